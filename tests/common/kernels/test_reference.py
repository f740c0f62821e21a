"""The dense reference against QDS-Transformer's Eqs. 7-10 written out by hand, and the pattern densities."""

import math

import pytest
import torch

from common.kernels.patterns import PATTERNS, density, global_tokens, nonzeros, synthetic_layout
from common.kernels.reference import allowed_keys, reference_attention


def test_adjacency_matches_equations_7_to_10_by_hand():
    # n = 6, w = 2 (|i - j| <= 1); token 4 is global ([SOS]); token 5 is padding.
    is_global = torch.tensor([[False, False, False, False, True, False]])
    padding = torch.tensor([[False, False, False, False, False, True]])
    expected = torch.tensor(
        [
            [1, 1, 0, 0, 1, 0],  # Eq. 7 band {0, 1} ∪ Eq. 8 global column 4
            [1, 1, 1, 0, 1, 0],
            [0, 1, 1, 1, 1, 0],
            [0, 0, 1, 1, 1, 0],
            [1, 1, 1, 1, 1, 0],  # the global row sees every valid token
            [0, 0, 0, 0, 0, 0],  # padded row: nothing
        ],
        dtype=torch.bool,
    )
    assert torch.equal(allowed_keys(is_global, padding, window=2)[0], expected)


def test_attention_worked_by_hand():
    # One head, D = 1, n = 3, w = 2, no global token. q = [1, 0, 2], k = [0, 1, 1] (scale 1/sqrt(1)), v = [1, 2, 4].
    q = torch.tensor([1.0, 0.0, 2.0]).view(1, 1, 3, 1)
    k = torch.tensor([0.0, 1.0, 1.0]).view(1, 1, 3, 1)
    v = torch.tensor([1.0, 2.0, 4.0]).view(1, 1, 3, 1)
    out = reference_attention(q, k, v, torch.zeros(1, 3, dtype=torch.bool), window=2).view(3)
    e = math.e
    # row 0 sees keys 0, 1: scores 0, 1; row 1 sees 0, 1, 2: all 0; row 2 sees 1, 2: scores 2, 2.
    expected = [(1 + 2 * e) / (1 + e), (1 + 2 + 4) / 3, (2 + 4) / 2]
    assert out.tolist() == pytest.approx(expected, abs=1e-6)


def test_global_rows_use_their_own_projections():
    torch.manual_seed(0)
    q, k, v, q_g, k_g, v_g = (torch.randn(1, 1, 5, 4) for _ in range(6))
    is_global = torch.tensor([[True, False, False, False, False]])
    out = reference_attention(q, k, v, is_global, window=2, global_qkv=(q_g, k_g, v_g))
    row0 = torch.softmax(q_g[0, 0, 0] @ k_g[0, 0].T / 2.0, dim=-1) @ v_g[0, 0]  # every key, global projections
    scores1 = q[0, 0, 1] @ k[0, 0, [0, 1, 2]].T / 2.0  # band {0, 1, 2}; key 0 is global, counted once
    row1 = torch.softmax(scores1, dim=-1) @ v[0, 0, [0, 1, 2]]
    scores4 = q[0, 0, 4] @ k[0, 0, [0, 3, 4]].T / 2.0  # band {3, 4} ∪ global {0}
    row4 = torch.softmax(scores4, dim=-1) @ v[0, 0, [0, 3, 4]]
    assert torch.allclose(out[0, 0, 0], row0, atol=1e-6)
    assert torch.allclose(out[0, 0, 1], row1, atol=1e-6)
    assert torch.allclose(out[0, 0, 4], row4, atol=1e-6)


def test_synthetic_layout_and_table4_patterns():
    layout = synthetic_layout(60, query_len=3, sentence_every=25)
    where = lambda mask: torch.nonzero(mask).view(-1).tolist()  # noqa: E731
    assert where(global_tokens("sparse", layout)) == []
    assert where(global_tokens("longformer_qa", layout)) == [0, 5]  # <s> and the [SOS] before the document
    assert where(global_tokens("qds_s", layout)) == [0, 5, 30, 55]  # [CLS] and an [SOS] every 25 tokens
    # [CLS], the query, its </s>, and the first [SOS] (official utils.py line 386: tok_mask[sent_locs[0]] = 2)
    assert where(global_tokens("qds_q", layout)) == [0, 1, 2, 3, 4, 5]
    assert where(global_tokens("qds", layout)) == [0, 1, 2, 3, 4, 5, 30, 55]
    with pytest.raises(ValueError, match="unknown attention pattern 'dense'"):
        global_tokens("dense", layout)


def test_density_counts_the_adjacency():
    # Local only at n = 2048, w = 128: 2048 rows of 129 keys less 2 * (1 + ... + 64) cut at the edges.
    assert density(torch.zeros(2048, dtype=torch.bool), 128) == pytest.approx((2048 * 129 - 64 * 65) / 2048**2)
    for pattern in PATTERNS:
        is_global = global_tokens(pattern, synthetic_layout(700))
        nonzero = int(allowed_keys(is_global[None], None, 64).sum())
        assert density(is_global, 64) == nonzero / 700**2


def test_density_counts_on_the_masks_device():
    """Its index and band tensors are made where the masks are (the meta device standing in for a GPU)."""
    from tests.devices import on_meta

    is_global, padding = global_tokens("qds", synthetic_layout(700)), torch.zeros(700, dtype=torch.bool)
    with on_meta():  # an op meeting a CPU tensor raises tests.devices.MixedDevices
        counts = [nonzeros(is_global.to("meta"), 64, padding.to("meta")), nonzeros(is_global.to("meta"), 64)]
    assert all(isinstance(count, int) for count in counts)


@pytest.mark.parametrize("impl", ["reference", "portable", "tvm", "flex"])
def test_every_implementation_refuses_inputs_of_other_shapes(impl):
    """`check_inputs`, first in every implementation: one (B, H, N, D) shape, (B, N) masks; the message names them."""
    from common.kernels import get_implementation

    attention = get_implementation(impl)
    q, is_global = torch.zeros(2, 3, 10, 4), torch.zeros(2, 10, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"of one shape \(B, H, N, D\) and is_global \(B, N\); got \(2, 3, 10, 4\), "
                                         r"\(2, 3, 9, 4\), \(2, 3, 10, 4\), \(2, 10\)"):
        attention(q, torch.zeros(2, 3, 9, 4), q, is_global)
    with pytest.raises(ValueError, match=r"and is_global, key_padding_mask \(B, N\)"):
        attention(q, q, q, is_global, torch.zeros(2, 11, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"expected q, k, v, global_qkv of one shape"):
        attention(q, q, q, is_global, None, 4, (q, q, q[:1]))
