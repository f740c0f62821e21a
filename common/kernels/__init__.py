"""Query-directed sparse attention kernels (QDS-Transformer, Sec. 4.3), one interface, several implementations.

``qds_attention(q, k, v, is_global, key_padding_mask=None, window=128, global_qkv=None, impl="auto")``
computes Longformer-style attention: each ordinary token attends to its local
window |i - j| <= window/2 (Eq. 7) and to every global token (Eqs. 8-10); each
global token attends to every token with its own projections (``global_qkv``).
Semantics are fixed by `common.kernels.reference`; shapes (B, H, N, D) -> (B, H, N, D).

Implementations (``impl``):
- ``reference``: dense masked softmax, O(n^2) memory, the ground truth;
- ``portable``: banded blocks plus gathered global tokens in PyTorch, O(n (w + g)) memory, CPU and CUDA;
- ``tvm``: the banded matrix products compiled with Apache TVM (LLVM on CPU, CUDA where available);
- ``flex``: FlexAttention with a block mask over globally-gathered tokens (GPU);
- ``auto``: the fastest exact implementation that can run the call (`auto_implementation`):
  on CPU ``tvm`` (measured fastest there, `results/kernels/`); on CUDA ``flex``, whose fused kernel skips
  the empty tiles of the block mask (`common.kernels.flex`) where ``portable`` computes every tile of the
  band unfused (not yet timed on a GPU in `results/kernels/`), where ``torch.compile`` can build it: Triton
  is installed, the GPU has compute capability 7.0 or higher (Volta on; inductor's Triton backend needs it)
  and the head dimension is at least 16 (Triton's ``tl.dot``; torch refuses smaller); ``portable``
  everywhere else (other devices, older GPUs, no Triton, TVM unable to run). TVM's CUDA kernels (one
  thread per output) stay opt-in, and so does ``flex`` on CPU (forward only: `common.kernels.flex`).
  A chosen kernel that raises `KernelUnavailableError` falls back to ``portable`` with a warning, once per
  reason. ``flex`` is compiled at ``auto``'s first call (a small call forward and backward), and where that
  fails on any process of a DDP job every process runs ``portable`` (`common.kernels.flex`, "Compile
  failures"); ``impl="flex"`` given explicitly raises instead.

What an implementation derives from the global tokens and the padding is built once per encoder call and
shared by its layers (`common.kernels.layouts`).

Half precision (bf16, fp16, and autocast's ``bf16-mixed``/``16-mixed``): ``reference``, ``portable`` and
``flex`` compute in their inputs' dtype (their matmuls in what autocast picks); ``tvm`` computes in
float32, the inputs cast in and the output cast back, autocast off inside (`common.kernels.tvm_kernel`), so
``auto`` keeps it for bf16 on CPU.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings

import torch
from torch import Tensor

from common.kernels.reference import reference_attention

IMPLEMENTATIONS = ("reference", "portable", "tvm", "flex")

_MODULES = {
    "reference": ("common.kernels.reference", "reference_attention"),
    "portable": ("common.kernels.portable", "portable_attention"),
    "tvm": ("common.kernels.tvm_kernel", "tvm_attention"),
    "flex": ("common.kernels.flex", "flex_attention_qds"),
}


class KernelUnavailableError(RuntimeError):
    """An implementation cannot run here (its backend or device is missing); the message says why."""


def get_implementation(impl: str):
    """The attention function of `impl` (see the module docstring); raises KernelUnavailableError if it cannot run."""
    if impl not in _MODULES:
        raise ValueError(f"unknown attention implementation {impl!r}; expected one of {', '.join(IMPLEMENTATIONS)}")
    module, name = _MODULES[impl]
    return getattr(importlib.import_module(module), name)


def qds_attention(q: Tensor, k: Tensor, v: Tensor, is_global: Tensor, key_padding_mask: Tensor | None = None,
                  window: int = 128, global_qkv: tuple[Tensor, Tensor, Tensor] | None = None,
                  impl: str = "auto") -> Tensor:
    """Query-directed sparse attention; see the module docstring."""
    args = (q, k, v, is_global, key_padding_mask, window, global_qkv)
    if impl != "auto":
        return get_implementation(impl)(*args)
    chosen = auto_implementation(q.device, q.shape[-1])
    if chosen == "flex":
        # Compiled at its first call, with every process's success agreed on (common.kernels.flex)
        reason = importlib.import_module("common.kernels.flex").KERNEL.unusable(q, window)
        if reason is not None:
            _warn_fallback(reason)
            chosen = "portable"
    if chosen != "portable":
        try:
            return get_implementation(chosen)(*args)
        except KernelUnavailableError as error:
            _warn_fallback(str(error))
    return get_implementation("portable")(*args)


def auto_implementation(device: torch.device, head_dim: int) -> str:
    """The implementation ``impl="auto"`` runs for inputs on `device` with heads of `head_dim` (module docstring):
    ``tvm`` on CPU, ``flex`` on a CUDA device where `flex_compiles` holds, else ``portable``."""
    if device.type == "cpu":
        return "tvm"
    if device.type == "cuda" and flex_compiles(device, head_dim):
        return "flex"
    return "portable"


def flex_compiles(device: torch.device, head_dim: int) -> bool:
    """Whether ``torch.compile`` can build FlexAttention's fused kernel for CUDA `device` and `head_dim`: Triton is
    installed, the device's compute capability is at least 7.0, and `head_dim` at least 16."""
    if importlib.util.find_spec("triton") is None or head_dim < 16:
        return False
    return torch.cuda.get_device_capability(device) >= (7, 0)


def _warn_fallback(reason: str) -> None:
    if reason not in _WARNED:
        _WARNED.add(reason)
        warnings.warn(f"impl='auto' falls back to the portable kernel: {reason}", RuntimeWarning, stacklevel=3)


_WARNED: set[str] = set()


__all__ = ["IMPLEMENTATIONS", "KernelUnavailableError", "auto_implementation", "flex_compiles", "get_implementation",
           "qds_attention", "reference_attention"]
