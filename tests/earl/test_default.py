"""The embedded default, ``python -m earl.train`` with no arguments, beats BM25 on the built-in test queries.

This runs the real command: a small EARL (ClsPool, tied) trained from scratch on the built-in collection, evaluated
on all 100 test queries re-ranking BM25's top 30, without the BERT ranker the default trains after it
(``--compare_with '[]'``: EARL's run and metrics are the same either way; `test_earl_train` checks a baseline trained beside it).
The numbers measured with seed 0 are in results/earl/README.md; the margin asserted leaves room for other CPUs'
floating-point differences.
"""

import pytest
import json

from earl import train

pytestmark = [pytest.mark.slow, pytest.mark.whole_run]  # the second tier, run alone (README, "Tests")


def test_the_default_run_beats_bm25(tmp_path):
    metrics = train.main(["--output_dir", str(tmp_path / "default"), "--compare_with", "[]"])
    earl, bm25 = metrics["earl_cls_tied"], metrics["bm25"]
    assert set(metrics) == {"earl_cls_tied", "bm25"}
    assert earl["ndcg_cut_10"] > bm25["ndcg_cut_10"] + 0.02
    assert abs(bm25["ndcg_cut_10"] - 0.2341) < 1e-3  # the built-in collection's BM25 (common.data.builtin)
    assert json.loads((tmp_path / "default" / "metrics.json").read_text()) == metrics
