"""Dense masked reference of query-directed sparse attention: the ground truth, O(n^2) memory.

QDS-Transformer (Jiang et al., Findings of EMNLP 2020, Sec. 4.1-4.2) keeps the
attention adjacency A_QDS = A_local ∪ A_sent ∪ A_query ∪ A_[CLS] (Eqs. 7-10),
run as Longformer's attention in the official code (Beltagy et al. 2020):

- Eq. 7, local: an ordinary token i attends to keys j with |i - j| <= w/2;
- Eqs. 8-10, global: it also attends to every global token ([SOS], query, [CLS]),
  through the same (local) key and value projections; a global key inside the
  window is counted once;
- a global token attends to every token, with its own projections
  (Longformer's ``query_global``, ``key_global``, ``value_global``);
- padded keys are never attended to, and padded rows output zeros (as
  transformers' ``LongformerSelfAttention`` zeroes their probabilities).

Queries are scaled by 1/sqrt(head_dim) here, for ordinary and global rows alike.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def allowed_keys(is_global: Tensor, key_padding_mask: Tensor | None, window: int) -> Tensor:
    """Boolean (B, N, N) adjacency of each row's attended keys, for ordinary and global rows alike.

    Row i of an ordinary token: Eq. 7 band ∪ global columns; row i of a global token:
    every column. Padded columns are removed; padded rows keep no key.
    """
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
    """Raise ValueError unless the inputs have the shapes every implementation takes: q, k, v and the three tensors
    of ``global_qkv`` one (B, H, N, D) shape, ``is_global`` and ``key_padding_mask`` (B, N)."""
    tensors = (q, k, v, *(global_qkv or ()))
    masks = (is_global,) if key_padding_mask is None else (is_global, key_padding_mask)
    if q.dim() != 4 or any(t.shape != q.shape for t in tensors) or any(m.shape != (q.shape[0], q.shape[2])
                                                                       for m in masks):
        raise ValueError(f"expected q, k, v{', global_qkv' if global_qkv else ''} of one shape (B, H, N, D) and "
                         f"is_global{', key_padding_mask' if key_padding_mask is not None else ''} (B, N); got "
                         + ", ".join(str(tuple(t.shape)) for t in (*tensors, *masks)))


def reference_attention(q: Tensor, k: Tensor, v: Tensor, is_global: Tensor, key_padding_mask: Tensor | None = None,
                        window: int = 128, global_qkv: tuple[Tensor, Tensor, Tensor] | None = None) -> Tensor:
    """Query-directed sparse attention by a dense masked softmax. Shapes: q, k, v (B, H, N, D) -> (B, H, N, D)."""
    check_inputs(q, k, v, is_global, key_padding_mask, global_qkv)
    scale = 1.0 / math.sqrt(q.shape[-1])
    allowed = allowed_keys(is_global, key_padding_mask, window)[:, None]  # (B, 1, N, N)
    out = _masked_attention(q * scale, k, v, allowed)  # ordinary rows
    if global_qkv is not None:
        q_g, k_g, v_g = global_qkv
        out_g = _masked_attention(q_g * scale, k_g, v_g, allowed)  # global rows: every valid key
        out = torch.where(is_global[:, None, :, None], out_g, out)
    return out


def _masked_attention(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor) -> Tensor:
    scores = (q @ k.transpose(-1, -2)).masked_fill(~allowed, float("-inf"))  # (B, H, N, N)
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # rows without any key (padding) -> 0
    return probs @ v
