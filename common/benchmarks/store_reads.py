"""Store reads as a user pays them: a first stage's candidates scattered over a store (a new draw each repeat), a
store's rows of seeded noise written at memory speed, reads into one preallocated tensor, cold (pages dropped from the
page cache, and ``mincore`` telling how many stayed) then warm, and the median query with its parts."""

from __future__ import annotations

import argparse
import ctypes
import functools
import os
from collections.abc import Iterable, Sequence

from common.refusals import output_folder, positive_int, usage_error


#: Documents in a benchmark's store: a top 1,000 drawn from them scatters over about every shard of 1,000.
STORE_DOCUMENTS = 100_000


def add_store_options(parser: argparse.ArgumentParser, stores: str, *, capped_by: str = "",
                      documents: int = STORE_DOCUMENTS) -> None:
    """``--store_documents`` and ``--store_dir`` of a benchmark reading candidates from `stores` ("each store")."""
    add = parser.add_argument
    add("--store_documents", type=positive_int, default=documents, help=f"documents in {stores}, over which "
        f"each query's candidates are drawn (at least --candidates{'; fewer where ' + capped_by if capped_by else ''})")
    add("--store_dir", type=output_folder, help="where the stores are built and kept, reused when their identity "
        "matches: every store stays (default: a temporary folder under $TMPDIR, each store removed once measured: "
        "one on disk at a time)")


def check_store_options(args: argparse.Namespace) -> None:
    if args.store_documents < args.candidates:
        usage_error(f"argument --store_documents: a query draws --candidates {args.candidates} distinct documents; "
                    f"got {args.store_documents}")


def draw_candidates(documents: int, count: int, seed: int, repeat: int):
    """A first stage's `count` candidates: distinct positions in a store of `documents`, uniformly at random in the
    draw's order (a ranking has no relation to a store's order), a new draw for each `repeat`: (count,) int64."""
    import numpy as np

    if not 0 < count <= documents:
        raise ValueError(f"cannot draw {count} distinct candidates from {documents} documents")
    return np.random.default_rng((seed % 2**64, repeat)).choice(documents, size=count, replace=False)


def noise_documents(seed: int, first: int, count: int, rows: int, width: int, dtype: str = "float32"):
    """Documents `first` to `first` + `count` - 1 of a seeded collection of noise, (count, rows, width) of `dtype`:
    each a window of one pool of standard normal noise (2^24 values, or twice a document) at an offset hashed from
    its position, depending only on `seed`, its position and its shape."""
    import numpy as np

    size = rows * width
    length = max(1 << 24, 2 * size)
    pool = _noise_pool(seed % 2**64, length, np.dtype(dtype).name)
    span = length - size + 1
    out = np.empty((count, size), dtype=pool.dtype)
    for i in range(count):
        start = ((first + i) * 2654435761 + seed) % span  # Knuth's multiplicative hash of the position
        out[i] = pool[start : start + size]
    return out.reshape(count, rows, width)


def write_noise(writer, seed: int, rows: int) -> None:
    """Each pending shard of `writer` (a `common.stores` writer): its documents' `rows` x width noise of `seed`, in
    the store's float type (an int8 store's quantised by the writer from float32 noise)."""
    dtype = "float32" if writer.plan["dtype"] == "int8" else writer.plan["dtype"]
    for shard in writer.pending():
        first, count = shard * writer.shard_size, len(writer.shard_doc_ids(shard))
        writer.write_shard(shard, list(noise_documents(seed, first, count, rows, writer.width, dtype)))


@functools.lru_cache(maxsize=2)
def _noise_pool(seed: int, length: int, dtype: str):
    import numpy as np

    pool = np.random.default_rng(seed).standard_normal(length, dtype=np.float32).astype(dtype)
    pool.flags.writeable = False
    return pool


def evict_from_page_cache(paths: Iterable[str | os.PathLike]) -> bool:
    """Write `paths` back to disk and drop their pages from the page cache (``fsync``, ``POSIX_FADV_DONTNEED``; pages
    mapped by a process and tmpfs stay); False where there is no ``posix_fadvise``."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return False
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # dirty pages cannot be dropped
            advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return True


def cached_fraction(paths: Iterable[str | os.PathLike]) -> float | None:
    """The share of `paths`' pages in the page cache now (``mincore`` over a fresh map, which reads none of them);
    None where ``mincore`` cannot be called."""
    import numpy as np

    try:
        mincore = ctypes.CDLL(None, use_errno=True).mincore
    except (OSError, AttributeError):
        return None
    mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    page, resident, total = os.sysconf("SC_PAGE_SIZE"), 0, 0
    for path in paths:
        size = os.path.getsize(path)
        if not size:
            continue
        pages = -(-size // page)
        vector = (ctypes.c_ubyte * pages)()
        mapped = np.memmap(path, dtype=np.uint8, mode="r")  # offset 0: the map starts on a page
        failed = mincore(ctypes.c_void_p(mapped.ctypes.data), size, vector)
        del mapped
        if failed:
            return None
        resident += int((np.frombuffer(vector, dtype=np.uint8) & 1).sum())
        total += pages
    return resident / total if total else 0.0


def median_query(records: Sequence[dict], key: str = "ms") -> dict:
    """The query at the median of `key` among `records` (one dict of numbers per query), every field of it (an even
    count: the middle two's mean), so that its parts add up to its total."""
    ordered = sorted(records, key=lambda record: record[key])
    middle = ordered[(len(ordered) - 1) // 2 : len(ordered) // 2 + 1]
    return {name: sum(record[name] for record in middle) / len(middle) for name in middle[0]}


def candidate_ids(positions) -> list[str]:
    """The doc ids of store positions (a benchmark's store names document i ``d{i}``)."""
    return [f"d{position}" for position in positions.tolist()]


class StoreReads:
    """Candidates' rows copied into one preallocated (count, rows, width) tensor of the store's float type (an int8
    store's dequantised into fp32 as they are copied: `RepresentationStore.read_into`), read as fp32."""

    def __init__(self, store, count: int, rows: int, device: str = "cpu"):
        import torch

        self.store, self.device = store, device
        stored = torch.float16 if store.dtype == "float16" else torch.float32
        self.rows = torch.zeros(count, rows, store.width, dtype=stored)
        self.rows_numpy = self.rows.numpy()  # the same memory: numpy copies the memory map's rows into it
        self.compute = self.rows if stored == torch.float32 else torch.zeros(count, rows, store.width)

    def map_shards(self, ids: list[str]):
        """Map the shards that `ids` fall in, touching none of their rows; the (zero) fp32 tensor on the device."""
        self.store.get_many(ids, read_ahead=False)
        return self.compute.to(self.device)

    def __call__(self, ids: list[str]):
        """The rows of `ids`, (len(ids), rows, width) fp32 on the device: the preallocated tensor's first rows."""
        self.store.read_into(ids, self.rows_numpy)
        if self.compute is not self.rows:
            self.compute[: len(ids)].copy_(self.rows[: len(ids)])
        return self.compute[: len(ids)].to(self.device)


def cold_then_warm(store, candidates: int, repeats: int, seed: int, warm_up, query):
    """``query(ids)``'s records of `repeats` draws of `candidates` over `store`, read cold (the store dropped from the
    page cache after ``warm_up(ids)`` of a spare draw), then warm: ``(cold, warm, store's documents, median candidates'
    shards and cached fraction)``."""
    import statistics

    import numpy as np

    draws = [draw_candidates(len(store), candidates, seed, repeat) for repeat in range(repeats + 1)]
    *timed, spare = [candidate_ids(positions) for positions in draws]
    files = sorted(path for path in store.folder.iterdir() if path.is_file())  # its shards, id table and manifest
    warm_up(spare)
    evict_from_page_cache(files)  # after the mapping: pages a process has mapped in would stay
    cached = cached_fraction(files)
    cold = [query(ids) for ids in timed]
    warm = [query(ids) for ids in timed]
    shards = [len(np.unique(positions // store.manifest["shard_size"])) for positions in draws[:-1]]
    return cold, warm, {"store_documents": len(store), "candidate_shards": statistics.median(shards),
                        "store_cached": cached}
