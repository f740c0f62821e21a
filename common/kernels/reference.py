"""Dense masked reference of query-directed sparse attention (QDS-Transformer Eqs. 7-10): the ground truth.

Ordinary rows: keys with |i - j| <= w/2 (Eq. 7) and every global token, through the local projections (a global
key in the window counted once); global rows: every key, with their own projections (Longformer's ``*_global``);
padded keys are never attended to and padded rows output zeros. Queries are scaled by 1/sqrt(head_dim).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

#: The local window w of Eq. 7 (|i - j| <= w / 2), the paper's and Longformer's: the kernels' default.
WINDOW = 128


def allowed_keys(is_global: Tensor, key_padding_mask: Tensor | None, window: int) -> Tensor:
    """Boolean (B, N, N) adjacency of each row's attended keys, for ordinary and global rows alike."""
    batch, n = is_global.shape
    position = torch.arange(n, device=is_global.device)
    band = (position[:, None] - position[None, :]).abs() <= window // 2  # (N, N), Eq. 7
    allowed = band[None] | is_global[:, None, :] | is_global[:, :, None]  # (B, N, N), Eqs. 8-10
    if key_padding_mask is not None:
        valid = ~key_padding_mask
        allowed = allowed & valid[:, None, :] & valid[:, :, None]
    return allowed


def check_inputs(q: Tensor, k: Tensor, v: Tensor, is_global: Tensor, key_padding_mask: Tensor | None = None,
                 global_qkv: tuple[Tensor, Tensor, Tensor] | None = None) -> None:
    """Raise ValueError unless q, k, v, ``global_qkv`` are one (B, H, N, D) shape and the masks (B, N)."""
    tensors = (q, k, v, *(global_qkv or ()))
    masks = (is_global,) if key_padding_mask is None else (is_global, key_padding_mask)
    if q.dim() != 4 or any(t.shape != q.shape for t in tensors) or any(m.shape != (q.shape[0], q.shape[2])
                                                                       for m in masks):
        raise ValueError(f"expected q, k, v{', global_qkv' if global_qkv else ''} of one shape (B, H, N, D) and "
                         f"is_global{', key_padding_mask' if key_padding_mask is not None else ''} (B, N); got "
                         + ", ".join(str(tuple(t.shape)) for t in (*tensors, *masks)))


def reference_attention(q: Tensor, k: Tensor, v: Tensor, is_global: Tensor, key_padding_mask: Tensor | None = None,
                        window: int = WINDOW, global_qkv: tuple[Tensor, Tensor, Tensor] | None = None) -> Tensor:
    """Query-directed sparse attention by a dense masked softmax. Shapes: q, k, v (B, H, N, D) -> (B, H, N, D)."""
    check_inputs(q, k, v, is_global, key_padding_mask, global_qkv)
    scale = 1.0 / math.sqrt(q.shape[-1])
    allowed = allowed_keys(is_global, key_padding_mask, window)[:, None]  # (B, 1, N, N)
    out = _masked_attention(q * scale, k, v, allowed)
    if global_qkv is not None:
        q_g, k_g, v_g = global_qkv
        out_g = _masked_attention(q_g * scale, k_g, v_g, allowed)
        out = torch.where(is_global[:, None, :, None], out_g, out)
    return out


def _masked_attention(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor) -> Tensor:
    scores = (q @ k.transpose(-1, -2)).masked_fill(~allowed, float("-inf"))  # (B, H, N, N)
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return probs @ v
