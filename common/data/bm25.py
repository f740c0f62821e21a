"""First-stage BM25 retrieval with `bm25s`, as Anserini/Pyserini do for TREC DL (the papers re-rank BM25 top-100
candidates): Lucene's BM25 with k1 = 0.9, b = 0.4, Lucene's 33 English stopwords, the Porter stemmer, title and text
in one field. Differences from Anserini: tokens are ``\\b\\w\\w+\\b`` matches and scores float32. Only documents
matching a query term are returned; ties as trec_eval orders them; tokens held in one flat int32 array.
"""

from __future__ import annotations

import argparse
import sys
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import bm25s
import numpy as np
from bm25s.tokenization import Tokenized, Tokenizer
from tqdm.auto import tqdm

from common.data.formats import (DataFormatError, Document, Run, Topics, collection_format, iter_numbered_collection,
                                 ranked, read_topics, write_run)
from common.refusals import (ArgumentParser, existing_file, input_errors, number_in, output_file_problem, positive_int,
                             usage_error)

#: Pyserini's defaults for MS MARCO / TREC DL (Anserini's `-bm25 -bm25.k1 0.9 -bm25.b 0.4`).
DEFAULT_K1 = 0.9
DEFAULT_B = 0.4
DEFAULT_STEMMER = "porter"


def _stemmer(name: str | None) -> Callable[[str], str] | None:
    if name is None or name == "none":
        return None
    try:
        import Stemmer
    except ImportError:
        raise ImportError(f"stemmer {name!r} needs PyStemmer (pip install PyStemmer), or pass stemmer=None") from None
    return Stemmer.Stemmer(name).stemWord


class DuplicateDocumentError(ValueError):
    """A document id seen before; `position` and `first` are the 0-based positions of the repeat and of the first."""

    def __init__(self, doc_id: str, position: int, first: int):
        self.doc_id, self.position, self.first = doc_id, position, first
        super().__init__(f"duplicate document id {doc_id!r} (documents {first + 1} and {position + 1})")


class UnindexableError(ValueError):
    """A collection with nothing to index: no document, or no document with an indexable term."""


class _FlatTokenIds(Sequence[list[int]]):
    """Token ids of every document in one int32 array; yields each document's ids as a list."""

    def __init__(self) -> None:
        self._ids = array("i")
        self._offsets = array("q", [0])

    def append(self, token_ids: list[int]) -> None:
        self._ids.extend(token_ids)
        self._offsets.append(len(self._ids))

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i: int) -> list[int]:  # type: ignore[override]
        return self._ids[self._offsets[i] : self._offsets[i + 1]].tolist()

    def __iter__(self) -> Iterator[list[int]]:
        for start, end in zip(self._offsets, self._offsets[1:]):
            yield self._ids[start:end].tolist()


class BM25Index:
    """An in-memory Lucene-variant BM25 index over a collection (see the module docstring)."""

    def __init__(self, model: bm25s.BM25, tokenizer: Tokenizer, doc_ids: list[str]):
        self._model, self._tokenizer, self.doc_ids = model, tokenizer, doc_ids

    @classmethod
    def build(cls, documents: Iterable[Document], *, k1: float = DEFAULT_K1, b: float = DEFAULT_B,
              stemmer: str | None = DEFAULT_STEMMER, stopwords: str | list[str] | None = "english",
              progress: bool = False) -> BM25Index:
        tokenizer = Tokenizer(lower=True, stopwords=stopwords or [], stemmer=_stemmer(stemmer))
        doc_ids: list[str] = []
        token_ids = _FlatTokenIds()
        seen: set[str] = set()
        documents = tqdm(documents, desc="tokenising", unit=" docs", disable=not progress)
        for position, doc in enumerate(documents):
            if doc.doc_id in seen:
                raise DuplicateDocumentError(doc.doc_id, position, doc_ids.index(doc.doc_id))
            seen.add(doc.doc_id)
            doc_ids.append(doc.doc_id)
            text = f"{doc.title} {doc.text}" if doc.title else doc.text
            token_ids.append(next(tokenizer.streaming_tokenize([text], allow_empty=False)))
        if not doc_ids:
            raise UnindexableError("no document to index (the collection is empty)")
        if not tokenizer.get_vocab_dict():
            raise UnindexableError("no document has an indexable term (only stopwords or one-character tokens)")
        model = bm25s.BM25(k1=k1, b=b, method="lucene", idf_method="lucene")
        model.index(Tokenized(ids=token_ids, vocab=tokenizer.get_vocab_dict()), create_empty_token=False,
                    show_progress=progress)
        return cls(model, tokenizer, doc_ids)

    def __len__(self) -> int:
        return len(self.doc_ids)

    def search(self, query: str, k: int = 100) -> dict[str, float]:
        if k < 1:
            raise ValueError(f"k must be positive, got {k}")
        query_ids = next(self._tokenizer.streaming_tokenize([query], update_vocab=False, allow_empty=False))
        scores = self._model.get_scores_from_ids(query_ids)
        matching = np.flatnonzero(scores > 0)
        if len(matching) > k:
            kth = np.partition(scores[matching], len(matching) - k)[len(matching) - k]
            matching = matching[scores[matching] >= kth]
        hits = {self.doc_ids[i]: float(scores[i]) for i in matching}
        return dict(ranked(hits)[:k])

    def retrieve(self, topics: Topics, k: int = 100, *, progress: bool = False) -> Run:
        """Top-`k` for every topic, in topic order; a topic that matches nothing gets an empty ranking."""
        return {qid: self.search(text, k)
                for qid, text in tqdm(topics.items(), desc="retrieving", unit=" queries", disable=not progress)}


def bm25_retrieve(documents: Iterable[Document], topics: Topics, k: int = 100, *, progress: bool = False,
                  **options) -> Run:
    """Each topic's BM25 top-`k` over `documents`, indexed with `options` (`BM25Index.build`'s k1, b, stemmer...)."""
    return BM25Index.build(documents, progress=progress, **options).retrieve(topics, k, progress=progress)


def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m common.data.bm25", description="Retrieve a BM25 top-k run (Lucene BM25, "
                            "Porter stemming, Lucene stopwords, title+text) for a topics file over a TSV/JSONL "
                            "collection, and write it as a TREC run.")
    parser.add_argument("--collection", required=True, type=_collection_file,
                        help="collection: docid<TAB>[title<TAB>]text TSV, or JSONL with doc_id/title/text (.gz ok)")
    parser.add_argument("--topics", required=True, type=existing_file, help="topics file: qid<TAB>text")
    parser.add_argument("--output", required=True, type=Path, help="TREC run to write (qid Q0 docid rank score tag)")
    parser.add_argument("-k", type=positive_int, default=100, help="documents per query (default: %(default)s)")
    parser.add_argument("--k1", type=number_in(0), default=DEFAULT_K1,
                        help="BM25 k1, >= 0 (default: %(default)s, Pyserini MS MARCO)")
    parser.add_argument("--b", type=number_in(0, 1), default=DEFAULT_B,
                        help="BM25 b, in [0, 1] (default: %(default)s, Pyserini MS MARCO)")
    parser.add_argument("--stemmer", type=_stemmer_name, default=DEFAULT_STEMMER,
                        help="PyStemmer algorithm, or 'none' (default: %(default)s)")
    parser.add_argument("--tag", type=_tag, default="bm25", help="run tag in the last column (default: %(default)s)")
    parser.add_argument("--overwrite", action="store_true", help="replace --output if it exists")
    return parser


def _collection_file(text: str) -> Path:
    path = existing_file(text)
    try:
        collection_format(path)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return path


def _stemmer_name(text: str) -> str:
    import Stemmer

    names = ["none", *sorted(Stemmer.algorithms())]
    if text not in names:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(names)}, got {text}")
    return text


def _tag(text: str) -> str:
    if not text or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(f"must be one word without spaces or tabs, got {text!r}")
    return text


def _index(args: argparse.Namespace, progress: bool) -> BM25Index:
    """Index --collection; what makes it unindexable is a `DataFormatError` naming the file (and the lines)."""
    lines = array("q")

    def documents() -> Iterator[Document]:
        for number, doc in iter_numbered_collection(args.collection):
            lines.append(number)
            yield doc

    try:
        return BM25Index.build(documents(), k1=args.k1, b=args.b, stemmer=args.stemmer, progress=progress)
    except DuplicateDocumentError as error:
        raise DataFormatError(args.collection, lines[error.position],
                              f"duplicate document id {error.doc_id!r} (first on line {lines[error.first]})") from None
    except UnindexableError as error:
        raise DataFormatError(args.collection, None, str(error)) from None


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    problem = output_file_problem(args.output, args.overwrite)
    if problem:
        usage_error(f"argument --output: {problem}")
    progress = sys.stderr.isatty()
    with input_errors(DataFormatError, OSError):
        topics = read_topics(args.topics)
        if not topics:
            raise DataFormatError(args.topics, None, "no topic (expected qid<TAB>text lines)")
        index = _index(args, progress)
    run = index.retrieve(topics, args.k, progress=progress)
    write_run(args.output, run, tag=args.tag, depth=args.k, overwrite=args.overwrite)
    empty = sum(1 for scores in run.values() if not scores)
    print(f"wrote {args.output}: {len(run)} queries over {len(index)} documents, k={args.k}"
          + (f" ({empty} queries matched no document)" if empty else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
