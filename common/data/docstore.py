"""Random-access document store: look up 100 candidates without loading 3 million documents.

A collection file (TSV or JSONL, see `common.data.formats`) is streamed once into
an SQLite table ``docs(doc_id, title, text, url)`` keyed by document id. The
store is built atomically (a temporary database renamed into place) in a cache
folder, keyed by the collection's resolved path, size and modification time, and
reused by every later run; processes that ask for it at once (DDP ranks) build it
once (`common.io.built_once`).

Each store is stamped with `SCHEMA_VERSION` (SQLite's ``user_version``). A
cached store of an older schema (version 0: built before documents had a url,
so without a ``url`` column) is rebuilt in place by `DocumentStore.for_collection`
rather than read with its urls missing; opening one directly raises
`StaleStoreError`.

The cache folder is ``$EFFICIENT_RANKERS_CACHE/docstore`` if that variable is
set, else ``~/.cache/efficient-rankers/docstore``.

`Lookup` is what every document lookup (this store, `common.data.irds.IrDatasetsDocuments`,
`common.data.source.InMemoryDocuments`) answers from its ``lookup[doc_id]``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from tqdm.auto import tqdm

from common.data.formats import DataFormatError, Document, iter_collection
from common.io import built_once, cache_root


#: Layout of the ``docs`` table; bump it whenever the table changes, so that cached stores are rebuilt.
#: 0 (SQLite's default user_version): doc_id, title, text. 1: doc_id, title, text, url.
SCHEMA_VERSION = 1


class StaleStoreError(RuntimeError):
    """A store built with another table layout than this code reads (see `SCHEMA_VERSION`)."""


class Lookup:
    """`get` and `get_many` of a document lookup whose ``lookup[doc_id]`` raises KeyError for an absent id."""

    def __getitem__(self, doc_id: str) -> Document:
        raise NotImplementedError

    def get(self, doc_id: str, default: Document | None = None) -> Document | None:
        try:
            return self[doc_id]
        except KeyError:
            return default

    def get_many(self, doc_ids: Iterable[str]) -> list[Document]:
        """Documents in the order asked; a missing id raises KeyError."""
        return [self[doc_id] for doc_id in doc_ids]

    def prepare(self) -> None:
        """Build what the lookups read where it is not built yet (a lookup built when it is made has nothing to do)."""


class DocumentStore(Lookup):
    """Read-only mapping ``doc_id -> Document`` backed by SQLite; safe to use after a fork."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: no such document store")
        self._connection: sqlite3.Connection | None = None
        self._pid: int | None = None

    @classmethod
    def build(
        cls, collection: str | os.PathLike, path: str | os.PathLike, *, overwrite: bool = False, progress: bool = True
    ) -> DocumentStore:
        """Stream `collection` into a new store at `path`; a repeated document id is an error."""
        path = Path(path)
        if path.exists() and not overwrite:
            raise FileExistsError(f"{path} already exists; refusing to overwrite it")
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            with contextlib.closing(sqlite3.connect(tmp)) as db:
                db.execute("PRAGMA journal_mode = OFF")
                db.execute("PRAGMA synchronous = OFF")
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                db.execute("CREATE TABLE docs (doc_id TEXT PRIMARY KEY, title TEXT NOT NULL, text TEXT NOT NULL, "
                           "url TEXT NOT NULL)")
                documents = tqdm(iter_collection(collection), desc=f"indexing {Path(collection).name}", unit=" docs",
                                 disable=not progress)
                for number, doc in enumerate(documents, start=1):
                    try:
                        db.execute("INSERT INTO docs VALUES (?, ?, ?, ?)", (doc.doc_id, doc.title, doc.text, doc.url))
                    except sqlite3.IntegrityError:
                        raise DataFormatError(collection, number, f"duplicate document id {doc.doc_id!r}") from None
                db.commit()
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        return cls(path)

    @classmethod
    def for_collection(
        cls, collection: str | os.PathLike, cache_dir: str | os.PathLike | None = None, *, progress: bool = True
    ) -> DocumentStore:
        """The cached store of `collection`, built on first use and reused while the file is unchanged.

        Built once however many processes (DDP ranks) ask at once (`common.io.built_once`): the others wait and
        open the finished store. A cached store of another `SCHEMA_VERSION` (an older build without urls) is
        rebuilt, atomically replacing it, instead of being reused.
        """
        collection = Path(collection).resolve()
        if not collection.is_file():
            raise FileNotFoundError(f"{collection}: no such collection file")
        stat = collection.stat()
        key = hashlib.sha256(f"{collection}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()[:16]
        path = Path(cache_dir or cache_root() / "docstore") / f"{collection.stem}-{key}.sqlite"
        built_once(path, lambda tmp: cls.build(collection, tmp, progress=progress),
                   ready=lambda store: store.is_file() and schema_version(store) == SCHEMA_VERSION)
        return cls(path)

    @property
    def _db(self) -> sqlite3.Connection:
        # SQLite connections must not cross a fork (DataLoader workers): reopen per process.
        if self._connection is None or self._pid != os.getpid():
            uri = f"{self.path.resolve().as_uri()}?mode=ro"
            connection = sqlite3.connect(uri, uri=True, check_same_thread=False)
            try:
                _check_schema(self.path, connection)
            except StaleStoreError:
                connection.close()
                raise
            self._connection, self._pid = connection, os.getpid()
        return self._connection

    def __getitem__(self, doc_id: str) -> Document:
        row = self._db.execute("SELECT title, text, url FROM docs WHERE doc_id = ?", (doc_id,)).fetchone()
        if row is None:
            raise KeyError(f"document {doc_id!r} is not in {self.path}")
        title, text, url = row
        return Document(doc_id, text, title, url)

    def __contains__(self, doc_id: object) -> bool:
        return self._db.execute("SELECT 1 FROM docs WHERE doc_id = ?", (doc_id,)).fetchone() is not None

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM docs").fetchone()[0]

    def __iter__(self) -> Iterator[str]:
        for (doc_id,) in self._db.execute("SELECT doc_id FROM docs ORDER BY rowid"):
            yield doc_id

    def documents(self) -> Iterator[Document]:
        """Every document in collection order."""
        for doc_id, title, text, url in self._db.execute("SELECT doc_id, title, text, url FROM docs ORDER BY rowid"):
            yield Document(doc_id, text, title, url)

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])


def schema_version(path: str | os.PathLike) -> int:
    """The `SCHEMA_VERSION` a store was built with (0 for stores built before versions were stamped)."""
    uri = f"{Path(path).resolve().as_uri()}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        return _stamped_version(db)


def _stamped_version(db: sqlite3.Connection) -> int:
    return db.execute("PRAGMA user_version").fetchone()[0]


def _check_schema(path: Path, db: sqlite3.Connection) -> None:
    # Reading an old store would fail on the missing url column deep in a DataLoader worker; say why here.
    version = _stamped_version(db)
    if version != SCHEMA_VERSION:
        raise StaleStoreError(
            f"{path}: document store of schema version {version}, this code reads version {SCHEMA_VERSION} "
            f"(version 0 has no url column); rebuild it with DocumentStore.build(collection, path, overwrite=True) "
            f"(DocumentStore.for_collection rebuilds its cached stores by itself)"
        )
