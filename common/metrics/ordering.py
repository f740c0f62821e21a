"""The ranking orders the reference tools impose on a run, cutting a run at a depth, and a re-ranked run's
unscored candidates placed below it.

Both trec_eval and gdeval.pl ignore the rank column: a query's documents are
sorted by score descending, ties broken by docid descending (byte-wise, which
for UTF-8 equals Python's code-point string order). They differ in how
precisely they read the score:

- trec_eval 9.0.8 stores it in a C ``float`` (``TEXT_RESULTS.sim`` in
  trec_format.h; widened to ``double`` only in 10.0, usnistgov/trec_eval#34),
  so scores equal in single precision tie and fall back to the docid.
  pytrec_eval 0.5.11 does the same. `trec_eval_ranking` rounds to float32.
- gdeval.pl compares Perl numbers (doubles): `exact_ranking`.

MS MARCO's MRR code as ir_measures runs it (its ``msmarco`` provider, which
computes ``RR@K``) sorts by the double score descending, then docid
ascending: `msmarco_ranking`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

def ranked(scores: Mapping[str, float]) -> list[tuple[str, float]]:
    """One query's ``(docid, score)`` pairs in trec_eval 9.0.8's order.

    trec_eval keeps scores in a C ``float``: documents are sorted by the score
    rounded to float32, descending, then by docid descending, so two scores that
    differ only beyond single precision tie. The returned scores are unrounded.
    """
    single = np.asarray(list(scores.values()), dtype=np.float32).tolist()
    order = sorted(zip(single, scores), reverse=True)
    return [(doc_id, scores[doc_id]) for _, doc_id in order]


def with_unscored_below(run: dict[str, dict[str, float]], candidates: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """`run` (re-ranked scores) with each of its queries' other `candidates` below, in their own order.

    A re-ranker scores a query's top candidates; the rest keep the first-stage order under the
    lowest re-ranked score (score = floor - rank below it), so the run is as deep as the candidates.
    `run` is changed in place and returned.
    """
    for qid, scored in run.items():
        floor = min(scored.values())
        rest = [doc_id for doc_id, _ in ranked(candidates.get(qid, {})) if doc_id not in scored]
        for rank, doc_id in enumerate(rest, start=1):
            scored[doc_id] = floor - rank
    return run


Ranking = Callable[[Mapping[str, float]], list[str]]


def trec_eval_ranking(scores: Mapping[str, float]) -> list[str]:
    """Docids in trec_eval 9.0.8's order: float32(score) descending, then docid descending."""
    return [doc for doc, _ in ranked(scores)]


def exact_ranking(scores: Mapping[str, float]) -> list[str]:
    """Docids by double-precision score descending, then docid descending (gdeval.pl's ``runOrder``)."""
    return [doc for doc, _ in sorted(scores.items(), key=lambda item: (item[1], item[0]), reverse=True)]


def msmarco_ranking(scores: Mapping[str, float]) -> list[str]:
    """Docids by double-precision score descending, then docid ascending (ir_measures' MS MARCO ``RR@K``)."""
    return [doc for doc, _ in sorted(scores.items(), key=lambda item: (-item[1], item[0]))]


def cut_run(
    run: Mapping[str, Mapping[str, float]], depth: int | None, ranking: Ranking = trec_eval_ranking
) -> Mapping[str, Mapping[str, float]]:
    """Keep each query's top `depth` documents under `ranking` (trec_eval ``-M depth``).

    ``None`` returns `run` itself. The kept documents retain their scores, so
    any consumer that re-sorts them with the same order sees the same ranking.
    """
    if depth is None:
        return run
    if depth < 1:
        raise ValueError(f"depth must be a positive number of documents, got {depth}")
    return {
        qid: scores if len(scores) <= depth else {doc: scores[doc] for doc in ranking(scores)[:depth]}
        for qid, scores in run.items()
    }
