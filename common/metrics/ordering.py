"""The ranking orders the reference tools impose on a run, and cutting a run at a depth.

Both trec_eval and gdeval.pl ignore the rank column: a query's documents are
sorted by score descending, ties broken by docid descending (byte-wise, which
for UTF-8 equals Python's code-point string order). They differ in how
precisely they read the score:

- trec_eval 9.0.8 stores it in a C ``float`` (``TEXT_RESULTS.sim`` in
  trec_format.h; widened to ``double`` only in 10.0, usnistgov/trec_eval#34),
  so scores equal in single precision tie and fall back to the docid.
  pytrec_eval 0.5.11 does the same. `trec_eval_ranking` rounds to float32.
- gdeval.pl compares Perl numbers (doubles): `exact_ranking`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from common.data.formats import ranked

Ranking = Callable[[Mapping[str, float]], list[str]]


def trec_eval_ranking(scores: Mapping[str, float]) -> list[str]:
    """Docids in trec_eval 9.0.8's order: float32(score) descending, then docid descending."""
    return [doc for doc, _ in ranked(scores)]


def exact_ranking(scores: Mapping[str, float]) -> list[str]:
    """Docids by double-precision score descending, then docid descending (gdeval.pl's ``runOrder``)."""
    return [doc for doc, _ in sorted(scores.items(), key=lambda item: (item[1], item[0]), reverse=True)]


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
