"""Query-directed sparse attention with the banded products compiled by Apache TVM (``impl="tvm"``).

QDS-Transformer (Jiang et al., Findings of EMNLP 2020, Sec. 4.3) runs its sparse
attention through TVM "to dynamically compile our attention map A_QDS", following
Longformer (Beltagy et al. 2020), whose ``diagonaled_mm_tvm.py`` compiles one
generic banded matmul in variants that cover the forward QK^T, the forward PV and
every backward product. This module does the same with TVM 0.27 (TE compute +
TensorIR schedules), for one-sided window h = window // 2 (Eq. 7):

- ``band_qk``: S[b, i, t] = sum_d A[b, i, d] * B[b, i + t - h, d], t in [0, 2h] (scores QK^T; backward dP = dO V^T);
- ``band_pv``: O[b, i, d] = sum_t P[b, i, t] * V[b, i + t - h, d] (backward dQ = dS K);
- ``band_tpv``: X[b, j, d] = sum_t G[b, j - t + h, t] * Y[b, j - t + h, d] (backward dK = dS^T Q, dV = P^T dO);
- ``softmax_fwd`` / ``softmax_bwd``: the masked softmax over [band ++ global keys] and its backward;
- ``attend`` (CPU): the forward of the ordinary rows fused per row tile, band and global-key scores,
  softmax and output, so no (n x band) matrix goes to memory (the unfused forward is bound by memory
  traffic on few cores). The backward recomputes the probabilities with band_qk + softmax_fwd.

Band layout. Rows are taken in tiles of ``_TILE`` (R) consecutive queries; a tile's
keys are one contiguous span of C >= R + 2h positions of the *frame* (key j at frame
position j + h, zeros outside [0, n)). The band of row r of tile u is stored as
``band[b, u, r, c]`` for its frame position u*R + c, so offset t = c - r and
entries with c outside [r, r + 2h] are always masked. Every product is then a small
dense matmul per tile (a (R x D) @ (D x C) block for QK^T, (R x C) @ (C x D) for PV,
C / R (R x R) @ (R x D) blocks for the transposed band) that TVM vectorises with
register blocking and key reuse, and the softmax needs no skewed indexing. C / (2h+1)
(1.12 for w = 128) is the price in extra flops.

Global tokens (Eqs. 8-10). The ordinary rows' scores against the gathered global keys
(O(n g)) are extra columns of the softmax. The global rows (g x n, with Longformer's
``*_global`` projections) are dense rows over every key, so they go to PyTorch's SDPA,
after the ordinary rows: its flash kernel runs such wide rows faster than ``attend``. Between
the TVM kernels of the ordinary rows (gathers, frames, ``attend``) no PyTorch parallel op
runs: PyTorch's OpenMP workers spin for milliseconds after each one and take the cores
TVM's workers need (both measured in results/kernels/README.md, "What the kernels' code
refers to"). With autograd the glue is PyTorch (gathers, matmuls for the global columns
of the backward).
For the same reason TVM's pool gets PyTorch's thread count unless ``TVM_NUM_THREADS``
or ``OMP_NUM_THREADS`` is set (TVM would take half the logical CPUs), and its idle
workers sleep (``TVM_THREAD_POOL_SPIN_COUNT=0`` unless set).

The masks and global slots (`_GlobalLayout`) are built once per encoder call and shared by its layers
(`common.kernels.layouts`).

Kernels are compiled once per shape family (h, head_dim, dtype, target); batch*heads,
sequence length, heads and the global count are symbolic (``te.var``). The compiled
library is exported as a shared object under ``cache_root() / "tvm"`` (keyed by this
file's source, the TVM version and the target; written atomically) so that later
processes load it without recompiling, and kept in an in-process dict. Torch tensors
are handed to the kernels zero-copy through DLPack (tvm-ffi converts them on call).
CUDA tensors use the unfused kernels with one thread per output (per row for the
softmax) where TVM has a CUDA runtime; that path is compiled to CUDA C in testing, never run.
The semantics are `reference_attention`'s.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import tempfile
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from common.io import cache_root
from common.kernels import KernelUnavailableError
from common.kernels.layouts import global_tokens_of, shared
from common.kernels.reference import check_inputs

#: Band spans and global slots are padded to multiples of 16 fp32 lanes: one AVX-512 register, two AVX2 ones.
_LANES = 16
#: Query rows per tile (R).
_TILE = 16
#: CUDA threads per block of the GPU schedules.
_GPU_THREADS = 128

_FALLBACK = 'use impl="portable" (pure PyTorch) instead'

#: How this process obtained kernel libraries: "compiled" (TVM ran) or "loaded" (from the disk cache).
_STATS = {"compiled": 0, "loaded": 0}
_KERNELS: dict[tuple, _Kernels] = {}  # (h, head_dim, dtype, device, cache folder) -> kernels
_LOCK = threading.Lock()
_SCRATCH = threading.local()  # per-thread reusable buffers, see _Kernels._scratch


def _import_tvm():
    """``tvm`` and ``tvm.te``, or KernelUnavailableError naming what failed."""
    # Read by TVM when its thread pool starts (module docstring): TVM would take half the logical CPUs
    # (it assumes hyper-threads: one thread on 2 vCPUs), and its idle workers would spin.
    if "TVM_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in os.environ:
        os.environ["TVM_NUM_THREADS"] = str(torch.get_num_threads())
    os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "0")
    try:
        import tvm
        from tvm import te
    except Exception as error:  # ImportError, or a broken native library (OSError, RuntimeError)
        raise KernelUnavailableError(
            f"Apache TVM cannot be imported ({type(error).__name__}: {error}); {_FALLBACK}") from error
    return tvm, te


def tvm_available() -> tuple[bool, str]:
    """Whether the CPU kernels can run here, with the reason (TVM version and target, or what is missing)."""
    try:
        tvm, _ = _import_tvm()
        if not tvm.runtime.enabled("llvm"):
            return False, f"Apache TVM {tvm.__version__} was built without LLVM, so it cannot compile CPU kernels"
        return True, f"Apache TVM {tvm.__version__}, target {_cpu_target()}"
    except KernelUnavailableError as error:
        return False, str(error)


def cache_stats() -> dict[str, int]:
    """Kernel libraries this process "compiled" with TVM or "loaded" from the on-disk cache."""
    return dict(_STATS)


def tvm_attention(q: Tensor, k: Tensor, v: Tensor, is_global: Tensor, key_padding_mask: Tensor | None = None,
                  window: int = 128, global_qkv: tuple[Tensor, Tensor, Tensor] | None = None) -> Tensor:
    """`reference_attention` with the banded products on TVM kernels. Shapes: q, k, v (B, H, N, D) -> (B, H, N, D).

    float32 and float64 run natively; other floating dtypes (bf16, fp16) are computed in float32, cast in and the
    output cast back, and so is the PyTorch glue (global rows, backward products) under autocast (bf16-mixed),
    which is turned off inside: the kernels' buffers are float32 whatever autocast would pick.
    Raises KernelUnavailableError when TVM is missing, cannot target the device, or fails to compile.
    """
    with torch.autocast(q.device.type, enabled=False):
        return _tvm_attention(q, k, v, is_global, key_padding_mask, window, global_qkv)


def _tvm_attention(q: Tensor, k: Tensor, v: Tensor, is_global: Tensor, key_padding_mask: Tensor | None,
                   window: int, global_qkv: tuple[Tensor, Tensor, Tensor] | None) -> Tensor:
    """`tvm_attention` outside autocast."""
    check_inputs(q, k, v, is_global, key_padding_mask, global_qkv)
    batch, heads, n, head_dim = q.shape
    dtype = q.dtype if q.dtype in (torch.float32, torch.float64) else torch.float32
    kernels = load_kernels(window, head_dim, dtype, q.device)
    if n == 0 or batch * heads == 0:
        return q.new_zeros(q.shape)
    layout = shared(_GlobalLayout.build, is_global, key_padding_mask, kernels.geometry, dtype)  # once per encoder call
    q_, k_, v_ = (x.to(dtype).contiguous() for x in (q, k, v))
    if global_qkv is not None:
        global_qkv = tuple(x.to(dtype).contiguous() for x in global_qkv)
    needs_grad = torch.is_grad_enabled() and any(x.requires_grad for x in (q_, k_, v_, *(global_qkv or ())))
    if not needs_grad and "attend" in kernels.functions:
        out = kernels.ordinary_rows(q_, k_, v_, layout, heads)
    else:
        index = layout.index[:, None, :, None].expand(batch, heads, -1, head_dim)  # (B, H, Gp, D)
        k_global, v_global = k_.gather(2, index), v_.gather(2, index)  # global keys of the ordinary rows
        out = _BandAttention.apply(q_, k_, v_, k_global, v_global, layout, kernels)
    if layout.count:
        out[layout.rows_batch, :, layout.rows_position] = _global_rows(q_, k_, v_, global_qkv, layout)
    return out.to(q.dtype)


def load_kernels(window: int, head_dim: int, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> _Kernels:
    """The compiled kernels of one shape family: from this process, else from the disk cache, else compiled."""
    if window < 0 or head_dim <= 0:
        raise ValueError(f"window must be >= 0 and head_dim > 0, got window={window}, head_dim={head_dim}")
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"the TVM kernels compute in float32 or float64, not {dtype}")
    tvm, te = _import_tvm()
    device = torch.device(device)
    family = (window // 2, head_dim, dtype, device, cache_root())
    kernels = _KERNELS.get(family)  # the per-call fast path: no hashing, no target detection
    if kernels is not None:
        return kernels
    with _LOCK:
        if family not in _KERNELS:
            target = _target_for(tvm, device)
            geometry = _Geometry(window // 2, head_dim)
            type_name = str(dtype).removeprefix("torch.")
            name = f"h{geometry.half}-d{head_dim}-{type_name}-{device.type}"
            digest = hashlib.sha256(b"\0".join([Path(__file__).read_bytes(), tvm.__version__.encode(),
                                                str(target).encode(), name.encode()])).hexdigest()[:20]
            path = cache_root() / "tvm" / f"qds-band-{name}-{digest}.so"
            module = _load_cached(tvm, path)
            if module is None:
                module = _compile(tvm, te, target, geometry, type_name, device.type)
                _save_cached(module, path)
            _KERNELS[family] = _Kernels(module, geometry, device)
    return _KERNELS[family]


# --------------------------------------------------------------------------- targets and the disk cache


def _cpu_target():
    """LLVM for this CPU (``mcpu`` from LLVM's host detection, for its vector width), else generic LLVM."""
    from tvm.target import Target, codegen

    with contextlib.suppress(Exception):
        cpu = codegen.llvm_get_system_cpu()
        if cpu and cpu != "generic":
            return Target({"kind": "llvm", "mcpu": cpu})  # 0.27 takes dicts; "llvm -mcpu=..." strings are gone
    return Target({"kind": "llvm"})


def _target_for(tvm, device: torch.device):
    if device.type == "cpu":
        if not tvm.runtime.enabled("llvm"):
            raise KernelUnavailableError(f"Apache TVM {tvm.__version__} was built without LLVM; {_FALLBACK}")
        return _cpu_target()
    if device.type == "cuda":
        if not (tvm.runtime.enabled("cuda") and tvm.cuda(device.index or 0).exist):
            raise KernelUnavailableError(
                f"tensors are on {device} but Apache TVM {tvm.__version__} has no usable CUDA runtime here "
                f"(a CUDA-enabled TVM build and a visible GPU are both needed); {_FALLBACK}")
        from tvm.target import Target

        return Target.from_device(tvm.cuda(device.index or 0))
    raise KernelUnavailableError(f"no TVM schedule for tensors on {device}; {_FALLBACK}")


@dataclass(frozen=True)
class _VectorUnit:
    """The CPU target's fp32 lanes per vector register and its vector register count: the micro-kernels'
    accumulators must fit in the registers, or every reduction step spills them to the stack."""

    lanes: int
    registers: int


def _vector_unit(target) -> _VectorUnit:
    """AVX-512 (16 lanes, 32 zmm registers) where the target has it, else AVX2's 8 lanes and 16 ymm registers."""
    from tvm.target import codegen

    with contextlib.suppress(Exception):
        if codegen.target_has_features("avx512f", target):
            return _VectorUnit(16, 32)
    return _VectorUnit(8, 16)


def _load_cached(tvm, path: Path):
    if not path.is_file():
        return None
    try:
        module = tvm.runtime.load_module(str(path))
    except Exception:  # a library from another toolchain, or a damaged file: rebuild it
        return None
    _STATS["loaded"] += 1
    return module


def _save_cached(module, path: Path) -> None:
    """Export the library atomically (temporary file + rename) so concurrent processes never see half a file."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp.so")
        os.close(fd)
        module.export_library(tmp)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shared cache from other users
        os.replace(tmp, path)
    except Exception as error:
        # A read-only cache folder, or no C compiler to link with: only the in-process cache serves.
        warnings.warn(f"could not write the TVM kernel cache {path}: {error}", RuntimeWarning, stacklevel=3)
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


# --------------------------------------------------------------------------- geometry and TE definitions


@dataclass(frozen=True)
class _Geometry:
    """Sizes of the tiled band layout (module docstring) for one-sided window `half`."""

    half: int
    head_dim: int

    @property
    def width(self) -> int:  # 2h + 1 keys per row
        return 2 * self.half + 1

    @property
    def span(self) -> int:  # C: frame positions per tile, covering [r, r + 2h] for every row r of the tile
        return -(-(_TILE + self.width - 1) // _LANES) * _LANES

    def tiles(self, n: int) -> int:
        return -(-n // _TILE)

    def frame(self, n: int) -> int:  # frame length read by ceil(n / R) tiles
        return (self.tiles(n) - 1) * _TILE + self.span

    def key_tiles(self, n: int) -> int:  # tiles of frame positions that hold the keys [h, h + n)
        return -(-(self.half + n) // _TILE)


def _exp(x, dtype: str):
    """exp for float32 as a vectorisable polynomial (Cephes expf, ~1 ulp); LLVM would scalarise ``llvm.exp``.

    Inputs <= -88.38 (masked -inf scores) give exactly 0: the power of two's exponent field is then 0."""
    from tvm import tirx

    if dtype != "float32":
        return tirx.exp(x)

    def c(value):
        return tirx.const(value, "float32")

    x = tirx.max(tirx.min(x, c(88.3762626647950)), c(-88.3762626647949))
    power = tirx.floor(x * c(1.44269504088896341) + c(0.5))
    r = x - power * c(0.693359375) + power * c(2.12194440e-4)  # x - power * ln 2, in two parts for precision
    poly = ((((c(1.9875691500e-4) * r + c(1.3981999507e-3)) * r + c(8.3334519073e-3)) * r + c(4.1665795894e-2)) * r
            + c(1.6666665459e-1)) * r + c(5.0000001201e-1)
    mantissa = poly * r * r + r + c(1.0)
    return mantissa * tirx.reinterpret("float32", tirx.shift_left(tirx.Cast("int32", power) + 127, 23))


@dataclass(frozen=True)
class _Definition:
    """One kernel: its TE arguments and the blocks its schedule arranges."""

    arguments: list
    anchor: str  # the block whose loops carry the parallel (or thread-bound) axis
    producers: tuple[str, ...] = ()  # row reductions computed at the anchor's row (consumers first)
    consumers: tuple[str, ...] = ()  # outputs computed after the anchor, in the same row


class _Builder:
    """TE graphs of the kernels over the tiled band layout (module docstring), one `_Builder` per kernel.

    Symbolic sizes (int64, as (batch*heads) x n x span overflows int32 at long inputs): bh = batch*heads,
    n = sequence length, nt = row tiles, frame = frame length, nb = batch, heads, gq = global slots / 16
    (passed explicitly: TVM cannot bind a var from the shape gq * 16), nk = key tiles of band_tpv,
    count = gathered rows.
    """

    def __init__(self, te, geometry: _Geometry, dtype: str):
        from tvm import tirx

        self.te, self.tirx, self.geometry, self.dtype = te, tirx, geometry, dtype
        self.scale = 1.0 / math.sqrt(geometry.head_dim)
        self.zero, self.ninf = tirx.const(0.0, dtype), tirx.const(-math.inf, dtype)
        self.bh, self.n, self.nt, self.frame, self.nb, self.heads, self.gq, self.nk, self.count = (
            te.var(name, "int64") for name in ("bh", "n", "nt", "frame", "nb", "heads", "gq", "nk", "count"))
        self.slots = self.gq * _LANES
        self.tiles = (self.bh, self.nt, _TILE, geometry.span)  # band tiles
        self.tile_slots = (self.bh, self.nt, _TILE, self.slots)  # global-key columns of the tile rows
        self.tile_rows = (self.bh, self.nt, _TILE)

    def tensor(self, shape, name):
        return self.te.placeholder(shape, self.dtype, name=name)

    def row(self, u, r):
        """Query row of tile u, clamped: the last tile's padding rows are computed and never used."""
        return self.tirx.min(u * _TILE + r, self.n - 1)

    def masks(self):
        """(1 = kept) frame keys, tile rows and global slots, per batch row b // heads."""
        return (self.tensor((self.nb, self.frame), "KOK"), self.tensor((self.nb, self.nt * _TILE), "ROK"),
                self.tensor((self.nb, self.slots), "GOK"))

    def band_ok(self, masks, b, u, r, c):
        key_ok, row_ok, _ = masks
        return self.tirx.all(c >= r, c < r + self.geometry.width, key_ok[b // self.heads, u * _TILE + c] > 0,
                             row_ok[b // self.heads, u * _TILE + r] > 0)

    def slot_ok(self, masks, b, u, r, s):
        _, row_ok, slot_ok = masks
        return self.tirx.all(slot_ok[b // self.heads, s] > 0, row_ok[b // self.heads, u * _TILE + r] > 0)

    def reduce_rows(self, name, combine, band_expr, slot_expr):
        """Row reductions over the band span and over the global slots, apart so each vectorises."""
        te = self.te
        c, s = te.reduce_axis((0, self.geometry.span), "c"), te.reduce_axis((0, self.slots), "s")
        return (te.compute(self.tile_rows, lambda b, u, r: combine(band_expr(b, u, r, c), axis=c), name=f"{name}B"),
                te.compute(self.tile_rows, lambda b, u, r: combine(slot_expr(b, u, r, s), axis=s), name=f"{name}G"))

    def band_scores(self, q, kt):
        """Band tiles of q . k (unscaled), k as the transposed frame kt[b, d, j + h] = k[b, j, d]."""
        te, R = self.te, _TILE
        d = te.reduce_axis((0, self.geometry.head_dim), "d")
        return te.compute(self.tiles, lambda b, u, r, c: te.sum(q[b, self.row(u, r), d] * kt[b, d, u * R + c], axis=d),
                          name="SB")

    def slot_scores(self, q, kgt):
        """Global-key columns of the tile rows, q . k_global (unscaled)."""
        te = self.te
        d = te.reduce_axis((0, self.geometry.head_dim), "d")
        return te.compute(self.tile_slots, lambda b, u, r, s: te.sum(q[b, self.row(u, r), d] * kgt[b, d, s], axis=d),
                          name="SG")

    def row_max(self, masks, band, slots):
        """Row maxima of the kept band and global scores (unscaled), as a function (b, u, r) -> scale * max, or 0
        for rows without any key so that exp() stays finite. `slots` is indexed (b, u, r, s)."""
        tirx = self.tirx
        mb, mg = self.reduce_rows(
            "M", self.te.max,
            lambda b, u, r, c: tirx.Select(self.band_ok(masks, b, u, r, c), band[b, u, r, c], self.ninf),
            lambda b, u, r, s: tirx.Select(self.slot_ok(masks, b, u, r, s), slots(b, u, r, s), self.ninf))

        def shift(b, u, r):
            m = tirx.max(mb[b, u, r], mg[b, u, r])
            return tirx.Select(m > self.ninf, m * self.scale, self.zero)

        return shift

    def exponentials(self, masks, band, slots):
        """E = exp(scale * score - row max) over band ++ globals, 0 where masked, and 1 / row sum of E.

        The masks are applied once, as -inf scores (_exp(-inf) is exactly 0), not in every pass."""
        te, tirx, scale = self.te, self.tirx, self.scale
        kept = te.compute(self.tiles, lambda b, u, r, c: tirx.Select(
            self.band_ok(masks, b, u, r, c), band[b, u, r, c] * scale, self.ninf), name="KB")
        kept_slots = te.compute(self.tile_slots, lambda b, u, r, s: tirx.Select(
            self.slot_ok(masks, b, u, r, s), slots[b, u, r, s] * scale, self.ninf), name="KG")
        mb, mg = self.reduce_rows("M", te.max, lambda b, u, r, c: kept[b, u, r, c],
                                  lambda b, u, r, s: kept_slots[b, u, r, s])

        def shift(b, u, r):  # the row max; rows without any key keep -inf scores, whose exp is 0 for any shift
            return tirx.max(mb[b, u, r], mg[b, u, r])

        eb = te.compute(self.tiles, lambda b, u, r, c: _exp(kept[b, u, r, c] - shift(b, u, r), self.dtype),
                        name="EB")
        eg = te.compute(self.tile_slots, lambda b, u, r, s: _exp(kept_slots[b, u, r, s] - shift(b, u, r), self.dtype),
                        name="EG")
        zb, zg = self.reduce_rows("Z", te.sum, lambda b, u, r, c: eb[b, u, r, c], lambda b, u, r, s: eg[b, u, r, s])

        def inverse(b, u, r):  # 1 / row sum, or 0 for rows without any key: their outputs are 0
            total = zb[b, u, r] + zg[b, u, r]
            return tirx.Select(total > 0, tirx.const(1.0, self.dtype) / total, self.zero)

        return eb, eg, inverse

    # ----------------------------------------------------------------- kernels

    def attend(self) -> _Definition:
        """The fused forward of the ordinary rows, per row tile: scores against the band and the global keys,
        softmax, and O = (E_band V_band + E_global V_global) / Z with the unnormalised exponentials E.

        It keeps no probabilities (the backward recomputes them with band_qk and softmax_fwd): a second
        output would need the intermediates both under the tile loop and outside it."""
        te, R, D = self.te, _TILE, self.geometry.head_dim
        q, kt, vf = (self.tensor((self.bh, self.n, D), "Q"), self.tensor((self.bh, D, self.frame), "KT"),
                     self.tensor((self.bh, self.frame, D), "VF"))
        kgt, vg = self.tensor((self.bh, D, self.slots), "KGT"), self.tensor((self.bh, self.slots, D), "VG")
        masks = self.masks()
        eb, eg, inverse = self.exponentials(masks, self.band_scores(q, kt), self.slot_scores(q, kgt))
        c, s = te.reduce_axis((0, self.geometry.span), "c"), te.reduce_axis((0, self.slots), "s")
        rows = (self.bh, self.nt, R, D)
        ob = te.compute(rows, lambda b, u, r, e: te.sum(eb[b, u, r, c] * vf[b, u * R + c, e], axis=c), name="OB")
        og = te.compute(rows, lambda b, u, r, e: te.sum(eg[b, u, r, s] * vg[b, s, e], axis=s), name="OG")
        # Normalising the (R x D) output is cheaper than normalising the (R x (span + slots)) weights.
        out = te.compute(rows, lambda b, u, r, e: (ob[b, u, r, e] + og[b, u, r, e]) * inverse(b, u, r), name="O")
        return _Definition([q, kt, vf, kgt, vg, *masks, out, self.heads, self.gq], "O")

    def softmax_fwd(self) -> _Definition:
        """Unfused softmax (the CUDA forward, and the backward's recomputation of P): band tiles and
        (bh, n, slots) scores -> probabilities. The rows' log-sum-exp is the anchor statistic, so the
        outputs read nothing else of the row."""
        te, tirx, scale = self.te, self.tirx, self.scale
        band, slots = self.tensor(self.tiles, "S"), self.tensor((self.bh, self.n, self.slots), "SG")
        masks = self.masks()

        def slot(b, u, r, s):
            return slots[b, self.row(u, r), s]

        shift = self.row_max(masks, band, slot)
        zb, zg = self.reduce_rows(
            "Z", te.sum,
            lambda b, u, r, c: tirx.Select(self.band_ok(masks, b, u, r, c),
                                           _exp(band[b, u, r, c] * scale - shift(b, u, r), self.dtype), self.zero),
            lambda b, u, r, s: tirx.Select(self.slot_ok(masks, b, u, r, s),
                                           _exp(slot(b, u, r, s) * scale - shift(b, u, r), self.dtype), self.zero))

        def log_sum_exp(b, u, r):  # +inf for rows without any key: their probabilities come out 0
            total = zb[b, u, r] + zg[b, u, r]
            return tirx.Select(total > 0, shift(b, u, r) + tirx.log(total), tirx.const(math.inf, self.dtype))

        lse = te.compute(self.tile_rows, log_sum_exp, name="LSE")
        pb = te.compute(self.tiles, lambda b, u, r, c: tirx.Select(
            self.band_ok(masks, b, u, r, c), _exp(band[b, u, r, c] * scale - lse[b, u, r], self.dtype), self.zero),
            name="P")
        pg = te.compute(self.tile_slots, lambda b, u, r, s: tirx.Select(
            self.slot_ok(masks, b, u, r, s), _exp(slot(b, u, r, s) * scale - lse[b, u, r], self.dtype), self.zero),
            name="PG")
        return _Definition([band, slots, *masks, lse, pb, pg, self.heads, self.gq], "LSE",
                           ("ZB", "ZG", "MB", "MG"), ("P", "PG"))

    def softmax_bwd(self) -> _Definition:
        """dS = scale * P * (dP - sum(P * dP)) over band ++ globals; masked entries have P = 0."""
        te, scale = self.te, self.scale
        pb, pg, dpb = self.tensor(self.tiles, "P"), self.tensor(self.tile_slots, "PG"), self.tensor(self.tiles, "DP")
        dpg = self.tensor((self.bh, self.n, self.slots), "DPG")
        rb, rg = self.reduce_rows("R", te.sum, lambda b, u, r, c: pb[b, u, r, c] * dpb[b, u, r, c],
                                  lambda b, u, r, s: pg[b, u, r, s] * dpg[b, self.row(u, r), s])
        rowdot = te.compute(self.tile_rows, lambda b, u, r: rb[b, u, r] + rg[b, u, r], name="RD")
        dsb = te.compute(self.tiles, lambda b, u, r, c: pb[b, u, r, c] * (dpb[b, u, r, c] - rowdot[b, u, r]) * scale,
                         name="DS")
        dsg = te.compute(self.tile_slots, lambda b, u, r, s: pg[b, u, r, s]
                         * (dpg[b, self.row(u, r), s] - rowdot[b, u, r]) * scale, name="DSG")
        return _Definition([pb, pg, dpb, dpg, rowdot, dsb, dsg, self.gq], "RD", ("RB", "RG"), ("DS", "DSG"))

    # ----------------------------------------------------------------- data movement (no PyTorch op between
    # the kernels of a forward: PyTorch's OpenMP workers spin after each parallel op and take the cores
    # TVM's workers need)

    def frame_rows(self) -> _Definition:
        """XF[b, j] = X[b, j - offset] inside [0, n), else 0: the frame (offset h), or a zero-padded tail (0)."""
        x, offset = self.tensor((self.bh, self.n, self.geometry.head_dim), "X"), self.te.var("offset", "int64")
        out = self.te.compute((self.bh, self.frame, self.geometry.head_dim),
                              lambda b, j, e: self._shifted(x, b, j - offset, e), name="XF")
        return _Definition([x, out, offset], "XF")

    def frame_cols(self) -> _Definition:
        """The transposed frame, XT[b, e, j] = X[b, j - offset, e] inside [0, n), else 0."""
        x, offset = self.tensor((self.bh, self.n, self.geometry.head_dim), "X"), self.te.var("offset", "int64")
        out = self.te.compute((self.bh, self.geometry.head_dim, self.frame),
                              lambda b, e, j: self._shifted(x, b, j - offset, e), name="XT")
        return _Definition([x, out, offset], "XT")

    def _shifted(self, x, b, i, e):
        inside = self.tirx.all(i >= 0, i < self.n)
        return self.tirx.Select(inside, x[b, self.tirx.max(self.tirx.min(i, self.n - 1), 0), e], self.zero)

    def gather_rows(self) -> _Definition:
        """XG[b, s] = X[b, index[b // heads, s]]: the global tokens' rows."""
        x, index = self.tensor((self.bh, self.n, self.geometry.head_dim), "X"), self.index()
        out = self.te.compute((self.bh, self.count, self.geometry.head_dim),
                              lambda b, s, e: x[b, index[b // self.heads, s], e], name="XG")
        return _Definition([x, index, out, self.heads], "XG")

    def gather_cols(self) -> _Definition:
        """XGT[b, e, s] = X[b, index[b // heads, s], e]: the global keys, transposed for the scores."""
        x, index = self.tensor((self.bh, self.n, self.geometry.head_dim), "X"), self.index()
        out = self.te.compute((self.bh, self.geometry.head_dim, self.count),
                              lambda b, e, s: x[b, index[b // self.heads, s], e], name="XGT")
        return _Definition([x, index, out, self.heads], "XGT")

    def index(self):
        return self.te.placeholder((self.nb, self.count), "int64", name="INDEX")

    def band_qk(self) -> _Definition:
        """Band tiles of A . B (B as the transposed frame BT[b, d, j + h] = B[b, j, d])."""
        a = self.tensor((self.bh, self.n, self.geometry.head_dim), "A")
        bt = self.tensor((self.bh, self.geometry.head_dim, self.frame), "BT")
        return _Definition([a, bt, self.band_scores(a, bt)], "SB")

    def band_pv(self) -> _Definition:
        """Rows (tiles of R) of P X over the band, X as the frame XF[b, j + h] = X[b, j]."""
        te, R, D = self.te, _TILE, self.geometry.head_dim
        p, xf = self.tensor(self.tiles, "P"), self.tensor((self.bh, self.frame, D), "XF")
        c = te.reduce_axis((0, self.geometry.span), "c")
        out = te.compute((self.bh, self.nt, R, D), lambda b, u, r, e: te.sum(p[b, u, r, c] * xf[b, u * R + c, e],
                                                                              axis=c), name="O")
        return _Definition([p, xf, out], "O")

    def band_tpv(self) -> _Definition:
        """The transposed band G^T Y in frame tiles: tile v holds frame positions v*R + s, whose band
        entries sit at (u, r, c) = (v - k, r, k*R + s) for k < span / R."""
        te, tirx, R, D = self.te, self.tirx, _TILE, self.geometry.head_dim
        g, y = self.tensor(self.tiles, "G"), self.tensor((self.bh, self.n, D), "Y")
        k, r = te.reduce_axis((0, self.geometry.span // R), "k"), te.reduce_axis((0, R), "r")

        def transposed(b, v, s, e):
            u = tirx.max(tirx.min(v - k, self.nt - 1), 0)  # clamped so that masked terms still load in bounds
            inside = tirx.all(v - k >= 0, v - k < self.nt)
            return te.sum(tirx.Select(inside, g[b, u, r, k * R + s] * y[b, self.row(u, r), e], self.zero), axis=[k, r])

        return _Definition([g, y, te.compute((self.bh, self.nk, R, D), transposed, name="X")], "X")


# --------------------------------------------------------------------------- schedules


def _micro_kernel(sch, block: str, rows: int, columns: int, lanes: int) -> None:
    """Register-blocked matmul on a block whose loops end (r, x, *reductions): `rows` x `columns`
    outputs live in registers (a local cache written back once) while the reduction runs outside
    them, so each loaded vector serves `rows` rows and each broadcast `columns / lanes` vectors."""
    _, count = _iterators(sch, block)  # band_tpv reduces over (k, r)
    *_, r, x = sch.get_loops(block)[:-count]
    reductions = sch.get_loops(block)[-count:]
    r_outer, r_inner = sch.split(r, [None, rows])
    x_outer, x_inner = sch.split(x, [None, columns])
    vectors, lane = sch.split(x_inner, [None, lanes])
    sch.reorder(r_outer, x_outer, *reductions, r_inner, vectors, lane)
    sch.unroll(r_inner)
    sch.unroll(vectors)
    # Vectorise before decompose_reduction: afterwards the update block fails vectorize's dataflow check.
    sch.vectorize(lane)
    local = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(local, x_outer)
    sch.decompose_reduction(block, reductions[0])
    _, lane = sch.split(sch.get_loops(local)[-1], [None, lanes])
    sch.vectorize(lane)


def _vectorize_last(sch, block: str) -> None:
    _, lane = sch.split(sch.get_loops(block)[-1], [None, _LANES])
    sch.vectorize(lane)


def _rfactor_rows(sch, names) -> dict:
    """Split each row reduction into _LANES partial lanes (vectorised) and a final sum; before any compute_at,
    which rfactor refuses. factor_axis=3 keeps a row's partials contiguous."""
    partial = {}
    for name in names:
        _, lanes = sch.split(sch.get_loops(name)[-1], [None, _LANES])
        partial[name] = sch.rfactor(lanes, 3)
    return partial


def _compute_at(sch, names, partial: dict, loop) -> None:
    """compute_at `names` (consumers before producers, as compute_at requires) under `loop`; a reduction's
    partial lanes go innermost and vectorise, elementwise (row, column) stages vectorise their columns."""
    for name in names:
        sch.compute_at(name, loop)
        if name in partial:
            sch.compute_at(partial[name], loop)
            loops = sch.get_loops(partial[name])
            sch.reorder(loops[-1], loops[-2])
            sch.vectorize(sch.get_loops(partial[name])[-1])
        elif name in ("EB", "EG", "KB", "KG"):
            _vectorize_last(sch, name)


def _schedule_cpu_attend(sch, geometry: _Geometry, unit: _VectorUnit) -> None:
    """Row tiles in parallel; every stage of a tile at the tile: (R x span) and (R x slots) scores,
    row reductions, exponentials and the output matmuls, all in L1/L2 and never in memory."""
    partial = _rfactor_rows(sch, ("ZB", "ZG", "MB", "MG"))
    b, u, _, _ = sch.get_loops("O")
    tile = sch.fuse(b, u)
    sch.parallel(tile)
    _vectorize_last(sch, "O")
    _compute_at(sch, ("OG", "OB", "ZG", "ZB", "EG", "EB", "MG", "MB", "KG", "KB", "SG", "SB"), partial, tile)
    _schedule_cpu_products(sch, geometry, unit, {"OB": "head", "OG": "head", "SB": "span", "SG": "slots"})
    # Mask and scale as the score micro-kernels write back their registers, not in another pass.
    sch.reverse_compute_inline("KB")
    sch.reverse_compute_inline("KG")


def _schedule_cpu_products(sch, geometry: _Geometry, unit: _VectorUnit, blocks: dict) -> None:
    """Micro-kernel shapes, measured on AVX-512 and AVX2 (results/kernels/README.md): 4 rows, keys or values reused
    across them; the head products and the global columns with half the registers as accumulators (16 zmm,
    8 ymm), the band scores with up to 3 vectors a row (12 either way). AVX-512's shapes on an AVX2 machine
    (32 ymm accumulators) made the fused forward 2x slower."""
    lanes, accumulators = unit.lanes, unit.registers // 2
    head_lanes = math.gcd(geometry.head_dim, lanes)  # the largest power of two <= lanes dividing head_dim
    vectors = geometry.head_dim // head_lanes
    if lanes == _LANES:  # AVX-512: whole head rows, as many as fit (head_dim 64: 4 rows x 4 vectors)
        head = (max(r for r in (1, 2, 4, 8, 16) if r * vectors <= max(accumulators, vectors)), geometry.head_dim)
    else:  # 4 rows x the widest column block of at most accumulators / 4 vectors (head_dim 64: 4 x 2 vectors)
        head = (4, head_lanes * max(v for v in (1, 2, 4, 8) if v <= accumulators // 4 and vectors % v == 0))
    span_vectors = geometry.span // lanes
    slot_vectors = _LANES // lanes  # the global slots come in multiples of _LANES
    span_columns = lanes * max(v for v in (1, 2, 3) if span_vectors % v == 0)
    shapes = {"head": (*head, head_lanes), "span": (4, span_columns, lanes),
              "slots": (accumulators // slot_vectors, _LANES, lanes)}
    for block, kind in blocks.items():
        _micro_kernel(sch, block, *shapes[kind])


def _schedule_cpu_tiles(sch, block: str, geometry: _Geometry, unit: _VectorUnit, kind: str) -> None:
    """A standalone product: parallel over (batch*heads, tiles), a micro-kernel per tile."""
    b, u, *_ = sch.get_loops(block)
    sch.parallel(sch.fuse(b, u))
    _schedule_cpu_products(sch, geometry, unit, {block: kind})


def _schedule_cpu_rows(sch, definition: _Definition) -> None:
    """Row-fused softmax: rows in parallel, each row's reductions at the row, its outputs after them."""
    partial = _rfactor_rows(sch, definition.producers)
    row = sch.fuse(*sch.get_loops(definition.anchor))
    sch.parallel(row)
    _compute_at(sch, definition.producers, partial, row)
    for name in definition.consumers:
        sch.reverse_compute_at(name, row)
        _vectorize_last(sch, name)


def _schedule_cpu_elementwise(sch, block: str, geometry: _Geometry) -> None:
    """Data movement: parallel over the two outer axes, the head dimension vectorised where it is innermost."""
    from tvm.tirx import IntImm

    outer, middle, inner = sch.get_loops(block)
    sch.parallel(sch.fuse(outer, middle))
    if isinstance(sch.get(inner).extent, IntImm):  # not the symbolic frame or gathered axis
        _, lane = sch.split(inner, [None, math.gcd(geometry.head_dim, _LANES)])
        sch.vectorize(lane)


def _iterators(sch, block: str) -> tuple[int, int]:
    """(data-parallel, reduction) iterator counts of a block."""
    from tvm.tirx import IterVar

    kinds = [iv.iter_type for iv in sch.get(sch.get_sblock(block)).iter_vars]
    return sum(kind == IterVar.DataPar for kind in kinds), sum(kind == IterVar.CommReduce for kind in kinds)


def _schedule_gpu(sch, definition: _Definition) -> None:
    """One CUDA thread per output element (products, data movement) or per row (softmax); reductions run
    within the thread."""
    spatial, reductions = _iterators(sch, definition.anchor)
    fused = sch.fuse(*sch.get_loops(definition.anchor)[:spatial])
    blocks, threads = sch.split(fused, [None, _GPU_THREADS])
    sch.bind(blocks, "blockIdx.x")
    sch.bind(threads, "threadIdx.x")
    if reductions:  # a product: accumulate in a register, store once
        sch.reverse_compute_at(sch.cache_write(definition.anchor, 0, "local"), threads)
    for name in definition.producers:
        sch.compute_at(name, threads)
        sch.set_scope(name, 0, "local")  # per-thread values: GPU kernels cannot allocate global memory
    for name in definition.consumers:
        sch.reverse_compute_at(name, threads)


#: Kernels of each device: the CPU forward is fused (``attend``), CUDA runs the products unfused, one thread
#: per output. The backward recomputes the probabilities with band_qk + softmax_fwd on both.
_MOVES = ("frame_rows", "frame_cols", "gather_rows", "gather_cols")
_KERNEL_NAMES = {
    "cpu": ("attend", "band_qk", "softmax_fwd", "band_pv", "band_tpv", "softmax_bwd", *_MOVES),
    "cuda": ("band_qk", "softmax_fwd", "band_pv", "band_tpv", "softmax_bwd", *_MOVES),
}


def _scheduled(tvm, te, name: str, geometry: _Geometry, dtype: str, device_type: str, unit: _VectorUnit):
    definition = getattr(_Builder(te, geometry, dtype), name)()
    sch = tvm.s_tir.Schedule(te.create_prim_func(definition.arguments, index_dtype_override="int64"))
    if device_type == "cuda":
        _schedule_gpu(sch, definition)
    elif name == "attend":
        _schedule_cpu_attend(sch, geometry, unit)
    elif definition.producers:
        _schedule_cpu_rows(sch, definition)
    elif name in _MOVES:
        _schedule_cpu_elementwise(sch, definition.anchor, geometry)
    else:
        _schedule_cpu_tiles(sch, definition.anchor, geometry, unit, "span" if name == "band_qk" else "head")
    return sch.mod["main"].with_attr("global_symbol", name)


def _compile(tvm, te, target, geometry: _Geometry, dtype: str, device_type: str):
    try:
        unit = _vector_unit(target)
        functions = {name: _scheduled(tvm, te, name, geometry, dtype, device_type, unit)
                     for name in _KERNEL_NAMES[device_type]}
        module = tvm.compile(tvm.IRModule(functions), target=target)
    except Exception as error:
        # TVM schedule errors embed the whole IR; keep their last line, which says what went wrong.
        lines = [line for line in str(error).splitlines() if line.strip()]
        raise KernelUnavailableError(
            f"TVM {tvm.__version__} failed to compile the QDS band kernels (h={geometry.half}, "
            f"head_dim={geometry.head_dim}, {dtype}) for {target}: {type(error).__name__}: "
            f"{lines[-1][:500] if lines else ''}; {_FALLBACK}") from error
    _STATS["compiled"] += 1
    return module


# --------------------------------------------------------------------------- torch side


class _Kernels:
    """The compiled functions of one shape family, called on torch tensors (zero-copy through DLPack).

    Band tensors are in the tiled layout (BH, nt, R, C); row tensors are (BH, N, D).
    """

    def __init__(self, module, geometry: _Geometry, device: torch.device):
        self.module, self.geometry, self.device = module, geometry, device
        self.functions = {name: module[name] for name in _KERNEL_NAMES[device.type]}

    def _call(self, name: str, *args) -> None:
        if self.device.type == "cuda":
            import tvm_ffi

            with tvm_ffi.use_torch_stream():  # run on torch's current stream, ordered with its ops
                self.functions[name](*args)
        else:
            self.functions[name](*args)

    def _frame(self, x: Tensor, transposed: bool = False) -> Tensor:
        """(BH, N, D) -> (BH, frame, D): row j at frame position j + h, zeros elsewhere; `transposed`: (BH, D, frame),
        the keys contiguous for the vectorised scores."""
        bh, n, head_dim = x.shape
        length = self.geometry.frame(n)
        name, shape = ("frame_t", (bh, head_dim, length)) if transposed else ("frame", (bh, length, head_dim))
        out = self._scratch(name, x, shape)
        self._call("frame_cols" if transposed else "frame_rows", x, out, self.geometry.half)
        return out

    def _scratch(self, name: str, x: Tensor, shape: tuple[int, ...], zeros: bool = False) -> Tensor:
        """A buffer kept per thread and reused while its shape repeats (CPU): a fresh multi-MB allocation
        page-faults on every call, as glibc returns it to the system. The kernels overwrite it entirely,
        except the `zeros` buffers, which nothing writes."""
        if x.device.type != "cpu":
            return x.new_zeros(shape) if zeros else x.new_empty(shape)
        key = (shape, x.dtype)
        buffers = _SCRATCH.__dict__.setdefault(name, {})
        if key not in buffers:
            buffers.clear()  # one live buffer per name and thread
            buffers[key] = x.new_zeros(shape) if zeros else x.new_empty(shape)
        return buffers[key]

    def _gather(self, x: Tensor, index: Tensor, heads: int, transposed: bool = False) -> Tensor:
        """Rows index[b // heads] of (BH, N, D) -> (BH, S, D), or (BH, D, S) `transposed`."""
        bh, _, head_dim = x.shape
        shape = (bh, head_dim, index.shape[1]) if transposed else (bh, index.shape[1], head_dim)
        out = x.new_empty(shape)
        self._call("gather_cols" if transposed else "gather_rows", x, index, out, heads)
        return out

    def ordinary_rows(self, q: Tensor, k: Tensor, v: Tensor, layout: _GlobalLayout, heads: int) -> Tensor:
        """Inference (CPU): the ordinary rows of (B, H, N, D) inputs with TVM kernels only (gathers, frames and the
        fused ``attend``), as (B, H, N, D); the global rows' outputs are left for the caller to write."""
        q3, k3, v3 = _flat(q, k, v)
        n = q3.shape[1]
        out = q.new_empty(q.shape)
        whole = n % _TILE == 0  # the row tiles are the output
        rows = self.attend(q3, k3, v3, self._gather(k3, layout.index, heads, transposed=True),
                           self._gather(v3, layout.index, heads), layout, heads, _flat(out)[0] if whole else None)
        if not whole:
            _flat(out)[0].copy_(rows[:, :n])
        return out

    def attend(self, q: Tensor, k: Tensor, v: Tensor, k_global_t: Tensor, v_global: Tensor, layout: _GlobalLayout,
               heads: int, rows: Tensor | None = None) -> Tensor:
        """Ordinary rows of (BH, N, D) inputs, global keys k_global_t (BH, D, Gp) and values (BH, Gp, D), as
        whole row tiles (BH, nt * R, D) (rows past N are padding), into `rows` if given: the fused kernel
        where compiled, else the unfused products."""
        bh, n, head_dim = q.shape
        rows = q.new_empty(bh, self.geometry.tiles(n) * _TILE, head_dim) if rows is None else rows
        if "attend" in self.functions:
            self._call("attend", q, self._frame(k, transposed=True), self._frame(v), k_global_t, v_global,
                       layout.key_ok, layout.row_ok, layout.global_ok, rows.view(bh, -1, _TILE, head_dim), heads,
                       k_global_t.shape[2] // _LANES)
        else:
            p, pg = self.probabilities(q, k, k_global_t, layout, heads)
            self._call("band_pv", p, self._frame(v), rows.view(bh, -1, _TILE, head_dim))
            rows[:, :n].baddbmm_(pg[:, :n], v_global)
        return rows

    def probabilities(self, q: Tensor, k: Tensor, k_global_t: Tensor, layout: _GlobalLayout,
                      heads: int) -> tuple[Tensor, Tensor]:
        """The softmax weights of the ordinary rows: band tiles and (BH, nt * R, Gp) global columns."""
        return self.softmax_fwd(self.band_qk(q, k), torch.bmm(q, k_global_t), layout, heads)

    def band_qk(self, a: Tensor, b: Tensor) -> Tensor:
        """(BH, N, D) x (BH, N, D) -> band tiles: a[:, i] . b[:, j] for the keys j of row i's band."""
        n = a.shape[1]
        out = a.new_empty(a.shape[0], self.geometry.tiles(n), _TILE, self.geometry.span)
        self._call("band_qk", a, self._frame(b, transposed=True), out)
        return out

    def band_pv(self, p: Tensor, x: Tensor) -> Tensor:
        """Band tiles x (BH, N, D) -> (BH, N, D): O[:, i] = sum over row i's band of p * x[:, j]."""
        bh, n, head_dim = x.shape
        rows = x.new_empty(bh, self.geometry.tiles(n) * _TILE, head_dim)
        self._call("band_pv", p, self._frame(x), rows.view(bh, -1, _TILE, head_dim))
        return rows[:, :n]

    def band_tpv(self, g: Tensor, y: Tensor) -> Tensor:
        """Band tiles x (BH, N, D) -> (BH, N, D): X[:, j] = sum over the rows i whose band holds j of g * y[:, i]."""
        bh, n, head_dim = y.shape
        geo = self.geometry
        frame = y.new_empty(bh, geo.key_tiles(n), _TILE, head_dim)  # frame positions 0 .. key_tiles * R - 1
        self._call("band_tpv", g, y, frame)
        return frame.view(bh, -1, head_dim)[:, geo.half:geo.half + n]

    def softmax_fwd(self, s: Tensor, sg: Tensor, layout: _GlobalLayout, heads: int) -> tuple[Tensor, Tensor]:
        """Band tiles and (BH, N, Gp) scores -> probabilities (band tiles, (BH, nt * R, Gp))."""
        bh, nt = s.shape[:2]
        lse = s.new_empty(bh, nt, _TILE)  # only the anchor of the row-fused schedule
        p, pg = torch.empty_like(s), s.new_empty(bh, nt, _TILE, sg.shape[2])
        self._call("softmax_fwd", s, sg, layout.key_ok, layout.row_ok, layout.global_ok, lse, p, pg, heads,
                   sg.shape[2] // _LANES)
        return p, pg.view(bh, nt * _TILE, -1)

    def softmax_bwd(self, p: Tensor, pg: Tensor, dp: Tensor, dpg: Tensor) -> tuple[Tensor, Tensor]:
        """Band tiles and (BH, nt * R, Gp) probabilities, their gradients -> scaled score gradients, same layouts."""
        bh, nt = p.shape[:2]
        rowdot = p.new_empty(bh, nt, _TILE)
        ds, dsg = torch.empty_like(p), torch.empty_like(pg)
        self._call("softmax_bwd", p, pg.view(bh, nt, _TILE, -1), dp, dpg, rowdot, ds, dsg.view(bh, nt, _TILE, -1),
                   pg.shape[2] // _LANES)
        return ds, dsg


@dataclass(frozen=True)
class _GlobalLayout:
    """Masks and global-token slots of a batch, shared by every head (and, through `common.kernels.layouts`, by
    every layer of an encoder call).

    Each example's valid global tokens fill its first slots of ``index`` (B, Gp), Gp the
    largest count rounded up to the vector width (at least one vector, so the kernels keep
    one signature); the other slots point at position 0 and are masked by ``global_ok``.
    """

    key_ok: Tensor  # (B, frame): the key at each frame position is in range, valid and not global
    row_ok: Tensor  # (B, nt * R): ordinary valid rows (global, padded and tile-padding rows are not)
    global_ok: Tensor  # (B, Gp): the slot holds a valid global token
    index: Tensor  # (B, Gp) long: positions of the slots
    rows_batch: Tensor  # (T,): batch of each valid global token, T in all
    rows_position: Tensor  # (T,): its position
    rows_slot: Tensor  # (T,): its slot
    rows_mask: Tensor | None  # (B, 1, G, N) bool: the keys of the global rows' SDPA, None where all are valid
    count: int  # T
    widest: int  # G, the largest count of an example

    @staticmethod
    def build(is_global: Tensor, key_padding_mask: Tensor | None, geometry: _Geometry, dtype) -> _GlobalLayout:
        batch, n = is_global.shape
        device = is_global.device
        tokens = global_tokens_of(is_global, key_padding_mask)
        valid, glob, counts = tokens.valid, tokens.glob, tokens.counts
        ordinary = (valid & ~is_global).to(dtype)
        key_ok = is_global.new_zeros(batch, geometry.frame(n), dtype=dtype)
        key_ok[:, geometry.half:geometry.half + n] = ordinary
        row_ok = F.pad(ordinary, (0, geometry.tiles(n) * _TILE - n))
        slots = max(_LANES, -(-tokens.widest // _LANES) * _LANES)
        # A stable sort puts each example's global positions first, in order.
        order = torch.sort((~glob).to(torch.int8), dim=1, stable=True).indices[:, :slots]
        global_ok = torch.arange(slots, device=device)[None] < counts[:, None]
        index = torch.where(global_ok, F.pad(order, (0, slots - order.shape[1])), 0)
        # Each token's rank among its example's global tokens: its place in (example, position) order less the
        # tokens of the examples before.
        rows_slot = torch.arange(tokens.total, device=device) - (torch.cumsum(counts, 0) - counts)[tokens.batch]
        slot_ok = global_ok[:, :tokens.widest]  # (B, G)
        rows_mask = None  # SDPA's fastest path, when every slot and key is valid
        if tokens.padded or tokens.fewest < tokens.widest:
            # Empty slots may see key 0 too: no row is left without keys (NaN), and their outputs are dropped.
            rows_mask = (valid[:, None, :] | (~slot_ok[:, :, None] & (torch.arange(n, device=device) == 0)))[:, None]
        return _GlobalLayout(key_ok, row_ok, global_ok.to(dtype), index, tokens.batch, tokens.position, rows_slot,
                             rows_mask, tokens.total, tokens.widest)


class _BandAttention(torch.autograd.Function):
    """Ordinary rows: softmax over [band ++ global keys] with the TVM kernels, forward and backward."""

    @staticmethod
    def forward(ctx, q, k, v, k_global, v_global, layout: _GlobalLayout, kernels: _Kernels):
        q3, k3, v3, kg3, vg3 = _flat(q, k, v, k_global, v_global)
        n = q.shape[2]
        # Not a view of a tensor made here, so that global rows can be written into it in place.
        out = q.new_empty(q.shape)
        whole = n % _TILE == 0  # the row tiles are the output
        rows = kernels.attend(q3, k3, v3, kg3.transpose(1, 2).contiguous(), vg3, layout, q.shape[1],
                              _flat(out)[0] if whole else None)
        if not whole:
            _flat(out)[0].copy_(rows[:, :n])
        ctx.save_for_backward(q, k, v, k_global, v_global)
        ctx.layout, ctx.kernels = layout, kernels
        return out

    @staticmethod
    def backward(ctx, grad):
        # float32 buffers, as in the forward: autocast stays off where a backward runs inside an autocast region.
        with torch.autocast(grad.device.type, enabled=False):
            q, k, v, k_global, v_global = ctx.saved_tensors
            kernels, n = ctx.kernels, q.shape[2]
            q3, k3, v3, kg3, vg3, g3 = _flat(q, k, v, k_global, v_global, grad.contiguous())
            p, pg = kernels.probabilities(q3, k3, kg3.transpose(1, 2), ctx.layout, q.shape[1])  # recomputed
            dp = kernels.band_qk(g3, v3)  # dO . V over the band
            dpg = torch.bmm(g3, vg3.transpose(1, 2))  # (BH, N, Gp)
            ds, dsg = kernels.softmax_bwd(p, pg, dp, dpg)  # scaled score gradients
            dsg, pg = dsg[:, :n], pg[:, :n]
            need_q, need_k, need_v, need_kg, need_vg = ctx.needs_input_grad[:5]
            dq = kernels.band_pv(ds, k3).baddbmm(dsg, kg3).view(q.shape) if need_q else None
            dk = kernels.band_tpv(ds, q3).reshape(q.shape) if need_k else None
            dv = kernels.band_tpv(p, g3).reshape(q.shape) if need_v else None
            dkg = torch.bmm(dsg.transpose(1, 2), q3).view(k_global.shape) if need_kg else None
            dvg = torch.bmm(pg.transpose(1, 2), g3).view(v_global.shape) if need_vg else None
            return dq, dk, dv, dkg, dvg, None, None


def _flat(*tensors: Tensor) -> list[Tensor]:
    """(B, H, L, D) -> (B*H, L, D) views."""
    return [x.view(-1, *x.shape[2:]) for x in tensors]


def _global_rows(q, k, v, global_qkv, layout: _GlobalLayout) -> Tensor:
    """(T, H, D) outputs of the valid global tokens by SDPA (differentiable): every valid key, with the
    global projections if given."""
    if global_qkv is not None:
        q, k, v = global_qkv
    batch, heads, n, head_dim = q.shape
    index = layout.index[:, :layout.widest]  # (B, G): the padding slots of the kernels are not needed here
    queries = q.gather(2, index[:, None, :, None].expand(batch, heads, -1, head_dim))  # (B, H, G, D)
    out = F.scaled_dot_product_attention(queries, k, v, attn_mask=layout.rows_mask)  # (B, H, G, D)
    return out.transpose(1, 2)[layout.rows_batch, layout.rows_slot]
