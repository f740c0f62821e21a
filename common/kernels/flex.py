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
``mask_mod``, and the output is gathered back). In the gathered order the
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

The block mask is built from its block-level structure (`_block_mask`), not by
evaluating ``mask_mod`` on every (query, key) pair as ``create_block_mask`` does
(a (B, N, N) temporary, 270 MB of int64 at B = 8, N = 2048). A key block is
non-empty for a query block holding an ordinary row when it holds a global
column (the first blocks) or when one of its ordinary keys is within the window
of one of the block's ordinary rows; the non-global tokens keep their order, so
the ordinary rows in a key's window are one range of slots (two searches), and
the query blocks of those ranges are added up per key block (a difference
array over blocks). A tile is full when every row is ordinary, every key valid
and the farthest (row, ordinary key) pair within the window; the partial tiles
keep ``mask_mod``. Everything is linear in N and stays on the device.

One layout per encoder call. The permutation, the gathered masks, the global
count and the block mask depend on the global tokens, the padding and the
window only, which every layer of a Longformer encoder shares; they are built
once per encoder call (`_Layout`, shared through `common.kernels.layouts`), and
their one host synchronisation is the global tokens' count read back there.

Shapes and compilations. `Ranker.pooled` (`qds.model`) encodes each batch in
length sub-batches, so nearly every call has another (B, N). A
``torch.compile``'d FlexAttention compiles a graph for a new shape until
dynamo marks the sizes that changed as dynamic, and again for each size dynamo
specialises (0 and 1: a single row, a single block) or found equal to another
at a first compilation (duck sizing); on a GPU each graph is a Triton build of
the forward and backward kernels, and inductor may guard on more. Past
dynamo's recompile limit (``torch._dynamo.config.recompile_limit``, 8 graphs
per function) dynamo silently runs the function eagerly: dense (N x N)
scores, the memory this kernel exists to save. Here N is padded up to whole
blocks, and B and N / 128 to at least 2 (padded rows and slots are padding:
their tiles are empty, FlexAttention skips them, and their outputs are
dropped), and `FlexKernel` compiles with dynamic shapes and without duck
sizing, so one graph serves every (B, N) of a grad mode, dtype and head shape
(`tests/common/kernels/test_flex_compile.py` counts them: 1 graph for 10
shapes, where ``torch.compile(flex_attention)`` compiled 4). Dynamic shapes
rather than a static graph per bucket (B in powers of two, N in blocks, the
recompile limit raised to their number): that would compile up to
log2(B) x N / 128 graphs, each a Triton build of tens of seconds, in the
middle of training. The recompile limit is left as it is; past it a call
raises (dynamo's ``fail_on_recompile_limit_hit``, set around every call)
instead of running densely, and `KernelUnavailableError` follows.

Compile failures. A Triton or inductor failure (no compiler, a ptxas error,
autotuning out of memory), possibly on some processes of a DDP job only,
must neither crash ``impl="auto"`` nor leave the other processes waiting in a
collective. `FlexKernel.unusable`, which ``impl="auto"`` asks before its first
flex call of each (device, dtype, heads, head_dim, window), runs a small call
forward without gradients and forward and backward with them (each grad mode
is a graph of its own; no backward on CPU), and all-reduces its success (MIN)
over the default process group where one is initialised: if any process
failed, every process runs ``portable``, with one warning naming the reason
(`common.kernels`). That first call must therefore be made by every process,
as a training step's forward is. A call failing later (a graph no probe
compiled) raises `KernelUnavailableError` and marks the kernel failed:
``auto`` runs ``portable`` from then on in that process; the others keep
FlexAttention, which computes the same attention, and no collective is left
waiting. ``impl="flex"`` given explicitly raises.

On CPU, torch 2.13 runs FlexAttention's forward only: eagerly, it falls back to
an unfused implementation that materialises the full (n x n) scores, like the
reference (torch.compile'd it builds a fused inductor CPU kernel, but compiling
takes tens of seconds per shape). It has no CPU backward: ``flex_attention``
checks its inputs first (``_validate_device`` in ``torch.nn.attention.flex_attention``)
and raises NotImplementedError for CPU inputs that require gradients, eager and
under torch.compile alike, so a call that needs gradients on CPU raises
`KernelUnavailableError` here. On CUDA the compiled, fused kernel is used, forward
and backward (its tests run where a GPU is present); there ``impl="auto"`` picks
this path (`common.kernels.auto_implementation`). `common.kernels.checks` holds
the checks that need a GPU, as functions a GPU check script calls.
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
from common.kernels.reference import check_inputs

#: FlexAttention's tile size, for queries and keys.
BLOCK_SIZE = 128
#: The smallest batch and number of blocks a call is padded to: dynamo compiles sizes 0 and 1 apart.
MIN_SIZE = 2


def flex_attention_qds(q: Tensor, k: Tensor, v: Tensor, is_global: Tensor, key_padding_mask: Tensor | None = None,
                       window: int = 128, global_qkv: tuple[Tensor, Tensor, Tensor] | None = None, *,
                       kernel: Callable[[Tensor, Tensor, Tensor, BlockMask], Tensor] | None = None) -> Tensor:
    """Query-directed sparse attention with FlexAttention, semantics of `reference_attention`.

    Shapes: q, k, v and the optional ``global_qkv`` (B, H, N, D) -> (B, H, N, D);
    ``is_global`` and ``key_padding_mask`` (True = padding) (B, N) bool.
    `kernel` runs FlexAttention on the gathered inputs ((B', H, N', D) and the block mask -> (B', H, N', D)):
    `KERNEL` unless given (tests and `common.kernels.checks` pass their own `FlexKernel`).
    Raises `KernelUnavailableError` where FlexAttention cannot run the call (gradients on CPU, a failed
    compilation); see the module docstring.
    """
    check_inputs(q, k, v, is_global, key_padding_mask, global_qkv)
    batch, heads, n, dim = q.shape
    if not q.numel():
        return q.new_zeros(q.shape)
    layout = shared(_Layout.build, is_global, key_padding_mask, window)  # once per encoder call
    heads_index = torch.arange(heads, device=q.device)[None, :, None]  # (1, H, 1)

    # Ordinary rows: flex over the gathered order, so that the global key columns form dense blocks.
    q_p, k_p, v_p = (x[layout.source_batch, heads_index, layout.source_position] for x in (q, k, v))  # (B', H, N', D)
    out_p = (KERNEL if kernel is None else kernel)(q_p, k_p, v_p, layout.block_mask)  # global, padded rows: 0
    out = out_p[layout.example, heads_index, layout.slot]  # (B, H, N, D), original order
    if not layout.widest:
        return out

    # Global rows: a dense (G x N) attention, G the batch's largest global count; an example with fewer globals
    # fills its remaining slots with ordinary tokens, whose results are discarded.
    q_g, k_g, v_g = global_qkv if global_qkv is not None else (q, k, v)
    queries = q_g[layout.example, heads_index, layout.global_position]  # (B, H, G, D)
    out_g = F.scaled_dot_product_attention(queries, k_g, v_g, attn_mask=layout.global_keys)  # (B, H, G, D)
    return torch.where(layout.is_global, out_g[layout.example, heads_index, layout.global_slot], out)


def block_density(
    is_global: Tensor,
    window: int = 128,
    key_padding_mask: Tensor | None = None,
    gathered: bool = True,
    block_size: int = BLOCK_SIZE,
) -> float:
    """Fraction of non-empty (block_size x block_size) tiles of the ordinary rows' block mask.

    ``is_global`` (B, N) bool; ``gathered=False`` gives the natural token order, for comparison (built by
    ``create_block_mask``: a (B, N, N) evaluation of the mask, which this analysis can afford).
    The dense (g x n) global rows are computed outside FlexAttention and not counted here.
    """
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
    """What FlexAttention's path derives from the global tokens, the padding and the window (module docstring).

    The gathered order has B' = max(B, 2) rows of N' slots, N' = N rounded up to whole blocks (at least 2): an
    example's valid global tokens first, then its other tokens in order, then padding slots; the rows past B are
    padding.
    """

    source_batch: Tensor  # (B', 1, 1) long: the example each gathered row reads (0 for the padding rows)
    source_position: Tensor  # (B', 1, N') long: the position each slot reads (0 for the padding slots)
    block_mask: BlockMask  # the ordinary rows' tiles over (B', 1, N', N')
    example: Tensor  # (B, 1, 1) long: arange(B)
    slot: Tensor  # (B, 1, N) long: the gathered slot of each position
    widest: int  # G: the largest global count of an example
    global_position: Tensor  # (B, 1, G) long: the positions of an example's first G slots (its globals first)
    global_keys: Tensor  # (B, 1, G, N) bool: the keys of those rows (every valid key; every key for the fillers)
    global_slot: Tensor  # (B, 1, N) long: the rank of a global token among its example's (0 elsewhere)
    is_global: Tensor  # (B, 1, N, 1) bool: valid global tokens

    @staticmethod
    def build(is_global: Tensor, key_padding_mask: Tensor | None, window: int,
              block_size: int = BLOCK_SIZE) -> _Layout:
        tokens = global_tokens_of(is_global, key_padding_mask)
        valid, glob, device = tokens.valid, tokens.glob, is_global.device
        batch, n = glob.shape
        rows, length = max(batch, MIN_SIZE), max(-(-n // block_size), MIN_SIZE) * block_size
        # A stable sort keeps the ordinary tokens in order, so their window stays a band of blocks.
        perm = torch.argsort((~glob).to(torch.uint8), dim=1, stable=True)  # (B, N): the position of each slot

        # Padding slots and rows hold positions past the sequence (the slot's index): every row stays sorted
        # after its global slots, as `_block_mask` needs.
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
        # Every valid key, in the original order; filler slots may see every key so that no row is empty
        # (an all-masked row would make SDPA return NaN, and NaN gradients survive torch.where).
        global_keys = (valid[:, None, :] | ~real[:, :, None])[:, None]  # (B, 1, G, N)
        global_slot = (torch.cumsum(glob, 1) - 1).clamp(min=0)[:, None, :]  # (B, 1, N)
        return _Layout(source_batch, source_position, block_mask, example[:, None, None], slot, widest,
                       perm[:, None, :widest], global_keys, global_slot, glob[:, None, :, None])


def _block_mask(position: Tensor, glob: Tensor, ordinary: Tensor, counts: Tensor, half: int,
                block_size: int) -> BlockMask:
    """The ordinary rows' block mask over a gathered order, from its block-level structure (module docstring).

    ``position`` (B', N') long: the original position of each slot, increasing after the global slots;
    ``glob`` and ``ordinary`` (B', N') bool: the slot holds a valid global token, a valid other token;
    ``counts`` (B',): global slots per row, which come first. N' is a multiple of `block_size`.
    """
    rows, length = position.shape
    blocks = length // block_size
    slots = torch.arange(length, device=position.device)

    def mask_mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        # Global rows are computed densely elsewhere, padded rows output 0: neither keeps a key here.
        near = (position[b, q_idx] - position[b, kv_idx]).abs() <= half  # Eq. 7 on the original positions
        return ordinary[b, q_idx] & (glob[b, kv_idx] | (ordinary[b, kv_idx] & near))

    # Band: the slots of the non-global tokens in a key's window are one range [lo, hi] (they keep their order;
    # the global slots, first, are given a position below every window), and the query blocks holding an
    # ordinary row of it run from the block of the range's first ordinary slot to that of its last.
    sorted_positions = torch.where(glob, -(half + 1), position)  # (B', N'), increasing
    lo = torch.searchsorted(sorted_positions, position - half).clamp(max=length - 1)  # a global key's may be past
    hi = torch.searchsorted(sorted_positions, position + half, right=True) - 1  # >= 0: the key's own value is in
    next_ordinary = torch.where(ordinary, slots, length).flip(1).cummin(1).values.flip(1)  # first at or after
    last_ordinary = torch.where(ordinary, slots, -1).cummax(1).values  # last at or before
    first_block = next_ordinary.gather(1, lo) // block_size  # (B', N'), per key; up to blocks for other keys
    last_block = last_ordinary.gather(1, hi) // block_size  # from -1 for other keys
    # +1 at (first block, key block), -1 past the last, summed down the query blocks: > 0 where some key
    # of the key block has an ordinary row of the query block in its window. Other keys count 0.
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

    # Full: every row ordinary, every key valid, and the farthest (row, ordinary key) pair within the window
    # (with no ordinary key, the sentinels make that distance negative). Query and key blocks are the same slots.
    far = length + half + 1
    block_position = position.view(tiles)
    low = torch.where(row_ordinary, block_position, far).amin(-1)  # (B', blocks): the ordinary tokens' span
    high = torch.where(row_ordinary, block_position, -far).amax(-1)
    reach = torch.maximum(high[:, :, None] - low[:, None, :], high[:, None, :] - low[:, :, None])  # (B', Q, K)
    all_valid_keys = (row_ordinary | key_global).all(-1)  # (B', K blocks)
    full = row_ordinary.all(-1)[:, :, None] & all_valid_keys[:, None, :] & (reach <= half)

    def ordered(dense: Tensor) -> tuple[Tensor, Tensor]:  # (B', Q, K) bool -> (B', 1, Q), (B', 1, Q, K) int32
        dense = dense.to(torch.int32)  # as torch's create_block_mask orders them: non-empty first, by index
        indices = torch.argsort(dense, dim=-1, descending=True, stable=True)
        return dense.sum(-1, dtype=torch.int32)[:, None], indices.to(torch.int32)[:, None]

    return BlockMask.from_kv_blocks(*ordered(non_empty & ~full), *ordered(full), BLOCK_SIZE=block_size,
                                    mask_mod=mask_mod, seq_lengths=(length, length))


class FlexKernel:
    """FlexAttention on the gathered inputs, ``(q, k, v, block_mask) -> out``, (B', H, N', D) each.

    On the device types of `compiled_on` it is ``torch.compile``'d, once per process, with dynamic shapes and
    `backend` (dynamo's name or a backend function: tests and `common.kernels.checks` pass a counting one), a
    function of its own, so that dynamo's graphs and recompile count are this kernel's alone. Elsewhere it runs
    FlexAttention eagerly, forward only (module docstring). `failure` says why the compiled kernel failed in this
    process, if it did; `unusable` is the probe ``impl="auto"`` asks first.
    """

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
            # Past the recompile limit, raise rather than run eagerly (densely); no duck sizing (module docstring).
            with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True), \
                    torch.fx.experimental._config.patch(use_duck_shape=False):
                return self._compiled(q, k, v, block_mask)
        except Exception as error:  # a compilation's failure takes any form (inductor, Triton, ptxas, out of memory)
            self.failure = _failed(q.device, error)
            raise KernelUnavailableError(self.failure) from error

    def unusable(self, q: Tensor, window: int) -> str | None:
        """Why ``impl="auto"`` must not run this kernel for inputs like `q` (B, H, N, D) and `window`, or None.

        The first time for each (device, dtype, heads, head_dim, window) where the kernel compiles, a small call
        runs forward and backward, and forward without gradients, and its success is all-reduced (MIN) over the
        default process group where one is initialised: every process gets the same answer (module docstring).
        """
        if q.device.type not in self.compiled_on:
            return None  # nothing is compiled
        key = (q.device, q.dtype, q.shape[1], q.shape[-1], window)
        if key not in self._probed:
            reason = self.failure or self._probe(q, window)
            if _failed_anywhere(reason is not None, q.device) and reason is None:  # every process takes part
                reason = self.failure = "FlexAttention failed to compile on another process of this job"
            self._probed[key] = reason
        return self.failure or self._probed[key]

    def _probe(self, like: Tensor, window: int) -> str | None:
        """Run a small call like `like`'s with this kernel (its graphs compile here); None, or what failed.

        Without gradients in the caller's mode (inference mode, where Lightning evaluates); with gradients outside
        inference mode, whose tensors take no gradient.
        """
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
            if like.device.type != "cpu":  # FlexAttention has no CPU backward (module docstring)
                with torch.inference_mode(False), torch.enable_grad():
                    call().float().sum().backward()
        except Exception as error:  # the backward's compilation fails outside __call__
            self.failure = self.failure or _failed(like.device, error)
        return self.failure


def _flex_call(q: Tensor, k: Tensor, v: Tensor, block_mask: BlockMask) -> Tensor:
    """The function `FlexKernel` compiles (a copy of it per kernel)."""
    return flex_attention(q, k, v, block_mask=block_mask)


def _own_copy(function: types.FunctionType) -> types.FunctionType:
    """`function` with a code object of its own: dynamo keeps compiled graphs, and counts recompilations against
    its limit, per code object, whichever ``torch.compile`` call made them."""
    return types.FunctionType(function.__code__.replace(), function.__globals__, function.__name__,
                              function.__defaults__, function.__closure__)


def _eager(q: Tensor, k: Tensor, v: Tensor, block_mask: BlockMask) -> Tensor:
    """FlexAttention's eager, unfused forward (module docstring); its warning says just that."""
    if q.requires_grad or k.requires_grad or v.requires_grad:
        raise KernelUnavailableError(
            f"FlexAttention in torch {torch.__version__} has no backward pass on {q.device.type} (forward only: "
            "flex_attention refuses inputs that require gradients there, compiled or not); run impl='flex' on CUDA, "
            "or use impl='portable' or 'reference' to train here"
        )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return flex_attention(q, k, v, block_mask=block_mask)


def _failed_anywhere(failed: bool, device: torch.device) -> bool:
    """Whether `failed` holds on any process of the default process group (this one's answer where none is)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return failed
    # NCCL reduces device tensors only; gloo (and the CPU side of a mixed backend) CPU ones.
    on = device if "nccl" in str(dist.get_backend()) else torch.device("cpu")
    succeeded = torch.tensor([0 if failed else 1], device=on)
    dist.all_reduce(succeeded, op=dist.ReduceOp.MIN)
    return not bool(succeeded.item())


def _failed(device: torch.device, error: BaseException) -> str:
    """The reason a compiled FlexAttention cannot be used, naming `error`."""
    return f"FlexAttention failed to compile or run on {device} ({_summary(error)})"


def _summary(error: BaseException) -> str:
    """The exception's type and first line, and those of its root cause (compiler errors run to pages, and dynamo
    wraps them: ``BackendCompilerFailed``, ``InductorError``, keeping the cause as ``inner_exception``)."""
    def line(exception: BaseException) -> str:
        lines = str(exception).strip().splitlines()
        return f"{type(exception).__name__}: {lines[0][:300]}" if lines else type(exception).__name__

    root = error
    while (inner := root.__cause__ or getattr(root, "inner_exception", None)) is not None:
        root = inner
    return line(error) if root is error else f"{type(error).__name__}, from {line(root)}"


#: The kernel `flex_attention_qds` runs unless given another: compiled on CUDA with inductor.
KERNEL = FlexKernel()
