"""Query-directed sparse attention (QDS-Transformer Sec. 4.3, Eqs. 7-10): one interface, several implementations.

``qds_attention(q, k, v, is_global, key_padding_mask, window, global_qkv, impl)``, (B, H, N, D) -> (B, H, N, D):
each ordinary token attends to |i - j| <= window / 2 (Eq. 7) and to every global token; global tokens attend to every
token with their own projections (``global_qkv``); semantics: `common.kernels.reference`. ``impl``: ``reference``
(dense), ``portable`` (PyTorch, O(n (w + g))), ``tvm`` (Apache TVM, CPU), ``flex`` (FlexAttention, GPU), ``auto``:
``tvm`` on CPU, ``flex`` on CUDA where torch.compile can build it (Triton, compute capability >= 7.0, head_dim >=
16), else ``portable``; a kernel raising `KernelUnavailableError` falls back to ``portable`` with one warning per
reason. Design and measurements: docs/kernels.md.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings

import torch
from torch import Tensor

from common.kernels.reference import WINDOW, reference_attention

_MODULES = {
    "reference": ("common.kernels.reference", "reference_attention"),
    "portable": ("common.kernels.portable", "portable_attention"),
    "tvm": ("common.kernels.tvm_kernel", "tvm_attention"),
    "flex": ("common.kernels.flex", "flex_attention_qds"),
}
IMPLEMENTATIONS = tuple(_MODULES)


class KernelUnavailableError(RuntimeError):
    """An implementation cannot run here (its backend or device is missing); the message says why."""


def get_implementation(impl: str):
    """The attention function of `impl` (see the module docstring); raises KernelUnavailableError if it cannot run."""
    if impl not in _MODULES:
        raise ValueError(f"unknown attention implementation {impl!r}; expected one of {', '.join(IMPLEMENTATIONS)}")
    module, name = _MODULES[impl]
    return getattr(importlib.import_module(module), name)


def qds_attention(q: Tensor, k: Tensor, v: Tensor, is_global: Tensor, key_padding_mask: Tensor | None = None,
                  window: int = WINDOW, global_qkv: tuple[Tensor, Tensor, Tensor] | None = None,
                  impl: str = "auto") -> Tensor:
    """Query-directed sparse attention; see the module docstring."""
    args = (q, k, v, is_global, key_padding_mask, window, global_qkv)
    if impl != "auto":
        return get_implementation(impl)(*args)
    chosen = auto_implementation(q.device, q.shape[-1])
    if chosen == "flex":
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
    """What ``impl="auto"`` runs on `device` (module docstring)."""
    if device.type == "cpu":
        return "tvm"
    if (device.type == "cuda" and importlib.util.find_spec("triton") is not None and head_dim >= 16
            and torch.cuda.get_device_capability(device) >= (7, 0)):
        return "flex"
    return "portable"


def _warn_fallback(reason: str) -> None:
    if reason not in _WARNED:
        _WARNED.add(reason)
        warnings.warn(f"impl='auto' falls back to the portable kernel: {reason}", RuntimeWarning, stacklevel=3)


_WARNED: set[str] = set()


__all__ = ["IMPLEMENTATIONS", "KernelUnavailableError", "auto_implementation", "get_implementation", "qds_attention",
           "reference_attention"]
