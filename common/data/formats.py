"""TREC file formats, read and written: topics ``qid<TAB>text``; qrels ``qid iter docid rel``; runs ``qid Q0 docid rank
score tag`` (rank ignored, trailing text allowed, as trec_eval does); collections as TSV (``docid [url] [title] text``)
or JSONL, ``.gz`` through gzip. ``#`` lines are comments; readers stream (`common.io.read_lines`) and raise
`DataFormatError` naming file and line, a repeated (qid, docid) included; writers are atomic.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.metrics.ordering import ranked, with_unscored_below
from common.io import DEFAULT_FALLBACK_ENCODING, atomic_write, read_lines

Topics = dict[str, str]
Qrels = dict[str, dict[str, int]]
Run = dict[str, dict[str, float]]


class DataFormatError(ValueError):
    """Malformed input; the message starts with ``path:line:`` like a compiler's."""

    def __init__(self, path: str | os.PathLike, line: int | None, reason: str):
        self.path, self.line, self.reason = str(path), line, reason
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {reason}")


@dataclass(frozen=True)
class Document:
    """One document; `url` is last so that positional ``Document(doc_id, text, title)`` keeps working."""

    doc_id: str
    text: str
    title: str = ""
    url: str = ""


def _content_lines(path, fallback: str) -> Iterator[tuple[int, str]]:
    return ((number, line) for number, line in _read(path, fallback) if line.strip() and not line.startswith("#"))


def _read(path, fallback: str) -> Iterator[tuple[int, str]]:
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such file")
    yield from read_lines(path, fallback)


def iter_topics(path, fallback: str = DEFAULT_FALLBACK_ENCODING) -> Iterator[tuple[int, str, str]]:
    for number, line in _content_lines(path, fallback):
        qid, tab, text = line.partition("\t")
        if not tab or not qid.strip() or not text.strip():
            raise DataFormatError(path, number, f"expected 'qid<TAB>text', got {line[:80]!r}")
        yield number, qid.strip(), text.strip()


def read_topics(path, fallback: str = DEFAULT_FALLBACK_ENCODING) -> Topics:
    """Read topics as ``{qid: text}``; a repeated qid is an error."""
    topics: Topics = {}
    for number, qid, text in iter_topics(path, fallback):
        if qid in topics:
            raise DataFormatError(path, number, f"duplicate topic id {qid!r}")
        topics[qid] = text
    return topics


def iter_qrels(path, fallback: str = DEFAULT_FALLBACK_ENCODING) -> Iterator[tuple[int, str, str, int]]:
    for number, line in _content_lines(path, fallback):
        fields = line.split()
        if len(fields) != 4:
            raise DataFormatError(path, number,
                                  f"expected 4 fields 'qid iter docid rel', got {len(fields)}: {line[:80]!r}")
        qid, _, doc_id, rel = fields
        yield number, qid, doc_id, _number(path, number, int, rel, "relevance")


def read_qrels(path, fallback: str = DEFAULT_FALLBACK_ENCODING) -> Qrels:
    """Read qrels as ``{qid: {docid: rel}}``; a repeated (qid, docid) is an error."""
    return _by_query(path, iter_qrels(path, fallback), "duplicate judgment for query {qid!r}, document {doc_id!r}")


def iter_run(path, fallback: str = DEFAULT_FALLBACK_ENCODING) -> Iterator[tuple[int, str, str, float]]:
    for number, line in _content_lines(path, fallback):
        fields = line.split()
        if len(fields) < 6:
            raise DataFormatError(path, number,
                                  f"expected 6 fields 'qid Q0 docid rank score tag', got {len(fields)}: {line[:80]!r}")
        qid, _, doc_id, rank, score = fields[:5]
        _number(path, number, int, rank, "rank")
        if math.isnan(score := _number(path, number, float, score, "score")):
            raise DataFormatError(path, number, "score is NaN")
        yield number, qid, doc_id, score


def read_run(path, fallback: str = DEFAULT_FALLBACK_ENCODING) -> Run:
    """Read a run as ``{qid: {docid: score}}``; a repeated (qid, docid) is an error."""
    return _by_query(path, iter_run(path, fallback), "document {doc_id!r} retrieved twice for query {qid!r}")


def _number(path, number: int, kind: type, text: str, what: str):
    try:
        return kind(text)
    except ValueError:
        kind_name = "an integer" if kind is int else "a number"
        raise DataFormatError(path, number, f"{what} {text!r} is not {kind_name}") from None


def _by_query(path, records: Iterable[tuple[int, str, str, Any]], repeated: str) -> dict[str, dict[str, Any]]:
    """``{qid: {docid: value}}`` of (line, qid, docid, value) `records`; a repeated pair is refused (`repeated`)."""
    nested: dict[str, dict[str, Any]] = {}
    for number, qid, doc_id, value in records:
        inner = nested.setdefault(qid, {})
        if doc_id in inner:
            raise DataFormatError(path, number, repeated.format(qid=qid, doc_id=doc_id))
        inner[doc_id] = value
    return nested


def collection_format(path) -> str:
    """``"jsonl"`` or ``"tsv"``, from the file name (a trailing ``.gz`` is ignored)."""
    suffix = ([s for s in Path(path).suffixes if s != ".gz"] or [""])[-1]
    if suffix in (".jsonl", ".json"):
        return "jsonl"
    if suffix in (".tsv", ".txt", ".tab"):
        return "tsv"
    raise ValueError(f"{path}: cannot tell the collection format from the name; use .tsv or .jsonl")


def iter_collection(path, fallback: str = DEFAULT_FALLBACK_ENCODING) -> Iterator[Document]:
    """Stream the documents of a TSV or JSONL collection (see the module docstring)."""
    return (doc for _, doc in iter_numbered_collection(path, fallback))


def iter_numbered_collection(path, fallback: str = DEFAULT_FALLBACK_ENCODING) -> Iterator[tuple[int, Document]]:
    """Stream ``(line, Document)`` from a TSV or JSONL collection, for messages that name a document's line."""
    parse = _parse_jsonl_document if collection_format(path) == "jsonl" else _parse_tsv_document
    for number, line in _read(path, fallback):
        if line.strip():
            yield number, parse(path, number, line)


def _parse_tsv_document(path, number: int, line: str) -> Document:
    fields = line.split("\t")
    if not 2 <= len(fields) <= 4:
        raise DataFormatError(path, number,
                              f"expected 2-4 tab-separated columns (docid [url] [title] text), got {len(fields)}")
    doc_id, *rest = fields
    url, title, text = ["", "", *rest][-3:]  # docid [url] [title] text: a missing column is empty
    if not doc_id.strip():
        raise DataFormatError(path, number, "empty document id")
    return Document(doc_id.strip(), text, title, url)


def _parse_jsonl_document(path, number: int, line: str) -> Document:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise DataFormatError(path, number, f"invalid JSON: {error.msg} at column {error.colno}") from None
    if not isinstance(record, dict) or "doc_id" not in record or "text" not in record:
        raise DataFormatError(path, number,
                              'expected an object with "doc_id" and "text" (and optional "title" and "url")')
    return Document(str(record["doc_id"]), str(record["text"] or ""), str(record.get("title") or ""),
                    str(record.get("url") or ""))


def write_topics(path, topics: Mapping[str, str], *, overwrite: bool = False) -> None:
    with atomic_write(path, overwrite=overwrite) as f:
        for qid, text in topics.items():
            _check_field(path, "query text", text, allow_space=True)
            f.write(f"{qid}\t{text}\n")


def write_qrels(path, qrels: Mapping[str, Mapping[str, int]], *, overwrite: bool = False) -> None:
    with atomic_write(path, overwrite=overwrite) as f:
        for qid, judged in qrels.items():
            for doc_id, rel in judged.items():
                f.write(f"{qid} 0 {doc_id} {int(rel)}\n")


def write_run(path, run: Mapping[str, Mapping[str, float]], *, tag: str = "run", depth: int | None = None,
              overwrite: bool = False) -> None:
    """Write a run in trec_eval's ranking order, ranks from 1, at most `depth` per query."""
    _check_field(path, "run tag", tag, allow_space=False)
    with atomic_write(path, overwrite=overwrite) as f:
        for qid, scores in run.items():
            for rank, (doc_id, score) in enumerate(ranked(scores)[:depth], start=1):
                f.write(f"{qid} Q0 {doc_id} {rank} {float(score)!r} {tag}\n")


def write_collection(path, documents: Iterable[Document], *, overwrite: bool = False) -> None:
    """Write a JSONL or TSV (``docid<TAB>title<TAB>text``) collection, chosen by the file name."""
    as_jsonl = collection_format(path) == "jsonl"
    with atomic_write(path, overwrite=overwrite) as f:
        for doc in documents:
            if as_jsonl:
                f.write(json.dumps(_jsonl_record(doc), ensure_ascii=False))
            else:
                for name, value in (("title", doc.title), ("text", doc.text)):
                    _check_field(path, f"document {doc.doc_id} {name}", value, allow_space=True)
                f.write(f"{doc.doc_id}\t{doc.title}\t{doc.text}")
            f.write("\n")


def _jsonl_record(doc: Document) -> dict[str, str]:
    """Keys in the MS MARCO column order (docid url title text); "url" only when there is one."""
    url = {"url": doc.url} if doc.url else {}
    return {"doc_id": doc.doc_id, **url, "title": doc.title, "text": doc.text}


def _check_field(path, what: str, value: str, *, allow_space: bool) -> None:
    forbidden = "\t\n\r" if allow_space else "\t\n\r "
    if any(c in value for c in forbidden):
        raise ValueError(f"{path}: {what} {value[:40]!r} contains a tab, newline or (for tags) a space")
