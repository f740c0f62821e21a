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
- ``auto``: ``tvm`` on CPU (measured fastest there, `results/kernels/`), falling back to ``portable``
  when TVM cannot run; ``portable`` on CUDA (``flex`` and TVM's CUDA kernels are opt-in until they
  have been measured on a GPU).
"""

from __future__ import annotations

import importlib
import warnings

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
    if q.device.type == "cpu":
        try:
            return get_implementation("tvm")(*args)
        except KernelUnavailableError as error:
            _warn_fallback(str(error))
    return get_implementation("portable")(*args)


def _warn_fallback(reason: str) -> None:
    if reason not in _WARNED:
        _WARNED.add(reason)
        warnings.warn(f"impl='auto' falls back to the portable kernel: {reason}", RuntimeWarning, stacklevel=3)


_WARNED: set[str] = set()


__all__ = ["IMPLEMENTATIONS", "KernelUnavailableError", "get_implementation", "qds_attention", "reference_attention"]
