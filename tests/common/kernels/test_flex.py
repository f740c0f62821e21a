"""FlexAttention path (common.kernels.flex) against the dense reference: forward and gradients, fp32.

Forward runs on CPU (eager, unfused FlexAttention) and CUDA. FlexAttention in
torch 2.13 has no CPU backward: ``flex_attention`` raises NotImplementedError for
CPU inputs that require gradients, eager and torch.compile'd alike (inductor's CPU
kernel is forward only; `test_torch_flex_attention_has_no_cpu_backward` pins it, and
fails once a torch version adds one). The gradient tests of the FlexAttention call
itself therefore run on CUDA only and skip on CPU with that reason; everything
around it is differentiated on CPU too, with the fused kernel emulated densely
(`test_output_and_gradients_with_the_block_sparse_kernel_emulated`). Torch's eager
forward ignores the block mask's tiles (it evaluates mask_mod everywhere), so the
tiles are checked by that emulation and against torch's create_block_mask.
"""

from functools import partial

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask

import common.kernels.flex as flex_module

from common.kernels import KernelUnavailableError, qds_attention
from common.kernels.flex import block_density, flex_attention_qds
from common.kernels.patterns import PATTERNS, global_tokens, synthetic_layout
from common.kernels.reference import reference_attention
from tests.common.kernels.cases import block_sparse_dense_flex

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ATOL = 1e-5
HEADS, DIM = 2, 16


def _layout_case(pattern: str, n: int = 300):
    """Two QDS-style examples of the pattern, the second padded and with a different query and sentence length."""
    first = global_tokens(pattern, synthetic_layout(n))
    second = global_tokens(pattern, synthetic_layout(n, query_len=8, sentence_every=40))
    padding = torch.zeros(2, n, dtype=torch.bool)
    padding[1, n - 70 :] = True
    return torch.stack([first, second]), padding, 128


def _case(name: str):
    """(is_global, key_padding_mask, window) of a named layout; is_global and the mask are (B, N) bool."""
    generator = torch.Generator().manual_seed(0)
    if name == "batch_different_global_counts":  # 3 examples, 0 / few / many globals, n not a multiple of 128
        n = 300
        is_global = torch.rand(3, n, generator=generator) < torch.tensor([[0.0], [0.02], [0.2]])
        padding = torch.zeros(3, n, dtype=torch.bool)
        padding[1, 250:] = True
        return is_global, padding, 128
    if name == "n_smaller_than_window":
        is_global = torch.zeros(2, 50, dtype=torch.bool)
        is_global[0, [0, 7]] = True
        is_global[1, 30] = True
        return is_global, None, 128
    if name == "n_not_multiple_of_block":  # and an odd window
        is_global = torch.rand(2, 200, generator=generator) < 0.05
        return is_global, None, 46
    if name == "no_global_tokens":
        padding = torch.zeros(2, 260, dtype=torch.bool)
        padding[0, 190:] = True
        return torch.zeros(2, 260, dtype=torch.bool), padding, 128
    if name == "all_tokens_global":  # padding too: padded tokens stay out, even when marked global
        padding = torch.zeros(2, 150, dtype=torch.bool)
        padding[1, 100:] = True
        return torch.ones(2, 150, dtype=torch.bool), padding, 128
    if name == "padding":  # padding inside and at the end, a global token on padding, an all-padding example
        is_global = torch.zeros(3, 270, dtype=torch.bool)
        is_global[:, [0, 3, 140]] = True
        padding = torch.zeros(3, 270, dtype=torch.bool)
        padding[0, 135:145] = True
        padding[1, 200:] = True
        padding[2] = True
        return is_global, padding, 128
    return _layout_case(name.removeprefix("pattern_"))


CASES = [
    "batch_different_global_counts",
    "n_smaller_than_window",
    "n_not_multiple_of_block",
    "no_global_tokens",
    "all_tokens_global",
    "padding",
    *(f"pattern_{pattern}" for pattern in PATTERNS),
]


def _inputs(is_global, with_global_qkv: bool, requires_grad: bool):
    batch, n = is_global.shape
    generator = torch.Generator().manual_seed(1)
    count = 6 if with_global_qkv else 3
    tensors = [torch.randn(batch, HEADS, n, DIM, generator=generator) for _ in range(count)]  # (B, H, N, D)
    return [t.to(DEVICE).requires_grad_(requires_grad) for t in tensors]


def _call(attention, tensors, is_global, padding, window):
    q, k, v, *global_qkv = tensors
    padding = None if padding is None else padding.to(DEVICE)
    return attention(q, k, v, is_global.to(DEVICE), padding, window, tuple(global_qkv) or None)


@pytest.mark.parametrize("with_global_qkv", [True, False], ids=["global_qkv", "shared_qkv"])
@pytest.mark.parametrize("name", CASES)
def test_forward_matches_reference(name, with_global_qkv):
    is_global, padding, window = _case(name)
    tensors = _inputs(is_global, with_global_qkv, requires_grad=False)
    out = _call(flex_attention_qds, tensors, is_global, padding, window)
    expected = _call(reference_attention, tensors, is_global, padding, window)
    assert out.shape == expected.shape
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", CASES)
def test_gradients_match_reference(name):
    is_global, padding, window = _case(name)
    tensors = _inputs(is_global, with_global_qkv=True, requires_grad=True)
    try:
        out = _call(flex_attention_qds, tensors, is_global, padding, window)
    except KernelUnavailableError as error:
        pytest.skip(f"torch {torch.__version__}'s flex_attention has no backward on {DEVICE}: it raises "
                    "NotImplementedError for inputs that require gradients there, eager and torch.compile'd alike "
                    f"(test_torch_flex_attention_has_no_cpu_backward); the kernel says: {error}")
    _assert_same_gradients(out, tensors, is_global, padding, window)


def _assert_same_gradients(out, tensors, is_global, padding, window):
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(2)).to(DEVICE)
    grads = torch.autograd.grad((out * weight).sum(), tensors, materialize_grads=True)  # unused q_g... -> 0
    expected = _call(reference_attention, tensors, is_global, padding, window)
    expected_grads = torch.autograd.grad((expected * weight).sum(), tensors)
    for name, got, want in zip(["q", "k", "v", "q_g", "k_g", "v_g"], grads, expected_grads):
        torch.testing.assert_close(got, want, atol=ATOL, rtol=0, msg=lambda m, name=name: f"d{name}: {m}")


@pytest.mark.parametrize("name", CASES)
def test_output_and_gradients_with_the_block_sparse_kernel_emulated(name):
    """Everything but FlexAttention's own kernel, on any device, forward and backward: the permutation, the
    block mask (its tiles: a tile left out or wrongly full changes the output), the dense global rows and the
    gathering back, with flex's fused kernel emulated densely (`block_sparse_dense_flex`)."""
    is_global, padding, window = _case(name)
    tensors = _inputs(is_global, with_global_qkv=True, requires_grad=True)
    out = _call(partial(flex_attention_qds, kernel=block_sparse_dense_flex), tensors, is_global, padding, window)
    torch.testing.assert_close(out, _call(reference_attention, tensors, is_global, padding, window), atol=ATOL,
                               rtol=0)
    _assert_same_gradients(out, tensors, is_global, padding, window)


def _random_layout(generator):
    """(is_global, key_padding_mask, window, block_size) of a random batch: global tokens scattered and in runs,
    or none, padding at the end, inside, or everywhere, windows from 0 to wider than the sequence."""
    def draw(high):
        return int(torch.randint(0, high, (1,), generator=generator))

    batch, n, block_size, window = 1 + draw(4), 1 + draw(400), (16, 32, 64, 128)[draw(4)], draw(300)
    is_global = torch.rand(batch, n, generator=generator) < float(torch.rand(1, generator=generator)) ** 2
    start = draw(n)
    is_global[:, start:start + draw(200)] = True
    if draw(4) == 0:
        is_global[:] = False
    padding = torch.zeros(batch, n, dtype=torch.bool)
    for row in range(batch):
        kind, start = draw(4), draw(n)
        if kind == 1:
            padding[row, start:] = True
        elif kind == 2:
            padding[row, start:start + draw(150)] = True
        elif kind == 3 and draw(4) == 0:
            padding[row] = True
    return is_global, padding if draw(4) else None, window, block_size


def test_block_mask_equals_create_block_masks_on_random_layouts():
    """The block mask built from its block-level structure lists the very tiles, partial and full, in the very
    order that torch's create_block_mask finds by evaluating mask_mod on every (query, key) pair."""
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        is_global, padding, window, block_size = _random_layout(generator)
        mask = flex_module._Layout.build(is_global, padding, window, block_size).block_mask
        rows, _, length, _ = mask.shape
        expected = create_block_mask(mask.mask_mod, rows, None, length, length, device="cpu", BLOCK_SIZE=block_size)
        for field in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices"):
            assert torch.equal(getattr(mask, field), getattr(expected, field)), (field, tuple(is_global.shape),
                                                                                 window, block_size)


def test_the_layout_has_no_quadratic_temporary():
    """create_block_mask evaluates mask_mod on a (B, N, N) grid; the layout's largest tensor at B = 8, N = 2048
    (QDS, 104 global tokens) is the global rows' (B, 1, G, N) key mask, 20 times smaller."""
    is_global = global_tokens("qds", synthetic_layout(2048)).expand(8, -1).clone()
    largest = _largest_tensor(lambda: flex_module._Layout.build(is_global, None, 128))
    assert largest == 8 * 104 * 2048
    grid = _largest_tensor(lambda: create_block_mask(lambda b, h, q, kv: is_global[b, q] | is_global[b, kv], 8, None,
                                                     2048, 2048, device="cpu"))
    assert grid == 8 * 2048 * 2048


def _largest_tensor(run) -> int:
    """The most elements of a tensor that an aten operation of `run()` returns."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Largest(TorchDispatchMode):
        elements = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for tensor in (out if isinstance(out, (tuple, list)) else [out]):
                if isinstance(tensor, torch.Tensor):
                    Largest.elements = max(Largest.elements, tensor.numel())
            return out

    with Largest():
        run()
    return Largest.elements


@pytest.mark.skipif(DEVICE != "cpu", reason="the CPU limitation only")
def test_cpu_backward_is_reported_unavailable():
    is_global, padding, window = _case("padding")
    tensors = _inputs(is_global, with_global_qkv=True, requires_grad=True)
    with pytest.raises(KernelUnavailableError, match="no backward pass on cpu"):
        _call(flex_attention_qds, tensors, is_global, padding, window)
    with torch.no_grad():  # inference on CPU does run
        _call(flex_attention_qds, tensors, is_global, padding, window)


@pytest.mark.skipif(DEVICE != "cpu", reason="the CPU limitation only")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_torch_flex_attention_has_no_cpu_backward(compiled):
    """The reason the gradient tests skip on CPU, asked of torch itself: its flex_attention, eager or compiled by
    inductor for CPU, refuses CPU inputs that require gradients."""
    from torch.nn.attention.flex_attention import flex_attention

    q, k, v = (torch.randn(1, 1, 128, DIM, requires_grad=True) for _ in range(3))
    block_mask = create_block_mask(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, 1, None, 128, 128, device="cpu")
    attention = torch.compile(flex_attention) if compiled else flex_attention
    with pytest.raises(NotImplementedError, match="FlexAttention does not support backward on CPU"):
        attention(q, k, v, block_mask=block_mask)


def test_reachable_through_qds_attention():
    is_global, padding, window = _case("pattern_qds")
    tensors = _inputs(is_global, with_global_qkv=True, requires_grad=False)
    out = _call(lambda *args: qds_attention(*args, impl="flex"), tensors, is_global, padding, window)
    torch.testing.assert_close(out, _call(reference_attention, tensors, is_global, padding, window), atol=ATOL, rtol=0)


def test_gathering_globals_makes_the_block_mask_sparse():
    """Scattered [SOS] tokens touch every tile; gathered, QDS at n = 2048 keeps under a quarter of them."""
    is_global = global_tokens("qds", synthetic_layout(2048))[None]  # (1, N)
    assert block_density(is_global, 128, gathered=False) == 1.0
    assert block_density(is_global, 128) == pytest.approx(60 / 256)  # band 46 tiles + 14 more of the global column
    assert block_density(torch.zeros_like(is_global), 128) == pytest.approx(46 / 256)  # band alone: 16 + 2 * 15
