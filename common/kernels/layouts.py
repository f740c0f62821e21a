"""What the attention kernels derive from a call's global tokens and padding, built once per encoder call.

Every layer of a Longformer encoder attends with the same global tokens and padding: ``LongformerEncoder``
derives ``is_index_global_attn`` and ``is_index_masked`` once and passes every layer these very tensors. What a
kernel builds from them (the global tokens' count and positions, the permutation putting them first, FlexAttention's
block mask, the band masks) is therefore the same in every layer. Building it reads a count back to the host (a
synchronisation with the GPU), and FlexAttention's block mask costs more than a small layer's attention.

`use_qds_attention` (`common.kernels.longformer`) opens a scope around each encoder forward (`open_scope` and
`close_scope` as the encoder's forward hooks). Inside a scope, `shared(build, *args)` returns what ``build(*args)``
returned at its first call with the same arguments: tensors compared by identity, other arguments by equality. The
scope keeps those tensors alive, so no identity is reused while it lasts; the tensors are read, not modified in
place, during the call (``LongformerEncoder`` creates them and only reads them). Outside a scope `shared` simply
calls `build`, so every direct `qds_attention` call builds its own. Scopes are per thread (``DataParallel`` runs
its replicas in threads) and nest: an encoder called inside another's forward has its own.

`global_tokens_of` is the one thing every kernel and the Longformer module need: the valid global tokens' count per
example, in all and the largest, and their (batch, position) indices. It is the only host synchronisation of an
encoder call (its counts, read back together); the indices are then found without another one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import Tensor

T = TypeVar("T")

_SCOPES = threading.local()  # .stack: one dict per open scope, innermost last


def open_scope(*_) -> None:
    """Start sharing layouts (until `close_scope`); the signature of a forward pre-hook."""
    _stack().append({})


def close_scope(*_) -> None:
    """Stop the innermost scope, dropping what it holds; the signature of a forward hook."""
    _stack().pop()


def shared(build: Callable[..., T], *args) -> T:
    """``build(*args)``, built once per scope for the same arguments (module docstring)."""
    stack = _stack()
    if not stack:
        return build(*args)
    key = (build, *((id(a), "tensor") if isinstance(a, Tensor) else a for a in args))
    if key not in stack[-1]:
        stack[-1][key] = (args, build(*args))  # the arguments kept alive with it: no identity is reused
    return stack[-1][key][1]


def _stack() -> list[dict]:
    if not hasattr(_SCOPES, "stack"):
        _SCOPES.stack = []
    return _SCOPES.stack


@dataclass(frozen=True)
class GlobalTokens:
    """The valid global tokens of a (B, N) batch: a global token on padding is not one (it is never attended)."""

    valid: Tensor  # (B, N) bool: not padding
    glob: Tensor  # (B, N) bool: global and valid
    counts: Tensor  # (B,) long: global tokens per example
    total: int  # T, in the batch
    widest: int  # the largest count of an example
    fewest: int  # the smallest
    padded: bool  # some token is padding
    batch: Tensor  # (T,) long: the example of each global token, in (example, position) order
    position: Tensor  # (T,) long: its position


def global_tokens_of(is_global: Tensor, key_padding_mask: Tensor | None) -> GlobalTokens:
    """`GlobalTokens` of ``is_global`` (B, N) and ``key_padding_mask`` (B, N, True = padding) or None, shared per
    scope: one host synchronisation per encoder call."""
    return shared(_global_tokens, is_global, key_padding_mask)


def _global_tokens(is_global: Tensor, key_padding_mask: Tensor | None) -> GlobalTokens:
    valid = torch.ones_like(is_global) if key_padding_mask is None else ~key_padding_mask.to(is_global.device)
    glob = is_global & valid
    counts = glob.sum(1)  # (B,)
    total, widest, fewest, padded = (
        torch.stack([counts.sum(), counts.max(), counts.min(), (~valid).any().long()]).tolist() if counts.numel()
        else (0, 0, 0, False))  # fmt: skip
    batch, position = torch.nonzero_static(glob, size=total).unbind(1)  # the count known: no second read-back
    return GlobalTokens(valid, glob, counts, total, widest, fewest, bool(padded), batch, position)
