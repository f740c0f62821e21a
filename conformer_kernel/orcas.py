"""The ORCAS "clicked queries" document field of the Conformer-Kernel's "NDRM3 + ORCAS" runs (Mitra et al. 2021,
Sec. 4, "Model variants"; Table 1), as the official ``data_utils.py`` builds it: per document, the text of its
clicked queries in click order joined by spaces (``""`` for a document nobody clicked); the featuriser keeps its
first 2,000 terms. `OrcasField` is that read-only lookup ``doc_id -> text``, read from topics and qrels files or
ir_datasets' ``msmarco-document/orcas``, built once into an SQLite cache under ``$EFFICIENT_RANKERS_CACHE/orcas``.

Differences from the official code: each query counts once per document (its first click), clicks of relevance <= 0
and empty queries add nothing."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sqlite3
from collections.abc import Iterable, Iterator
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from common.data import irds
from common.io import built_once, cache_root
from common.data.formats import DataFormatError, iter_qrels, iter_topics

#: What the field reads of its ir_datasets task (`common.data.irds_files`): the clicked queries and their clicks.
ORCAS_PARTS = ("queries", "qrels")
#: Bumped whenever the build's semantics change, so that an old cache is not reused.
FORMAT_VERSION = 1
#: The ir_datasets id of ORCAS.
DEFAULT_DATASET_ID = "msmarco-document/orcas"


class OrcasField:
    """Read-only lookup ``doc_id -> clicked-queries text`` (``""`` if unclicked) in SQLite, usable after a fork."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: no such ORCAS field file")
        self._connection: sqlite3.Connection | None = None
        self._pid: int | None = None

    @classmethod
    def from_files(cls, topics_path: str | os.PathLike, qrels_path: str | os.PathLike,
                   cache_dir: str | os.PathLike | None = None, *, progress: bool = True) -> OrcasField:
        """The field built from a topics file (ORCAS queries) and a qrels file (clicks); cached."""
        inputs = []
        for path in (topics_path, qrels_path):
            resolved = Path(path).resolve()
            if not resolved.is_file():
                raise FileNotFoundError(f"{path}: no such file")
            stat = resolved.stat()
            inputs.append(f"{resolved}\0{stat.st_size}\0{stat.st_mtime_ns}")
        key = _key("files", *inputs)
        path = _cache_dir(cache_dir) / f"{_slug(Path(topics_path).name)}-{key}.sqlite"
        return cls(built_once(path, lambda tmp: _build_from_files(tmp, topics_path, qrels_path, progress),
                              ready=Path.is_file))

    @classmethod
    def from_irds(cls, dataset_id: str = DEFAULT_DATASET_ID, cache_dir: str | os.PathLike | None = None, *,
                  progress: bool = True) -> OrcasField:
        """The field of an ir_datasets dataset's queries and qrels (default: ORCAS), cached by id."""
        path = _cache_dir(cache_dir) / f"irds-{_slug(dataset_id)}-{_key('irds', dataset_id)}.sqlite"
        return cls(built_once(path, lambda tmp: _build_from_irds(tmp, dataset_id, progress), ready=Path.is_file))

    @property
    def _db(self) -> sqlite3.Connection:
        # SQLite connections must not cross a fork (DataLoader workers): reopen per process.
        if self._connection is None or self._pid != os.getpid():
            uri = f"{self.path.resolve().as_uri()}?mode=ro"
            self._connection = sqlite3.connect(uri, uri=True, check_same_thread=False)
            self._pid = os.getpid()
        return self._connection

    def get(self, doc_id: str, default: Any = "") -> Any:
        """`doc_id`'s clicked-queries text, `default` where nobody clicked it."""
        row = self._db.execute("SELECT text FROM field WHERE doc_id = ?", (doc_id,)).fetchone()
        return default if row is None else row[0]

    def __len__(self) -> int:
        """The clicked documents."""
        return self._db.execute("SELECT COUNT(*) FROM field").fetchone()[0]

    @property
    def source(self) -> str:
        """What the field was built from (``files: ...`` or ``irds:<id>``)."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'source'").fetchone()
        return "" if row is None else row[0]

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])


#: An ORCAS field as a config value: ``"irds:<ir_datasets id>"`` or ``{"topics_path": ..., "qrels_path": ...}``.
OrcasSpec = str | dict


def orcas_from_spec(spec: OrcasSpec | None) -> OrcasField | None:
    """The `OrcasField` a config names (None for none); a malformed spec raises ValueError saying why."""
    if spec is None:
        return None
    if isinstance(spec, dict):
        if set(spec) != {"topics_path", "qrels_path"}:
            raise ValueError(f"an ORCAS field from files needs exactly topics_path and qrels_path; got "
                             f"{sorted(map(str, spec))}")
        return OrcasField.from_files(spec["topics_path"], spec["qrels_path"])
    if isinstance(spec, str):
        kind, _, value = spec.partition(":")
        if kind == "irds" and value:
            return OrcasField.from_irds(value)
    raise ValueError(f"cannot read the ORCAS field {spec!r}: expected None, 'irds:<ir_datasets id>' (e.g. "
                     f"'irds:{DEFAULT_DATASET_ID}') or a mapping with topics_path and qrels_path")


def _cache_dir(cache_dir: str | os.PathLike | None) -> Path:
    return Path(cache_dir) if cache_dir is not None else cache_root() / "orcas"


def _key(*parts: str) -> str:
    return hashlib.sha256("\0".join((f"v{FORMAT_VERSION}", *parts)).encode()).hexdigest()[:16]


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "orcas"


def _build_from_files(path: Path, topics_path, qrels_path, progress: bool) -> None:
    topics_label, qrels_label = str(topics_path), str(qrels_path)
    _build(path, iter_topics(topics_path), iter_qrels(qrels_path),
           duplicate_query=lambda number, qid: DataFormatError(topics_label, number, f"duplicate topic id {qid!r}"),
           unknown_query=lambda number, qid: DataFormatError(qrels_label, number, f"query id {qid!r} is not in the "
                                                             f"topics file {topics_label}"),
           source=f"files: topics={Path(topics_path).resolve()} qrels={Path(qrels_path).resolve()}",
           name=Path(qrels_path).name, progress=progress)


def _build_from_irds(path: Path, dataset_id: str, progress: bool) -> None:
    dataset = irds.load_dataset(dataset_id)
    for entity in ("queries", "qrels"):
        has = getattr(dataset, f"has_{entity}", None)
        if has is not None and not has():
            raise ValueError(f"ir_datasets dataset {dataset_id!r} has no {entity}; the ORCAS field needs both")

    def records(part: str, fields) -> Iterator[tuple]:  # (number, *fields(record)), numbered from 1
        with irds._reading(dataset_id, part):
            for number, record in enumerate(getattr(dataset, f"{part}_iter")(), start=1):
                yield number, *fields(record)

    _build(path, records("queries", lambda query: (str(query.query_id), irds.query_text(query))),
           records("qrels", lambda qrel: (str(qrel.query_id), str(qrel.doc_id), int(qrel.relevance))),
           duplicate_query=lambda number, qid: DataFormatError(
               f"ir_datasets:{dataset_id} queries", None, f"duplicate query id {qid!r} (record {number})"),
           unknown_query=lambda number, qid: DataFormatError(
               f"ir_datasets:{dataset_id} qrels", None, f"query id {qid!r} is not among the queries (record {number})"),
           source=f"irds:{dataset_id}", name=dataset_id, progress=progress)


def _build(path: Path, queries: Iterable[tuple[int, str, str]], clicks: Iterable[tuple[int, str, str, int]], *,
           duplicate_query, unknown_query, source: str, name: str, progress: bool) -> None:
    """Write the field of `clicks` over `queries` to `path` (`built_once`'s own), staged in a database beside it."""
    stage = path.with_name(f"{path.name}.stage")  # built_once's temporary `path` is unique, so is this
    try:
        with contextlib.closing(sqlite3.connect(path)) as db:
            db.execute("ATTACH DATABASE ? AS stage", (str(stage),))
            for schema in ("main", "stage"):
                db.execute(f"PRAGMA {schema}.journal_mode = OFF")
                db.execute(f"PRAGMA {schema}.synchronous = OFF")
            db.execute("PRAGMA cache_size = -262144")  # 256 MiB for the staging index and sort
            db.execute("CREATE TABLE stage.queries (qid TEXT PRIMARY KEY, text TEXT NOT NULL) WITHOUT ROWID")
            db.execute("CREATE TABLE stage.clicks (qid TEXT NOT NULL, doc_id TEXT NOT NULL, number INTEGER NOT NULL)")

            for number, qid, text in tqdm(queries, desc=f"ORCAS queries ({name})", unit=" queries",
                                          disable=not progress):
                try:
                    db.execute("INSERT INTO stage.queries VALUES (?, ?)", (qid, text))
                except sqlite3.IntegrityError:
                    raise duplicate_query(number, qid) from None

            kept = ((qid, doc_id, number) for number, qid, doc_id, rel
                    in tqdm(clicks, desc=f"ORCAS clicks ({name})", unit=" clicks", disable=not progress) if rel > 0)
            db.executemany("INSERT INTO stage.clicks VALUES (?, ?, ?)", kept)

            unknown = db.execute("SELECT c.number, c.qid FROM stage.clicks AS c WHERE NOT EXISTS (SELECT 1 FROM "
                                 "stage.queries AS q WHERE q.qid = c.qid) ORDER BY c.rowid LIMIT 1").fetchone()
            if unknown is not None:
                raise unknown_query(*unknown)

            # A covering index lists each document's clicks in input order (`number` grows with the input).
            db.execute("CREATE INDEX stage.clicks_by_doc ON clicks (doc_id, number, qid)")
            db.execute("CREATE TABLE field (doc_id TEXT PRIMARY KEY, text TEXT NOT NULL)")
            db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            (documents,) = db.execute("SELECT COUNT(DISTINCT doc_id) FROM stage.clicks").fetchone()
            rows = db.execute("SELECT c.doc_id, c.qid, q.text FROM stage.clicks AS c JOIN stage.queries AS q "
                              "ON q.qid = c.qid ORDER BY c.doc_id, c.number")
            fields = tqdm(_fields(rows), total=documents, desc=f"ORCAS field ({name})", unit=" docs",
                          disable=not progress)
            db.executemany("INSERT INTO field VALUES (?, ?)", fields)
            (total_clicks,) = db.execute("SELECT COUNT(*) FROM stage.clicks").fetchone()
            (written,) = db.execute("SELECT COUNT(*) FROM field").fetchone()
            meta = [("source", source), ("format_version", str(FORMAT_VERSION)), ("clicks", str(total_clicks)),
                    ("documents", str(written))]
            db.executemany("INSERT INTO meta VALUES (?, ?)", meta)
            db.commit()
            db.execute("DETACH DATABASE stage")
    finally:
        stage.unlink(missing_ok=True)


def _fields(rows: Iterable[tuple[str, str, str]]) -> Iterator[tuple[str, str]]:
    """``(doc_id, text)`` from rows sorted by document then click order: each query once, joined by spaces."""
    for doc_id, clicks in groupby(rows, key=itemgetter(0)):
        texts: dict[str, str] = {}
        for _, qid, text in clicks:
            texts.setdefault(qid, text)  # each query at its first click
        if any(texts.values()):
            yield doc_id, " ".join(text for text in texts.values() if text)
