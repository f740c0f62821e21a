"""Separable self-attention (Eq. 2) and standard self-attention (Eq. 1) against direct formulas.

`in_proj(x).view(B, N, 2, heads, d_h)` means: output feature c*H + h*d_h + j is projection c
(0 = K, 1 = V) of head h, feature j. So rows [h*d_h, (h+1)*d_h) of in_proj give K_h (= Q_h) and
rows [H + h*d_h, H + (h+1)*d_h) give V_h; head h's output fills columns [h*d_h, (h+1)*d_h) of the
concatenation read by out_proj. DotProductSelfAttention's (3H x H) in_proj is Q, K, V in that order.
"""

import math
import os

import pytest
import torch

from conformer_kernel.model import DotProductSelfAttention, SeparableSelfAttention


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _seeded(module: torch.nn.Module, seed: int, scale: float = 0.5) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)
    return module.eval()


def _softmax(values: list[float]) -> list[float]:
    """Softmax of a list; -inf entries get exactly 0."""
    m = max(v for v in values if v != -math.inf)
    e = [0.0 if v == -math.inf else math.exp(v - m) for v in values]
    s = sum(e)
    return [x / s for x in e]


def _separable_by_loops(module: SeparableSelfAttention, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
    """Eq. 2 element by element, in Python floats (float64)."""
    B, N, H = x.shape
    heads = module.num_heads
    dh = H // heads
    W = module.in_proj.weight.double().tolist()
    b_in = module.in_proj.bias.double().tolist()
    Wo = module.out_proj.weight.double().tolist()
    bo = module.out_proj.bias.double().tolist()
    xs = x.double().tolist()
    out = torch.zeros(B, N, H, dtype=torch.float64)
    for b in range(B):
        concat = [[0.0] * H for _ in range(N)]
        for h in range(heads):
            # K_h (= Q_h) from rows h*dh.., V_h from rows H + h*dh..
            K = [[sum(W[h * dh + a][c] * xs[b][i][c] for c in range(H)) + b_in[h * dh + a] for a in range(dh)]
                 for i in range(N)]
            V = [[sum(W[H + h * dh + a][c] * xs[b][i][c] for c in range(H)) + b_in[H + h * dh + a] for a in range(dh)]
                 for i in range(N)]
            # Φ(Kᵀ): softmax over positions, padded keys at -inf, for every key feature a
            phi_k = [[0.0] * dh for _ in range(N)]
            for a in range(dh):
                col = _softmax([-math.inf if padding[b, i] else K[i][a] for i in range(N)])
                for i in range(N):
                    phi_k[i][a] = col[i]
            A = [[sum(phi_k[i][a] * V[i][c] for i in range(N)) for c in range(dh)] for a in range(dh)]
            for i in range(N):
                phi_q = _softmax([K[i][a] / math.sqrt(dh) for a in range(dh)])  # Φ(Q): over d_h
                for c in range(dh):
                    concat[i][h * dh + c] = sum(phi_q[a] * A[a][c] for a in range(dh))
        for i in range(N):
            for o in range(H):
                out[b, i, o] = sum(Wo[o][c] * concat[i][c] for c in range(H)) + bo[o]
    return out


def test_separable_attention_equals_per_element_formula():
    B, N, H, heads = 2, 5, 8, 2
    module = _seeded(SeparableSelfAttention(H, heads, dropout=0.3), seed=1).double()
    x = torch.randn(B, N, H, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    padding = torch.tensor([[False] * 5, [False, False, False, True, True]])
    got = module(x, padding)
    want = _separable_by_loops(module, x, padding)
    # padded rows too: they read their own Φ(Q) and the real positions' A
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    # the same module in float32 agrees to float32 precision
    got32 = module.float()(x.float(), padding)
    torch.testing.assert_close(got32.double(), want, rtol=1e-5, atol=1e-5)


def _separable_positions_first(module: SeparableSelfAttention, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
    """Eq. 2 with Q and K laid out (B, h, N, d_h), as the official code holds them (conformer.py:199-226): the
    straightforward layout that the module's (B, h, d_h, N) replaces."""
    B, N, H = x.shape
    k, v = module.in_proj(x).view(B, N, 2, module.num_heads, H // module.num_heads).permute(2, 0, 3, 1, 4)
    q = torch.softmax(k * k.shape[-1] ** -0.5, dim=-1)
    k = torch.softmax(k.masked_fill(padding[:, None, :, None], float("-inf")), dim=-2)
    y = q @ (k.transpose(-2, -1) @ v)
    return module.out_proj(y.transpose(1, 2).reshape(B, N, H))


def test_separable_attention_gradients_equal_the_positions_first_layout():
    B, N, H, heads = 3, 11, 16, 4
    module = _seeded(SeparableSelfAttention(H, heads, dropout=0.2), seed=11).double()
    x = torch.randn(B, N, H, generator=torch.Generator().manual_seed(12), dtype=torch.float64, requires_grad=True)
    padding = torch.zeros(B, N, dtype=torch.bool)
    padding[1, 7:] = True
    padding[2, 1:] = True
    upstream = torch.randn(B, N, H, generator=torch.Generator().manual_seed(13), dtype=torch.float64)
    inputs = (x, *module.parameters())
    got, want = module(x, padding), _separable_positions_first(module, x, padding)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for a, b in zip(torch.autograd.grad(got, inputs, upstream), torch.autograd.grad(want, inputs, upstream)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_separable_attention_shares_query_and_key_projection():
    """Swapping the K rows and V rows of in_proj changes the output (K and Q are the first H rows)."""
    H, heads = 8, 2
    module = _seeded(SeparableSelfAttention(H, heads, 0.0), seed=3).double()
    assert module.in_proj.weight.shape == (2 * H, H)
    x = torch.randn(1, 4, H, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    padding = torch.zeros(1, 4, dtype=torch.bool)
    swapped = _seeded(SeparableSelfAttention(H, heads, 0.0), seed=3).double()
    with torch.no_grad():
        swapped.in_proj.weight.copy_(torch.cat([module.in_proj.weight[H:], module.in_proj.weight[:H]]))
        swapped.in_proj.bias.copy_(torch.cat([module.in_proj.bias[H:], module.in_proj.bias[:H]]))
    torch.testing.assert_close(module(x, padding), _separable_by_loops(module, x, padding), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(swapped(x, padding), _separable_by_loops(swapped, x, padding), rtol=1e-12, atol=1e-12)
    assert not torch.allclose(module(x, padding), swapped(x, padding))


def test_padded_positions_do_not_influence_real_outputs():
    B, N, H, heads = 2, 7, 8, 2
    module = _seeded(SeparableSelfAttention(H, heads, 0.2), seed=5)
    g = torch.Generator().manual_seed(6)
    x = torch.randn(B, N, H, generator=g)
    padding = torch.tensor([[False] * 4 + [True] * 3, [False] * 6 + [True]])
    x2 = x.clone()
    x2[padding] = torch.randn(int(padding.sum()), H, generator=g) * 10
    y, y2 = module(x, padding), module(x2, padding)
    real = ~padding
    assert torch.equal(y[real], y2[real])
    # the padded rows themselves did change (their Φ(Q) reads their own input)
    assert not torch.equal(y[padding], y2[padding])


def _total_ram() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_never_allocates_n_by_n():
    """Forward and backward at a length where one head's n x n float32 matrix is over twice the RAM."""
    ram = _total_ram()
    n = max(150_000, math.isqrt(2 * ram // 4) + 1)
    assert n * n * 4 > 2 * ram
    H, heads = 16, 2
    dh = H // heads
    # small weights keep float32's rounding of K (amplified by exp) well below the tolerance
    module = _seeded(SeparableSelfAttention(H, heads, 0.1), seed=7, scale=0.2)
    pad = 3
    x = torch.randn(1, n, H, generator=torch.Generator().manual_seed(8), requires_grad=True)
    padding = torch.zeros(1, n, dtype=torch.bool)
    padding[0, -pad:] = True
    y = module(x, padding)
    (y[0, : n - pad] * 1.0).sum().backward()
    # padded inputs get exactly zero gradient from the real outputs; real ones a finite, non-zero one
    assert torch.equal(x.grad[0, -pad:], torch.zeros(pad, H))
    assert torch.isfinite(x.grad).all() and x.grad[0, : n - pad].abs().sum() > 0
    assert module.in_proj.weight.grad is not None and torch.isfinite(module.in_proj.weight.grad).all()

    # A = softmax_positions(Kᵀ) V computed independently in float64, then a few rows of Eq. 2
    with torch.no_grad():
        xd = x[0, : n - pad].double()
        W, b = module.in_proj.weight.double(), module.in_proj.bias.double()
        K = xd @ W[:H].T + b[:H]  # (n_real, H)
        V = xd @ W[H:].T + b[H:]
        rows = [0, 1, n // 2, n - pad - 1, n - 1]  # the last row is padded: it still reads A
        concat = torch.zeros(len(rows), H, dtype=torch.float64)
        for h in range(heads):
            Kh, Vh = K[:, h * dh : (h + 1) * dh], V[:, h * dh : (h + 1) * dh]
            A = torch.softmax(Kh, dim=0).T @ Vh  # (dh, dh)
            for r, i in enumerate(rows):
                ki = (x[0, i].double() @ W[h * dh : (h + 1) * dh].T + b[h * dh : (h + 1) * dh])
                concat[r, h * dh : (h + 1) * dh] = torch.softmax(ki / math.sqrt(dh), dim=0) @ A
        want = concat @ module.out_proj.weight.double().T + module.out_proj.bias.double()
    torch.testing.assert_close(y[0, rows].detach().double(), want, rtol=1e-4, atol=1e-5)


def test_dot_product_attention_equals_softmax_formula():
    B, N, H, heads = 2, 5, 8, 2
    dh = H // heads
    module = _seeded(DotProductSelfAttention(H, heads, 0.5), seed=9).double()
    x = torch.randn(B, N, H, generator=torch.Generator().manual_seed(10), dtype=torch.float64)
    padding = torch.tensor([[False] * 5, [False, False, True, True, True]])
    W, bias = module.in_proj.weight, module.in_proj.bias
    want = torch.zeros(B, N, H, dtype=torch.float64)
    with torch.no_grad():
        for b in range(B):
            concat = torch.zeros(N, H, dtype=torch.float64)
            for h in range(heads):
                sl = lambda part: slice(part * H + h * dh, part * H + (h + 1) * dh)  # noqa: E731
                Q = x[b] @ W[sl(0)].T + bias[sl(0)]
                K = x[b] @ W[sl(1)].T + bias[sl(1)]
                V = x[b] @ W[sl(2)].T + bias[sl(2)]
                for i in range(N):
                    logits = [float(Q[i] @ K[j]) / math.sqrt(dh) if not padding[b, j] else -math.inf
                              for j in range(N)]
                    p = torch.tensor(_softmax(logits), dtype=torch.float64)
                    concat[i, h * dh : (h + 1) * dh] = p @ V
            want[b] = concat @ module.out_proj.weight.T + module.out_proj.bias
    torch.testing.assert_close(module(x, padding), want, rtol=1e-12, atol=1e-12)
    # padded keys are ignored exactly
    x2 = x.clone()
    x2[padding] += 5.0
    assert torch.equal(module(x, padding)[~padding], module(x2, padding)[~padding])


def test_heads_must_divide_hidden():
    with pytest.raises(ValueError, match="divisible"):
        SeparableSelfAttention(10, 4, 0.0)
    with pytest.raises(ValueError, match="divisible"):
        DotProductSelfAttention(10, 4, 0.0)
