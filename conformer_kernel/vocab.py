"""Vocabulary, IDFs and word2vec embeddings of the Conformer-Kernel (Mitra et al. 2021, Sec. 4, "Model training").

- Embeddings: skip-gram on the training queries and documents (URL, title, body; not ORCAS), IN ‖ OUT. Official:
  fastText, dim 128, window 10, min count 100, 5 epochs; here gensim's `Word2Vec` with fastText's defaults for the
  rest (lr 0.05, 5 negatives, sample 1e-4), one worker thread by default (more are not reproducible).
- Ids: UNK = 0 (also padding), ``<S>`` = 1, ``</S>`` = 2, zero vectors; then the vocabulary, most frequent first.
- IDF (official ``model_utils.py``): max(log((N - df + 0.5) / (df + 0.5)), 0), kept where positive, keyed by term.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from common.io import built_once, cache_root
from common.data.formats import Document
from conformer_kernel.text import END, START, analyze

#: The three ids before the word2vec vocabulary.
SPECIAL = ("UNK", START, END)
UNK = 0


@dataclass(frozen=True)
class EmbeddingOptions:
    """word2vec settings: the data module's embedding_* options, min_count and seed (`conformer_kernel.data`)."""

    dim: int
    window: int
    min_count: int
    epochs: int
    seed: int
    workers: int


@dataclass
class Resources:
    """Term ids, IDFs and the initial embedding matrix ``(len(terms), 2 * dim)`` (IN ‖ OUT)."""

    terms: list[str]
    idf: dict[str, float]
    embeddings: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.ids = {term: i for i, term in enumerate(self.terms)}

    def __len__(self) -> int:
        return len(self.terms)

    def id(self, term: str) -> int:
        return self.ids.get(term, UNK)

    def id_list(self, terms: list[str]) -> list[int]:
        """``[self.id(t) for t in terms]``, without a Python call per term."""
        return list(map(self.ids.get, terms, itertools.repeat(UNK, len(terms))))

    @classmethod
    def build(cls, queries: Iterable[str], documents: Iterable[Document], options: EmbeddingOptions,
              progress: bool = True) -> Resources:
        """Embeddings from `queries` + `documents`, IDFs from `documents` (see the module docstring)."""
        from gensim.models import Word2Vec

        sentences: list[list[str]] = [terms for q in queries if (terms := analyze(q))]
        df, n = Counter(), 0  # document frequencies, documents
        for doc in tqdm(documents, desc="analysing documents", unit=" docs", disable=not progress):
            fields = [terms for part in (getattr(doc, "url", ""), doc.title, doc.text) if (terms := analyze(part))]
            sentences += fields  # one word2vec sentence per field, as the official corpus file has one line each
            df.update(set().union(*fields))
            n += 1
        if n == 0:
            raise ValueError("no documents to compute IDFs and embeddings from")
        idf = {t: v for t, count in df.items() if (v := max(math.log((n - count + 0.5) / (count + 0.5)), 0.0)) > 0}
        model = Word2Vec(sentences=sentences, vector_size=options.dim, window=options.window,
                         min_count=options.min_count, sg=1, epochs=options.epochs, seed=options.seed,
                         workers=options.workers, alpha=0.05, sample=1e-4, negative=5)
        vectors = np.concatenate([model.wv.vectors, model.syn1neg], axis=1).astype(np.float32)
        embeddings = np.concatenate([np.zeros((len(SPECIAL), vectors.shape[1]), np.float32), vectors])
        return cls([*SPECIAL, *model.wv.index_to_key], idf, embeddings)

    @classmethod
    def cached(cls, key: dict, queries: Iterable[str], documents: Iterable[Document],
               options: EmbeddingOptions) -> Resources:
        """`build`'s result for the corpus `key`, built once however many processes ask (`common.io.built_once`)."""
        meta = {"corpus": key, "options": asdict(options)}
        digest = hashlib.sha256(json.dumps({**meta, "version": 1}, sort_keys=True).encode()).hexdigest()[:16]
        folder = cache_root() / "conformer_kernel" / f"resources-{digest}"
        built_once(folder, lambda tmp: cls.build(queries, documents, options).save(tmp, meta=meta),
                   ready=lambda path: (path / "meta.json").is_file())
        return cls.load(folder)

    def save(self, folder: str | os.PathLike, meta: dict | None = None) -> None:
        """Write ``terms.txt``, ``idf.tsv``, ``embeddings.npy`` and ``meta.json`` into a new `folder`."""
        folder = Path(folder)
        folder.mkdir(parents=True)
        for name, data in self.text_files().items():
            (folder / name).write_bytes(data)
        if self.embeddings is not None:
            np.save(folder / "embeddings.npy", self.embeddings)
        (folder / "meta.json").write_text(json.dumps(meta or {}, indent=2, sort_keys=True) + "\n")

    def text_files(self) -> dict[str, bytes]:
        """``terms.txt`` (by id) and ``idf.tsv`` (term, tab, the IDF's ``repr``), name -> bytes."""
        return {"terms.txt": "".join(f"{t}\n" for t in self.terms).encode(),
                "idf.tsv": "".join(f"{t}\t{v!r}\n" for t, v in sorted(self.idf.items())).encode()}

    @classmethod
    def load(cls, folder: str | os.PathLike) -> Resources:
        folder = Path(folder)
        terms = (folder / "terms.txt").read_text(encoding="utf-8").splitlines()
        lines = (folder / "idf.tsv").read_text(encoding="utf-8").splitlines()
        idf = {term: float(value) for term, value in (line.split("\t") for line in lines)}
        embeddings = np.load(folder / "embeddings.npy") if (folder / "embeddings.npy").is_file() else None
        return cls(terms, idf, embeddings)

    def state(self) -> dict:
        """What a checkpoint keeps (the embeddings live in the model's weights)."""
        return {"terms": self.terms, "idf": self.idf}

    @classmethod
    def from_state(cls, state: dict) -> Resources:
        return cls(list(state["terms"]), dict(state["idf"]))
