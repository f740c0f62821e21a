"""Atomic writes, caches built once, and tolerant line reading, shared by every reader and writer.

Outputs (run files, checkpoints, caches) are written to a temporary file in the
destination folder and renamed into place, so an interrupted job never leaves a
half-written file, and an existing file is never overwritten silently.

A cache (a tokenizer, a vocabulary, a document store, ...) is built once however many processes ask for it at
the same moment: the ranks of a multi-GPU job (torchrun and srun start them all at once), or parallel jobs on one
cache. `built_once` takes a file lock beside the cache (`build_lock`, ``<cache>.lock``, an ``flock`` through the
`filelock` package, so it holds between processes on one machine and, where the file system supports it, across the
nodes that share it; where it has no ``flock`` at all, filelock falls back to a lock file of its own): the first
process builds and publishes the cache by a rename, the others wait for the lock and then open the finished cache.

On a cluster. A lock lies beside what it protects, on the same file system, so the processes that share a cache
share its lock, whichever node they run on (`common.data.irds` locks ir_datasets' stores beside them, under
``IR_DATASETS_HOME``). Where a file system's locks do not reach across nodes (NFS without a lock manager, Lustre
mounted ``localflock``), two nodes may build the same cache at once; both builds are whole, and the second rename
finds the first's: a folder already renamed into place counts as built (the second build is dropped), a file is
replaced by an identical one. A Lightning data module's ``prepare_data`` runs on each node's local rank 0
(``prepare_data_per_node``, Lightning's default, kept): right where each node has its own cache, and, on a shared
one, the lock (or the rename, failing that) makes the second node open what the first built.

`file_digest` keys a cache by a file's content rather than its path, so that a collection copied to another path
(staged to a node's local disk per job) finds the cache built from the same bytes. `recorded_caches` lists the
caches a block asked for and whether each was built or found built (`python -m <package>.prepare` prints it).
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import gzip
import hashlib
import json
import logging
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

#: Encoding tried for a line that is not valid UTF-8. Windows-1252 is what
#: mis-encoded TREC and web-collection files almost always are; bytes it leaves
#: undefined fall through to Latin-1, which decodes every byte.
DEFAULT_FALLBACK_ENCODING = "cp1252"


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike, mode: str = "w", *, overwrite: bool = False, encoding: str | None = "utf-8"
) -> Iterator[IO]:
    """Open a temporary file beside `path` and rename it onto `path` on success.

    Raises FileExistsError when `path` exists and `overwrite` is False. On any
    exception the temporary file is removed and `path` is left untouched.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists; refusing to overwrite it (pass overwrite=True / --overwrite)")
    path.parent.mkdir(parents=True, exist_ok=True)
    binary = "b" in mode
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with renamed_on_success(Path(tmp), path):
        # mkstemp makes the file private (0600); an output gets the mode any new file gets (0644 under umask 022).
        os.chmod(tmp, 0o666 & ~umask())
        with os.fdopen(fd, mode, encoding=None if binary else encoding, newline=None if binary else "\n") as f:
            yield f


@contextlib.contextmanager
def renamed_on_success(tmp: Path, path: Path) -> Iterator[Path]:
    """Yield `tmp`, a file the block writes beside `path`; when the block succeeds, sync `tmp` and rename it onto
    `path` (readers see the old file or the whole new one); on any exception, remove `tmp` and re-raise."""
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def umask() -> int:
    """The process's file-creation mask (reading it means setting it: it is set back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def check_encoding(name: str) -> str:
    """Return the canonical codec name, or raise ValueError naming the unknown encoding."""
    try:
        return codecs.lookup(name).name
    except LookupError:
        raise ValueError(f"unknown text encoding {name!r}") from None


def decode_line(raw: bytes, fallback: str = DEFAULT_FALLBACK_ENCODING) -> tuple[str, bool]:
    """Decode one line as UTF-8, else with `fallback` (then Latin-1). Returns (text, used_fallback)."""
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        pass
    try:
        return raw.decode(fallback), True
    except UnicodeDecodeError:
        return raw.decode("latin-1"), True


def read_lines(path: str | os.PathLike, fallback: str = DEFAULT_FALLBACK_ENCODING) -> Iterator[tuple[int, str]]:
    """Stream `(line_number, text)` pairs (1-based, line ending stripped) from a text file.

    Each line is decoded independently, so a stray Windows-1252 byte in line
    2,000,000 does not abort the file (``.gz`` files are decompressed on the fly): the line is decoded with `fallback` and
    a single warning names the file and the first such line.
    """
    fallback = check_encoding(fallback)
    warned = False
    with (gzip.open if str(path).endswith(".gz") else open)(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if number == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]
            text, used_fallback = decode_line(raw, fallback)
            if used_fallback and not warned:
                log.warning("%s:%d: not valid UTF-8; decoded with %s (further lines likewise)", path, number, fallback)
                warned = True
            yield number, text.rstrip("\r\n")


def cache_root() -> Path:
    """The project's cache folder (``$EFFICIENT_RANKERS_CACHE`` or ``~/.cache/efficient-rankers``)."""
    root = os.environ.get("EFFICIENT_RANKERS_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "efficient-rankers"


@contextlib.contextmanager
def build_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold the lock of the cache `path` (the file ``<path>.lock``) for the duration of the ``with`` block.

    Every builder of `path` takes it; one that finds it held says so once (a log line naming `path`) and waits as
    long as the other's build takes.
    """
    from filelock import FileLock, Timeout

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path.with_name(f"{path.name}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.warning("waiting for %s: another process is building it", path)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


@dataclass(frozen=True)
class CacheUse:
    """A cache a process asked for: its path, whether this process built it (else it was found built) and the seconds
    the build (or the wait for another process's) took."""

    path: Path
    built: bool
    seconds: float


#: The lists `recorded_caches` is filling, innermost last.
_RECORDS: list[list[CacheUse]] = []


@contextlib.contextmanager
def recorded_caches() -> Iterator[list[CacheUse]]:
    """A list that receives a `CacheUse` for every cache asked for in this process during the ``with`` block
    (`built_once`'s, and each ir_datasets store `common.data.irds` opens), in the order asked."""
    uses: list[CacheUse] = []
    _RECORDS.append(uses)
    try:
        yield uses
    finally:
        _RECORDS.remove(uses)


def record_cache(path: str | os.PathLike, built: bool, seconds: float = 0.0) -> None:
    """Tell the `recorded_caches` blocks under way that cache `path` was built (or found built)."""
    for uses in _RECORDS:
        uses.append(CacheUse(Path(path), built, seconds))


def built_once(
    path: str | os.PathLike, build: Callable[[Path], object], *, ready: Callable[[Path], bool] = Path.exists
) -> Path:
    """`path`, a cache (a file or a folder) that `build` makes once however many processes ask for it at once.

    Where ``ready(path)`` (default: `path` exists), `path` is returned as it is. Otherwise, under `build_lock`,
    it is checked again (another process may have built it meanwhile) and, where still not ready, ``build(tmp)``
    writes the cache at `tmp`, a new name beside `path`, which is then renamed onto `path`: a reader never sees a
    half-built cache, and a build that fails (or is killed) leaves no `path` (a killed one may leave its
    ``.<name>.*.tmp``). A file that is not ready (e.g. of an older format) is replaced; a folder that is not ready is
    refused (FileExistsError), as it may hold something else. A folder that another node renamed into place while
    this one built (their lock did not exclude each other: module docstring) is kept, and this build dropped.
    """
    path = Path(path)
    if ready(path):
        record_cache(path, False)
        return path
    start = time.monotonic()
    with build_lock(path):
        if ready(path):
            record_cache(path, False, time.monotonic() - start)
            return path
        if path.is_dir():
            raise FileExistsError(f"{path} exists but holds no complete build; remove it")
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            build(tmp)
            published = _published(tmp, path, ready)
        finally:
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
    record_cache(path, published, time.monotonic() - start)
    return path


def _published(tmp: Path, path: Path, ready: Callable[[Path], bool]) -> bool:
    """Rename the build at `tmp` onto `path`: True; or False where `path` is a folder another node built meanwhile
    (a rename onto a folder that is not empty fails), which is kept as the cache."""
    try:
        os.replace(tmp, path)
    except OSError as error:
        if error.errno in (errno.ENOTEMPTY, errno.EEXIST) and path.is_dir() and ready(path):
            log.info("%s was built by another process meanwhile; its build is kept", path)
            return False
        raise
    return True


#: Bytes read at a time when a file is hashed.
DIGEST_BLOCK = 1 << 20


def file_digest(path: str | os.PathLike) -> str:
    """The sha256 (hex) of the bytes of file `path`, hashed once per (resolved path, size, modification time,
    inode) and remembered under ``cache_root() / "digests"`` (``<file name>-<key>.sha256``).

    A cache keyed by it is found from any copy of the file: a copy staged per job, at a new path with a new time,
    costs one pass over its bytes (0.72 GB/s from the page cache on an AMD EPYC core) where a key of path and time
    would rebuild the cache. The inode is in the memo's key so that a file replaced by another of the same size and
    time (``cp -p``, ``rsync -t``) is hashed again.
    """
    path = Path(path).resolve()
    stat = path.stat()
    seen = json.dumps([str(path), stat.st_size, stat.st_mtime_ns, stat.st_ino])
    memo = cache_root() / "digests" / f"{path.name}-{hashlib.sha256(seen.encode()).hexdigest()[:16]}.sha256"

    def hash_file(tmp: Path) -> None:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(DIGEST_BLOCK):
                digest.update(block)
        tmp.write_text(f"{digest.hexdigest()}\n", encoding="ascii")

    return built_once(memo, hash_file, ready=_holds_digest).read_text(encoding="ascii").strip()


def _holds_digest(memo: Path) -> bool:
    try:
        return len(memo.read_text(encoding="ascii").strip()) == 64
    except (OSError, UnicodeDecodeError):
        return False
