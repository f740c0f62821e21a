"""What the attention kernels derive from a call's global tokens and padding, built once per encoder call.

Every layer of a Longformer encoder gets the same ``is_index_global_attn`` and ``is_index_masked`` tensors;
`use_qds_attention` opens a scope around each encoder forward (`open_scope`, `close_scope`), inside which `shared(build,
*args)` returns the first result for the same arguments (tensors by identity, others by equality), outside one calls
`build`. Scopes are per thread and nest. `global_tokens_of` (the global tokens' counts, indices and order) is an
encoder call's only host synchronisation. Discussion: docs/kernels.md.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import Tensor

T = TypeVar("T")


class _Scopes(threading.local):
    def __init__(self):
        self.stack: list[dict] = []


_SCOPES = _Scopes()


def open_scope(*_) -> None:
    """Start sharing layouts (until `close_scope`); the signature of a forward pre-hook."""
    _SCOPES.stack.append({})


def close_scope(*_) -> None:
    """Stop the innermost scope, dropping what it holds; the signature of a forward hook."""
    _SCOPES.stack.pop()


def shared(build: Callable[..., T], *args) -> T:
    """``build(*args)``, built once per scope for the same arguments (module docstring)."""
    stack = _SCOPES.stack
    if not stack:
        return build(*args)
    key = (build, *((id(a), "tensor") if isinstance(a, Tensor) else a for a in args))
    if key not in stack[-1]:
        stack[-1][key] = (args, build(*args))
    return stack[-1][key][1]


@dataclass(frozen=True)
class GlobalTokens:
    """The valid global tokens of a (B, N) batch: a global token on padding is not one (it is never attended)."""

    valid: Tensor  # (B, N) bool: not padding
    glob: Tensor  # (B, N) bool: global and valid
    counts: Tensor  # (B,) long: global tokens per example
    total: int
    widest: int
    fewest: int
    padded: bool
    batch: Tensor  # (T,) long: the example of each global token, in (example, position) order
    position: Tensor  # (T,) long: its position
    order: Tensor  # (B, N) long: the positions, each example's global tokens first, each part in order
    slot: Tensor  # (B, N) long: the rank of each global token among its example's (0 elsewhere)


def global_tokens_of(is_global: Tensor, key_padding_mask: Tensor | None) -> GlobalTokens:
    """`GlobalTokens` of ``is_global`` and ``key_padding_mask`` (B, N), shared per scope."""
    return shared(_global_tokens, is_global, key_padding_mask)


def _global_tokens(is_global: Tensor, key_padding_mask: Tensor | None) -> GlobalTokens:
    valid = torch.ones_like(is_global) if key_padding_mask is None else ~key_padding_mask.to(is_global.device)
    glob = is_global & valid
    counts = glob.sum(1)  # (B,)
    total, widest, fewest, padded = (
        torch.stack([counts.sum(), counts.max(), counts.min(), (~valid).any().long()]).tolist() if counts.numel()
        else (0, 0, 0, False))
    batch, position = torch.nonzero_static(glob, size=total).unbind(1)
    order = torch.argsort((~glob).to(torch.int8), dim=1, stable=True)
    slot = (torch.cumsum(glob, 1) - 1).clamp(min=0)
    return GlobalTokens(valid, glob, counts, total, widest, fewest, bool(padded), batch, position, order, slot)
