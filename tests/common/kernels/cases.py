"""Random inputs for the kernel parity tests (every implementation is compared with the dense reference), and
FlexAttention's fused kernel emulated densely."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.nn.attention.flex_attention import create_mask

from common.kernels.patterns import PATTERNS, global_tokens, synthetic_layout


@dataclass(frozen=True)
class Case:
    name: str
    batch: int
    heads: int
    n: int
    dim: int
    window: int
    global_fraction: float | str  # a fraction of random positions, or a Table 4 pattern name
    padded: tuple[int, ...] = ()  # padded tail length per example
    separate_global_projections: bool = True


CASES = [
    Case("batch_and_different_global_counts", 3, 2, 150, 16, 32, 0.08, (0, 11, 40)),
    Case("n_smaller_than_window", 2, 2, 20, 8, 128, 0.2),
    Case("n_not_multiple_of_chunk", 2, 3, 203, 8, 64, 0.05, (0, 7)),
    Case("no_global_tokens", 2, 2, 97, 8, 32, 0.0, (5, 0)),
    Case("all_tokens_global", 2, 2, 60, 8, 16, 1.0, (0, 9)),
    Case("padding_only", 2, 2, 80, 8, 16, 0.1, (30, 79)),
    Case("shared_projections", 2, 2, 90, 8, 16, 0.1, (0, 3), separate_global_projections=False),
    Case("odd_window", 1, 2, 50, 8, 7, 0.1),
    *[Case(f"pattern_{p}", 2, 2, 300, 16, 64, p, (0, 23)) for p in PATTERNS],
]


def make_inputs(case: Case, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed)

    def tensor():
        return (torch.randn(case.batch, case.heads, case.n, case.dim, generator=generator) * 0.5).requires_grad_()

    if isinstance(case.global_fraction, str):
        is_global = global_tokens(case.global_fraction, synthetic_layout(case.n)).expand(case.batch, -1).clone()
    else:
        is_global = torch.rand(case.batch, case.n, generator=generator) < case.global_fraction
    padding = torch.zeros(case.batch, case.n, dtype=torch.bool)
    for row, length in enumerate(case.padded):
        if length:
            padding[row, case.n - length :] = True
    q, k, v = tensor(), tensor(), tensor()
    global_qkv = (tensor(), tensor(), tensor()) if case.separate_global_projections else None
    return dict(q=q, k=k, v=v, is_global=is_global, key_padding_mask=padding, window=case.window, global_qkv=global_qkv)


def output_and_grads(attention, inputs: dict) -> list[torch.Tensor]:
    """The output and the gradients of a fixed random projection of it w.r.t. every input tensor."""
    out = attention(**inputs)
    leaves = [inputs["q"], inputs["k"], inputs["v"], *(inputs["global_qkv"] or ())]
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    grads = torch.autograd.grad((out * weight).sum(), leaves, allow_unused=True)
    return [out.detach(), *(torch.zeros_like(x) if g is None else g for g, x in zip(grads, leaves))]


def block_sparse_dense_flex(q, k, v, block_mask):
    """What FlexAttention's fused kernel computes, densely and differentiably on any device: only the tiles that
    the block mask lists, every entry of its full tiles, mask_mod's entries of its partial ones; rows without a
    key output 0. (Torch's eager flex_attention evaluates mask_mod everywhere and ignores the tiles.)"""
    batch, _, n, dim = q.shape
    size = block_mask.BLOCK_SIZE[0]

    def tiles(count, indices):  # (B, 1, Q), (B, 1, Q, K) -> (B, 1, N, N) bool: the listed tiles, entry by entry
        listed = torch.arange(indices.shape[-1], device=q.device) < count[..., None]  # the first `count` entries
        dense = torch.zeros(indices.shape, dtype=torch.bool, device=q.device).scatter(-1, indices.long(), listed)
        return dense.repeat_interleave(size, -2).repeat_interleave(size, -1)[..., :n, :n]

    partial = tiles(block_mask.kv_num_blocks, block_mask.kv_indices)
    full = tiles(block_mask.full_kv_num_blocks, block_mask.full_kv_indices)
    allowed = full | (partial & create_mask(block_mask.mask_mod, batch, 1, n, n, device=q.device))  # (B, 1, N, N)
    scores = (q @ k.transpose(-1, -2) / math.sqrt(dim)).masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v
