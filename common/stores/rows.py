"""How a representation store (`common.stores.representations`) lays one row (a token's or timestep's vector of
``width`` floats) out on disk, by the store's ``dtype``, and how it is read back as floats.

- ``float32``, ``float16``: ``width`` raw little-endian floats, read as they are.
- ``int8``: one little-endian float32 scale, then ``width`` int8 codes: ``width + 4`` bytes a row, against fp32's
  ``4·width`` (0.254 of it at width 256, MVA²'s [D_K | D_V] of 2 x 2 x 64; 0.251 at EARL S1's 768). Symmetric absmax
  quantisation, one scale per row: scale = max|x| / 127, code = round(x / scale) (``numpy.rint``, half to even), x
  read back as code x scale in float32, each value within scale / 2 of the float written (a row of zeros: scale 0,
  codes 0, read back exactly). A query's candidates are dequantised batch by batch as they are read
  (`decode_into`), never the whole store.

What the field does: ColBERTv2 (Santhanam et al. 2022, "ColBERTv2: Effective and Efficient Retrieval via Lightweight
Late Interaction") stores each token vector as the id of its nearest centroid (k-means over the collection's vectors)
and a residual quantised to 1 or 2 bits a dimension; PLAID (Santhanam et al. 2022, "PLAID: An Efficient Engine for
Late Interaction Retrieval") scores from that store, decompressing through the centroids. Neither EARL (Gao, Dai,
Callan 2020) nor MVA (Zhou and Devlin 2021) compresses what it stores: EARL keeps S1's D and S2's D' as computed, MVA's
Table 5 counts the floats stored.

The choices, where no paper of this repository says:

- Absmax int8 rather than ColBERTv2's residuals: no pass over the collection to fit centroids before the first shard
  can be written (a store is built shard by shard, in any order, by any number of processes, and resumed), no
  codebook to keep beside the store and to match to it, and a row is read back with one multiply; 4x fewer bytes
  than fp32 rather than ColBERTv2's 6-10x.
- One scale per row, not per store or per column: rows differ in norm from token to token, and a shared scale is set
  by the largest rows, leaving the small ones few codes; a row's own scale costs 4 bytes (1.6% at width 256).
- Symmetric, no zero point: the rows stored here (encoder outputs and their linear projections) hold values of both
  signs, and a zero point would cost 4 more bytes a row and an add per value read. Codes span -127..127, not -128, so
  that the grid is symmetric.
- The scale as float32, not fp16: its range and precision are fp32's, for 2 bytes more a row.
- The scale in front of its row, not in a second file: a shard stays one file (its atomic write, size, checksum,
  resumption and verification as for the float rows), memory-mapped as an array of (scale, codes) records, and a
  candidate's read touches one place of it rather than two.
- Rows holding a value that is not finite are refused: absmax has no scale for them.

Imports numpy alone.
"""

from __future__ import annotations

import numpy as np

#: The largest code: codes span -127..127.
CODE_MAX = 127


def row_dtype(dtype: str, width: int) -> np.dtype:
    """One stored row's numpy type: `width` little-endian floats (an array of `n` of them has shape (n, width)), or
    int8's record of ``scale`` (float32) and ``codes`` (`width` int8)."""
    if dtype == "int8":
        return np.dtype([("scale", "<f4"), ("codes", "i1", (width,))])
    return np.dtype((np.dtype(dtype).newbyteorder("<"), (width,)))


def float_dtype(dtype: str) -> np.dtype:
    """The floats a store's rows are read back as: their own for float rows, float32 for int8's."""
    return np.dtype(np.float32 if dtype == "int8" else dtype)


def encode(matrix, dtype: str) -> np.ndarray:
    """A document's (rows, width) floats as `dtype` rows: (rows, width) little-endian floats, or int8's (rows,)
    records (scale = max|x| / 127 and codes = round(x / scale) of each row, computed in float32)."""
    if dtype != "int8":
        return np.ascontiguousarray(matrix, dtype=np.dtype(dtype).newbyteorder("<"))
    values = np.asarray(matrix, dtype=np.float32)  # (rows, width)
    if not np.isfinite(values).all():
        raise ValueError("int8 rows quantise finite values only; this matrix holds inf or nan")
    scale = np.abs(values).max(axis=1, initial=0.0) / np.float32(CODE_MAX)  # (rows,) float32
    rows = np.empty(len(values), dtype=row_dtype("int8", values.shape[1]))
    rows["scale"] = scale
    rows["codes"] = np.rint(np.divide(values, scale[:, None], out=np.zeros_like(values), where=scale[:, None] > 0))
    return rows


def decode_into(stored: np.ndarray, out: np.ndarray) -> None:
    """Write `stored` rows (`encode`'s, or a store's view of them) into `out`, (len(stored), width) of any float type:
    float rows copied (and cast), int8's codes x scale computed in float32. The codes are cast into `out` first (every
    float type holds -127..127 exactly) and scaled there: the same values as ``np.multiply(codes, scale)``, without
    its buffered mixed-type loop (about 1.5x faster on a query's candidates)."""
    if stored.dtype.names:
        np.copyto(out, stored["codes"])
        np.multiply(out, stored["scale"][:, None], out=out, dtype=np.float32)
    else:
        np.copyto(out, stored)
