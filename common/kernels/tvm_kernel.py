"""Query-directed sparse attention with the banded products compiled by Apache TVM for the CPU (``impl="tvm"``).

QDS-Transformer (Sec. 4.3) compiles its attention with TVM, after Longformer's ``diagonaled_mm_tvm.py``; here TVM
0.27 (TE + TensorIR), one-sided window h = window // 2 (Eq. 7). Kernels: ``band_qk`` (S = QK^T on the band, and
dP = dO V^T), ``band_pv`` (O = PV, dQ = dS K), ``band_tpv`` (dK = dS^T Q, dV = P^T dO), ``softmax_fwd`` /
``softmax_bwd`` over [band ++ global keys], and ``attend``, the fused forward of the ordinary rows per row tile.
Band layout: tiles of ``_TILE`` rows read one contiguous span of C >= R + 2h positions of a zero-padded *frame* (key
j at j + h); ``band[b, u, r, c]`` holds frame position u*R + c, offset c - r. Global rows (Eqs. 8-10): PyTorch's SDPA
over every key. TVM's pool takes PyTorch's thread count and its idle workers sleep, unless ``TVM_NUM_THREADS``/
``OMP_NUM_THREADS``/``TVM_THREAD_POOL_SPIN_COUNT`` are set. Kernels are compiled once per (h, head_dim, dtype), sizes
symbolic, and exported to ``cache_root() / "tvm"`` (keyed by this file, the TVM version and the target).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import tempfile
import threading
import warnings
from collections import namedtuple
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from common.io import cache_root, renamed_on_success
from common.kernels import KernelUnavailableError
from common.kernels.layouts import GlobalTokens, global_tokens_of, shared
from common.kernels.reference import WINDOW, check_inputs

#: Band spans and global slots are padded to multiples of 16 fp32 lanes: one AVX-512 register, two AVX2 ones.
_LANES = 16
#: Query rows per tile (R).
_TILE = 16

_FALLBACK = 'use impl="portable" (pure PyTorch) instead'

#: Kernel libraries this process "compiled" with TVM or "loaded" from the on-disk cache.
STATS = {"compiled": 0, "loaded": 0}
_KERNELS: dict[tuple, _Kernels] = {}  # (h, head_dim, dtype, cache folder) -> kernels
_LOCK = threading.Lock()
_SCRATCH = threading.local()


def _import_tvm():
    """``tvm`` and ``tvm.te``, or KernelUnavailableError naming what failed."""
    if "TVM_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in os.environ:
        os.environ["TVM_NUM_THREADS"] = str(torch.get_num_threads())
    os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "0")
    try:
        import tvm
        from tvm import te
    except Exception as error:
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


def tvm_attention(q: Tensor, k: Tensor, v: Tensor, is_global: Tensor, key_padding_mask: Tensor | None = None,
                  window: int = WINDOW, global_qkv: tuple[Tensor, Tensor, Tensor] | None = None) -> Tensor:
    """`reference_attention` on TVM kernels, in float32 (or float64), autocast off; (B, H, N, D) -> (B, H, N, D)."""
    if q.device.type != "cpu":
        raise KernelUnavailableError(f"the TVM kernels run on CPU, not on {q.device}; {_FALLBACK}")
    with torch.autocast("cpu", enabled=False):
        check_inputs(q, k, v, is_global, key_padding_mask, global_qkv)
        batch, heads, n, head_dim = q.shape
        dtype = q.dtype if q.dtype in (torch.float32, torch.float64) else torch.float32
        kernels = load_kernels(window, head_dim, dtype)
        if n == 0 or batch * heads == 0:
            return q.new_zeros(q.shape)
        layout = shared(_GlobalLayout.build, is_global, key_padding_mask, kernels.geometry, dtype)
        q_, k_, v_ = (x.to(dtype).contiguous() for x in (q, k, v))
        if global_qkv is not None:
            global_qkv = tuple(x.to(dtype).contiguous() for x in global_qkv)
        needs_grad = torch.is_grad_enabled() and any(x.requires_grad for x in (q_, k_, v_, *(global_qkv or ())))
        if not needs_grad:
            q3, k3, v3 = _flat(q_, k_, v_)
            out = kernels.attend(q3, k3, v3, kernels._gather(k3, layout.index, heads, transposed=True),
                                 kernels._gather(v3, layout.index, heads), layout, q_.shape)
        else:
            index = layout.index[:, None, :, None].expand(batch, heads, -1, head_dim)  # (B, H, Gp, D)
            k_global, v_global = k_.gather(2, index), v_.gather(2, index)
            out = _BandAttention.apply(q_, k_, v_, k_global, v_global, layout, kernels)
        if layout.tokens.total:
            out[layout.tokens.batch, :, layout.tokens.position] = _global_rows(*(global_qkv or (q_, k_, v_)), layout)
        return out.to(q.dtype)


def load_kernels(window: int, head_dim: int, dtype: torch.dtype = torch.float32) -> _Kernels:
    """The compiled kernels of one shape family: from this process, else from the disk cache, else compiled."""
    tvm, te = _import_tvm()
    family = (window // 2, head_dim, dtype, cache_root())
    if family in _KERNELS:
        return _KERNELS[family]
    with _LOCK:
        if family not in _KERNELS:
            if not tvm.runtime.enabled("llvm"):
                raise KernelUnavailableError(f"Apache TVM {tvm.__version__} was built without LLVM; {_FALLBACK}")
            target, geometry = _cpu_target(), _Geometry(window // 2, head_dim)
            type_name = str(dtype).removeprefix("torch.")
            name = f"h{geometry.half}-d{head_dim}-{type_name}-cpu"
            digest = hashlib.sha256(b"\0".join([Path(__file__).read_bytes(), tvm.__version__.encode(),
                                                str(target).encode(), name.encode()])).hexdigest()[:20]
            path = cache_root() / "tvm" / f"qds-band-{name}-{digest}.so"
            module = None
            if path.is_file():
                with contextlib.suppress(Exception):  # an unreadable cache entry is compiled again
                    module = tvm.runtime.load_module(str(path))
                    STATS["loaded"] += 1
            if module is None:
                module = _compile(tvm, te, target, geometry, type_name)
                _save_cached(module, path)
            _KERNELS[family] = _Kernels(module, geometry)
    return _KERNELS[family]


def _cpu_target():
    """LLVM for this CPU (``mcpu`` from LLVM's host detection, for its vector width), else generic LLVM."""
    from tvm.target import Target, codegen

    with contextlib.suppress(Exception):
        cpu = codegen.llvm_get_system_cpu()
        if cpu and cpu != "generic":
            return Target({"kind": "llvm", "mcpu": cpu})
    return Target({"kind": "llvm"})


#: fp32 lanes per vector register and the register count: the micro-kernels' accumulators must fit.
_VectorUnit = namedtuple("_VectorUnit", "lanes registers")


def _vector_unit(target) -> _VectorUnit:
    """AVX-512 (16 lanes, 32 zmm registers) where the target has it, else AVX2's 8 lanes and 16 ymm registers."""
    from tvm.target import codegen

    with contextlib.suppress(Exception):
        if codegen.target_has_features("avx512f", target):
            return _VectorUnit(16, 32)
    return _VectorUnit(8, 16)


def _save_cached(module, path: Path) -> None:
    """Export the library atomically (temporary file + rename) so concurrent processes never see half a file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp.so")
        os.close(fd)
        with renamed_on_success(Path(tmp), path):
            module.export_library(tmp)
            os.chmod(tmp, 0o644)
    except Exception as error:
        warnings.warn(f"could not write the TVM kernel cache {path}: {error}", RuntimeWarning, stacklevel=3)


@dataclass(frozen=True)
class _Geometry:
    """Sizes of the tiled band layout (module docstring) for one-sided window `half`."""

    half: int
    head_dim: int

    @property
    def width(self) -> int:
        return 2 * self.half + 1

    @property
    def span(self) -> int:
        return -(-(_TILE + self.width - 1) // _LANES) * _LANES

    def tiles(self, n: int) -> int:
        return -(-n // _TILE)

    def frame(self, n: int) -> int:
        return (self.tiles(n) - 1) * _TILE + self.span

    def key_tiles(self, n: int) -> int:
        return -(-(self.half + n) // _TILE)


def _exp(x, dtype: str):
    """exp for float32 as a vectorisable polynomial (Cephes expf, ~1 ulp); LLVM would scalarise ``llvm.exp``."""
    from tvm import tirx

    if dtype != "float32":
        return tirx.exp(x)

    def c(value):
        return tirx.const(value, "float32")

    x = tirx.max(tirx.min(x, c(88.3762626647950)), c(-88.3762626647949))
    power = tirx.floor(x * c(1.44269504088896341) + c(0.5))
    r = x - power * c(0.693359375) + power * c(2.12194440e-4)
    poly = ((((c(1.9875691500e-4) * r + c(1.3981999507e-3)) * r + c(8.3334519073e-3)) * r + c(4.1665795894e-2)) * r
            + c(1.6666665459e-1)) * r + c(5.0000001201e-1)
    mantissa = poly * r * r + r + c(1.0)
    return mantissa * tirx.reinterpret("float32", tirx.shift_left(tirx.Cast("int32", power) + 127, 23))


@dataclass(frozen=True)
class _Definition:
    """One kernel: its TE arguments and the blocks its schedule arranges."""

    arguments: list
    anchor: str
    producers: tuple[str, ...] = ()
    consumers: tuple[str, ...] = ()


class _Builder:
    """TE graphs of the kernels over the tiled band layout (module docstring), one `_Builder` per kernel."""

    def __init__(self, te, geometry: _Geometry, dtype: str):
        from tvm import tirx

        self.te, self.tirx, self.geometry, self.dtype = te, tirx, geometry, dtype
        self.scale = 1.0 / math.sqrt(geometry.head_dim)
        self.zero, self.ninf = tirx.const(0.0, dtype), tirx.const(-math.inf, dtype)
        self.bh, self.n, self.nt, self.frame, self.nb, self.heads, self.gq, self.nk, self.count = (
            te.var(name, "int64") for name in ("bh", "n", "nt", "frame", "nb", "heads", "gq", "nk", "count"))
        self.slots = self.gq * _LANES
        self.tiles = (self.bh, self.nt, _TILE, geometry.span)
        self.tile_slots = (self.bh, self.nt, _TILE, self.slots)
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
        """Row maxima of the kept scores as (b, u, r) -> scale * max, 0 for rows without a key."""
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
        """E = exp(scale * score - row max) over band ++ globals, 0 where masked, and 1 / row sum of E."""
        te, tirx, scale = self.te, self.tirx, self.scale
        kept = te.compute(self.tiles, lambda b, u, r, c: tirx.Select(
            self.band_ok(masks, b, u, r, c), band[b, u, r, c] * scale, self.ninf), name="KB")
        kept_slots = te.compute(self.tile_slots, lambda b, u, r, s: tirx.Select(
            self.slot_ok(masks, b, u, r, s), slots[b, u, r, s] * scale, self.ninf), name="KG")
        mb, mg = self.reduce_rows("M", te.max, lambda b, u, r, c: kept[b, u, r, c],
                                  lambda b, u, r, s: kept_slots[b, u, r, s])

        def shift(b, u, r):
            return tirx.max(mb[b, u, r], mg[b, u, r])

        eb = te.compute(self.tiles, lambda b, u, r, c: _exp(kept[b, u, r, c] - shift(b, u, r), self.dtype),
                        name="EB")
        eg = te.compute(self.tile_slots, lambda b, u, r, s: _exp(kept_slots[b, u, r, s] - shift(b, u, r), self.dtype),
                        name="EG")
        zb, zg = self.reduce_rows("Z", te.sum, lambda b, u, r, c: eb[b, u, r, c], lambda b, u, r, s: eg[b, u, r, s])

        def inverse(b, u, r):
            total = zb[b, u, r] + zg[b, u, r]
            return tirx.Select(total > 0, tirx.const(1.0, self.dtype) / total, self.zero)

        return eb, eg, inverse

    def attend(self) -> _Definition:
        """Per row tile: band and global scores, softmax, O = (E_band V_band + E_global V_global) / Z."""
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
        out = te.compute(rows, lambda b, u, r, e: (ob[b, u, r, e] + og[b, u, r, e]) * inverse(b, u, r), name="O")
        return _Definition([q, kt, vf, kgt, vg, *masks, out, self.heads, self.gq], "O")

    def softmax_fwd(self) -> _Definition:
        """Unfused softmax (the backward's recomputation of P): band tiles and (bh, n, slots) scores -> P."""
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

        def log_sum_exp(b, u, r):
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

    def frame_rows(self, transposed: bool = False) -> _Definition:
        """XF[b, j] = X[b, j - offset] inside [0, n), else 0 (the frame: offset h); `transposed`: XT[b, e, j]."""
        tirx, D = self.tirx, self.geometry.head_dim
        x, offset = self.tensor((self.bh, self.n, D), "X"), self.te.var("offset", "int64")

        def value(b, j, e):
            i = j - offset
            return tirx.Select(tirx.all(i >= 0, i < self.n), x[b, tirx.max(tirx.min(i, self.n - 1), 0), e], self.zero)

        out = (self.te.compute((self.bh, D, self.frame), lambda b, e, j: value(b, j, e), name="XT") if transposed
               else self.te.compute((self.bh, self.frame, D), value, name="XF"))
        return _Definition([x, out, offset], out.op.name)

    def gather_rows(self, transposed: bool = False) -> _Definition:
        """XG[b, s] = X[b, index[b // heads, s]]: the global tokens' rows; `transposed`: XGT[b, e, s], the keys."""
        D = self.geometry.head_dim
        x, index = self.tensor((self.bh, self.n, D), "X"), self.te.placeholder((self.nb, self.count), "int64",
                                                                               name="INDEX")

        def value(b, s, e):
            return x[b, index[b // self.heads, s], e]

        out = (self.te.compute((self.bh, D, self.count), lambda b, e, s: value(b, s, e), name="XGT") if transposed
               else self.te.compute((self.bh, self.count, D), value, name="XG"))
        return _Definition([x, index, out, self.heads], out.op.name)

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
        """The transposed band G^T Y in frame tiles: tile v's entries sit at (u, r, c) = (v - k, r, k*R + s)."""
        te, tirx, R, D = self.te, self.tirx, _TILE, self.geometry.head_dim
        g, y = self.tensor(self.tiles, "G"), self.tensor((self.bh, self.n, D), "Y")
        k, r = te.reduce_axis((0, self.geometry.span // R), "k"), te.reduce_axis((0, R), "r")

        def transposed(b, v, s, e):
            u = tirx.max(tirx.min(v - k, self.nt - 1), 0)
            inside = tirx.all(v - k >= 0, v - k < self.nt)
            return te.sum(tirx.Select(inside, g[b, u, r, k * R + s] * y[b, self.row(u, r), e], self.zero), axis=[k, r])

        return _Definition([g, y, te.compute((self.bh, self.nk, R, D), transposed, name="X")], "X")


def _micro_kernel(sch, block: str, rows: int, columns: int, lanes: int) -> None:
    """Register-blocked matmul: `rows` x `columns` outputs in registers while the reduction runs outside them."""
    count = _reductions(sch, block)
    *_, r, x = sch.get_loops(block)[:-count]
    reductions = sch.get_loops(block)[-count:]
    r_outer, r_inner = sch.split(r, [None, rows])
    x_outer, x_inner = sch.split(x, [None, columns])
    vectors, lane = sch.split(x_inner, [None, lanes])
    sch.reorder(r_outer, x_outer, *reductions, r_inner, vectors, lane)
    sch.unroll(r_inner)
    sch.unroll(vectors)
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
    """Split each row reduction into _LANES vectorised partial lanes and a final sum (before any compute_at)."""
    partial = {}
    for name in names:
        _, lanes = sch.split(sch.get_loops(name)[-1], [None, _LANES])
        partial[name] = sch.rfactor(lanes, 3)
    return partial


def _compute_at(sch, names, partial: dict, loop) -> None:
    """compute_at `names` (consumers first) under `loop`, vectorising partial lanes and elementwise columns."""
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
    """Row tiles in parallel, every stage of a tile computed at the tile (in cache, never in memory)."""
    partial = _rfactor_rows(sch, ("ZB", "ZG", "MB", "MG"))
    b, u, _, _ = sch.get_loops("O")
    tile = sch.fuse(b, u)
    sch.parallel(tile)
    _vectorize_last(sch, "O")
    _compute_at(sch, ("OG", "OB", "ZG", "ZB", "EG", "EB", "MG", "MB", "KG", "KB", "SG", "SB"), partial, tile)
    _schedule_cpu_products(sch, geometry, unit, {"OB": "head", "OG": "head", "SB": "span", "SG": "slots"})
    sch.reverse_compute_inline("KB")
    sch.reverse_compute_inline("KG")


def _schedule_cpu_products(sch, geometry: _Geometry, unit: _VectorUnit, blocks: dict) -> None:
    """Micro-kernel shapes measured on AVX-512 and AVX2 (docs/kernels.md): 4 rows, half the registers."""
    lanes, accumulators = unit.lanes, unit.registers // 2
    head_lanes = math.gcd(geometry.head_dim, lanes)
    vectors = geometry.head_dim // head_lanes
    if lanes == _LANES:
        head = (max(r for r in (1, 2, 4, 8, 16) if r * vectors <= max(accumulators, vectors)), geometry.head_dim)
    else:
        head = (4, head_lanes * max(v for v in (1, 2, 4, 8) if v <= accumulators // 4 and vectors % v == 0))
    span_vectors = geometry.span // lanes
    slot_vectors = _LANES // lanes
    span_columns = lanes * max(v for v in (1, 2, 3) if span_vectors % v == 0)
    shapes = {"head": (*head, head_lanes), "span": (4, span_columns, lanes),
              "slots": (accumulators // slot_vectors, _LANES, lanes)}
    for block, kind in blocks.items():
        _micro_kernel(sch, block, *shapes[kind])


def _reductions(sch, block: str) -> int:
    from tvm.tirx import IterVar

    return sum(iv.iter_type == IterVar.CommReduce for iv in sch.get(sch.get_sblock(block)).iter_vars)


_MOVES = ("frame_rows", "frame_cols", "gather_rows", "gather_cols")
_KERNEL_NAMES = ("attend", "band_qk", "softmax_fwd", "band_pv", "band_tpv", "softmax_bwd", *_MOVES)


def _scheduled(tvm, te, name: str, geometry: _Geometry, dtype: str, unit: _VectorUnit):
    from tvm.tirx import IntImm

    builder = _Builder(te, geometry, dtype)
    definition = (getattr(builder, name.replace("_cols", "_rows"))(transposed=name.endswith("_cols"))
                  if name in _MOVES else getattr(builder, name)())
    sch = tvm.s_tir.Schedule(te.create_prim_func(definition.arguments, index_dtype_override="int64"))
    if name == "attend":
        _schedule_cpu_attend(sch, geometry, unit)
    elif definition.producers:  # row-fused softmax: rows in parallel, a row's reductions at the row, outputs after
        partial = _rfactor_rows(sch, definition.producers)
        row = sch.fuse(*sch.get_loops(definition.anchor))
        sch.parallel(row)
        _compute_at(sch, definition.producers, partial, row)
        for consumer in definition.consumers:
            sch.reverse_compute_at(consumer, row)
            _vectorize_last(sch, consumer)
    elif name in _MOVES:  # data movement: parallel over the outer two axes, the head dimension vectorised if innermost
        outer, middle, inner = sch.get_loops(definition.anchor)
        sch.parallel(sch.fuse(outer, middle))
        if isinstance(sch.get(inner).extent, IntImm):
            _, lane = sch.split(inner, [None, math.gcd(geometry.head_dim, _LANES)])
            sch.vectorize(lane)
    else:  # a standalone product: parallel over (batch*heads, tiles), a micro-kernel per tile
        b, u, *_ = sch.get_loops(definition.anchor)
        sch.parallel(sch.fuse(b, u))
        _schedule_cpu_products(sch, geometry, unit, {definition.anchor: "span" if name == "band_qk" else "head"})
    return sch.mod["main"].with_attr("global_symbol", name)


def _compile(tvm, te, target, geometry: _Geometry, dtype: str):
    try:
        unit = _vector_unit(target)
        functions = {name: _scheduled(tvm, te, name, geometry, dtype, unit) for name in _KERNEL_NAMES}
        module = tvm.compile(tvm.IRModule(functions), target=target)
    except Exception as error:
        lines = [line for line in str(error).splitlines() if line.strip()]
        raise KernelUnavailableError(
            f"TVM {tvm.__version__} failed to compile the QDS band kernels (h={geometry.half}, "
            f"head_dim={geometry.head_dim}, {dtype}) for {target}: {type(error).__name__}: "
            f"{lines[-1][:500] if lines else ''}; {_FALLBACK}") from error
    STATS["compiled"] += 1
    return module


class _Kernels:
    """The compiled functions of one shape family, called on torch tensors (zero-copy through DLPack)."""

    def __init__(self, module, geometry: _Geometry):
        self.module, self.geometry = module, geometry
        self.functions = {name: module[name] for name in _KERNEL_NAMES}

    def _frame(self, x: Tensor, transposed: bool = False) -> Tensor:
        """(BH, N, D) -> (BH, frame, D), row j at j + h, zeros elsewhere; `transposed`: (BH, D, frame)."""
        bh, n, head_dim = x.shape
        length = self.geometry.frame(n)
        name, shape = ("frame_t", (bh, head_dim, length)) if transposed else ("frame", (bh, length, head_dim))
        out = self._scratch(name, x, shape)
        self.functions["frame_cols" if transposed else "frame_rows"](x, out, self.geometry.half)
        return out

    def _scratch(self, name: str, x: Tensor, shape: tuple[int, ...]) -> Tensor:
        """A buffer kept per thread and reused while its shape repeats (a fresh one page-faults on every call)."""
        key = (shape, x.dtype)
        buffers = _SCRATCH.__dict__.setdefault(name, {})
        if key not in buffers:
            buffers.clear()
            buffers[key] = x.new_empty(shape)
        return buffers[key]

    def _gather(self, x: Tensor, index: Tensor, heads: int, transposed: bool = False) -> Tensor:
        """Rows index[b // heads] of (BH, N, D) -> (BH, S, D), or (BH, D, S) `transposed`."""
        bh, _, head_dim = x.shape
        shape = (bh, head_dim, index.shape[1]) if transposed else (bh, index.shape[1], head_dim)
        out = x.new_empty(shape)
        self.functions["gather_cols" if transposed else "gather_rows"](x, index, out, heads)
        return out

    def attend(self, q: Tensor, k: Tensor, v: Tensor, k_global_t: Tensor, v_global: Tensor, layout: _GlobalLayout,
               shape: torch.Size) -> Tensor:
        """The ordinary rows (global rows left to the caller): (BH, N, D) q, k, v -> (B, H, N, D) `shape`."""
        bh, n, head_dim = q.shape
        rows = q.new_empty(*shape[:2], self.geometry.tiles(n) * _TILE, head_dim)  # (B, H, nt * R, D)
        self.functions["attend"](q, self._frame(k, transposed=True), self._frame(v), k_global_t, v_global,
                                 layout.key_ok, layout.row_ok, layout.global_ok, rows.view(bh, -1, _TILE, head_dim),
                                 shape[1], k_global_t.shape[2] // _LANES)
        return rows if n % _TILE == 0 else rows[:, :, :n].clone(memory_format=torch.contiguous_format)  # not a view

    def band_qk(self, a: Tensor, b: Tensor) -> Tensor:
        """(BH, N, D) x (BH, N, D) -> band tiles: a[:, i] . b[:, j] for the keys j of row i's band."""
        n = a.shape[1]
        out = a.new_empty(a.shape[0], self.geometry.tiles(n), _TILE, self.geometry.span)
        self.functions["band_qk"](a, self._frame(b, transposed=True), out)
        return out

    def band_pv(self, p: Tensor, x: Tensor) -> Tensor:
        """Band tiles x (BH, N, D) -> (BH, N, D): O[:, i] = sum over row i's band of p * x[:, j]."""
        bh, n, head_dim = x.shape
        rows = x.new_empty(bh, self.geometry.tiles(n) * _TILE, head_dim)
        self.functions["band_pv"](p, self._frame(x), rows.view(bh, -1, _TILE, head_dim))
        return rows[:, :n]

    def band_tpv(self, g: Tensor, y: Tensor) -> Tensor:
        """Band tiles x (BH, N, D) -> (BH, N, D): X[:, j] = sum over the rows i whose band holds j of g * y[:, i]."""
        bh, n, head_dim = y.shape
        geo = self.geometry
        frame = y.new_empty(bh, geo.key_tiles(n), _TILE, head_dim)
        self.functions["band_tpv"](g, y, frame)
        return frame.view(bh, -1, head_dim)[:, geo.half:geo.half + n]

    def softmax_fwd(self, s: Tensor, sg: Tensor, layout: _GlobalLayout, heads: int) -> tuple[Tensor, Tensor]:
        """Band tiles and (BH, N, Gp) scores -> probabilities (band tiles, (BH, nt * R, Gp))."""
        bh, nt = s.shape[:2]
        lse = s.new_empty(bh, nt, _TILE)
        p, pg = torch.empty_like(s), s.new_empty(bh, nt, _TILE, sg.shape[2])
        self.functions["softmax_fwd"](s, sg, layout.key_ok, layout.row_ok, layout.global_ok, lse, p, pg, heads,
                   sg.shape[2] // _LANES)
        return p, pg.view(bh, nt * _TILE, -1)

    def softmax_bwd(self, p: Tensor, pg: Tensor, dp: Tensor, dpg: Tensor) -> tuple[Tensor, Tensor]:
        """Band tiles and (BH, nt * R, Gp) probabilities, their gradients -> scaled score gradients, same layouts."""
        bh, nt = p.shape[:2]
        rowdot = p.new_empty(bh, nt, _TILE)
        ds, dsg = torch.empty_like(p), torch.empty_like(pg)
        self.functions["softmax_bwd"](p, pg.view(bh, nt, _TILE, -1), dp, dpg, rowdot, ds, dsg.view(bh, nt, _TILE, -1),
                   pg.shape[2] // _LANES)
        return ds, dsg


@dataclass(frozen=True)
class _GlobalLayout:
    """Masks and global-token slots of a batch, shared by every head and layer (`common.kernels.layouts`)."""

    key_ok: Tensor  # (B, frame): the key at each frame position is in range, valid and not global
    row_ok: Tensor  # (B, nt * R): ordinary valid rows (global, padded and tile-padding rows are not)
    global_ok: Tensor  # (B, Gp): the slot holds a valid global token
    index: Tensor  # (B, Gp) long: positions of the slots
    tokens: GlobalTokens  # the valid global tokens, T in all
    rows_slot: Tensor  # (T,): the slot of each
    rows_mask: Tensor | None  # (B, 1, G, N) bool: the keys of the global rows' SDPA, None where all are valid

    @staticmethod
    def build(is_global: Tensor, key_padding_mask: Tensor | None, geometry: _Geometry, dtype) -> _GlobalLayout:
        (batch, n), device = is_global.shape, is_global.device
        tokens = global_tokens_of(is_global, key_padding_mask)
        valid, counts = tokens.valid, tokens.counts
        ordinary = (valid & ~is_global).to(dtype)
        key_ok = is_global.new_zeros(batch, geometry.frame(n), dtype=dtype)
        key_ok[:, geometry.half:geometry.half + n] = ordinary
        row_ok = F.pad(ordinary, (0, geometry.tiles(n) * _TILE - n))
        slots = max(_LANES, -(-tokens.widest // _LANES) * _LANES)
        order = tokens.order[:, :slots]
        global_ok = torch.arange(slots, device=device)[None] < counts[:, None]
        index = torch.where(global_ok, F.pad(order, (0, slots - order.shape[1])), 0)
        rows_slot = torch.arange(tokens.total, device=device) - (torch.cumsum(counts, 0) - counts)[tokens.batch]
        slot_ok = global_ok[:, :tokens.widest]  # (B, G)
        rows_mask = None
        if tokens.padded or tokens.fewest < tokens.widest:
            # Empty slots may see key 0 too: no row is left without keys (NaN), and their outputs are dropped.
            rows_mask = (valid[:, None, :] | (~slot_ok[:, :, None] & (torch.arange(n, device=device) == 0)))[:, None]
        return _GlobalLayout(key_ok, row_ok, global_ok.to(dtype), index, tokens, rows_slot, rows_mask)


class _BandAttention(torch.autograd.Function):
    """Ordinary rows: softmax over [band ++ global keys] with the TVM kernels, forward and backward."""

    @staticmethod
    def forward(ctx, q, k, v, k_global, v_global, layout: _GlobalLayout, kernels: _Kernels):
        q3, k3, v3, kg3, vg3 = _flat(q, k, v, k_global, v_global)
        out = kernels.attend(q3, k3, v3, kg3.transpose(1, 2).contiguous(), vg3, layout, q.shape)
        ctx.save_for_backward(q, k, v, k_global, v_global)
        ctx.layout, ctx.kernels = layout, kernels
        return out

    @staticmethod
    def backward(ctx, grad):
        with torch.autocast(grad.device.type, enabled=False):
            q, k, v, k_global, v_global = ctx.saved_tensors
            kernels, n = ctx.kernels, q.shape[2]
            q3, k3, v3, kg3, vg3, g3 = _flat(q, k, v, k_global, v_global, grad.contiguous())
            p, pg = kernels.softmax_fwd(kernels.band_qk(q3, k3), torch.bmm(q3, kg3.transpose(1, 2)), ctx.layout,
                                        q.shape[1])
            dp = kernels.band_qk(g3, v3)
            dpg = torch.bmm(g3, vg3.transpose(1, 2))  # (BH, N, Gp)
            ds, dsg = kernels.softmax_bwd(p, pg, dp, dpg)
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


def _global_rows(q, k, v, layout: _GlobalLayout) -> Tensor:
    """(T, H, D) outputs of the valid global tokens by SDPA over every valid key (q, k, v: their projections)."""
    batch, heads, n, head_dim = q.shape
    index = layout.index[:, :layout.tokens.widest]  # (B, G): the padding slots of the kernels are not needed here
    queries = q.gather(2, index[:, None, :, None].expand(batch, heads, -1, head_dim))  # (B, H, G, D)
    out = F.scaled_dot_product_attention(queries, k, v, attn_mask=layout.rows_mask)  # (B, H, G, D)
    return out.transpose(1, 2)[layout.tokens.batch, layout.rows_slot]
