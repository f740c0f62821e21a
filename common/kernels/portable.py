"""Query-directed sparse attention in plain PyTorch, O(n (w + g)) memory, forward and backward, CPU and CUDA.

Eq. 7: rows in blocks of c (32, or w/2 if smaller) score the (c, c + w) key tile around them, strided views of
one padded buffer, keeping the band |i - j| <= w/2 without the global keys; Eqs. 8-10: every row also scores the
gathered global keys, one softmax over both; the global rows attend to every valid key with their own projections.
The layout (`_Layout`) is built once per encoder call (`common.kernels.layouts`). Semantics: `common.kernels.reference`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from common.kernels.layouts import GlobalTokens, global_tokens_of, shared
from common.kernels.reference import WINDOW, check_inputs


def portable_attention(q: Tensor, k: Tensor, v: Tensor, is_global: Tensor, key_padding_mask: Tensor | None = None,
                       window: int = WINDOW, global_qkv: tuple[Tensor, Tensor, Tensor] | None = None) -> Tensor:
    """Shapes: q, k, v (B, H, N, D); is_global, key_padding_mask (B, N) bool -> (B, H, N, D)."""
    check_inputs(q, k, v, is_global, key_padding_mask, global_qkv)
    batch, heads, n, dim = q.shape
    layout = shared(_Layout.build, is_global, key_padding_mask, window)
    scale = 1.0 / math.sqrt(dim)

    out = _ordinary_rows(q * scale, k, v, layout)
    tokens = layout.tokens
    if layout.order.shape[1]:
        q_g, k_g, v_g = (q, k, v) if global_qkv is None else global_qkv
        out_g = _global_rows(q_g * scale, k_g, v_g, tokens.valid, layout.order)  # (B, H, g, D)
        out_g = torch.gather(out_g, 2, tokens.slot[:, None, :, None].expand(batch, heads, n, dim))
        out = torch.where(tokens.glob[:, None, :, None], out_g, out)
    return out.masked_fill(~tokens.valid[:, None, :, None], 0.0)


@dataclass(frozen=True)
class _Layout:
    """What the kernel derives from the global tokens, the padding and the window, for every head and layer."""

    tokens: GlobalTokens
    order: Tensor  # (B, g) long: each example's global positions in order, g the batch's largest count
    slot_valid: Tensor  # (B, g) bool: the slot holds a global token
    keep: Tensor  # (B * blocks, c, span) bool: the band tile entries a row keeps (`_ordinary_rows`)
    chunk: int
    front: int
    blocks: int
    half: int

    @staticmethod
    def build(is_global: Tensor, key_padding_mask: Tensor | None, window: int) -> _Layout:
        tokens = global_tokens_of(is_global, key_padding_mask)
        valid, is_global, g = tokens.valid, tokens.glob, tokens.widest
        batch, n = is_global.shape
        slot_valid = torch.arange(g, device=is_global.device)[None] < tokens.counts[:, None]  # (B, g)

        half = window // 2
        chunk = max(min(32, half), 1)
        front = -(-half // chunk)
        blocks = -(-n // chunk) + front + 1
        span = chunk + 2 * half
        # Eq. 7 inside a tile: row r sees column t iff r <= t <= r + 2 half, for a valid non-global key.
        r = torch.arange(chunk, device=is_global.device)[:, None]
        t = torch.arange(span, device=is_global.device)[None, :]
        band = (t >= r) & (t <= r + 2 * half)  # (c, span)
        local_key = _key_tiles((valid & ~is_global)[..., None], blocks, chunk, half, front)[..., 0]  # (B blocks, span)
        # Padding rows keep every column: finite values, discarded, so a zero gradient instead of NaN.
        real_row = F.pad(valid, (0, blocks * chunk - n)).view(batch * blocks, chunk)
        keep = (band & local_key[:, None, :]) | ~real_row[..., None]  # (B * blocks, c, span)
        return _Layout(tokens, tokens.order[:, :g], slot_valid, keep, chunk, front, blocks, half)


def _ordinary_rows(q: Tensor, k: Tensor, v: Tensor, layout: _Layout) -> Tensor:
    """Every row's attention over its Eq. 7 band and the gathered global keys (q pre-scaled), (B, H, N, D)."""
    batch, heads, n, dim = q.shape
    chunk, blocks, half = layout.chunk, layout.blocks, layout.half
    span = chunk + 2 * half
    tiles = batch * heads * blocks

    q_blocks = F.pad(q, (0, 0, 0, blocks * chunk - n)).view(tiles, chunk, dim)  # (T, c, D)
    k_tiles, v_tiles = (_key_tiles(x, blocks, chunk, half, layout.front) for x in (k, v))  # (T, span, D)
    scores = torch.bmm(q_blocks, k_tiles.transpose(1, 2)).view(batch, heads, blocks, chunk, span)
    scores = scores.masked_fill(~layout.keep.view(batch, 1, blocks, chunk, span), float("-inf"))

    order = layout.order
    g = order.shape[1]
    if not g:
        probs = torch.softmax(scores, dim=-1).view(tiles, chunk, span)
        return torch.bmm(probs, v_tiles).view(batch, heads, blocks * chunk, dim)[:, :, :n]

    index = order[:, None, :, None].expand(batch, heads, g, dim)
    k_global, v_global = torch.gather(k, 2, index), torch.gather(v, 2, index)  # (B, H, g, D)
    global_scores = q_blocks.view(batch, heads, blocks * chunk, dim) @ k_global.transpose(-1, -2)  # (B, H, L, g)
    global_scores = global_scores.masked_fill(~layout.slot_valid[:, None, None, :], float("-inf"))
    scores = torch.cat([scores, global_scores.view(batch, heads, blocks, chunk, g)], dim=-1)
    probs = torch.softmax(scores, dim=-1).view(tiles, chunk, span + g)
    out = torch.bmm(probs[..., :span], v_tiles).view(batch, heads, blocks * chunk, dim)
    out = out + probs[..., span:].reshape(batch, heads, blocks * chunk, g) @ v_global
    return out[:, :, :n]


def _key_tiles(x: Tensor, blocks: int, chunk: int, half: int, front: int) -> Tensor:
    """Overlapping (c + 2 half)-row tiles of x (..., N, D), tile b of each leading index starting at row b c - half."""
    *lead, n, dim = x.shape
    rows = x.reshape(-1, n, dim)
    padded = F.pad(rows, (0, 0, front * chunk, (blocks - front) * chunk - n))  # (L, blocks * c, D)
    flat = F.pad(padded.reshape(-1), (0, (chunk + 2 * half) * dim))
    count = rows.shape[0] * blocks
    return flat.as_strided((count, chunk + 2 * half, dim), (chunk * dim, dim, 1), (front * chunk - half) * dim)


def _global_rows(q_g: Tensor, k_g: Tensor, v_g: Tensor, valid: Tensor, order: Tensor) -> Tensor:
    """Eqs. 8-10 rows: each gathered global query (pre-scaled) attends to every valid key, (B, H, g, D)."""
    batch, heads, _, dim = q_g.shape
    index = order[:, None, :, None].expand(batch, heads, order.shape[1], dim)
    scores = torch.gather(q_g, 2, index) @ k_g.transpose(-1, -2)  # (B, H, g, N)
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    return torch.softmax(scores, dim=-1) @ v_g
