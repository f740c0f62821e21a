"""The ranking orders the reference tools impose on a run, cutting a run at a depth, and a re-ranked run's unscored
candidates placed below it. Every tool ignores the rank column and sorts by score descending: trec_eval 9.0.8 (and
pytrec_eval 0.5.11) on the score as a C ``float``, ties by docid descending (`trec_eval_ranking`); gdeval.pl on doubles
(`exact_ranking`); MS MARCO's MRR code (ir_measures' ``RR@K``) on doubles, ties by docid ascending (`msmarco_ranking`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np


def ranked(scores: Mapping[str, float]) -> list[tuple[str, float]]:
    """One query's ``(docid, score)`` pairs in trec_eval 9.0.8's order (float32 score, then docid, descending)."""
    single = np.asarray(list(scores.values()), dtype=np.float32).tolist()
    order = sorted(zip(single, scores), reverse=True)
    return [(doc_id, scores[doc_id]) for _, doc_id in order]


def with_unscored_below(run: dict[str, dict[str, float]],
                        candidates: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """`run` (re-ranked scores), changed in place, with each query's other `candidates` below in first-stage order
    (score = lowest re-ranked score - rank below it)."""
    for qid, scored in run.items():
        floor = min(scored.values())
        rest = [doc_id for doc_id, _ in ranked(candidates.get(qid, {})) if doc_id not in scored]
        for rank, doc_id in enumerate(rest, start=1):
            scored[doc_id] = floor - rank
    return run


def trec_eval_ranking(scores: Mapping[str, float]) -> list[str]:
    """Docids in trec_eval 9.0.8's order: float32(score) descending, then docid descending."""
    return [doc for doc, _ in ranked(scores)]


def exact_ranking(scores: Mapping[str, float]) -> list[str]:
    """Docids by double-precision score descending, then docid descending (gdeval.pl's ``runOrder``)."""
    return [doc for doc, _ in sorted(scores.items(), key=lambda item: (item[1], item[0]), reverse=True)]


def msmarco_ranking(scores: Mapping[str, float]) -> list[str]:
    """Docids by double-precision score descending, then docid ascending (ir_measures' MS MARCO ``RR@K``)."""
    return [doc for doc, _ in sorted(scores.items(), key=lambda item: (-item[1], item[0]))]


def cut_run(run: Mapping[str, Mapping[str, float]], depth: int | None) -> Mapping[str, Mapping[str, float]]:
    """Each query's top `depth` documents in trec_eval's order, with their scores (trec_eval ``-M``); None: `run`."""
    if depth is None:
        return run
    return {qid: scores if len(scores) <= depth else {doc: scores[doc] for doc in trec_eval_ranking(scores)[:depth]}
            for qid, scores in run.items()}
