"""A trained ranker of any package as a PyTerrier transformer (``pip install -e ".[pyterrier]"``).

    pipeline = first_stage >> PyTerrierRanker(load("my-ranker"))

`PyTerrierRanker.transform` is `common.api.Ranker.rerank`: ``score`` and ``rank`` (0 first) replaced, each query's
rows sorted by score, so PyTerrier's measures are those of the package's ``evaluate`` run.trec.
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
