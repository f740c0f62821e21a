"""earl.costs: Table 1's online cost, its cells worked by hand with every constant 1 and in multiply-adds."""

import pytest

from earl.costs import COUNTED, TABLE1, Constants, analytic_cost, counted_constants


def test_analytic_cost_is_table_1_worked_by_hand():
    """n = 4, q = 2, d = 3, N = 5, one layer of each: Table 1's cells with every constant 1."""
    tiny = {"n": 4, "q": 2, "d": 3, "documents": 5}
    # BERT ranker: (n (d+q)^2 + n^2 (d+q)) N = (4*25 + 16*5) * 5 = 900
    assert analytic_cost("bert_ranker", **tiny) == 900
    # query understanding n q^2 + n^2 q = 16 + 32 = 48; S1 judge (n (qd + q^2) + n^2 (q + d)) N = (40 + 80) * 5
    assert analytic_cost("earl_s1", **tiny) == 48 + 600
    # S2 judge (n (qd + q^2) + n^2 q) N = (40 + 32) * 5
    assert analytic_cost("earl_s2", **tiny) == 48 + 360
    # per-layer costs times the layer counts: L for the ranker, l for T_qry, K for the judge
    assert analytic_cost("bert_ranker", **tiny, layers=12) == 12 * 900
    assert analytic_cost("earl_s2", **tiny, query_layers=10, blocks=2) == 10 * 48 + 2 * 360
    # in multiply-adds: a = 2, t = 12, j_q = 14, j_d = 2
    assert analytic_cost("bert_ranker", **tiny, constants=COUNTED) == (2 * 4 * 25 + 12 * 16 * 5) * 5  # 5800
    query = 2 * 4 * 4 + 12 * 16 * 2  # 416
    assert analytic_cost("earl_s1", **tiny, constants=COUNTED) == query + (2 * 4 * 10 + 14 * 16 * 2 + 2 * 16 * 3) * 5
    assert analytic_cost("earl_s2", **tiny, constants=COUNTED) == query + (2 * 4 * 10 + 14 * 16 * 2) * 5
    assert TABLE1.attention == TABLE1.layer_token == 1
    assert counted_constants(32, 96) == Constants(2, 10, 12, 2)
    with pytest.raises(ValueError):
        analytic_cost("earl_s3", **tiny)
