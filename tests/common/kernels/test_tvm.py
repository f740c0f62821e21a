"""The TVM kernels (`common.kernels.tvm_kernel`) against `reference_attention`: outputs and gradients.

Two shape families are compiled (window 16 / head_dim 16, and window 40 / head_dim 24, whose
band span and head dimension are not powers of two) into a temporary cache folder, and reused
by every test; the disk-cache test checks that a second process loads them without TVM compiling.
Every case runs both forwards: with autograd, and the inference one (TVM kernels only for the ordinary
rows, no PyTorch gathers between them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from common.kernels import KernelUnavailableError, qds_attention
from common.kernels.patterns import PATTERNS, global_tokens, synthetic_layout
from common.kernels.reference import reference_attention
from common.kernels.tvm_kernel import load_kernels, tvm_attention, tvm_available

AVAILABLE, REASON = tvm_available()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=f"the TVM kernels cannot run here: {REASON}")

REPO_ROOT = Path(__file__).resolve().parents[3]
WINDOW, HEAD_DIM = 16, 16  # the main shape family: h = 8, band span 32 (two key tiles per row tile)
ATOL = 1e-5


@pytest.fixture(scope="module", autouse=True)
def cache_dir(tmp_path_factory):
    """A fresh kernel cache for this module, so compilation and the disk cache are exercised."""
    path = tmp_path_factory.mktemp("efficient-rankers-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EFFICIENT_RANKERS_CACHE", str(path))
        yield path


def _inputs(batch, heads, n, head_dim=HEAD_DIM, *, seed, with_global_qkv=True):
    generator = torch.Generator().manual_seed(seed)

    def randn():
        return torch.randn(batch, heads, n, head_dim, generator=generator) * 0.5

    q, k, v = randn(), randn(), randn()
    return q, k, v, ((randn(), randn(), randn()) if with_global_qkv else None)


def check_matches_reference(q, k, v, is_global, key_padding_mask=None, window=WINDOW, global_qkv=None):
    """Forward (inference and autograd paths) and the gradients of q, k, v (and q_g, k_g, v_g) equal the
    reference's at ATOL."""
    leaves = [q, k, v, *(global_qkv or ())]
    ours = [x.clone().requires_grad_() for x in leaves]
    theirs = [x.clone().requires_grad_() for x in leaves]
    out = tvm_attention(*ours[:3], is_global, key_padding_mask, window, tuple(ours[3:]) or None)
    ref = reference_attention(*theirs[:3], is_global, key_padding_mask, window, tuple(theirs[3:]) or None)
    torch.testing.assert_close(out, ref, atol=ATOL, rtol=0)
    with torch.no_grad():  # the inference forward
        inference = tvm_attention(q, k, v, is_global, key_padding_mask, window, global_qkv)
    torch.testing.assert_close(inference, ref.detach(), atol=ATOL, rtol=0)
    upstream = torch.randn_like(ref)
    (out * upstream).sum().backward()
    (ref * upstream).sum().backward()
    for name, a, b in zip(("q", "k", "v", "q_g", "k_g", "v_g"), ours, theirs):
        # Without global tokens the global projections take no part: no gradient on our side, zeros on theirs.
        grad = a.grad if a.grad is not None else torch.zeros_like(a)
        torch.testing.assert_close(grad, b.grad, atol=ATOL, rtol=0, msg=lambda m, name=name: f"grad {name}: {m}")


def _random_globals(batch, n, counts, generator):
    is_global = torch.zeros(batch, n, dtype=torch.bool)
    for b, count in enumerate(counts):
        is_global[b, torch.randperm(n, generator=generator)[:count]] = True
    return is_global


@pytest.mark.parametrize("seed", range(4))
def test_random_shapes(seed):
    """Batch > 1 with a different global count per example, some padded tails, odd lengths."""
    generator = torch.Generator().manual_seed(100 + seed)
    batch = int(torch.randint(2, 4, (1,), generator=generator))
    heads = int(torch.randint(1, 4, (1,), generator=generator))
    n = int(torch.randint(17, 90, (1,), generator=generator))
    counts = torch.randint(0, 9, (batch,), generator=generator).tolist()
    is_global = _random_globals(batch, n, counts, generator)
    key_padding_mask = torch.zeros(batch, n, dtype=torch.bool)
    key_padding_mask[0, n - int(torch.randint(0, n // 2, (1,), generator=generator)):] = True
    q, k, v, global_qkv = _inputs(batch, heads, n, seed=seed, with_global_qkv=seed % 2 == 0)
    check_matches_reference(q, k, v, is_global, key_padding_mask, global_qkv=global_qkv)


@pytest.mark.parametrize("n", [1, 5, 12])
def test_sequence_shorter_than_window(n):
    q, k, v, global_qkv = _inputs(2, 2, n, seed=n)
    is_global = torch.zeros(2, n, dtype=torch.bool)
    is_global[1, 0] = True
    check_matches_reference(q, k, v, is_global, global_qkv=global_qkv)


def test_one_example_of_one_head_with_a_partial_tile():
    """The ordinary rows of a (1, 1, N, D) input cut to N are contiguous: the output must still be its own tensor,
    which the global rows are then written into (autograd refuses a view of a custom Function's output)."""
    q, k, v, global_qkv = _inputs(1, 1, 33, seed=7)
    is_global = _random_globals(1, 33, [3], torch.Generator().manual_seed(7))
    check_matches_reference(q, k, v, is_global, global_qkv=global_qkv)


@pytest.mark.parametrize("n", [16, 33, 47, 81])
def test_length_not_a_multiple_of_the_tile(n):
    """16 fills the row tiles exactly; the others leave a partial last tile (and partial key tiles)."""
    q, k, v, global_qkv = _inputs(2, 2, n, seed=n)
    is_global = _random_globals(2, n, [3, 1], torch.Generator().manual_seed(n))
    check_matches_reference(q, k, v, is_global, global_qkv=global_qkv)


@pytest.mark.parametrize("with_global_qkv", [False, True])
def test_no_global_tokens(with_global_qkv):
    q, k, v, global_qkv = _inputs(2, 3, 40, seed=7, with_global_qkv=with_global_qkv)
    check_matches_reference(q, k, v, torch.zeros(2, 40, dtype=torch.bool), global_qkv=global_qkv)


@pytest.mark.parametrize("with_global_qkv", [False, True])
def test_all_tokens_global(with_global_qkv):
    """Every row is dense over all keys; the band kernels see no ordinary row and no band key."""
    q, k, v, global_qkv = _inputs(2, 2, 37, seed=8, with_global_qkv=with_global_qkv)
    check_matches_reference(q, k, v, torch.ones(2, 37, dtype=torch.bool), global_qkv=global_qkv)


def test_padding():
    """Padded tails of different lengths, a global token inside a padded tail, a fully padded example."""
    n = 50
    q, k, v, global_qkv = _inputs(3, 2, n, seed=9)
    is_global = torch.zeros(3, n, dtype=torch.bool)
    is_global[:, [0, 3]] = True
    is_global[1, 45] = True  # padded, so neither a global row nor a global key
    key_padding_mask = torch.zeros(3, n, dtype=torch.bool)
    key_padding_mask[0, 30:] = True
    key_padding_mask[1, 41:] = True
    key_padding_mask[2, :] = True
    check_matches_reference(q, k, v, is_global, key_padding_mask, global_qkv=global_qkv)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_every_pattern(pattern):
    layout = synthetic_layout(100, query_len=8, sentence_every=12)
    is_global = global_tokens(pattern, layout)[None].repeat(2, 1)
    key_padding_mask = torch.zeros(2, 100, dtype=torch.bool)
    key_padding_mask[1, 77:] = True
    q, k, v, global_qkv = _inputs(2, 2, 100, seed=10)
    check_matches_reference(q, k, v, is_global, key_padding_mask, global_qkv=global_qkv)


def test_second_shape_family():
    """Window 40 (h = 20, span 64, four key tiles per row tile) and head_dim 24 (vectors of 8)."""
    q, k, v, global_qkv = _inputs(2, 2, 75, head_dim=24, seed=11)
    is_global = _random_globals(2, 75, [5, 2], torch.Generator().manual_seed(11))
    key_padding_mask = torch.zeros(2, 75, dtype=torch.bool)
    key_padding_mask[1, 60:] = True
    check_matches_reference(q, k, v, is_global, key_padding_mask, window=40, global_qkv=global_qkv)


def test_inference_and_dispatch():
    """Without gradients, on non-contiguous (B, N, H, D)-transposed inputs; `qds_attention(impl="tvm")` lands here."""
    q, k, v, global_qkv = _inputs(2, 2, 30, seed=12)
    q, k, v = (x.transpose(1, 2).contiguous().transpose(1, 2) for x in (q, k, v))
    is_global = _random_globals(2, 30, [2, 4], torch.Generator().manual_seed(12))
    with torch.no_grad():
        out = qds_attention(q, k, v, is_global, None, WINDOW, global_qkv, impl="tvm")
    torch.testing.assert_close(out, reference_attention(q, k, v, is_global, None, WINDOW, global_qkv),
                               atol=ATOL, rtol=0)


def test_disk_cache_serves_a_second_process(cache_dir):
    load_kernels(WINDOW, HEAD_DIM)  # compiled (or already loaded) in this process and exported
    assert list((cache_dir / "tvm").glob(f"qds-band-h{WINDOW // 2}-d{HEAD_DIM}-float32-cpu-*.so"))
    script = textwrap.dedent(f"""
        import json, torch
        from common.kernels.tvm_kernel import STATS, tvm_attention
        q = torch.randn(1, 2, 20, {HEAD_DIM})
        is_global = torch.zeros(1, 20, dtype=torch.bool)
        is_global[0, 0] = True
        tvm_attention(q, q, q, is_global, None, {WINDOW})
        print(json.dumps(STATS))
    """)
    env = {**os.environ, "EFFICIENT_RANKERS_CACHE": str(cache_dir)}
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"compiled": 0, "loaded": 1}


def test_missing_tvm_raises_with_the_fallback(monkeypatch):
    monkeypatch.setitem(sys.modules, "tvm", None)  # `import tvm` now raises ImportError
    available, reason = tvm_available()
    assert not available and 'impl="portable"' in reason
    q = torch.randn(1, 1, 8, HEAD_DIM)
    with pytest.raises(KernelUnavailableError, match=r'cannot be imported.*impl="portable"'):
        tvm_attention(q, q, q, torch.zeros(1, 8, dtype=torch.bool), None, WINDOW)


def test_tensors_off_the_cpu_raise_with_the_fallback():
    q = torch.randn(1, 1, 8, HEAD_DIM, device="meta")
    with pytest.raises(KernelUnavailableError, match=r'run on CPU, not on meta.*impl="portable"'):
        tvm_attention(q, q, q, torch.zeros(1, 8, dtype=torch.bool, device="meta"), None, WINDOW)
