"""`common.api`'s ranked frames: PyTerrier's columns, ranks from 0, trec_eval's order of ties."""

import pandas as pd

from common.api import ranked_frame


def test_each_query_is_sorted_by_score_with_ties_broken_by_docno_descending():
    frame = pd.DataFrame({
        "qid": ["2", "1", "1", "1", "2"],
        "docno": ["a", "a", "b", "c", "b"],
        # d1's b and c tie in float32 (1 + 2^-30 rounds to 1): trec_eval orders them by docno descending
        "score": [0.5, 1.0 + 2**-30, 1.0, 2.0, 0.7],
    })
    out = ranked_frame(frame)
    assert out[["qid", "docno", "rank"]].values.tolist() == [
        ["1", "c", 0], ["1", "b", 1], ["1", "a", 2], ["2", "b", 0], ["2", "a", 1]]
    assert out["score"].tolist() == [2.0, 1.0, 1.0 + 2**-30, 0.7, 0.5]  # the scores themselves unrounded
