"""Windowed kernel pooling (TKL's, per query term) against hand values and the official layout."""

import math

import pytest
import torch
from torch import nn

from conformer_kernel.model import WindowedKernelPooling, window_count


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _kv(s: float, mu: float, sigma: float = 0.1) -> float:
    return math.exp(-((s - mu) ** 2) / (2 * sigma**2))


def _hand_pooling() -> WindowedKernelPooling:
    """3 kernels (mu = 1, 1/3, -1/3), windows of 3 with stride 2 over 5 terms (2 windows), and an MLP
    whose output is log(S_0 + 1e-6) + 0.5 * log(S_1 + 1e-6) (the +50 / -50 keep ReLU the identity)."""
    pool = WindowedKernelPooling(kernels=3, sigma=0.1, window=3, stride=2, max_doc_terms=5, hidden_size=2, dropout=0.5)
    with torch.no_grad():
        pool.mlp[0].weight.copy_(torch.tensor([[1.0, 0.5, 0.0], [0.0, 0.0, 0.0]]))
        pool.mlp[0].bias.copy_(torch.tensor([50.0, 0.0]))
        pool.mlp[3].weight.copy_(torch.tensor([[1.0, 0.0]]))
        pool.mlp[3].bias.copy_(torch.tensor([-50.0]))
    return pool.eval()


def test_kernel_centres():
    pool = _hand_pooling()
    torch.testing.assert_close(pool.mus, torch.tensor([1.0, 1 / 3, -1 / 3]))
    assert pool.windows == 2
    pool10 = WindowedKernelPooling(10, 0.1, 300, 100, 4000, 8, 0.0)
    torch.testing.assert_close(pool10.mus, torch.tensor([1.0, 0.8, 0.6, 0.4, 0.2, 0.0, -0.2, -0.4, -0.6, -0.8]))
    assert pool10.windows == 38


def test_hand_computed_term_scores():
    pool = _hand_pooling()
    t = 1 / 3
    sim = torch.tensor([[[1.0, 0.9, t, -t, 1.0],  # term 0
                         [-t, -t, 0.0, 1.0, 1.0]]], dtype=torch.float64)  # term 1; (1, Tq=2, Td=5)
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]], dtype=torch.float64)  # the last term is padding
    got = pool.double()(sim, mask)

    def score(s0: float, s1: float) -> float:
        return math.log(s0 + 1e-6) + 0.5 * math.log(s1 + 1e-6)

    # term 0, window [0, 3): S_0 = k0(1) + k0(.9) + k0(1/3) = 1 + e^-0.5 + e^-200/9
    w0 = score(1 + math.exp(-0.5) + math.exp(-200 / 9), _kv(1.0, t) + _kv(0.9, t) + 1.0)
    # term 0, window [2, 5): the padded 1.0 must not count: S_0 = k0(1/3) + k0(-1/3) only
    w1 = score(math.exp(-200 / 9) + math.exp(-800 / 9), 1.0 + _kv(-t, t))
    term0 = max(w0, w1)
    assert term0 == pytest.approx(0.47408, abs=1e-5)  # log(1 + e^-0.5) + 0.5 log(1 + ~1e-7)
    # term 1, window [0, 3): kernels at -1/3 and 0
    v0 = score(2 * _kv(-t, 1.0) + _kv(0.0, 1.0), 2 * _kv(-t, t) + _kv(0.0, t))
    # term 1, window [2, 5): S_0 = k0(0) + k0(1) = e^-50 + 1, not 2 (the padded 1.0 is masked)
    v1 = score(_kv(0.0, 1.0) + 1.0, _kv(0.0, t) + _kv(1.0, t))
    term1 = max(v0, v1)
    assert term1 == pytest.approx(0.5 * math.log(math.exp(-50 / 9) + 1e-6), abs=1e-4)
    # 1e-6: the module's mus are float32 (1/3 rounded), amplified by d k / d mu = (s - mu) / sigma^2 k
    torch.testing.assert_close(got, torch.tensor([[term0, term1]], dtype=torch.float64), rtol=0, atol=1e-6)


def _official(pool: WindowedKernelPooling, sim: torch.Tensor, mask: torch.Tensor, max_doc_terms: int) -> torch.Tensor:
    """The official RBFKernel: zero-pad to max_doc_terms, AvgPool1d(window, stride) * window, log, MLP, max."""
    pad = max_doc_terms - sim.shape[-1]
    sim = nn.functional.pad(sim, (0, pad))
    mask = nn.functional.pad(mask, (0, pad))
    y = sim[..., None] - pool.mus.view(1, 1, 1, -1)  # (D, Tq, Td, K)
    y = torch.exp(-torch.pow(y, 2) / (2 * pool.sigma**2))
    y = y * mask[:, None, :, None]
    shape = y.shape
    y = y.view(-1, shape[-2], shape[-1]).permute(0, 2, 1)  # (D Tq, K, Td)
    y = nn.AvgPool1d(pool.window, stride=pool.stride)(y) * pool.window
    y = torch.log(y + 1e-6).permute(0, 2, 1)  # (D Tq, N, K)
    y, _ = pool.mlp(y).max(dim=1)
    return y.view(shape[:2])


def _official_case_pool(seed: int = 0) -> WindowedKernelPooling:
    torch.manual_seed(seed)
    return WindowedKernelPooling(kernels=10, sigma=0.1, window=30, stride=10, max_doc_terms=200, hidden_size=16,
                                 dropout=0.2).eval()


LENGTHS = [12, 29, 30, 31, 45, 60, 175, 195, 200]  # < a window, = a window, between strides, = max


@pytest.mark.parametrize("length", LENGTHS)
def test_equals_official_layout_single_document(length):
    pool = _official_case_pool()
    g = torch.Generator().manual_seed(length)
    sim = torch.rand(1, 4, length, generator=g) * 2 - 1  # (D=1, Tq=4, Td)
    sim[0, 0, length // 2] = 0.99  # some strong matches
    sim[0, 1, :3] = 1.0
    mask = torch.ones(1, length)
    want = _official(pool, sim, mask, 200)
    torch.testing.assert_close(pool(sim, mask), want, rtol=1e-5, atol=1e-5)


def test_equals_official_layout_padded_batch():
    """Documents of lengths 12, 30, 45 padded (with garbage similarities) to the batch's 45 terms."""
    pool = _official_case_pool(1)
    g = torch.Generator().manual_seed(2)
    lengths = [12, 30, 45]
    sim = torch.rand(3, 5, 45, generator=g) * 2 - 1
    mask = torch.zeros(3, 45)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1.0
        sim[i, :, n:] = 1.0  # would dominate kernel 0 if it were not masked
    got = pool(sim, mask)
    for i, n in enumerate(lengths):
        want = _official(pool, sim[i : i + 1, :, :n], mask[i : i + 1, :n], 200)
        torch.testing.assert_close(got[i : i + 1], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("length", [12, 30, 45, 180, 181, 190, 200])
def test_empty_window_floor(length):
    """An MLP decreasing in the window sums: the empty window (sums 0, log 1e-6) is then the maximum
    wherever the official 200-term layout has one (a window starting at or after `length`)."""
    pool = _official_case_pool(3)
    with torch.no_grad():
        pool.mlp[0].weight.zero_()
        pool.mlp[0].weight[0].fill_(-0.1)  # hidden unit 0 = -mean_k log(S_k + 1e-6) + 50
        pool.mlp[0].bias.fill_(50.0)
        pool.mlp[3].weight.zero_()
        pool.mlp[3].weight[0, 0] = 1.0
        pool.mlp[3].bias.fill_(-50.0)
    sim = torch.rand(2, 3, length, generator=torch.Generator().manual_seed(4)) * 2 - 1
    mask = torch.ones(2, length)
    got = pool(sim, mask)
    torch.testing.assert_close(got, _official(pool, sim, mask, 200), rtol=1e-5, atol=1e-5)
    floor = -math.log(1e-6)  # 13.8155...
    has_empty_window = (window_count(200, 30, 10) - 1) * 10 >= length  # the last window starts at 170
    if has_empty_window:
        torch.testing.assert_close(got, torch.full((2, 3), floor), rtol=0, atol=1e-4)
    else:
        assert (got < floor - 1).all()


def test_window_count():
    assert window_count(4000, 300, 100) == 38
    assert window_count(200, 30, 10) == 18
    assert window_count(205, 30, 10) == 18  # the last 5 terms are in no window (AvgPool1d drops them)
    assert window_count(10, 30, 10) == 1
    assert window_count(300, 300, 100) == 1


# --- the faster window sums against the straightforward computation ----------------------------------------------


def _straightforward_window_sums(pool: WindowedKernelPooling, sim: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The kernels of every (term, kernel) pair times the mask, zero-padded, and each window summed term by term
    (`unfold`): the computation `WindowedKernelPooling.window_sums` replaces, as it was before."""
    length = sim.shape[-1]
    k = torch.exp(-((sim[..., None] - pool.mus) ** 2) / (2 * pool.sigma**2)) * mask[..., None, :, None]
    starts = min(pool.windows, -(-length // pool.stride))
    end = pool.stride * (starts - 1) + pool.window
    k = nn.functional.pad(k, (0, 0, 0, max(end - length, 0)))[..., :end, :]
    sums = k.unfold(-2, pool.window, pool.stride).sum(-1)
    return nn.functional.pad(sums, (0, 0, 0, 1)) if starts < pool.windows else sums


@pytest.mark.parametrize("window,stride,max_doc_terms", [(30, 10, 200), (300, 100, 4000), (12, 8, 60), (7, 3, 40)])
@pytest.mark.parametrize("length", [5, 29, 31, 57, 200])
def test_window_sums_equal_summing_each_window(window, stride, max_doc_terms, length):
    """Blocks of gcd(window, stride) terms summed per window, and padding entered as a far similarity, give the
    kernel sums of the straightforward computation, and the same gradients (the summation order differs)."""
    torch.manual_seed(length)
    pool = WindowedKernelPooling(10, 0.1, window, stride, max_doc_terms, hidden_size=8, dropout=0.0)
    sim = (torch.rand(3, 4, length, dtype=torch.float64) * 2 - 1).requires_grad_()
    mask = torch.ones(3, length, dtype=torch.float64)
    mask[1, length // 2 :] = 0.0  # a shorter document of the batch
    mask[2, 1:] = 0.0
    with torch.no_grad():
        sim[1, :, length // 2 :] = 1.0  # padding that would dominate kernel 0 if it counted
    got, want = pool.window_sums(sim, mask), _straightforward_window_sums(pool, sim, mask)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    upstream = torch.randn_like(want)
    grad_got, = torch.autograd.grad(got, sim, upstream)
    grad_want, = torch.autograd.grad(want, sim, upstream)
    torch.testing.assert_close(grad_got, grad_want, rtol=1e-12, atol=1e-12)
    assert torch.equal(grad_got[1, :, length // 2 :], torch.zeros_like(grad_got[1, :, length // 2 :]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_padded_terms_count_exactly_zero(dtype):
    """At `far_similarity` every kernel underflows to 0 exactly: in float32 the term scores and their gradients
    equal, bit for bit, those of kernels multiplied by the mask; and the backward pass meets no NaN."""
    torch.manual_seed(0)
    pool = WindowedKernelPooling(10, 0.1, 300, 100, 4000, hidden_size=8, dropout=0.0).to(dtype)
    far = pool.far_similarity(dtype)
    assert torch.equal(pool.kernels(torch.tensor([far], dtype=dtype)), torch.zeros(10, 1, dtype=dtype))
    sim = (torch.rand(2, 3, 250, dtype=dtype) * 2 - 1).requires_grad_()
    mask = torch.ones(2, 250, dtype=dtype)
    mask[0, 100:] = 0.0
    with torch.autograd.detect_anomaly():
        got = pool.window_sums(sim, mask)
        got.sum().backward()
    want = _straightforward_window_sums(pool, sim.detach(), mask)
    torch.testing.assert_close(got, want)  # one window of 300: the sums add the same blocks in another order
    assert torch.equal(sim.grad[0, :, 100:], torch.zeros(3, 150, dtype=dtype))
