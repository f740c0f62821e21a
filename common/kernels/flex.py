"""Query-directed sparse attention through PyTorch FlexAttention (QDS-Transformer Sec. 4.3), for GPUs.

Each example's global tokens are gathered first, so the global columns fill whole key blocks and the window is a band
of blocks FlexAttention skips around; global rows: a dense (g x n) SDPA. The block mask is built from its block-level
structure (`_block_mask`), linear in N. `FlexKernel` compiles once, dynamic shapes, (B, N) padded to at least 2 rows
and 2 blocks, no duck sizing, raising past dynamo's recompile limit rather than running densely; `FlexKernel.unusable`
probes the compilation at ``auto``'s first call, its success all-reduced over the process group. On CPU FlexAttention
has a forward only: gradients raise `KernelUnavailableError`. Design: docs/kernels.md; GPU checks: `.checks`.
"""

from __future__ import annotations

import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from common.kernels import KernelUnavailableError
from common.kernels.layouts import global_tokens_of, shared
from common.kernels.reference import WINDOW, check_inputs

#: FlexAttention's tile size, for queries and keys.
BLOCK_SIZE = 128
#: The smallest batch and number of blocks a call is padded to: dynamo compiles sizes 0 and 1 apart.
MIN_SIZE = 2


def flex_attention_qds(q: Tensor, k: Tensor, v: Tensor, is_global: Tensor, key_padding_mask: Tensor | None = None,
                       window: int = WINDOW, global_qkv: tuple[Tensor, Tensor, Tensor] | None = None, *,
                       kernel: Callable[[Tensor, Tensor, Tensor, BlockMask], Tensor] | None = None) -> Tensor:
    """Query-directed sparse attention with FlexAttention, semantics of `reference_attention`."""
    check_inputs(q, k, v, is_global, key_padding_mask, global_qkv)
    batch, heads, n, dim = q.shape
    if not q.numel():
        return q.new_zeros(q.shape)
    layout = shared(_Layout.build, is_global, key_padding_mask, window)
    heads_index = torch.arange(heads, device=q.device)[None, :, None]  # (1, H, 1)

    q_p, k_p, v_p = (x[layout.source_batch, heads_index, layout.source_position] for x in (q, k, v))  # (B', H, N', D)
    out_p = (KERNEL if kernel is None else kernel)(q_p, k_p, v_p, layout.block_mask)
    out = out_p[layout.example, heads_index, layout.slot]  # (B, H, N, D), original order
    if not layout.widest:
        return out

    q_g, k_g, v_g = global_qkv if global_qkv is not None else (q, k, v)
    queries = q_g[layout.example, heads_index, layout.global_position]  # (B, H, G, D)
    out_g = F.scaled_dot_product_attention(queries, k_g, v_g, attn_mask=layout.global_keys)  # (B, H, G, D)
    return torch.where(layout.is_global, out_g[layout.example, heads_index, layout.global_slot], out)


def block_density(is_global: Tensor, window: int = WINDOW, key_padding_mask: Tensor | None = None,
                  gathered: bool = True, block_size: int = BLOCK_SIZE) -> float:
    """Fraction of non-empty (block_size x block_size) tiles of the ordinary rows' block mask."""
    batch, n = is_global.shape
    blocks_per_side = -(-n // block_size)
    if gathered:
        mask = _Layout.build(is_global, key_padding_mask, window, block_size).block_mask
    else:
        tokens = global_tokens_of(is_global, key_padding_mask)
        ordinary, glob, half = tokens.valid & ~tokens.glob, tokens.glob, window // 2

        def mask_mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return ordinary[b, q_idx] & (glob[b, kv_idx] | (ordinary[b, kv_idx] & ((q_idx - kv_idx).abs() <= half)))

        mask = create_block_mask(mask_mod, batch, None, n, n, device=is_global.device, BLOCK_SIZE=block_size)
    computed = mask.kv_num_blocks[:batch].sum() + mask.full_kv_num_blocks[:batch].sum()
    return float(computed) / (batch * blocks_per_side**2)


@dataclass(frozen=True)
class _Layout:
    """What FlexAttention's path derives from the global tokens, the padding and the window (module docstring)."""

    source_batch: Tensor  # (B', 1, 1) long: the example each gathered row reads (0 for the padding rows)
    source_position: Tensor  # (B', 1, N') long: the position each slot reads (0 for the padding slots)
    block_mask: BlockMask  # the ordinary rows' tiles over (B', 1, N', N')
    example: Tensor  # (B, 1, 1) long: arange(B)
    slot: Tensor  # (B, 1, N) long: the gathered slot of each position
    widest: int
    global_position: Tensor  # (B, 1, G) long: the positions of an example's first G slots (its globals first)
    global_keys: Tensor  # (B, 1, G, N) bool: the keys of those rows (every valid key; every key for the fillers)
    global_slot: Tensor  # (B, 1, N) long: the rank of a global token among its example's (0 elsewhere)
    is_global: Tensor  # (B, 1, N, 1) bool: valid global tokens

    @staticmethod
    def build(is_global: Tensor, key_padding_mask: Tensor | None, window: int, block_size: int = BLOCK_SIZE) -> _Layout:
        tokens = global_tokens_of(is_global, key_padding_mask)
        valid, glob, device = tokens.valid, tokens.glob, is_global.device
        batch, n = glob.shape
        rows, length = max(batch, MIN_SIZE), max(-(-n // block_size), MIN_SIZE) * block_size
        perm = tokens.order  # (B, N): the position of each slot, the ordinary ones in order (a band of blocks)

        position = torch.arange(length, device=device).repeat(rows, 1)  # (B', N')
        position[:batch, :n] = perm
        pad = (0, length - n, 0, rows - batch)
        glob_p = F.pad(glob.gather(1, perm), pad)  # (B', N'), padding slots False
        ordinary_p = F.pad((valid & ~glob).gather(1, perm), pad)
        counts = F.pad(tokens.counts, (0, rows - batch))  # (B',)
        block_mask = _block_mask(position, glob_p, ordinary_p, counts, window // 2, block_size)

        example = torch.arange(batch, device=device)
        source_batch = F.pad(example, (0, rows - batch))[:, None, None]
        source_position = torch.where(position < n, position, 0)[:, None, :]
        slot = perm.argsort(dim=1)[:, None, :]  # (B, 1, N)

        widest = tokens.widest
        real = torch.arange(widest, device=device)[None] < tokens.counts[:, None]  # (B, G): the slot is a global
        # Filler slots see every key: an all-masked row would make SDPA return NaN (and NaN gradients).
        global_keys = (valid[:, None, :] | ~real[:, :, None])[:, None]  # (B, 1, G, N)
        return _Layout(source_batch, source_position, block_mask, example[:, None, None], slot, widest,
                       perm[:, None, :widest], global_keys, tokens.slot[:, None, :], glob[:, None, :, None])


def _block_mask(position: Tensor, glob: Tensor, ordinary: Tensor, counts: Tensor, half: int,
                block_size: int) -> BlockMask:
    """The ordinary rows' block mask over a gathered order, from its block-level structure (docs/kernels.md)."""
    rows, length = position.shape
    blocks = length // block_size
    slots = torch.arange(length, device=position.device)

    def mask_mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        near = (position[b, q_idx] - position[b, kv_idx]).abs() <= half  # Eq. 7 on the original positions
        return ordinary[b, q_idx] & (glob[b, kv_idx] | (ordinary[b, kv_idx] & near))

    sorted_positions = torch.where(glob, -(half + 1), position)  # (B', N'), increasing
    lo = torch.searchsorted(sorted_positions, position - half).clamp(max=length - 1)
    hi = torch.searchsorted(sorted_positions, position + half, right=True) - 1
    next_ordinary = torch.where(ordinary, slots, length).flip(1).cummin(1).values.flip(1)
    last_ordinary = torch.where(ordinary, slots, -1).cummax(1).values
    first_block = next_ordinary.gather(1, lo) // block_size  # (B', N'), per key; up to blocks for other keys
    last_block = last_ordinary.gather(1, hi) // block_size
    weight = ordinary.long()
    key_block = slots // block_size
    marks = torch.zeros(rows, (blocks + 1) * blocks, dtype=torch.long, device=position.device)
    marks.scatter_add_(1, first_block * blocks + key_block, weight)
    marks.scatter_add_(1, (last_block + 1) * blocks + key_block, -weight)
    band = marks.view(rows, blocks + 1, blocks).cumsum(1)[:, :blocks] > 0  # (B', Q blocks, K blocks)

    tiles = (rows, blocks, block_size)
    row_ordinary, key_global = ordinary.view(tiles), glob.view(tiles)
    start = torch.arange(blocks, device=position.device) * block_size
    global_block = start[None] < counts[:, None]  # (B', K blocks): holds a global key (they come first)
    non_empty = (band | global_block[:, None, :]) & row_ordinary.any(-1)[:, :, None]

    far = length + half + 1
    block_position = position.view(tiles)
    low = torch.where(row_ordinary, block_position, far).amin(-1)  # (B', blocks): the ordinary tokens' span
    high = torch.where(row_ordinary, block_position, -far).amax(-1)
    reach = torch.maximum(high[:, :, None] - low[:, None, :], high[:, None, :] - low[:, :, None])  # (B', Q, K)
    all_valid_keys = (row_ordinary | key_global).all(-1)  # (B', K blocks)
    full = row_ordinary.all(-1)[:, :, None] & all_valid_keys[:, None, :] & (reach <= half)

    def ordered(dense: Tensor) -> tuple[Tensor, Tensor]:  # (B', Q, K) bool -> (B', 1, Q), (B', 1, Q, K) int32
        dense = dense.to(torch.int32)
        indices = torch.argsort(dense, dim=-1, descending=True, stable=True)
        return dense.sum(-1, dtype=torch.int32)[:, None], indices.to(torch.int32)[:, None]

    return BlockMask.from_kv_blocks(*ordered(non_empty & ~full), *ordered(full), BLOCK_SIZE=block_size,
                                    mask_mod=mask_mod, seq_lengths=(length, length))


class FlexKernel:
    """FlexAttention on the gathered inputs, ``(q, k, v, block_mask) -> out``, (B', H, N', D) each."""

    def __init__(self, backend: str | Callable = "inductor", compiled_on: tuple[str, ...] = ("cuda",)):
        self.backend, self.compiled_on = backend, compiled_on
        self.failure: str | None = None
        self._compiled: Callable | None = None
        self._probed: dict[tuple, str | None] = {}

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, block_mask: BlockMask) -> Tensor:
        if q.device.type not in self.compiled_on:
            return _eager(q, k, v, block_mask)
        import torch._dynamo
        import torch.fx.experimental._config

        try:
            if self._compiled is None:
                self._compiled = torch.compile(_own_copy(_flex_call), backend=self.backend, dynamic=True)
            with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True), \
                    torch.fx.experimental._config.patch(use_duck_shape=False):
                return self._compiled(q, k, v, block_mask)
        except Exception as error:
            self.failure = _failed(q.device, error)
            raise KernelUnavailableError(self.failure) from error

    def unusable(self, q: Tensor, window: int) -> str | None:
        """Why ``impl="auto"`` must not run this kernel for `q`-like inputs, or None (probed once, agreed)."""
        if q.device.type not in self.compiled_on:
            return None
        key = (q.device, q.dtype, q.shape[1], q.shape[-1], window)
        if key not in self._probed:
            reason = self.failure or self._probe(q, window)
            if _failed_anywhere(reason is not None, q.device) and reason is None:
                reason = self.failure = "FlexAttention failed to compile on another process of this job"
            self._probed[key] = reason
        return self.failure or self._probed[key]

    def _probe(self, like: Tensor, window: int) -> str | None:
        """Run a small call like `like`'s (compiling its graphs); None, or what failed."""
        def call():  # (2, H, 256, D) inputs, globals and padding in both examples' own places
            batch, n = MIN_SIZE, MIN_SIZE * BLOCK_SIZE
            is_global = torch.zeros(batch, n, dtype=torch.bool, device=like.device)
            is_global[:, :3] = True
            padding = torch.zeros(batch, n, dtype=torch.bool, device=like.device)
            padding[1, n // 2:] = True
            generator = torch.Generator().manual_seed(0)
            q, k, v, *global_qkv = (torch.randn(batch, like.shape[1], n, like.shape[3], generator=generator).to(like)
                                    .requires_grad_(torch.is_grad_enabled()) for _ in range(6))
            return flex_attention_qds(q, k, v, is_global, padding, window, tuple(global_qkv), kernel=self)

        try:
            with torch.no_grad():
                call()
            if like.device.type != "cpu":
                with torch.inference_mode(False), torch.enable_grad():
                    call().float().sum().backward()
        except Exception as error:
            self.failure = self.failure or _failed(like.device, error)
        return self.failure


def _flex_call(q: Tensor, k: Tensor, v: Tensor, block_mask: BlockMask) -> Tensor:
    """The function `FlexKernel` compiles (a copy of it per kernel)."""
    return flex_attention(q, k, v, block_mask=block_mask)


def _own_copy(function: types.FunctionType) -> types.FunctionType:
    """`function` with a code object of its own: dynamo counts graphs and recompilations per code object."""
    return types.FunctionType(function.__code__.replace(), function.__globals__, function.__name__,
                              function.__defaults__, function.__closure__)


def _eager(q: Tensor, k: Tensor, v: Tensor, block_mask: BlockMask) -> Tensor:
    """FlexAttention's eager, unfused forward (module docstring); its warning says just that."""
    if q.requires_grad or k.requires_grad or v.requires_grad:
        raise KernelUnavailableError(
            f"FlexAttention in torch {torch.__version__} has no backward pass on {q.device.type} (forward only: "
            "flex_attention refuses inputs that require gradients there, compiled or not); run impl='flex' on CUDA, "
            "or use impl='portable' or 'reference' to train here")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return flex_attention(q, k, v, block_mask=block_mask)


def _failed_anywhere(failed: bool, device: torch.device) -> bool:
    """Whether `failed` holds on any process of the default process group (this one's answer where none is)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return failed
    on = device if "nccl" in str(dist.get_backend()) else torch.device("cpu")
    succeeded = torch.tensor([0 if failed else 1], device=on)
    dist.all_reduce(succeeded, op=dist.ReduceOp.MIN)
    return not bool(succeeded.item())


def _failed(device: torch.device, error: BaseException) -> str:
    """Why a compiled FlexAttention cannot be used: `error`'s type and first line, and its root cause's."""
    def line(exception: BaseException) -> str:
        lines = str(exception).strip().splitlines()
        return f"{type(exception).__name__}: {lines[0][:300]}" if lines else type(exception).__name__

    root = error
    while (inner := root.__cause__ or getattr(root, "inner_exception", None)) is not None:  # dynamo wraps errors
        root = inner
    summary = line(error) if root is error else f"{type(error).__name__}, from {line(root)}"
    return f"FlexAttention failed to compile or run on {device} ({summary})"


#: The kernel `flex_attention_qds` runs unless given another: compiled on CUDA with inductor.
KERNEL = FlexKernel()
