"""Query-directed sparse attention through PyTorch FlexAttention (QDS-Transformer, Sec. 4.3), for GPUs.

QDS-Transformer (Jiang et al., Findings of EMNLP 2020) runs Longformer's
attention (Beltagy et al. 2020): a local window |i - j| <= w/2 (Eq. 7) plus
global tokens ([CLS], query, [SOS]; Eqs. 8-10) that every token attends to and
that attend to every token with their own projections. Sec. 4.3 notes that this
pattern is only fast with a kernel that skips the zero blocks; FlexAttention
(``torch.nn.attention.flex_attention``) is such a kernel, driven by a block mask.

Block sparsity. FlexAttention skips a (128 x 128) tile only when no entry of it
is allowed. In the natural token order the [SOS] markers are scattered (one per
sentence, every ~25 tokens), so every key block holds a global column and every
tile is partial: the block mask is 100% dense and nothing is skipped. Tokens are
therefore permuted per example so that its global tokens come first (positions
are already embedded, so the attention result does not depend on token order;
the original positions are kept in an index tensor for the window test inside
``mask_mod``, and the output is scattered back). In the gathered order the
global columns fill the first ceil(g / 128) key blocks (dense for every row) and
the window becomes a band of ~3 blocks per query block. Global rows, which have
separate projections and attend to every valid key, are removed from the flex
call and computed as a small dense (g x n) attention (SDPA).
Non-empty tiles of the block mask (`block_density`, QDS synthetic layout of
`common.kernels.patterns`: query of 20 tokens, an [SOS] every 25 tokens,
window 128, BLOCK_SIZE 128):

    n = 2048 (QDS, g = 104):  natural order 100.0%,  globals gathered 23.4%  (window alone 18.0%)
    n = 4096 (QDS, g = 185):  natural order 100.0%,  globals gathered 14.7%  (window alone  9.2%)

plus the dense global rows, g/n of the full matrix (5.1% and 4.5%).

On CPU, torch 2.13 runs FlexAttention's forward only: eagerly, it falls back to
an unfused implementation that materialises the full (n x n) scores, like the
reference (torch.compile'd it builds a fused inductor CPU kernel, but compiling
takes tens of seconds per shape). It has no CPU backward: ``flex_attention``
checks its inputs first (``_validate_device`` in ``torch.nn.attention.flex_attention``)
and raises NotImplementedError for CPU inputs that require gradients, eager and
under torch.compile alike, so a call that needs gradients on CPU raises
`KernelUnavailableError` here. On CUDA the compiled, fused kernel is used, forward
and backward (its tests run where a GPU is present); there ``impl="auto"`` picks
this path (`common.kernels.auto_implementation`).
"""

from __future__ import annotations

import functools
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from common.kernels import KernelUnavailableError
from common.kernels.reference import check_inputs

#: FlexAttention's tile size, for queries and keys.
BLOCK_SIZE = 128


def flex_attention_qds(q: Tensor, k: Tensor, v: Tensor, is_global: Tensor, key_padding_mask: Tensor | None = None,
                       window: int = 128, global_qkv: tuple[Tensor, Tensor, Tensor] | None = None) -> Tensor:
    """Query-directed sparse attention with FlexAttention, semantics of `reference_attention`.

    Shapes: q, k, v and the optional ``global_qkv`` (B, H, N, D) -> (B, H, N, D);
    ``is_global`` and ``key_padding_mask`` (True = padding) (B, N) bool.
    Raises `KernelUnavailableError` where FlexAttention cannot run the call
    (gradients on CPU); see the module docstring.
    """
    check_inputs(q, k, v, is_global, key_padding_mask, global_qkv)
    batch, heads, n, dim = q.shape
    perm, glob_p, valid_p = _globals_first(is_global, key_padding_mask)

    # Ordinary rows: flex over the gathered order, so that the global key columns form dense blocks.
    index = perm[:, None, :, None].expand(batch, heads, n, dim)
    q_p, k_p, v_p = (t.gather(2, index) for t in (q, k, v))  # (B, H, N, D), globals first
    block_mask = _block_mask(perm, glob_p, valid_p, window, q.device)
    out_p = _flex(q_p, k_p, v_p, block_mask)  # (B, H, N, D); global and padded rows keep no key -> 0

    # Global rows: a dense (G x N) attention, G the batch's largest global count; an example with
    # fewer globals fills its remaining slots with ordinary tokens, whose results are discarded.
    g = int(glob_p.sum(dim=1).max())
    if g:
        q_g, k_g, v_g = global_qkv if global_qkv is not None else (q, k, v)
        real = glob_p[:, :g]  # (B, G): the slot holds a global token
        rows = perm[:, None, :g, None].expand(batch, heads, g, dim)
        # Every valid key, in the original order; filler slots may see every key so that no row is empty
        # (an all-masked row would make SDPA return NaN, and NaN gradients survive torch.where).
        valid = torch.ones_like(is_global) if key_padding_mask is None else ~key_padding_mask  # (B, N)
        allowed = valid[:, None, None, :] | ~real[:, None, :, None]  # (B, 1, G, N)
        out_g = F.scaled_dot_product_attention(q_g.gather(2, rows), k_g, v_g, attn_mask=allowed)  # (B, H, G, D)
        out_p = torch.cat([torch.where(real[:, None, :, None], out_g, out_p[:, :, :g]), out_p[:, :, g:]], dim=2)

    inverse = perm.argsort(dim=1)[:, None, :, None].expand(batch, heads, n, dim)
    return out_p.gather(2, inverse)  # (B, H, N, D), original order


def block_density(
    is_global: Tensor,
    window: int = 128,
    key_padding_mask: Tensor | None = None,
    gathered: bool = True,
    block_size: int = BLOCK_SIZE,
) -> float:
    """Fraction of non-empty (block_size x block_size) tiles of the ordinary rows' block mask.

    ``is_global`` (B, N) bool; ``gathered=False`` gives the natural token order, for comparison.
    The dense (g x n) global rows are computed outside FlexAttention and not counted here.
    """
    if gathered:
        perm, glob_p, valid_p = _globals_first(is_global, key_padding_mask)
    else:
        valid = torch.ones_like(is_global) if key_padding_mask is None else ~key_padding_mask
        perm = torch.arange(is_global.shape[1], device=is_global.device).expand_as(is_global)
        glob_p, valid_p = is_global & valid, valid
    mask = _block_mask(perm, glob_p, valid_p, window, is_global.device, block_size)
    computed = mask.kv_num_blocks.sum() + (0 if mask.full_kv_num_blocks is None else mask.full_kv_num_blocks.sum())
    blocks_per_side = -(-is_global.shape[1] // block_size)
    return float(computed) / (is_global.shape[0] * blocks_per_side**2)


def _globals_first(is_global: Tensor, key_padding_mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """Per-example permutation putting the (valid) global tokens first; the rest keeps its order.

    Returns ``perm`` (B, N), the original position of each gathered slot, and the gathered
    global and valid masks (B, N). A padded token is never global: it is neither attended to nor attends.
    """
    valid = torch.ones_like(is_global) if key_padding_mask is None else ~key_padding_mask
    glob = is_global & valid
    # A stable sort keeps the ordinary tokens in order, so their window stays a band of blocks.
    perm = torch.argsort((~glob).to(torch.uint8), dim=1, stable=True)
    return perm, glob.gather(1, perm), valid.gather(1, perm)


def _block_mask(
    perm: Tensor, glob_p: Tensor, valid_p: Tensor, window: int, device: torch.device, block_size: int = BLOCK_SIZE
) -> BlockMask:
    """The ordinary rows' block mask over the gathered order (one per example: permutations differ)."""
    half = window // 2

    def mask_mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        # Global rows are computed densely elsewhere, padded rows output 0: neither keeps a key here.
        ordinary_query = valid_p[b, q_idx] & ~glob_p[b, q_idx]
        near = (perm[b, q_idx] - perm[b, kv_idx]).abs() <= half  # Eq. 7 on the original positions
        return ordinary_query & valid_p[b, kv_idx] & (glob_p[b, kv_idx] | near)

    batch, n = perm.shape
    # Built per call (globals and padding differ per batch); torch evaluates mask_mod on a (B, N, N) grid for it.
    return create_block_mask(mask_mod, batch, None, n, n, device=device, BLOCK_SIZE=block_size)


def _flex(q: Tensor, k: Tensor, v: Tensor, block_mask: BlockMask) -> Tensor:
    """FlexAttention, (B, H, N, D) -> (B, H, N, D): the fused compiled kernel on CUDA, eager forward elsewhere."""
    if q.device.type == "cuda":
        return _compiled_flex()(q, k, v, block_mask=block_mask)
    if q.requires_grad or k.requires_grad or v.requires_grad:
        raise KernelUnavailableError(
            f"FlexAttention in torch {torch.__version__} has no backward pass on {q.device.type} (forward only: "
            "flex_attention refuses inputs that require gradients there, compiled or not); run impl='flex' on CUDA, "
            "or use impl='portable' or 'reference' to train here"
        )
    # The eager, unfused forward (see the module docstring); its warning says just that.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return flex_attention(q, k, v, block_mask=block_mask)


@functools.cache
def _compiled_flex():
    """The fused kernel; compiled once per process (torch.compile then caches per shape)."""
    return torch.compile(flex_attention)
