"""What a representation store will take on disk, told before it is built, and whether the disk has room for it.

`estimate_store` encodes a seeded sample (`SAMPLE`, ``numpy.random.default_rng(0)``) with the build's encoder and
scales its rows' bytes to the collection, adding the shard indexes, id tables, plan and manifest as they will be
written. `free_space`, `written_bytes` and `format_bytes` serve the index commands, which print the estimate and refuse
in one line where it does not fit. Imports numpy alone.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from common.stores.representations import FORMATS, shard_files
from common.stores.rows import row_dtype

if TYPE_CHECKING:
    from collections.abc import Sequence

    from common.stores.writer import Representation

#: Documents encoded to estimate a store's rows (all of them where the collection has fewer).
SAMPLE = 1000


def sample_positions(documents: int, sample: int = SAMPLE, seed: int = 0) -> np.ndarray:
    """The sorted positions of `sample` of `documents`, drawn without replacement with ``default_rng(seed)``."""
    if documents <= sample:
        return np.arange(documents)
    return np.sort(np.random.default_rng(seed).choice(documents, size=sample, replace=False))


def format_bytes(size: float) -> str:
    """``512 bytes``, ``17.58 MiB``, ``1.23 GiB``: binary units, two decimals past bytes."""
    if size < 1024:
        return f"{size:,.0f} bytes"
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024:
            return f"{size:,.2f} {unit}"
    return f"{size / 1024:,.2f} TiB"


def free_space(path: str | os.PathLike) -> tuple[Path, int]:
    folder = Path(os.path.abspath(path))
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        folder = folder.parent
    return folder, shutil.disk_usage(folder).free


def written_bytes(folder: str | os.PathLike) -> int:
    folder = Path(folder)
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) if folder.is_dir() else 0


def npy_bytes(dtype, shape: tuple[int, ...]) -> int:
    """The size of the ``.npy`` file ``numpy.save`` writes of an array of `dtype` and `shape`: its header and data."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                  "fortran_order": False, "shape": tuple(shape)})
    return header.tell() + math.prod(shape) * np.dtype(dtype).itemsize


def json_bytes(value, indent: int = 1) -> int:
    """The size of `value` as `common.stores.representations` writes JSON: ``indent=1``, UTF-8, a final newline."""
    return len(json.dumps(value, indent=indent, ensure_ascii=False).encode("utf-8")) + 1


@dataclass(frozen=True)
class StoreEstimate:

    documents: int
    sample: int
    mean_rows: float
    width: int
    dtype: str
    rows_bytes: int
    other_bytes: int

    @property
    def bytes(self) -> int:
        return self.rows_bytes + self.other_bytes

    def describe(self) -> str:
        """``1.23 GiB (3,000 documents x mean 48.0 rows x width 32 x 4 bytes, from a sample of 1,000)``; int8 rows:
        ``x (width 32 + a 4-byte scale) bytes``."""
        if self.dtype == "int8":
            row = f"(width {self.width} + a 4-byte scale) bytes"
        else:
            row = f"width {self.width} x {np.dtype(self.dtype).itemsize} bytes"
        return (f"{format_bytes(self.bytes)} ({self.documents:,} documents x mean {self.mean_rows:,.1f} rows x {row}, "
                f"from a sample of {self.sample:,})")


def estimate_store(representation: Representation, encoder, documents, doc_ids: Sequence[str], *,
                   dtype: str = "float32", shard_size: int = 1000, sample: int = SAMPLE, seed: int = 0,
                   batch_size: int = 128) -> StoreEstimate:
    """The estimated size of the store `common.stores.writer.build_representations` would build."""
    positions = sample_positions(len(doc_ids), sample, seed)
    counts = []  # the rows `representation` keeps of each sampled document, from `encoder`'s token masks
    for start in range(0, len(positions), batch_size):
        docs = documents.get_many([doc_ids[i] for i in positions[start : start + batch_size].tolist()])
        counts.append(np.asarray(representation.rows(encoder.documents(docs)["doc_mask"]).cpu(), dtype=np.int64))
    rows = np.concatenate(counts) if counts else np.zeros(0, dtype=np.int64)
    n, width, name = len(doc_ids), representation.width, np.dtype(dtype).name
    row_bytes = row_dtype(name, width).itemsize  # width x the float's bytes, or int8's width + 4
    mean_rows = float(rows.mean()) if len(rows) else 0.0
    rows_bytes = round(n * mean_rows * row_bytes)
    id_bytes = np.fromiter((len(doc_id.encode("utf-8")) for doc_id in doc_ids), dtype=np.int64, count=n)
    other = (npy_bytes(f"S{max(int(id_bytes.max(initial=0)), 1)}", (n,)) + npy_bytes(np.int64, (n, 3))
             + int(id_bytes.sum()))
    typical = [int(r) for r in rows] or [0]
    full, last = divmod(n, shard_size)
    entries = []
    for count, size in ((full, shard_size), (1 if last else 0, last)):
        if not count:
            continue
        shard_rows = [typical[j % len(typical)] for j in range(size)]
        offsets = np.cumsum([0, *shard_rows[:-1]]).tolist()
        shard_bytes = sum(shard_rows) * row_bytes
        other += count * json_bytes({"shard": full, "doc_ids": [""] * size, "offsets": offsets, "rows": shard_rows,
                                     "bytes": shard_bytes, "sha256": "0" * 64})
        rows_file, index_file = shard_files(full)
        entries += [{"file": rows_file, "index": index_file, "documents": size, "rows": sum(shard_rows),
                     "bytes": shard_bytes, "sha256": "0" * 64}] * count
    plan = {"format": FORMATS[name], "width": width, "dtype": name, "shard_size": shard_size, "documents": n,
            "doc_ids_sha256": "0" * 64, "identity": {"checkpoint": "0" * 64, "strategy": representation.strategy},
            "extra": representation.extra}
    other += json_bytes(plan) + json_bytes({**plan, "shards": entries, "rows": round(n * mean_rows),
                                            "bytes": rows_bytes, "bytes_per_document": rows_bytes / max(n, 1)})
    return StoreEstimate(n, len(rows), mean_rows, width, name, rows_bytes, other)
