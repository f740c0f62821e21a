"""`RankLLMSource`: a ranking task from a rank_llm candidate file (castorini/rank_llm, e.g.
``rank_llm.BM25.retrieve_results_dl19.json``: ``[{"query": ..., "hits": [{"qid", "docid", "rank", "score",
"content"}, ...]}, ...]``), giving topics, candidates and documents (held in memory, title empty; a docid repeated
across queries must keep its text); an entry without hits is skipped. Qrels come from ``qrels_path``, else are empty.
Malformed input raises `common.data.formats.DataFormatError` naming file and entry.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from common.data.formats import DataFormatError, Document, Qrels, Run, Topics, read_qrels
from common.data.source import InMemoryDocuments, read_once


@dataclass(frozen=True)
class RankLLMTask:
    """What a rank_llm file holds: topics, the first-stage run and the text of its hits."""

    topics: Topics
    candidates: Run
    documents: InMemoryDocuments


def read_rank_llm(path: str | os.PathLike) -> RankLLMTask:
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        with open(path, encoding="utf-8") as f:
            entries = json.load(f)
    except json.JSONDecodeError as error:
        raise DataFormatError(path, error.lineno, f"not JSON: {error.msg}") from None
    if not isinstance(entries, list):
        raise DataFormatError(path, None, "expected a JSON list of {query, hits} entries")
    topics: Topics = {}
    candidates: Run = {}
    texts: dict[str, str] = {}
    for number, entry in enumerate(entries, start=1):
        where = f"entry {number}"
        if not isinstance(entry, dict) or not isinstance(entry.get("query"), str) or not isinstance(
                entry.get("hits"), list):
            raise DataFormatError(path, None, f"{where}: expected {{\"query\": text, \"hits\": [...]}}")
        for rank, hit in enumerate(entry["hits"], start=1):
            try:
                qid, doc_id, score, content = str(hit["qid"]), str(hit["docid"]), float(hit["score"]), hit["content"]
            except (KeyError, TypeError, ValueError):
                raise DataFormatError(path, None, f"{where}, hit {rank}: expected qid, docid, score and content")
            if not isinstance(content, str):
                raise DataFormatError(path, None, f"{where}, hit {rank}: content is not text")
            if topics.setdefault(qid, entry["query"]) != entry["query"]:
                raise DataFormatError(path, None, f"{where}: query {qid!r} already has another text")
            if doc_id in candidates.setdefault(qid, {}):
                raise DataFormatError(path, None,
                                      f"{where}, hit {rank}: document {doc_id!r} repeated for query {qid!r}")
            candidates[qid][doc_id] = score
            if texts.setdefault(doc_id, content) != content:
                raise DataFormatError(path, None, f"{where}, hit {rank}: document {doc_id!r} has two texts")
    if not candidates:
        raise DataFormatError(path, None, "no hits: nothing to re-rank")
    documents = InMemoryDocuments({doc_id: Document(doc_id, text) for doc_id, text in texts.items()}, str(path))
    return RankLLMTask(topics, candidates, documents)


@dataclass
class RankLLMSource:
    """A `RankingSource` of a rank_llm candidate file and a TREC qrels file (see the module docstring)."""

    rank_llm_path: str | os.PathLike
    qrels_path: str | os.PathLike | None = None
    name: str = ""

    def __post_init__(self) -> None:
        self.name = self.name or Path(self.rank_llm_path).stem

    def topics(self) -> Topics:
        return self._read.topics

    @read_once
    def qrels(self) -> Qrels:
        return {} if self.qrels_path is None else read_qrels(self.qrels_path)

    def candidates(self) -> Run:
        return self._read.candidates

    def documents(self) -> InMemoryDocuments:
        return self._read.documents

    @cached_property
    def _read(self) -> RankLLMTask:
        return read_rank_llm(self.rank_llm_path)
