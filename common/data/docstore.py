"""Random-access document store: a collection streamed once into SQLite ``docs(doc_id, title, text, url)``, built
atomically and once (`common.io.built_once`) in ``$EFFICIENT_RANKERS_CACHE/docstore``, keyed by the file's content.
Opened read-only with ``immutable=1`` (no lock or change check per statement: cheap on NFS); a store of an older
`SCHEMA_VERSION` is rebuilt by `DocumentStore.for_collection`. `Lookup` is every document lookup's interface.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from tqdm.auto import tqdm

from common.data.formats import DataFormatError, Document, iter_collection
from common.io import built_once, cache_root, file_digest, renamed_on_success


#: Layout of the ``docs`` table (0: doc_id, title, text; 1: with url); cached stores of another are rebuilt.
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


#: Host parameters of one statement where SQLite cannot be asked (Python < 3.11): SQLite's default before 3.32.
VARIABLE_LIMIT = 999


class DocumentStore(Lookup):
    """Read-only mapping ``doc_id -> Document`` backed by SQLite; safe to use after a fork."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: no such document store")
        self._connection: sqlite3.Connection | None = None
        self._pid: int | None = None

    @classmethod
    def build(cls, collection: str | os.PathLike, path: str | os.PathLike, *, overwrite: bool = False,
              progress: bool = True) -> DocumentStore:
        path = Path(path)
        if path.exists() and not overwrite:
            raise FileExistsError(f"{path} already exists; refusing to overwrite it")
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        with renamed_on_success(Path(tmp), path), contextlib.closing(sqlite3.connect(tmp)) as db:
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
        return cls(path)

    @classmethod
    def for_collection(cls, collection: str | os.PathLike, cache_dir: str | os.PathLike | None = None, *,
                       progress: bool = True) -> DocumentStore:
        """The cached store of `collection`, built on first use, reused for any file of the same content."""
        collection = Path(collection).resolve()
        if not collection.is_file():
            raise FileNotFoundError(f"{collection}: no such collection file")
        key = file_digest(collection)[:16]
        path = Path(cache_dir or cache_root() / "docstore") / f"{collection.stem}-{key}.sqlite"
        built_once(path, lambda tmp: cls.build(collection, tmp, progress=progress),
                   ready=lambda store: store.is_file() and schema_version(store) == SCHEMA_VERSION)
        return cls(path)

    @property
    def _db(self) -> sqlite3.Connection:
        if self._connection is None or self._pid != os.getpid():
            connection = _read_only(self.path, check_same_thread=False)
            version = _stamped_version(connection)
            if version != SCHEMA_VERSION:
                connection.close()
                raise StaleStoreError(f"{self.path}: document store of schema version {version}, this code reads "
                                      f"version {SCHEMA_VERSION} (version 0 has no url column); rebuild it with "
                                      "DocumentStore.build(collection, path, overwrite=True) "
                                      "(DocumentStore.for_collection rebuilds its cached stores by itself)")
            self._connection, self._pid = connection, os.getpid()
        return self._connection

    def __getitem__(self, doc_id: str) -> Document:
        row = self._db.execute("SELECT title, text, url FROM docs WHERE doc_id = ?", (doc_id,)).fetchone()
        if row is None:
            raise KeyError(f"document {doc_id!r} is not in {self.path}")
        title, text, url = row
        return Document(doc_id, text, title, url)

    def get_many(self, doc_ids: Iterable[str]) -> list[Document]:
        """Documents in the order asked, one statement per `variable_limit` distinct ids."""
        asked = list(doc_ids)
        distinct = list(dict.fromkeys(asked))
        found: dict[str, Document] = {}
        step = self.variable_limit()
        for start in range(0, len(distinct), step):
            chunk = distinct[start : start + step]
            rows = self._db.execute(f"SELECT doc_id, title, text, url FROM docs WHERE doc_id IN "
                                    f"({', '.join('?' * len(chunk))})", chunk)
            found.update((doc_id, Document(doc_id, text, title, url)) for doc_id, title, text, url in rows)
        missing = [doc_id for doc_id in distinct if doc_id not in found]
        if missing:
            shown = ", ".join(repr(d) for d in missing[:5]) + (", ..." if len(missing) > 5 else "")
            raise KeyError(f"{len(missing)} document(s) not in {self.path}: {shown}")
        return [found[doc_id] for doc_id in asked]

    def variable_limit(self) -> int:
        getlimit = getattr(self._db, "getlimit", None)
        return getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) if getlimit is not None else VARIABLE_LIMIT

    def __contains__(self, doc_id: object) -> bool:
        return self._db.execute("SELECT 1 FROM docs WHERE doc_id = ?", (doc_id,)).fetchone() is not None

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM docs").fetchone()[0]

    def __iter__(self) -> Iterator[str]:
        for (doc_id,) in self._db.execute("SELECT doc_id FROM docs ORDER BY rowid"):
            yield doc_id

    def documents(self) -> Iterator[Document]:
        for doc_id, title, text, url in self._db.execute("SELECT doc_id, title, text, url FROM docs ORDER BY rowid"):
            yield Document(doc_id, text, title, url)

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])


def schema_version(path: str | os.PathLike) -> int:
    """The `SCHEMA_VERSION` a store was built with (0 for stores built before versions were stamped)."""
    with contextlib.closing(_read_only(path)) as db:
        return _stamped_version(db)


def _read_only(path: str | os.PathLike, **options) -> sqlite3.Connection:
    return sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro&immutable=1", uri=True, **options)


def _stamped_version(db: sqlite3.Connection) -> int:
    return db.execute("PRAGMA user_version").fetchone()[0]

