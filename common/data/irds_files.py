"""Refuse a command whose ir_datasets tasks lack files, before anything is built: one line per missing file.

ir_datasets downloads a dataset's files on first use. Without the network (or before the files were copied to the
machine) a command would otherwise get far, on every rank of a distributed run, before failing deep inside
ir_datasets on the first file it lacks. `refuse_missing_files` asks first: for each ``irds:<id>`` task a command names, it finds
every file ir_datasets will read for what the repository reads of the task (`TASK_PARTS`: its documents, queries,
qrels and scoreddocs, the candidates; a train task's samplers read these same four), and if any is neither present
nor downloadable now it prints, all at once, one ``error:`` line per file (the file where ir_datasets keeps it,
under ``IR_DATASETS_HOME``; its URL; the options and tasks that need it) and exits with status 2, as
`common.refusals.usage_error` does, with nothing written. When every file is present it returns at once, opening
none of them (a collection is gigabytes).

Finding the files. ``ir_datasets.load(id)`` gives a dataset whose ``<part>_handler()`` reads one part (TsvQueries,
TrecQrels, TrecDocs, FilteredQueries over another handler, ...). The handler is walked through its attributes, the
way it will stream its data, down to ir_datasets' file objects:

- ``Download`` (a ``DownloadConfig`` entry: a URL, an ir-datasets.com mirror, a ``cache_path`` under
  ``IR_DATASETS_HOME``, maybe a local copy ``downloads/<md5>``): present when its cache path or a local copy exists;
  else it must be downloaded from its URLs;
- ``LocalDownload`` and ``ExpectedFile`` (licensed data a user places by hand, with ir_datasets' instructions):
  present when the file exists;
- ``Cache``, ``TarExtractAll``, ``ZipExtractCache``, ``ReTar`` (a file or folder ir_datasets derives once from
  another): present when it exists, else what it derives from is needed;
- ``RelativePath`` (a file inside an extracted folder): present when the file exists, else its folder is needed;
- ``GzipExtract``, ``Bz2Extract``, ``Lz4Extract``, ``TarExtract``, ``ZipExtract`` (read through on every use): what
  they read is needed; ``StringFile`` and ``PackageDataFile`` are in the package;
- a ``Dataset`` inside a handler (a filtered subset reading its parent): the parent's handler of the same part;
  any other ir_datasets object: its attributes.

Documents are read through ir_datasets' document store: once it is built (a ``.pklz4`` folder beside the
collection), ir_datasets reads documents from it and the collection's files are not needed.

Downloadable. A file that ir_datasets downloads by itself (it has a URL) and is absent is downloadable when a
connection to its host, or to the proxy that ``HTTPS_PROXY``/``HTTP_PROXY`` name, opens within `PROBE_TIMEOUT`
seconds; the download itself is left to ir_datasets. Without the network it is missing, as is an absent file with
no URL.

Not seen: a file a handler opens only from a function or a lazily computed value (the query ids of a ``judged``
subset come from its parent's qrels, which the repository reads as the subset's qrels anyway), and whether a
present file is complete (ir_datasets checks its hash only when it downloads it). A file removed after the check
still fails where ir_datasets reads it, as `common.data.irds.DatasetUnavailableError`.
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

#: What the repository reads of a task (`common.training.tasks`, the samplers, the evaluate commands), as
#: ir_datasets' entity types; a part the dataset lacks is not asked for.
TASK_PARTS = ("docs", "queries", "qrels", "scoreddocs")
#: How a refusal names each part.
PART_NAMES = {"docs": "documents", "queries": "queries", "qrels": "qrels", "scoreddocs": "candidates (scoreddocs)"}
#: Seconds a connection to a download's host may take before the file counts as not downloadable now.
PROBE_TIMEOUT = 5.0


@dataclass(frozen=True)
class Needed:
    """A file ir_datasets lacks: where it keeps it, where it downloads it from, and how else to get it."""

    path: str | None  # None: a download ir_datasets streams on every use, kept nowhere
    urls: tuple[str, ...] = ()
    instructions: str = ""  # ir_datasets' words for data it cannot download (licensed collections)
    derived: bool = False  # ir_datasets makes `path` from the URLs' files (extracts it), rather than saving them as is
    inside: str | None = None  # the present folder or archive that should hold it


def refuse_missing_files(specs: Iterable[Any], options: Iterable[str],
                         parts: Sequence[Iterable[str] | None] | None = None, *, quiet: bool = False) -> None:
    """Exit with status 2, one ``error:`` line per missing file on stderr, where an ``irds:`` task of `specs` needs
    a file that is neither present nor downloadable now; return at once otherwise.

    `specs` are task specs (`common.data.specs.SourceSpec`; others than ``irds:<id>`` are not checked, nor an
    unknown id, which `common.data.specs.check_spec` refuses), `options` the option naming each
    (``--data.train``). `parts`, where given, says per spec which of `TASK_PARTS` the command reads of it (None: all);
    e.g. ``[("queries", "qrels")]`` for a task read only for its queries and qrels. `quiet` exits without a word: for
    the processes of a launch (torchrun, srun) other than its global rank zero, which says it once.
    """
    lines = missing_files(specs, options, parts)
    if lines:
        if not quiet:
            for line in lines:
                print(f"error: {line}", file=sys.stderr)
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
             if isinstance(spec, str) and spec.startswith("irds:") and spec != "irds:"]  # fmt: skip
    if not tasks:
        return []  # ir_datasets is not even imported
    from common.data.irds import load_dataset

    users: dict[Needed, list[tuple[str, str, str]]] = {}  # a file -> (option, dataset id, part) needing it
    for dataset_id, option, want in tasks:
        try:
            dataset = load_dataset(dataset_id)
        except ValueError:
            continue  # an unknown id: check_spec's refusal
        for part in want:
            if part not in TASK_PARTS:
                raise ValueError(f"unknown part {part!r}; the parts are {', '.join(TASK_PARTS)}")
            if hasattr(dataset, f"{part}_handler"):
                for needed in needed_files(dataset, part):
                    users.setdefault(needed, []).append((option, dataset_id, part))
    if not users:
        return []
    endpoints = {url: _endpoint(url) for needed in users for url in needed.urls}
    reachable = _reachable(set(endpoints.values()) - {None})
    return [_line(needed, who, [endpoints[url] or (None, 0) for url in needed.urls]) for needed, who in users.items()
            if not any(reachable.get(endpoints[url]) for url in needed.urls)]  # fmt: skip


def needed_files(dataset: Any, part: str) -> list[Needed]:
    """The files `dataset` (an ir_datasets dataset) lacks for reading its `part` (one of `TASK_PARTS`): present ones
    left out, downloadable ones kept (whether they can be downloaded now is `missing_files`' question)."""
    handler = getattr(dataset, f"{part}_handler")()
    if part == "docs" and _store_built(handler):
        return []
    return list(dict.fromkeys(_Walk(part).needs(handler)))


def _store_built(handler: Any) -> bool:
    """Whether the documents' store is built, so that ir_datasets reads documents from it, not the collection."""
    try:
        return bool(handler.docs_store().built())
    except Exception:  # no store, or one that cannot say: its collection's files are needed
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
                                      ZipExtract, ZipExtractCache)  # fmt: skip

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
                    for needed in self.needs(source)]  # fmt: skip
        if isinstance(obj, RelativePath):
            folder = _place(obj._streamer)
            if folder is not None and os.path.exists(os.path.join(folder, obj._path)):
                return []
            inner = self.needs(obj._streamer)
            if inner or folder is None:
                return inner
            return [Needed(os.path.join(folder, obj._path), inside=str(folder))]
        if isinstance(obj, (GzipExtract, Bz2Extract, Lz4Extract, TarExtract)):
            return self.needs(vars(obj)["_streamer"])  # not the attribute: they pass unknown ones to what they read
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

    cache = download._cache_path if download._cache_path not in (None, os.devnull) else None
    copies = [str(mirror._path) for mirror in download.mirrors if isinstance(mirror, LocalDownload)]
    if any(os.path.exists(path) for path in (cache, *copies) if path):
        return []
    urls = tuple(url for mirror in download.mirrors if (url := getattr(mirror, "url", None) or
                                                        getattr(mirror, "uri", None)))  # fmt: skip
    # Without a URL, the copy is the only source, and its message says how to get it.
    words = "" if urls else " ".join(m._message or "" for m in download.mirrors if isinstance(m, LocalDownload))
    place = cache or (copies[0] if copies else None)
    return [Needed(str(place) if place else None, urls, _one_line(words))]


def _place(obj: Any) -> str | None:
    """Where a file object keeps its file or folder once had (no side effect, unlike some of their ``path()``)."""
    from ir_datasets.datasets.base import ExpectedFile
    from ir_datasets.util import (Bz2Extract, Cache, Download, GzipExtract, LocalDownload, Lz4Extract, RelativePath,
                                  ReTar, TarExtractAll, ZipExtract, ZipExtractCache)  # fmt: skip

    if isinstance(obj, Download):
        return obj._cache_path if obj._cache_path not in (None, os.devnull) else None
    if isinstance(obj, (Cache, LocalDownload, ExpectedFile)):
        return str(obj._path)
    if isinstance(obj, TarExtractAll):
        return str(obj._extract_path)
    if isinstance(obj, ZipExtractCache):
        return str(obj.extract_path)
    if isinstance(obj, ReTar):
        return str(obj._output_file)
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


# --- downloadable now? ----------------------------------------------------------------


def _endpoint(url: str) -> tuple[str, int] | None:
    """The host and port a download of `url` connects to first: its proxy's where one applies, else its own."""
    import urllib.request  # http.client and email with it: only when a file is absent

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

    # Daemon threads: a name lookup that hangs past the timeout (it has none of its own) must not hold the exit.
    threads = [threading.Thread(target=probe, args=(endpoint,), daemon=True) for endpoint in endpoints]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(PROBE_TIMEOUT)
    return {endpoint: answers.get(endpoint, False) for endpoint in endpoints}


# --- the refusal ----------------------------------------------------------------------


def _line(needed: Needed, who: list[tuple[str, str, str]], endpoints: list[tuple[str | None, int]]) -> str:
    """One refusal line: the options and tasks that need the file, the file, and how to get it (`endpoints`: those
    its URLs' downloads would connect to, none of which answered)."""
    tasks = ", ".join(dict.fromkeys(f"{option} irds:{dataset_id}" for option, dataset_id, _ in who))
    *others, last = dict.fromkeys(PART_NAMES[p] for _, _, p in who)
    part = f"{', '.join(others)} and {last}" if others else last
    where = needed.path or "(ir_datasets streams it on each use and keeps no copy)"
    line = f"{tasks}: missing {where}, a file of the {part}"
    if needed.urls:
        origin = " or ".join(needed.urls)
        tried = ", ".join(dict.fromkeys(
            f"{host}:{port}" + ("" if host == urlsplit(url).hostname else " (the proxy)")
            for url, (host, port) in zip(needed.urls, endpoints) if host)) or "a host"  # fmt: skip
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
