"""A ranking task from an ir_datasets id (`IrDatasetsSource`), through the `common.data.source.RankingSource` interface.

A repeated pair or a NaN score is a `DataFormatError` (ir_datasets' ``qrels_dict()`` keeps the last); scoreddocs
that all score the same are warned about. Documents map to ``Document(doc_id, text, title, url)``, the text from
``doc_text_field``, else ``body``/``text``, else ``default_text()`` with title and url blanked. An unknown id is an
`UnknownDatasetError` with close matches; files ir_datasets cannot get, a `DatasetUnavailableError` naming them. The
document store is built once under a lock beside it, however many processes open it (`_built_store`).
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import math
import os
import time
import warnings
from collections.abc import Iterable, Iterator
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common.data.docstore import Lookup
from common.data.formats import DataFormatError, Document, Qrels, Run, Topics
from common.data.source import read_once
from common.io import build_lock, built_once, cache_root, record_cache

if TYPE_CHECKING:
    from common.data.training_table import TrainingTable
    from common.data.triples import TriplesTable

TITLE_FIELDS = ("title", "headline")
#: Fields that hold the document body as-is, first string one wins (bytes bodies, GOV's, are skipped).
BODY_FIELDS = ("body", "text")
URL_FIELDS = ("url",)
#: Query fields tried when a query class has no ``default_text()`` (ir_datasets < 0.5).
QUERY_FALLBACK_FIELDS = ("text", "query", "title")

_ALL_SOURCES_FAILED = "All download sources failed"


class UnknownDatasetError(ValueError):
    """An id that is not in ``ir_datasets.registry``; ``matches`` holds the closest registered ids."""

    def __init__(self, dataset_id: str, matches: list[str]):
        self.dataset_id, self.matches = dataset_id, matches
        hint = "did you mean one of: " + ", ".join(matches) if matches else "no registered id is close to it"
        super().__init__(f"unknown ir_datasets id {dataset_id!r}; {hint}? (all ids: `python3 -m ir_datasets list`, "
                         f"or https://ir-datasets.com)")


class DatasetUnavailableError(RuntimeError):
    """ir_datasets could not get a dataset's files: a download failed (no network?) or a local file is missing."""

    def __init__(self, dataset_id: str, part: str, home: Path, expected: list[str], cause: str):
        self.dataset_id, self.part, self.home, self.expected = dataset_id, part, home, expected
        said = [f"ir_datasets dataset {dataset_id!r}: could not get the files for its {part} "
                f"(ir_datasets downloads them on first use: no network, or a required local file is missing);",
                f"ir_datasets keeps its files under IR_DATASETS_HOME={home} (default ~/.ir_datasets; "
                f"set the variable before ir_datasets is imported);"]
        if expected:
            said.append("to use the dataset offline, put a copy of each file where ir_datasets expects it: "
                        + "; ".join(expected) + ";")
        said.append(f"cause: {cause}")
        super().__init__(" ".join(" ".join(text.split()) for text in said))


def close_matches(dataset_id: str, known: Iterable[str], n: int = 8) -> list[str]:
    """Registered ids close to `dataset_id`: difflib's best, then ids containing it (``robust04``)."""
    known = list(known)
    matches = difflib.get_close_matches(dataset_id, known, n=n, cutoff=0.6)
    needle = dataset_id.lower()
    matches += sorted((k for k in known if needle and needle in k.lower()), key=len)
    return list(dict.fromkeys(matches))[:n]


def load_dataset(dataset_id: str) -> Any:
    """``ir_datasets.load(dataset_id)`` (a registry lookup, no download), or `UnknownDatasetError`."""
    import ir_datasets

    try:
        return ir_datasets.load(dataset_id)
    except KeyError:
        raise UnknownDatasetError(dataset_id, close_matches(dataset_id, ir_datasets.registry)) from None


@contextlib.contextmanager
def _reading(dataset_id: str, part: str) -> Iterator[None]:
    """Turn ir_datasets' failures to get files into `DatasetUnavailableError`; note the dataset on others."""
    try:
        yield
    except (DatasetUnavailableError, DataFormatError, KeyError):
        raise
    except Exception as error:
        if isinstance(error, OSError) or (isinstance(error, RuntimeError) and error.args[:1] == (_ALL_SOURCES_FAILED,)):
            raise _unavailable(dataset_id, part, error) from error
        if hasattr(error, "add_note"):
            error.add_note(f"(while reading the {part} of ir_datasets dataset {dataset_id!r})")
        raise


def _unavailable(dataset_id: str, part: str, error: BaseException) -> DatasetUnavailableError:
    home = Path(os.environ.get("IR_DATASETS_HOME") or Path.home() / ".ir_datasets")  # as ir_datasets decides
    return DatasetUnavailableError(dataset_id, part, home, _expected_files(dataset_id, part), _describe(error))


def _expected_files(dataset_id: str, part: str) -> list[str]:
    """The files ir_datasets lacks for reading `part` of the dataset (`common.data.irds_files.needed_files`)."""
    from common.data.irds_files import needed_files

    dataset, part = load_dataset(dataset_id), "docs" if part == "documents" else part
    needed = needed_files(dataset, part) if hasattr(dataset, f"{part}_handler") else []
    return [f"{n.path}  (from {' or '.join(n.urls)})" if n.urls else str(n.path) for n in needed if n.path]


def _describe(error: BaseException, limit: int = 1000) -> str:
    if isinstance(error, RuntimeError) and error.args[:1] == (_ALL_SOURCES_FAILED,) and len(error.args) > 1:
        tried = "; ".join(f"{getattr(m, 'url', None) or getattr(m, '_path', None) or type(m).__name__}: "
                          f"{_describe(cause, 240)}" for m, cause in error.args[1])
        return f"{_ALL_SOURCES_FAILED}: {tried}"
    root = error
    for _ in range(8):
        inner = getattr(root, "reason", None)
        if not isinstance(inner, BaseException):
            inner = root.args[0] if root.args and isinstance(root.args[0], BaseException) else None
        if inner is None:
            break
        root = inner
    text = f"{type(error).__name__}: {root}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def query_text(query: Any, field: str | None = None) -> str:
    """A query namedtuple's text: `field`, else ``default_text()``, else the first of text/query/title."""
    if field is not None:
        value = getattr(query, field)
    elif hasattr(query, "default_text"):
        value = query.default_text()
    else:
        value = next((getattr(query, f) for f in QUERY_FALLBACK_FIELDS if isinstance(getattr(query, f, None), str)),
                     None)
        if value is None:
            raise ValueError(f"query {query.query_id!r} ({type(query).__name__}) has no default_text() and none of the "
                             f"fields {QUERY_FALLBACK_FIELDS}; pass query_field= one of "
                             f"{getattr(query, '_fields', ())}")
    if not isinstance(value, str):
        raise ValueError(f"query field {field!r} of {type(query).__name__} is a {type(value).__name__}, not text")
    return value.strip()


def to_document(doc: Any, text_field: str | None = None) -> Document:
    """An ir_datasets document namedtuple as ``Document(doc_id, text, title, url)`` (see the module docstring)."""
    title, url = _first_string(doc, TITLE_FIELDS) or "", _first_string(doc, URL_FIELDS) or ""
    if text_field is not None:
        text = getattr(doc, text_field)
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        if not isinstance(text, str):
            raise ValueError(f"document field {text_field!r} of {type(doc).__name__} is a {type(text).__name__}")
    else:
        text = _body(doc)
    return Document(str(doc.doc_id), text, title, url)


def _first_string(doc: Any, fields: tuple[str, ...]) -> str | None:
    return next((v for f in fields if isinstance(v := getattr(doc, f, None), str)), None)


def _body(doc: Any) -> str:
    body = _first_string(doc, BODY_FIELDS)
    if body is not None:
        return body
    blanks = {f: "" for f in (*TITLE_FIELDS, *URL_FIELDS) if isinstance(getattr(doc, f, None), str)}
    if hasattr(doc, "default_text"):
        stripped = doc._replace(**blanks) if blanks and hasattr(doc, "_replace") else doc
        return stripped.default_text().strip()
    skip = {"doc_id", *blanks}
    return " ".join(v for f, v in zip(doc._fields, doc) if f not in skip and isinstance(v, str) and v)


class IrDatasetsDocuments(Lookup):
    """`DocumentLookup` over an ir_datasets docstore; picklable, reopened after a fork."""

    def __init__(self, dataset_id: str, dataset: Any = None, text_field: str | None = None):
        self.dataset_id, self.text_field, self._dataset = dataset_id, text_field, dataset
        self._store: Any = None
        self._pid: int | None = None

    def prepare(self) -> None:
        """Open the document store in this process, building it first where ir_datasets has not (`_built_store`)."""
        if self._store is None or self._pid != os.getpid():
            if self._dataset is None:
                self._dataset = load_dataset(self.dataset_id)
            with _reading(self.dataset_id, "documents"):
                self._store = _built_store(self._dataset, self.dataset_id)
            self._pid = os.getpid()

    def _fetch(self, doc_ids: list[str]) -> dict[str, Any]:
        self.prepare()
        with _reading(self.dataset_id, "documents"):
            return self._store.get_many(doc_ids)

    def __getitem__(self, doc_id: str) -> Document:
        found = self._fetch([doc_id])
        if doc_id not in found:
            raise KeyError(f"document {doc_id!r} is not in ir_datasets dataset {self.dataset_id!r}")
        return to_document(found[doc_id], self.text_field)

    def get_many(self, doc_ids: Iterable[str]) -> list[Document]:
        """Documents in the order asked (repeats allowed); a missing id raises KeyError."""
        asked = list(doc_ids)
        found = self._fetch(list(dict.fromkeys(asked)))
        missing = [d for d in dict.fromkeys(asked) if d not in found]
        if missing:
            shown = ", ".join(repr(d) for d in missing[:5]) + (", ..." if len(missing) > 5 else "")
            raise KeyError(f"{len(missing)} document(s) not in ir_datasets dataset {self.dataset_id!r}: {shown}")
        converted = {d: to_document(found[d], self.text_field) for d in found}
        return [converted[d] for d in asked]

    def __contains__(self, doc_id: object) -> bool:
        return isinstance(doc_id, str) and doc_id in self._fetch([doc_id])

    def documents(self) -> Iterator[Document]:
        if self._dataset is None:
            self._dataset = load_dataset(self.dataset_id)
        with _reading(self.dataset_id, "documents"):
            for doc in self._dataset.docs_iter():
                yield to_document(doc, self.text_field)

    def __iter__(self) -> Iterator[str]:
        """Document ids in collection order, as `DocumentStore` gives them (random negatives, impact indexes)."""
        return (doc.doc_id for doc in self.documents())

    def __repr__(self) -> str:
        return f"IrDatasetsDocuments({self.dataset_id!r})"

    def __getstate__(self) -> dict:
        return {"dataset_id": self.dataset_id, "text_field": self.text_field}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["dataset_id"], None, state["text_field"])


def _cache_key(dataset_id: str, version: object) -> str:
    digest = hashlib.sha256(json.dumps([dataset_id, version]).encode()).hexdigest()[:16]
    return f"{dataset_id.replace('/', '--')}-{digest}"


def _built_store(dataset: Any, dataset_id: str) -> Any:
    """`dataset`'s document store, built (once, whichever processes open it at once) before it is returned."""
    store = _opened_store(dataset)
    path = getattr(store, "path", None)
    if not callable(getattr(store, "build", None)) or not isinstance(path, (str, os.PathLike)):
        return store
    path = Path(path).absolute()
    parent = next((p for p in path.parents if p.exists()), None)
    if parent is None or not os.access(parent, os.W_OK):
        record_cache(path, False)
        return store
    start = time.monotonic()
    with build_lock(path):
        store = dataset.docs_store()
        built = getattr(store, "built", None)
        building = not (callable(built) and built())
        store.build()
    record_cache(path, building, time.monotonic() - start)
    return store


#: Tries, a tenth of a second apart, to open a store whose metadata a build under way is writing (`_opened_store`).
OPEN_TRIES = 20


def _opened_store(dataset: Any) -> Any:
    tries = 1
    while True:
        try:
            return dataset.docs_store()
        except AssertionError:
            if tries == OPEN_TRIES:
                raise
            tries += 1
            time.sleep(0.1)


class IrDatasetsSource:
    """A `RankingSource` read from an ir_datasets id; each part is read on first use and cached."""

    #: Its collection holds every judged and retrieved document (`common.training.tasks` checks none).
    complete_collection = True

    def __init__(self, dataset_id: str, query_field: str | None = None, *, doc_text_field: str | None = None,
                 name: str | None = None):
        self.dataset_id, self.query_field, self.doc_text_field = dataset_id, query_field, doc_text_field
        self.name = name or dataset_id
        self._dataset  # resolve the id now (registry only): a typo in a config fails here, not hours later
        self._check_field("queries", query_field, "query_field")
        self._check_field("docs", doc_text_field, "doc_text_field")

    def __repr__(self) -> str:
        return f"IrDatasetsSource({self.dataset_id!r}, query_field={self.query_field!r})"

    def provides(self) -> set[str]:
        has = {"topics": "queries", "qrels": "qrels", "candidates": "scoreddocs", "documents": "docs"}
        return {part for part, entity in has.items() if self._has(entity)}

    @cached_property
    def _dataset(self) -> Any:
        return load_dataset(self.dataset_id)

    @read_once
    def topics(self) -> Topics:
        self._require("queries", "topics (queries)")
        topics: Topics = {}
        with _reading(self.dataset_id, "queries"):
            for number, query in enumerate(self._dataset.queries_iter(), start=1):
                qid = str(query.query_id)
                if qid in topics:
                    raise DataFormatError(self._label("queries"), None, f"duplicate query id {qid!r} (record {number})")
                topics[qid] = query_text(query, self.query_field)
        return topics

    @read_once
    def qrels(self) -> Qrels:
        self._require("qrels", "qrels")
        with _reading(self.dataset_id, "qrels"):
            records = ((q.query_id, q.doc_id, int(q.relevance)) for q in self._dataset.qrels_iter())
            return self._by_query("qrels", records, "duplicate judgment for query {qid!r}, document {doc_id!r}")

    @read_once
    def candidates(self) -> Run:
        self._require_scoreddocs()
        with _reading(self.dataset_id, "scoreddocs"):
            records = ((s.query_id, s.doc_id, float(s.score)) for s in self._dataset.scoreddocs_iter())
            run = self._by_query("scoreddocs", records, "document {doc_id!r} retrieved twice for query {qid!r}")
        distinct = {score for scores in run.values() for score in scores.values()}
        if len(distinct) == 1 and sum(map(len, run.values())) > 1:
            self._warn_unscored(distinct.pop())
        return run

    def _by_query(self, entity: str, records: Iterable[tuple[Any, Any, float]], repeated: str) -> dict[str, dict]:
        """``{qid: {doc_id: value}}`` of (qid, doc_id, value) `records`; a NaN score or a repeated pair is refused."""
        nested: dict[str, dict] = {}
        for number, (qid, doc_id, value) in enumerate(records, start=1):
            qid, doc_id = str(qid), str(doc_id)
            if isinstance(value, float) and math.isnan(value):
                raise DataFormatError(self._label(entity), None, f"NaN score (record {number})")
            if doc_id in nested.setdefault(qid, {}):
                raise DataFormatError(self._label(entity), None,
                                      f"{repeated.format(qid=qid, doc_id=doc_id)} (record {number})")
            nested[qid][doc_id] = value
        return nested

    def _require_scoreddocs(self) -> None:
        if not self._has("scoreddocs"):
            raise ValueError(f"ir_datasets dataset {self.dataset_id!r} has no scoreddocs (first-stage candidates); "
                             f"create a candidate run with BM25 over its documents (common.data.bm25), e.g. "
                             f"bm25_retrieve(source.documents().documents(), source.topics(), k=100), and use that run "
                             f"as the candidates")

    def _warn_unscored(self, score: float) -> None:
        warnings.warn(f"the scoreddocs of ir_datasets dataset {self.dataset_id!r} all score {score}: the candidates "
                      "have no first-stage order (ties fall back to doc id); for a ranked candidate list build a BM25 "
                      "run (common.data.bm25)", stacklevel=4)

    @read_once
    def documents(self) -> IrDatasetsDocuments:
        self._require("docs", "documents")
        return IrDatasetsDocuments(self.dataset_id, self._dataset, self.doc_text_field)

    def training_table(self) -> TrainingTable:
        """The qrels and scoreddocs as a `TrainingTable`, streamed once into the cache (``training/<key>``)."""
        from common.data.training_table import FORMAT, TrainingTable

        folder = cache_root() / "training" / _cache_key(self.dataset_id, FORMAT)
        return TrainingTable.saved(folder, self._training_table, {"ir_datasets": self.dataset_id})

    def triples_table(self) -> TriplesTable:
        """The docpairs (query, ``doc_id_a`` the positive, ``doc_id_b`` the negative: MS MARCO's provided training
        triples) as a `common.data.triples.TriplesTable`, streamed once into the cache (``triples/<key>``)."""
        from common.data.triples import FORMAT, TriplesTable

        folder = cache_root() / "triples" / _cache_key(self.dataset_id, FORMAT)
        return TriplesTable.saved(folder, self._triples_table, {"ir_datasets": self.dataset_id})

    def _triples_table(self) -> TriplesTable:
        from tqdm.auto import tqdm

        from common.data.triples import TriplesTable

        self._require("docpairs", "training triples (docpairs)")
        with _reading(self.dataset_id, "docpairs"):
            return TriplesTable.of((str(pair.query_id), str(pair.doc_id_a), str(pair.doc_id_b)) for pair in tqdm(
                self._dataset.docpairs_iter(), desc=f"tabling {self.dataset_id} docpairs", unit=" triples"))

    def collection_ids(self):
        """The collection's document ids in its order as a memory-mapped numpy array, cached once."""
        import numpy as np

        path = cache_root() / "collections" / f"{_cache_key(self.dataset_id, 'ids')}.npy"

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as f:
                ids = [doc_id.encode("utf-8") for doc_id in self.documents()]
                np.save(f, np.array(ids, dtype=np.bytes_), allow_pickle=False)

        return np.load(built_once(path, write), mmap_mode="r", allow_pickle=False)

    def _training_table(self) -> TrainingTable:
        from tqdm.auto import tqdm

        from common.data.training_table import TableBuilder

        self._require("qrels", "qrels")
        self._require_scoreddocs()
        builder = TableBuilder(self._label("qrels"), self._label("scoreddocs"))
        with _reading(self.dataset_id, "qrels"):
            builder.add_qrels((str(q.query_id), str(q.doc_id), int(q.relevance)) for q in tqdm(
                self._dataset.qrels_iter(), desc=f"tabling {self.dataset_id} qrels", unit=" judgments"))
        with _reading(self.dataset_id, "scoreddocs"):
            builder.add_candidates((str(s.query_id), str(s.doc_id), float(s.score)) for s in tqdm(
                self._dataset.scoreddocs_iter(), desc=f"tabling {self.dataset_id} scoreddocs", unit=" candidates"))
        if len(builder.distinct_scores) == 1 and builder.candidate_count > 1:
            self._warn_unscored(builder.distinct_scores.pop())
        return builder.table()

    def _has(self, entity: str) -> bool:
        return bool(getattr(self._dataset, f"has_{entity}")())

    def _require(self, entity: str, what: str) -> None:
        if not self._has(entity):
            raise ValueError(f"ir_datasets dataset {self.dataset_id!r} has no {what}")

    def _label(self, part: str) -> str:
        return f"ir_datasets:{self.dataset_id} {part}"

    def _check_field(self, entity: str, field: str | None, argument: str) -> None:
        if field is None or not self._has(entity):
            return
        try:
            fields = getattr(self._dataset, f"{entity}_cls")()._fields
        except Exception:
            return
        if field not in fields:
            raise ValueError(f"{argument}={field!r} is not a field of the {entity} of ir_datasets dataset "
                             f"{self.dataset_id!r}; its fields are {', '.join(fields)}")

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_dataset", None)
        return state
