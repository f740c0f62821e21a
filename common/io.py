"""Atomic writes, caches built once, and tolerant line reading, shared by every reader and writer.

Outputs are written to a temporary file beside them and renamed into place, never over a file silently. `built_once`
builds a cache once however many processes ask, under a `filelock` beside it (`build_lock`); where locks do not reach
across nodes, the second rename finds the first's build. `file_digest` keys a cache by content, not path.
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

#: Encoding tried for a line that is not UTF-8 (mis-encoded TREC files); its undefined bytes fall to Latin-1.
DEFAULT_FALLBACK_ENCODING = "cp1252"


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", *, overwrite: bool = False,
                 encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file beside `path` and rename it onto `path` on success."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists; refusing to overwrite it (pass overwrite=True / --overwrite)")
    path.parent.mkdir(parents=True, exist_ok=True)
    binary = "b" in mode
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with renamed_on_success(Path(tmp), path):
        os.chmod(tmp, 0o666 & ~umask())
        with os.fdopen(fd, mode, encoding=None if binary else encoding, newline=None if binary else "\n") as f:
            yield f


@contextlib.contextmanager
def renamed_on_success(tmp: Path, path: Path) -> Iterator[Path]:
    """Yield `tmp`, a file the block writes beside `path`."""
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
    try:
        return codecs.lookup(name).name
    except LookupError:
        raise ValueError(f"unknown text encoding {name!r}") from None


def read_lines(path: str | os.PathLike, fallback: str = DEFAULT_FALLBACK_ENCODING) -> Iterator[tuple[int, str]]:
    """Stream `(line_number, text)` pairs (1-based, line ending stripped) from a text file: each line UTF-8, else
    `fallback`, else Latin-1."""
    fallback = check_encoding(fallback)
    warned = False
    with (gzip.open if str(path).endswith(".gz") else open)(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if number == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                if not warned:
                    log.warning("%s:%d: not valid UTF-8; decoded with %s (further lines likewise)", path, number,
                                fallback)
                    warned = True
                try:
                    text = raw.decode(fallback)
                except UnicodeDecodeError:
                    text = raw.decode("latin-1")
            yield number, text.rstrip("\r\n")


def cache_root() -> Path:
    root = os.environ.get("EFFICIENT_RANKERS_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "efficient-rankers"


@contextlib.contextmanager
def build_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold the lock of the cache `path` (the file ``<path>.lock``) for the duration of the ``with`` block."""
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

    path: Path
    built: bool
    seconds: float


#: The lists `recorded_caches` is filling, innermost last.
_RECORDS: list[list[CacheUse]] = []


@contextlib.contextmanager
def recorded_caches() -> Iterator[list[CacheUse]]:
    """A list receiving a `CacheUse` for every cache asked for in this process during the ``with`` block."""
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


def built_once(path: str | os.PathLike, build: Callable[[Path], object], *,
               ready: Callable[[Path], bool] = Path.exists) -> Path:
    """`path`, a cache (a file or a folder) that `build` makes once however many processes ask for it at once."""
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
            try:
                os.replace(tmp, path)
                published = True
            except OSError as error:
                if not (error.errno in (errno.ENOTEMPTY, errno.EEXIST) and path.is_dir() and ready(path)):
                    raise
                log.info("%s was built by another process meanwhile; its build is kept", path)
                published = False
        finally:
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
    record_cache(path, published, time.monotonic() - start)
    return path


def file_sha256(path: str | os.PathLike, block_size: int = 1 << 23) -> str:
    """The sha256 (hex) of file `path`'s bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(block_size):
            digest.update(block)
    return digest.hexdigest()


def file_digest(path: str | os.PathLike) -> str:
    """The sha256 of file `path`, remembered per (path, size, modification time, inode) under the cache."""
    path = Path(path).resolve()
    stat = path.stat()
    seen = json.dumps([str(path), stat.st_size, stat.st_mtime_ns, stat.st_ino])
    memo = cache_root() / "digests" / f"{path.name}-{hashlib.sha256(seen.encode()).hexdigest()[:16]}.sha256"
    built_once(memo, lambda tmp: tmp.write_text(f"{file_sha256(path)}\n", encoding="ascii"), ready=_holds_digest)
    return memo.read_text(encoding="ascii").strip()


def _holds_digest(memo: Path) -> bool:
    try:
        return len(memo.read_text(encoding="ascii").strip()) == 64
    except (OSError, UnicodeDecodeError):
        return False
