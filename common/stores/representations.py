"""Per-document matrices computed once, offline, and read back at query time: EARL's precomputed document
representations (Gao, Dai, Callan 2020) and MVA's stored token vectors.

A store is a folder: ``plan.json`` (width, dtype, shard size, documents, ``identity``), ``shard-NNNNN.bin`` (its
documents' rows one after another, each laid out as `common.stores.rows` says for the dtype: float32 or float16 raw,
int8 codes after their row's scale) with its ``.index.json``, ``ids.npy``/``locations.npy`` (sorted ids,
binary-searched) and ``manifest.json``, written last. Every file is written atomically; a build resumes only with its
own plan (`StoreMismatchError`); opening checks the identity (``expect``). Shards stay memory-mapped, the soft
``RLIMIT_NOFILE`` raised toward the hard one, least recently used maps let go past it. `RepresentationStore.padded`
and `read_into` give a query's candidates as floats, int8 rows dequantised batch by batch.

Reading ahead: a query's candidates scatter over the store, each one contiguous range of its shard. Touched one after
another through the memory map, each costs a page fault that waits for the disk (and the fault's read-around brings in
up to 128 KiB of neighbours whatever the document's size). `get_many` therefore first advises the kernel of every
candidate's exact byte range (``madvise(MADV_WILLNEED)``, page-aligned): the reads are queued together, the disk
serves them side by side, and the copies that follow find most pages already in. A document is then one request
whatever its dtype: int8 shortens the read of a document of many pages, not of one of a page or two. Where
``madvise`` is missing (not Linux or macOS) the rows are read by page faults alone; the values read are the same.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from common.io import atomic_write, file_sha256
from common.refusals import output_folder_problem
from common.stores.rows import decode_into, encode, float_dtype, row_dtype

#: The layout each row type is written in and read from; a store of another version is refused, not misread. Float
#: rows are format 2's; int8 rows (`common.stores.rows`) are format 3, which a reader of format 2 refuses rather than
#: take their width + 4 bytes a row for width int8 values.
FORMATS = {"float32": 2, "float16": 2, "int8": 3}
PLAN, MANIFEST = "plan.json", "manifest.json"
#: The sorted doc ids and each one's (position, first row, rows), written when every shard is.
IDS, LOCATIONS = "ids.npy", "locations.npy"
DTYPES = tuple(FORMATS)
#: Identity keys every store records: without them a store cannot tell what it was built from.
REQUIRED_IDENTITY = ("checkpoint", "strategy")
#: File descriptors left to the rest of the process when a reader decides how many shards it keeps mapped.
SPARE_DESCRIPTORS = 512
#: ``madvise``'s read-ahead advice, None where the platform has none (the rows are then read by page faults alone).
_MADV_WILLNEED = getattr(mmap, "MADV_WILLNEED", None)
#: The temporary files `atomic_write` leaves of this module's files when killed (``.<name>.<random>.tmp``).
_TEMPORARY = re.compile(r"\.(plan\.json|manifest\.json|ids\.npy|locations\.npy|shard-\d+\.(bin|index\.json))\..+\.tmp")


#: The sha256 (hex) of a checkpoint file: a store's ``identity["checkpoint"]``.
checkpoint_hash = file_sha256


class StoreMismatchError(ValueError):
    """A store (or an unfinished one to resume) built from something other than what the caller needs."""


class CorruptStoreError(ValueError):
    """A store's files that do not agree with its manifest: changed, truncated or damaged."""


class MissingRepresentationError(KeyError):
    """A document id that a store holds no representation of."""

    def __str__(self) -> str:
        return str(self.args[0])


def shard_files(shard: int) -> tuple[str, str]:
    return f"shard-{shard:05d}.bin", f"shard-{shard:05d}.index.json"


def store_output_problem(folder: str | os.PathLike, resume: bool = False) -> str | None:
    """What keeps a store from being built into `folder`, or None, for a command line to check before it runs."""
    folder = Path(folder)
    if problem := output_folder_problem(folder):
        return problem
    if (folder / MANIFEST).exists():
        return f"{folder} already holds a finished store; open it, or choose a new folder"
    if (folder / PLAN).exists():
        return None if resume else f"{folder} holds an unfinished store; resume it, or choose a new folder"
    if folder.is_dir() and any(not _TEMPORARY.fullmatch(entry.name) for entry in folder.iterdir()):
        return f"{folder} is not empty; choose a new folder"
    return None


class StoreWriter:
    """Builds a store into `folder` shard by shard, in any order, from any number of processes."""

    def __init__(self, folder: str | os.PathLike, *, doc_ids: Sequence[str], width: int, dtype: str,
                 shard_size: int, identity: dict, extra: dict | None = None, resume: bool = False,
                 verify: bool = False):
        self.folder = Path(folder)
        if problem := store_output_problem(self.folder, resume):
            raise ValueError(problem)
        self.doc_ids = list(doc_ids)
        self.plan = _plan(self.doc_ids, width, dtype, shard_size, identity, extra)
        self.shard_size, self.width = shard_size, width
        self._row = row_dtype(self.plan["dtype"], width)
        self.num_shards = -(-len(self.doc_ids) // shard_size)
        self._done: set[int] = set()
        self._planned = False
        if (self.folder / PLAN).exists():
            _check_plan(self.folder, _read_json(self.folder / PLAN), self.plan)
            self._planned = True
            self._done = {i for i in range(self.num_shards) if self._shard_is_whole(i, checksum=verify)}

    def shard_doc_ids(self, shard: int) -> list[str]:
        if not 0 <= shard < self.num_shards:
            raise IndexError(f"{self.folder} has shards 0 to {self.num_shards - 1}, not {shard}")
        return self.doc_ids[shard * self.shard_size : (shard + 1) * self.shard_size]

    def pending(self) -> list[int]:
        return [i for i in range(self.num_shards) if i not in self._done]

    def write_shard(self, shard: int, arrays: Sequence) -> None:
        """Write shard `shard` from one (rows, width) matrix of floats per document, in `shard_doc_ids` order."""
        ids = self.shard_doc_ids(shard)
        if shard in self._done:
            raise ValueError(f"shard {shard} of {self.folder} is already written")
        if len(arrays) != len(ids):
            raise ValueError(f"shard {shard} has {len(ids)} documents; got {len(arrays)} arrays")
        matrices = []
        for doc_id, array in zip(ids, arrays):
            if hasattr(array, "detach"):
                array = array.detach().float().cpu().numpy()
            array = np.asarray(array)
            if array.ndim != 2 or array.shape[1] != self.width:
                raise ValueError(f"shard {shard}, document {doc_id!r}: expected a (rows, {self.width}) matrix, "
                                 f"got shape {array.shape}")
            try:
                matrices.append(encode(array, self.plan["dtype"]))
            except ValueError as error:
                raise ValueError(f"shard {shard}, document {doc_id!r}: {error}") from None
        self._write_plan()
        rows_file, index_file = (self.folder / name for name in shard_files(shard))
        index_file.unlink(missing_ok=True)
        digest = hashlib.sha256()
        with atomic_write(rows_file, "wb", overwrite=True) as f:
            for matrix in matrices:
                data = matrix.tobytes()
                digest.update(data)
                f.write(data)
        rows = [len(m) for m in matrices]
        _write_json(index_file, {"shard": shard, "doc_ids": ids, "offsets": np.cumsum([0, *rows[:-1]]).tolist(),
                                 "rows": rows, "bytes": sum(m.nbytes for m in matrices),
                                 "sha256": digest.hexdigest()})
        self._done.add(shard)

    def finish(self) -> RepresentationStore:
        """Check that every shard is written (by this process or another), write the id table and the manifest."""
        if missing := [i for i in range(self.num_shards) if not self._shard_is_whole(i, checksum=False)]:
            shown = ", ".join(map(str, missing[:10])) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
            raise RuntimeError(f"{self.folder}: {len(missing)} of {self.num_shards} shards are not written "
                               f"({shown}); write them (resume the build) before finishing")
        self._write_plan()
        shards, offsets, rows = [], [], []
        for i in range(self.num_shards):
            rows_name, index_name = shard_files(i)
            index = _read_json(self.folder / index_name)
            shards.append({"file": rows_name, "index": index_name, "documents": len(index["doc_ids"]),
                           "rows": sum(index["rows"]), "bytes": index["bytes"], "sha256": index["sha256"]})
            offsets += index["offsets"]
            rows += index["rows"]
        # ids.npy, the doc ids sorted, and locations.npy, each one's (position, first row, rows)
        encoded = np.array([doc_id.encode("utf-8") for doc_id in self.doc_ids], dtype=np.bytes_)  # (N,) S<w>
        order = np.argsort(encoded, kind="stable")  # (N,) positions in id order
        locations = np.stack([order, np.array(offsets, dtype=np.int64)[order], np.array(rows, dtype=np.int64)[order]],
                             axis=1)  # (N, 3) int64
        for name, array in ((IDS, encoded[order]), (LOCATIONS, locations)):
            with atomic_write(self.folder / name, "wb", overwrite=True) as f:
                np.save(f, array, allow_pickle=False)
        for entry in self.folder.iterdir():
            if _TEMPORARY.fullmatch(entry.name):
                entry.unlink(missing_ok=True)
        total = sum(s["bytes"] for s in shards)
        _write_json(self.folder / MANIFEST, {**self.plan, "shards": shards, "rows": sum(s["rows"] for s in shards),
                                             "bytes": total, "bytes_per_document": total / len(self.doc_ids)})
        return RepresentationStore.open(self.folder)

    def _write_plan(self) -> None:
        if self._planned:
            return
        with contextlib.suppress(FileExistsError):  # another process wrote it first
            _write_json(self.folder / PLAN, self.plan)
        _check_plan(self.folder, _read_json(self.folder / PLAN), self.plan)
        self._planned = True

    def _shard_is_whole(self, shard: int, checksum: bool) -> bool:
        rows_file, index_file = (self.folder / name for name in shard_files(shard))
        try:
            index = _read_json(index_file)
            size = rows_file.stat().st_size
        except (FileNotFoundError, ValueError):
            return False
        if (index.get("doc_ids") != self.shard_doc_ids(shard) or size != index.get("bytes")
                or size != sum(index.get("rows", [])) * self._row.itemsize):
            return False
        return not checksum or file_sha256(rows_file) == index.get("sha256")


class RepresentationStore:
    """A finished store, read-only."""

    def __init__(self, folder: Path, manifest: dict, ids: np.ndarray, locations: np.ndarray):
        self.folder, self.manifest = folder, manifest
        self.width, self.dtype, self.identity = manifest["width"], manifest["dtype"], manifest["identity"]
        #: The mean size of a document's representation, in bytes (the paper's storage cost).
        self.bytes_per_document: float = manifest["bytes_per_document"]
        self._ids, self._locations = ids, locations  # (N,) sorted S<w>; (N, 3) position, first row, rows
        self._row, self._floats = row_dtype(self.dtype, self.width), float_dtype(self.dtype)
        self._maps: OrderedDict[int, tuple[np.ndarray, mmap.mmap | None]] = OrderedDict()  # shard: rows, its map
        self._kept = _shards_kept_mapped(len(manifest["shards"]))

    def __getstate__(self) -> dict:
        """Pickled (a DataLoader worker's copy) without the memory maps: the copy maps its shards itself."""
        return {**self.__dict__, "_maps": OrderedDict()}

    @classmethod
    def open(cls, folder: str | os.PathLike, expect: dict | None = None, verify: bool = False) -> RepresentationStore:
        """Open the finished store in `folder`: its manifest, the shards' sizes and the mapped id table."""
        folder = Path(folder)
        manifest = _finished_manifest(folder, expect)
        if verify:
            verify_store(folder)
        ids, locations = _id_table(folder, manifest["documents"])
        return cls(folder, manifest, ids, locations)

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, doc_id: object) -> bool:
        return isinstance(doc_id, str) and self._find([doc_id])[0] >= 0

    @property
    def doc_ids(self) -> list[str]:
        """Every doc id in the plan's order (reads the whole id table: for tools, not for the query path)."""
        return _plan_order(self._ids, self._locations)

    def get(self, doc_id: str) -> np.ndarray:
        """Document `doc_id`'s stored rows, a read-only view of its shard, not a copy: its (rows, width) matrix of
        floats, or an int8 store's (rows,) records of scale and codes (`read_into` and `padded` give floats)."""
        return self.get_many([doc_id])[0]

    def get_many(self, doc_ids: Sequence[str], read_ahead: bool = True) -> list[np.ndarray]:
        """Each document's stored rows (as `get`), every candidate's bytes first advised to the kernel (the module's
        docstring); ``read_ahead=False`` maps their shards without asking for any row (a benchmark's warm-up)."""
        found = self._find(doc_ids)
        if (found < 0).any():
            doc_id = doc_ids[int(np.flatnonzero(found < 0)[0])]
            raise MissingRepresentationError(f"document {doc_id!r} is not in the store {self.folder} (built for "
                                             f"{len(self):,} documents)")
        shard_size, row_bytes = self.manifest["shard_size"], self._row.itemsize
        order = np.argsort(found, kind="stable")
        matrices: list[np.ndarray] = [None] * len(found)  # type: ignore[list-item]
        for i, (position, start, rows) in zip(order.tolist(), self._locations[found[order]].tolist()):
            shard_rows, shard_map = self._shard(position // shard_size)
            if read_ahead and rows:  # a document with rows lies in a mapped shard
                _will_need(shard_map, start * row_bytes, rows * row_bytes)
            matrices[i] = shard_rows[start : start + rows]
        return matrices

    def read_into(self, doc_ids: Sequence[str], out: np.ndarray) -> list[int]:
        """Each document's rows as floats into `out`, (B, at least its rows, width) of any float type: document i's
        at ``out[i, :rows]`` (int8 rows dequantised, `common.stores.rows.decode_into`), the rest of `out` as it was;
        each document's rows."""
        matrices = self.get_many(doc_ids)
        for i, matrix in enumerate(matrices):
            decode_into(matrix, out[i, : len(matrix)])
        return [len(matrix) for matrix in matrices]

    def padded(self, doc_ids: Sequence[str], dtype=None):
        """The documents' rows as floats zero-padded, (B, T, width), and a bool mask (B, T), True at real rows: a
        float store's rows in its dtype, an int8 store's dequantised in float32, then cast to `dtype` (default
        float32)."""
        import torch

        matrices = self.get_many(doc_ids)
        longest = max((len(m) for m in matrices), default=0)
        batch = np.zeros((len(matrices), longest, self.width), dtype=self._floats)
        mask = np.zeros((len(matrices), longest), dtype=bool)
        for i, matrix in enumerate(matrices):
            decode_into(matrix, batch[i, : len(matrix)])
            mask[i, : len(matrix)] = True
        return torch.from_numpy(batch).to(torch.float32 if dtype is None else dtype), torch.from_numpy(mask)

    def _find(self, doc_ids: Sequence[str]) -> np.ndarray:
        """Each id's row of the id table, -1 where the store lacks it: a binary search of the sorted ids."""
        keys = [doc_id.encode("utf-8") for doc_id in doc_ids]
        width = self._ids.dtype.itemsize
        fits = np.array([len(key) <= width and not key.endswith(b"\0") for key in keys], dtype=bool)
        wanted = np.array([key if fit else b"" for key, fit in zip(keys, fits)], dtype=self._ids.dtype)
        order = np.argsort(wanted)
        found = np.empty(len(keys), dtype=np.int64)
        found[order] = np.minimum(np.searchsorted(self._ids, wanted[order]), len(self._ids) - 1)
        return np.where(fits & (self._ids[found] == wanted), found, -1)

    def _shard(self, shard: int) -> tuple[np.ndarray, mmap.mmap | None]:
        """Shard `shard`'s stored rows and their memory map (None for an empty shard), mapped on first use and kept
        (least recently used let go past `_kept`)."""
        mapped = self._maps.get(shard)
        if mapped is not None:
            self._maps.move_to_end(shard)
            return mapped
        entry = self.manifest["shards"][shard]
        if entry["rows"]:
            with open(self.folder / entry["file"], "rb") as file:
                memory = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)  # keeps its own descriptor
            mapped = np.frombuffer(memory, dtype=self._row, count=entry["rows"]), memory  # read-only rows
        else:
            rows = np.empty(0, dtype=self._row)
            rows.flags.writeable = False
            mapped = rows, None
        while len(self._maps) >= self._kept:
            self._maps.popitem(last=False)
        self._maps[shard] = mapped
        return mapped


def will_need_range(offset: int, length: int, page: int = mmap.PAGESIZE) -> tuple[int, int]:
    """The page-aligned (start, length) covering bytes [offset, offset + length) of a map: ``madvise`` takes a start
    on a page boundary."""
    start = offset - offset % page
    return start, offset + length - start


def _will_need(memory: mmap.mmap, offset: int, length: int) -> None:
    """Ask the kernel to start reading bytes [offset, offset + length) of `memory` from the disk now, without waiting."""
    if _MADV_WILLNEED is not None:
        memory.madvise(_MADV_WILLNEED, *will_need_range(offset, length))


def verify_store(folder: str | os.PathLike, progress: Callable[[Iterable], Iterable] | None = None) -> dict:
    """Check every byte of the finished store in `folder` against its manifest."""
    folder = Path(folder)
    manifest = _finished_manifest(folder)
    offsets, rows = [], []
    for shard in (progress or iter)(manifest["shards"]):
        path = folder / shard["file"]
        if file_sha256(path) != shard["sha256"]:
            raise CorruptStoreError(f"{path}: its checksum is not the manifest's (the file was changed or damaged)")
        index = _read_json(folder / shard["index"])
        if index["sha256"] != shard["sha256"] or sum(index["rows"]) != shard["rows"]:
            raise CorruptStoreError(f"{folder / shard['index']} does not describe the {shard['file']} of the manifest")
        offsets += index["offsets"]
        rows += index["rows"]
    ids, locations = _id_table(folder, manifest["documents"])
    positions = locations[:, 0]
    if (not np.array_equal(np.sort(positions), np.arange(len(ids))) or (len(ids) > 1 and not (ids[1:] > ids[:-1]).all())
            or _ids_sha256(_plan_order(ids, locations)) != manifest["doc_ids_sha256"]):
        raise CorruptStoreError(f"{folder / IDS}: not the plan's doc ids, sorted")
    if not (np.array_equal(locations[:, 1], np.array(offsets, dtype=np.int64)[positions])
            and np.array_equal(locations[:, 2], np.array(rows, dtype=np.int64)[positions])):
        raise CorruptStoreError(f"{folder / LOCATIONS}: not the rows the shards' indexes list")
    return manifest


def _plan_order(ids: np.ndarray, locations: np.ndarray) -> list[str]:
    """The sorted `ids` (N,) put back in the plan's order by their `locations` (N, 3)."""
    ordered = np.empty_like(ids)
    ordered[locations[:, 0]] = ids
    return [doc_id.decode("utf-8") for doc_id in ordered.tolist()]


def _finished_manifest(folder: Path, expect: dict | None = None) -> dict:
    """The manifest of the finished store in `folder`, of its dtype's format (`FORMATS`), built as `expect` says
    (where given), each shard file of the size it lists."""
    if not (folder / MANIFEST).is_file():
        unfinished = " (an unfinished one: resume its build)" if (folder / PLAN).is_file() else ""
        raise FileNotFoundError(f"{folder} holds no finished store (no {MANIFEST}, which a build writes last)"
                                f"{unfinished}")
    manifest = _read_json(folder / MANIFEST)
    dtype = manifest.get("dtype")
    if not isinstance(dtype, str) or dtype not in FORMATS:
        raise CorruptStoreError(f"{folder}: a store of {dtype!r} rows; this code reads {', '.join(DTYPES)} rows "
                                "(rebuild the store)")
    if manifest.get("format") != FORMATS[dtype]:
        raise CorruptStoreError(f"{folder}: a store of format {manifest.get('format')!r}; this code reads "
                                f"format {FORMATS[dtype]} for {dtype} rows (rebuild the store)")
    if expect:
        _check_identity(folder, manifest["identity"], expect)
    row_bytes = row_dtype(dtype, manifest["width"]).itemsize
    for shard in manifest["shards"]:
        path = folder / shard["file"]
        size = path.stat().st_size if path.is_file() else 0
        if size != shard["bytes"]:
            raise CorruptStoreError(f"{path}: {size} bytes, not the {shard['bytes']} its manifest lists; "
                                    "rebuild the store")
        if size != shard["rows"] * row_bytes:
            raise CorruptStoreError(f"{path}: {size} bytes, not {shard['rows']} rows of {row_bytes} bytes ({dtype}, "
                                    f"width {manifest['width']}) as its manifest says; rebuild the store")
    return manifest


def _id_table(folder: Path, documents: int) -> tuple[np.ndarray, np.ndarray]:
    """The store's mapped ``ids.npy`` (N,) and ``locations.npy`` (N, 3), checked against its `documents`."""
    try:
        ids = np.load(folder / IDS, mmap_mode="r", allow_pickle=False)
        locations = np.load(folder / LOCATIONS, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as error:
        raise CorruptStoreError(f"{folder}: its id table cannot be read ({error}); rebuild the store") from None
    if (ids.shape != (documents,) or ids.dtype.kind != "S" or locations.shape != (documents, 3)
            or locations.dtype != np.int64):
        raise CorruptStoreError(f"{folder}: its id table does not list the manifest's {documents:,} documents; "
                                "rebuild the store")
    return ids, locations


def _shards_kept_mapped(shards: int) -> int:
    try:
        import resource
    except ImportError:
        return shards
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    fd_folder = Path("/proc/self/fd")
    open_now = len(os.listdir(fd_folder)) if fd_folder.is_dir() else 0
    wanted = open_now + shards + SPARE_DESCRIPTORS
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
    return shards if soft == resource.RLIM_INFINITY else max(1, min(shards, soft - open_now - SPARE_DESCRIPTORS))


def _plan(doc_ids: list[str], width: int, dtype: str, shard_size: int, identity: dict, extra: dict | None) -> dict:
    """The plan of a store, checking what the caller gives; JSON's view of it (tuples as lists), as read back."""
    if not doc_ids:
        raise ValueError("no documents to store")
    if not all(isinstance(doc_id, str) for doc_id in doc_ids):
        raise TypeError("document ids must be strings")
    if any("\0" in doc_id for doc_id in doc_ids):
        raise ValueError("document ids must not hold NUL characters")
    if len(set(doc_ids)) != len(doc_ids):
        seen: set[str] = set()
        duplicate = next(d for d in doc_ids if d in seen or seen.add(d))
        raise ValueError(f"document {duplicate!r} is listed twice")
    for name, value in (("width", width), ("shard_size", shard_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    name = np.dtype(dtype).name
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if absent := [key for key in REQUIRED_IDENTITY if key not in identity]:
        raise ValueError(f"identity lacks {', '.join(absent)} (what the representations are built from)")
    return json.loads(json.dumps({"format": FORMATS[name], "width": width, "dtype": name, "shard_size": shard_size,
                                  "documents": len(doc_ids), "doc_ids_sha256": _ids_sha256(doc_ids),
                                  "identity": identity, "extra": extra or {}}))


def _check_plan(folder: Path, planned: dict, wanted: dict) -> None:
    """Raise `StoreMismatchError` naming the first difference of the plan in `folder` from the one wanted."""
    labels = {"doc_ids_sha256": "doc ids"}
    pairs = [(labels.get(k, k), planned.get(k), wanted[k]) for k in wanted if k not in ("identity", "extra")]
    for section, prefix in (("identity", ""), ("extra", "extra.")):
        have, want = planned.get(section) or {}, wanted[section]
        pairs += [(prefix + k, have.get(k), want.get(k)) for k in {**want, **have}]
    for label, have, want in pairs:
        if have != want:
            raise StoreMismatchError(f"{folder} holds an unfinished store planned with {label} {_show(have)}; this "
                                     f"build has {label} {_show(want)} (resume with the same settings, or choose "
                                     "a new folder)")


def _check_identity(folder: Path, identity: dict, expect: dict) -> None:
    differ = [(key, identity.get(key), value) for key, value in expect.items()
              if identity.get(key) != json.loads(json.dumps(value))]
    if differ:
        built, needed = ([f"{key} {_show(pair[side])}" for key, *pair in differ] for side in (0, 1))
        raise StoreMismatchError(f"{folder} was built {'from' if differ[0][0] == 'checkpoint' else 'with'} "
                                 f"{_with(built)}; this needs {_with(needed)}")


def _with(texts: list[str]) -> str:
    return texts[0] + (f" with {', '.join(texts[1:])}" if texts[1:] else "")


def _show(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, str):
        return f"{value[:12]}…" if re.fullmatch(r"[0-9a-f]{32,}", value) else value
    return json.dumps(value)


def _ids_sha256(doc_ids: Sequence[str]) -> str:
    return hashlib.sha256(json.dumps(list(doc_ids), ensure_ascii=False).encode()).hexdigest()


def _write_json(path: Path, value: dict) -> None:
    with atomic_write(path) as f:
        json.dump(value, f, indent=1, ensure_ascii=False)
        f.write("\n")


def _read_json(path: Path) -> dict:
    """A JSON file's object; ValueError naming the file where it is not one (a file damaged after writing)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: not a JSON object")
    return value
