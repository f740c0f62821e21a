"""earl.costs: Table 1's online cost, its cells worked by hand with every constant 1 and in multiply-adds."""

import pytest

from earl.costs import TABLE1, Constants, Size, counted_constants


def test_the_cost_is_table_1_worked_by_hand():
    """n = 4, q = 2, d = 3, N = 5, one layer of each: Table 1's cells with every constant 1."""
    one = Size(layers=1, hidden=4, heads=1, intermediate=16, blocks=1, query_layers=1)  # FFN 4 h: BERT's constants
    tiny = {"q": 2, "d": 3, "documents": 5}
    # BERT ranker: (n (d+q)^2 + n^2 (d+q)) N = (4*25 + 16*5) * 5 = 900
    assert one.cost("bert_ranker", **tiny, constants=TABLE1) == 900
    # query understanding n q^2 + n^2 q = 16 + 32 = 48; S1 judge (n (qd + q^2) + n^2 (q + d)) N = (40 + 80) * 5
    assert one.cost("earl_s1", **tiny, constants=TABLE1) == 48 + 600
    # S2 judge (n (qd + q^2) + n^2 q) N = (40 + 32) * 5
    assert one.cost("earl_s2", **tiny, constants=TABLE1) == 48 + 360
    # per-layer costs times the layer counts: L for the ranker, l for T_qry, K for the judge
    deep = Size(layers=12, hidden=4, heads=1, intermediate=16, blocks=2, query_layers=10)
    assert deep.cost("bert_ranker", **tiny, constants=TABLE1) == 12 * 900
    assert deep.cost("earl_s2", **tiny, constants=TABLE1) == 10 * 48 + 2 * 360
    # in multiply-adds: a = 2, t = 12, j_q = 14, j_d = 2
    assert counted_constants(4, 16) == counted_constants(768, 3072) == Constants(2, 12, 14, 2)
    assert one.cost("bert_ranker", **tiny) == (2 * 4 * 25 + 12 * 16 * 5) * 5  # 5800
    query = 2 * 4 * 4 + 12 * 16 * 2  # 416
    assert one.cost("earl_s1", **tiny) == query + (2 * 4 * 10 + 14 * 16 * 2 + 2 * 16 * 3) * 5
    assert one.cost("earl_s2", **tiny) == query + (2 * 4 * 10 + 14 * 16 * 2) * 5
    assert TABLE1.attention == TABLE1.layer_token == 1
    assert counted_constants(32, 96) == Constants(2, 10, 12, 2)
    with pytest.raises(ValueError):
        one.cost("earl_s3", **tiny)


def test_a_size_costs_table_1_at_its_layers_and_ffn():
    """L = 3 layers of h = 4, FFN 8 (t = 4 + 2·8/4 = 8, j_q = 10), K = 2 blocks, l = 1 query layer; q = 2, d = 3,
    N = 5."""
    size = Size(layers=3, hidden=4, heads=2, intermediate=8, blocks=2, query_layers=1)
    assert size.options() == {"num_layers": 3, "hidden_size": 4, "num_heads": 2, "intermediate_size": 8}
    assert size.describe() == "L=3, h=4, 2 heads, FFN 8; EARL l=1, K=2"
    # BERT ranker, in multiply-adds: 3 (a n (d+q)^2 + t n^2 (d+q)) N = 3 (2*4*25 + 8*16*5) * 5
    assert size.cost("bert_ranker", q=2, d=3, documents=5) == 3 * (200 + 640) * 5
    # S2: l (a n q^2 + t n^2 q) + K (a n (qd + q^2) + j_q n^2 q) N = (32 + 256) + 2 (80 + 320) * 5
    s2 = 288 + 2 * 400 * 5
    assert size.cost("earl_s2", q=2, d=3, documents=5) == s2
    # S1 adds j_d n^2 d = 2*16*3 per block and candidate
    assert size.cost("earl_s1", q=2, d=3, documents=5) == s2 + 2 * 96 * 5
    # with every constant 1: ranker 3 (4*25 + 16*5) * 5; S2 (16 + 32) + 2 (4*10 + 16*2) * 5
    assert size.cost("earl_s2", q=2, d=3, documents=5, constants=TABLE1) == 48 + 2 * 72 * 5
    assert size.cost("bert_ranker", q=2, d=3, documents=5, constants=TABLE1) == 3 * 180 * 5
