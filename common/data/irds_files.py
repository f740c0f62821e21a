"""Refuse a command whose ``irds:`` tasks lack files, before anything is built: one ``error:`` line per missing file.
`refuse_missing_files` walks the handlers of the parts read (`TASK_PARTS`) down to ir_datasets' file objects and names
each file neither present nor downloadable now (its host or proxy answering within `PROBE_TIMEOUT`), then exits 2.
A built document store stands for its collection's files; files opened only from a function are not seen.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

#: What the repository reads of a task, as ir_datasets' entity types (each of them where a command names no parts),
#: and what else it may read of one: its provided training triples.
TASK_PARTS = ("docs", "queries", "qrels", "scoreddocs")
PARTS = (*TASK_PARTS, "docpairs")
PART_NAMES = {"docs": "documents", "queries": "queries", "qrels": "qrels", "scoreddocs": "candidates (scoreddocs)",
              "docpairs": "training triples (docpairs)"}
#: Seconds a connection to a download's host may take before the file counts as not downloadable now.
PROBE_TIMEOUT = 5.0


@dataclass(frozen=True)
class Needed:
    """A file ir_datasets lacks: where it keeps it, where it downloads it from, and how else to get it."""

    path: str | None  # None: a download ir_datasets streams on every use, kept nowhere
    urls: tuple[str, ...] = ()
    instructions: str = ""
    derived: bool = False  # ir_datasets makes `path` from the URLs' files (extracts it), rather than saving them as is
    inside: str | None = None  # the present folder or archive that should hold it


def refuse_missing_files(specs: Iterable[Any], options: Iterable[str],
                         parts: Sequence[Iterable[str] | None] | None = None, *, quiet: bool = False) -> None:
    """Exit with status 2, one ``error:`` line per file an ``irds:`` task of `specs` needs and cannot get now."""
    lines = missing_files(specs, options, parts)
    if lines:
        if not quiet:
            print("\n".join(f"error: {line}" for line in lines), file=sys.stderr)
        raise SystemExit(2)


def missing_files(specs: Iterable[Any], options: Iterable[str],
                  parts: Sequence[Iterable[str] | None] | None = None) -> list[str]:
    """The lines `refuse_missing_files` prints (without ``error:``), one per missing file, in the order needed."""
    specs, options = list(specs), list(options)
    if len(specs) != len(options):
        raise ValueError(f"{len(specs)} task specs but {len(options)} option names")
    wanted = list(parts) if parts is not None else [None] * len(specs)
    tasks = [(str(spec)[len("irds:"):], option, TASK_PARTS if want is None else tuple(want))
             for spec, option, want in zip(specs, options, wanted)
             if isinstance(spec, str) and spec.startswith("irds:") and spec != "irds:"]
    if not tasks:
        return []
    import ir_datasets

    users: dict[Needed, list[tuple[str, str, str]]] = {}
    for dataset_id, option, want in tasks:
        try:
            dataset = ir_datasets.load(dataset_id)
        except KeyError:  # an unknown id: the task's own check names it
            continue
        for part in want:
            if part not in PARTS:
                raise ValueError(f"unknown part {part!r}; the parts are {', '.join(PARTS)}")
            if hasattr(dataset, f"{part}_handler"):
                for needed in needed_files(dataset, part):
                    users.setdefault(needed, []).append((option, dataset_id, part))
    if not users:
        return []
    endpoints = {url: _endpoint(url) for needed in users for url in needed.urls}
    reachable = _reachable(set(endpoints.values()) - {None})
    return [_line(needed, who, [endpoints[url] or (None, 0) for url in needed.urls]) for needed, who in users.items()
            if not any(reachable.get(endpoints[url]) for url in needed.urls)]


def needed_files(dataset: Any, part: str) -> list[Needed]:
    """The files `dataset` (an ir_datasets dataset) lacks for reading its `part` (one of `PARTS`)."""
    handler = getattr(dataset, f"{part}_handler")()
    if part == "docs" and _store_built(handler):
        return []
    return list(dict.fromkeys(_Walk(part).needs(handler)))


def _store_built(handler: Any) -> bool:
    try:
        return bool(handler.docs_store().built())
    except Exception:
        return False


class _Walk:
    """The files a handler lacks for one part (the module docstring's rules), each object visited once."""

    def __init__(self, part: str):
        self.part = part
        self.seen: set[int] = set()

    def needs(self, obj: Any) -> list[Needed]:
        from ir_datasets.datasets.base import Dataset, ExpectedFile
        from ir_datasets.util import (Bz2Extract, Cache, Download, GzipExtract, Lazy, LocalDownload, Lz4Extract,
                                      PackageDataFile, RelativePath, ReTar, StringFile, TarExtract, TarExtractAll,
                                      ZipExtract, ZipExtractCache)

        if isinstance(obj, (str, bytes, int, float, bool, Path, type)) or obj is None or id(obj) in self.seen:
            return []
        self.seen.add(id(obj))
        if isinstance(obj, (list, tuple, set, frozenset)):
            return [needed for item in obj for needed in self.needs(item)]
        if isinstance(obj, dict):
            return [needed for item in obj.values() for needed in self.needs(item)]
        if isinstance(obj, Download):
            return _download(obj)
        if isinstance(obj, (LocalDownload, ExpectedFile)):
            if obj._path.exists():
                return []
            words = obj._message if isinstance(obj, LocalDownload) else obj._instructions
            return [Needed(str(obj._path), (), _one_line((words or "").format(path=obj._path)))]
        if isinstance(obj, (Cache, TarExtractAll, ZipExtractCache, ReTar)):
            made = _place(obj)
            if made is not None and os.path.exists(made):
                return []
            source = obj.dlc if isinstance(obj, ZipExtractCache) else obj._streamer
            return [needed if needed.path else replace(needed, path=str(made), derived=True)
                    for needed in self.needs(source)]
        if isinstance(obj, RelativePath):
            folder = _place(obj._streamer)
            if folder is not None and os.path.exists(os.path.join(folder, obj._path)):
                return []
            inner = self.needs(obj._streamer)
            if inner or folder is None:
                return inner
            return [Needed(os.path.join(folder, obj._path), inside=str(folder))]
        if isinstance(obj, (GzipExtract, Bz2Extract, Lz4Extract, TarExtract)):
            return self.needs(vars(obj)["_streamer"])
        if isinstance(obj, ZipExtract):
            return self.needs(obj.dlc)
        if isinstance(obj, (StringFile, PackageDataFile, Lazy)):
            return []
        if isinstance(obj, Dataset):
            handler = getattr(obj, f"{self.part}_handler", None)
            return self.needs(handler()) if handler is not None else []
        if type(obj).__module__.split(".")[0].startswith("ir_datasets") and hasattr(obj, "__dict__"):
            return [needed for value in vars(obj).values() for needed in self.needs(value)]
        return []


def _download(download: Any) -> list[Needed]:
    """A ``Download``: nothing when its file or a local copy is present, else the file with its URLs."""
    from ir_datasets.util import LocalDownload

    cache = _place(download)
    copies = [str(mirror._path) for mirror in download.mirrors if isinstance(mirror, LocalDownload)]
    if any(os.path.exists(path) for path in (cache, *copies) if path):
        return []
    urls = tuple(url for mirror in download.mirrors if (url := getattr(mirror, "url", None) or
                                                        getattr(mirror, "uri", None)))
    words = "" if urls else " ".join(m._message or "" for m in download.mirrors if isinstance(m, LocalDownload))
    place = cache or (copies[0] if copies else None)
    return [Needed(str(place) if place else None, urls, _one_line(words))]


def _place(obj: Any) -> str | None:
    """Where a file object keeps its file or folder once had (no side effect, unlike some of their ``path()``)."""
    from ir_datasets.datasets.base import ExpectedFile
    from ir_datasets.util import (Bz2Extract, Cache, Download, GzipExtract, LocalDownload, Lz4Extract, RelativePath,
                                  ReTar, TarExtractAll, ZipExtract, ZipExtractCache)

    if isinstance(obj, Download):
        return obj._cache_path if obj._cache_path not in (None, os.devnull) else None
    for kinds, attribute in (((Cache, LocalDownload, ExpectedFile), "_path"), (TarExtractAll, "_extract_path"),
                             (ZipExtractCache, "extract_path"), (ReTar, "_output_file")):
        if isinstance(obj, kinds):
            return str(getattr(obj, attribute))
    if isinstance(obj, (GzipExtract, Bz2Extract, Lz4Extract)):
        return _place(vars(obj)["_streamer"])
    if isinstance(obj, ZipExtract):
        return _place(obj.dlc)
    if isinstance(obj, RelativePath):
        folder = _place(obj._streamer)
        return os.path.join(folder, obj._path) if folder is not None else None
    return None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _endpoint(url: str) -> tuple[str, int] | None:
    """The host and port a download of `url` connects to first: its proxy's where one applies, else its own."""
    import urllib.request

    parts = urlsplit(url)
    if not parts.hostname:
        return None
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(parts.hostname):
        via = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if via.hostname:
            return via.hostname, via.port or (443 if via.scheme == "https" else 80)
    return parts.hostname, parts.port or (443 if parts.scheme in ("https", "gs") else 80)


def _reachable(endpoints: set[tuple[str, int]]) -> dict[tuple[str, int], bool]:
    """Whether a connection to each (host, port) opens within `PROBE_TIMEOUT`; all are tried at once."""
    answers: dict[tuple[str, int], bool] = {}

    def probe(endpoint: tuple[str, int]) -> None:
        try:
            socket.create_connection(endpoint, timeout=PROBE_TIMEOUT).close()
            answers[endpoint] = True
        except OSError:
            answers[endpoint] = False

    threads = [threading.Thread(target=probe, args=(endpoint,), daemon=True) for endpoint in endpoints]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(PROBE_TIMEOUT)
    return {endpoint: answers.get(endpoint, False) for endpoint in endpoints}


def _line(needed: Needed, who: list[tuple[str, str, str]], endpoints: list[tuple[str | None, int]]) -> str:
    tasks = ", ".join(dict.fromkeys(f"{option} irds:{dataset_id}" for option, dataset_id, _ in who))
    *others, last = dict.fromkeys(PART_NAMES[p] for _, _, p in who)
    part = f"{', '.join(others)} and {last}" if others else last
    where = needed.path or "(ir_datasets streams it on each use and keeps no copy)"
    line = f"{tasks}: missing {where}, a file of the {part}"
    if needed.urls:
        origin = " or ".join(needed.urls)
        tried = ", ".join(dict.fromkeys(
            f"{host}:{port}" + ("" if host == urlsplit(url).hostname else " (the proxy)")
            for url, (host, port) in zip(needed.urls, endpoints) if host)) or "a host"
        if needed.derived:
            line += f"; ir_datasets makes it from {origin}"
        elif needed.path:
            line += f"; download {origin} to that path"
        else:
            line += f"; from {origin}"
        line += f" (not downloadable now: no connection to {tried})"
    elif needed.inside:
        line += f"; {needed.inside} is there but lacks it"
    if needed.instructions:
        line += f"; {needed.instructions}"
    return line
