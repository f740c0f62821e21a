"""A trained ranker of any package as a PyTerrier transformer (``pip install -e ".[pyterrier]"``: PyTerrier 1.x, whose
core runs without Java).

    import pyterrier as pt
    from common.api import load
    from common.pyterrier import PyTerrierRanker

    pipeline = first_stage >> PyTerrierRanker(load("my-ranker"))    # a first stage that adds the documents' text
    pt.Experiment([pipeline], topics, qrels, eval_metrics=["nDCG@10", "RR(rel=2)@10", "AP(rel=2)"])

`PyTerrierRanker.transform` is `common.api.Ranker.rerank`: it reads PyTerrier's result frame (``qid``, ``query``,
``docno``, ``text`` [, ``title``]; ``docno`` alone where the ranker scores from a store) and returns it with
``score`` and ``rank`` (0 first) replaced, each query's rows sorted by score, so the measures PyTerrier computes
through ir_measures are those of the ``run.trec`` the package's ``evaluate`` writes for the same candidates
(`tests/common/test_pyterrier.py`).
"""

from __future__ import annotations

import pyterrier as pt

from common.api import Ranker


class PyTerrierRanker(pt.Transformer):
    """`ranker` (`common.api.load`'s) re-ranking PyTerrier's result frames (module docstring)."""

    def __init__(self, ranker: Ranker):
        super().__init__()
        self.ranker = ranker

    def transform(self, frame):
        return self.ranker.rerank(frame)

    def __repr__(self) -> str:
        return f"PyTerrierRanker({self.ranker!r})"
