"""Each Table 4 pattern, run through the real encoder, attends exactly as Eqs. 7-10 written out by hand.

One encoder layer mixes positions only through attention, so output i changes when input token
j changes exactly when A[i, j] = 1 (or i = j). The adjacency is written from the equations:
A_local[i, j] = 1 iff |i - j| <= w/2 (Eq. 7); a global position (Eqs. 8-10: [SOS], query, [CLS])
attends to and is attended by every position, as Longformer's global attention runs them.
"""

import pytest
import torch

from qds.inputs import build_qds_input
from qds.model import build_encoder

WINDOW = 4  # |i - j| <= 2
SENTENCES = [[20, 21, 22], [30], [40, 41]]
GLOBAL = {  # by hand (see test_inputs for the official code's lines)
    # official: 0 <s> q q </s> | 0 <s> t t t </s> | 0 <s> s </s> | 0 <s> s s </s> | </s>  (21 tokens)
    "official": {
        "sparse": set(),
        "longformer_qa": {0, 5},
        "qds_s": {0, 1, 5, 6, 11, 12, 15, 16},
        "qds_q": {0, 1, 2, 3, 4, 5},
        "qds": {0, 1, 2, 3, 4, 5, 6, 11, 12, 15, 16},
    },
    # sos: <s> q q </s> [SOS] t t t [SOS] s [SOS] s s </s>  (14 tokens)
    "sos": {
        "sparse": set(),
        "longformer_qa": {0, 4},
        "qds_s": {0, 4, 8, 10},
        "qds_q": {0, 1, 2, 3, 4},
        "qds": {0, 1, 2, 3, 4, 8, 10},
    },
}
CASES = [(layout, pattern) for layout in GLOBAL for pattern in GLOBAL[layout]]


def adjacency(n: int, global_positions: set[int]) -> list[list[bool]]:
    local = [[abs(i - j) <= WINDOW // 2 for j in range(n)] for i in range(n)]  # Eq. 7
    return [[local[i][j] or i in global_positions or j in global_positions for j in range(n)] for i in range(n)]


@pytest.mark.parametrize("layout, pattern", CASES)
@pytest.mark.parametrize("impl", ["reference", "portable"])
def test_one_layer_sees_exactly_the_equations_adjacency(layout, pattern, impl):
    example = build_qds_input([10, 11], SENTENCES, bos=0, eos=2, layout=layout)
    torch.manual_seed(0)
    encoder = build_encoder(
        pattern, None, vocab_size=80, pad_token_id=1, max_length=32, window=WINDOW, num_layers=1, hidden_size=16,
        num_heads=2, intermediate_size=32, dropout=0.0, impl=impl,
    ).eval()
    ids = torch.tensor([example.input_ids])
    global_mask = torch.tensor([example.global_mask(pattern)]).long()

    def hidden(input_ids):
        out = encoder(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), global_attention_mask=global_mask)
        return out.last_hidden_state[0]  # (N, h)

    base = hidden(ids)
    n = ids.shape[1]
    seen = [[False] * n for _ in range(n)]
    for j in range(n):
        changed = ids.clone()
        changed[0, j] = 50 + j  # another (non-padding) token at position j
        moved = (hidden(changed) - base).abs().amax(-1) > 1e-6  # (N,)
        for i in range(n):
            seen[i][j] = bool(moved[i])
    expected = adjacency(n, GLOBAL[layout][pattern])
    assert seen == [[expected[i][j] or i == j for j in range(n)] for i in range(n)]
