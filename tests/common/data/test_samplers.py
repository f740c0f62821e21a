"""Training samplers: counts, label semantics, determinism, DataLoader use and impossible configurations."""

from collections import Counter

import pytest

from common.data.samplers import (
    RANDOM_LABEL,
    LabelGroupSampler,
    PairwiseSampler,
    PointwiseSampler,
    SoftmaxSampler,
    TrainingGroup,
    from_source,
)
from common.data.formats import Document, write_collection, write_qrels, write_run, write_topics
from common.data.source import FileSource

# q1: d1 (2) and d2 (1) are relevant candidates, d9 (1) relevant but not retrieved, d3 judged 0,
#     d4..d8 and x00..x39 unjudged: at depth 100 its non-relevant candidates are d3..d8 and x00..x39.
# q2: its only candidate is relevant -> no negative -> skipped.
# q3: no relevant document -> no anchor, not counted as skipped.
# q4: relevant document but no candidates -> skipped.
QRELS = {
    "q1": {"d1": 2, "d2": 1, "d9": 1, "d3": 0},
    "q2": {"d5": 1},
    "q3": {"d1": 0},
    "q4": {"d7": 1},
}
Q1_DOCS = [f"d{i}" for i in range(1, 9)] + [f"x{i:02d}" for i in range(40)]
RUN = {
    "q1": {doc_id: 100.0 - rank for rank, doc_id in enumerate(Q1_DOCS)},
    "q2": {"d5": 3.0},
    "q3": {"d1": 1.0, "d2": 0.5},
}
Q1_NEGATIVES = set(Q1_DOCS) - {"d1", "d2"}
COLLECTION = Q1_DOCS + ["d9"] + [f"r{i:02d}" for i in range(30)]


def test_pointwise_counts_and_labels():
    sampler = PointwiseSampler.of(QRELS, RUN, negatives=1, seed=3)
    groups = sampler.examples()
    assert len(sampler) == 3
    assert [(g.qid, g.doc_ids[0]) for g in groups] == [("q1", "d1"), ("q1", "d2"), ("q1", "d9")]
    for group in groups:
        assert group.labels == (1.0, 0.0)
        assert group.doc_ids[1] in Q1_NEGATIVES
        assert group.pairs == ()
    stats = sampler.stats
    assert (stats.anchors, stats.queries, stats.skipped_queries, stats.skipped_anchors) == (3, 1, 2, 2)
    assert stats.short_queries == 0


def test_positives_only_among_the_candidates_as_the_official_qds_sampler():
    # Official QDS utils.py lines 272-279: a positive is a top-100 line whose qrels label is > 0, so q1's d9
    # (relevant, not retrieved) is no positive; at depth 1 only d1 is a candidate, and it is relevant.
    sampler = PointwiseSampler.of(QRELS, RUN, negatives=1, positives="candidates", seed=3)
    assert [(g.qid, g.doc_ids[0]) for g in sampler.examples()] == [("q1", "d1"), ("q1", "d2")]
    assert sampler.stats.skipped_queries == 1  # q2 (no negative); q4's d7 is no candidate, so q4 has no positive
    with pytest.raises(ValueError, match="no training examples"):
        PointwiseSampler.of(QRELS, RUN, negatives=1, depth=1, positives="candidates")
    with pytest.raises(ValueError, match="unknown positives 'all'"):
        PointwiseSampler.of(QRELS, RUN, positives="all")


def test_depth_limits_negatives_to_the_top_candidates():
    sampler = PointwiseSampler.of(QRELS, RUN, negatives=2, depth=5, seed=0)
    # Top 5 of q1: d1 d2 d3 d4 d5 -> negatives d3, d4, d5 only.
    drawn = {d for epoch in range(20) for g in sampler.examples(epoch) for d in g.doc_ids[1:]}
    assert drawn == {"d3", "d4", "d5"}


def test_relevance_level_two_makes_label_one_a_negative():
    sampler = PointwiseSampler.of(QRELS, RUN, negatives=3, relevance_level=2, seed=0)
    assert [g.doc_ids[0] for g in sampler.examples()] == ["d1"]
    drawn = {d for epoch in range(30) for d in sampler.examples(epoch)[0].doc_ids[1:]}
    assert "d2" in drawn and drawn <= set(Q1_DOCS) - {"d1"}


def test_same_seed_same_examples_and_new_epoch_new_negatives():
    first = SoftmaxSampler.of(QRELS, RUN, negatives=4, seed=7)
    again = SoftmaxSampler.of(dict(reversed(QRELS.items())), RUN, negatives=4, seed=7)  # input order is irrelevant
    assert first.examples(0) == again.examples(0)
    assert first.examples(0) != first.examples(1)
    assert first.examples(0) != SoftmaxSampler.of(QRELS, RUN, negatives=4, seed=8).examples(0)
    # Any access order, e.g. a DDP rank reading only odd indices, sees the same item.
    first.set_epoch(1)
    assert [first[i] for i in reversed(range(len(first)))] == list(reversed(first.examples(1)))
    for group in first.examples(0):
        assert group.labels == (1.0, 0.0, 0.0, 0.0, 0.0)
        assert len(set(group.doc_ids[1:])) == 4  # without replacement when there are enough negatives
        assert set(group.doc_ids[1:]) <= Q1_NEGATIVES


def test_dataloader_with_workers_reproduces_the_epoch():
    torch_data = pytest.importorskip("torch.utils.data")
    sampler = PointwiseSampler.of(QRELS, RUN, negatives=2, seed=1)
    sampler.set_epoch(4)
    loader = torch_data.DataLoader(sampler, batch_size=2, num_workers=2, collate_fn=list)
    assert [group for batch in loader for group in batch] == sampler.examples(4)


def test_short_pool_draws_with_replacement_and_is_counted():
    sampler = PointwiseSampler.of(QRELS, RUN, negatives=5, depth=4, seed=0)  # negatives at depth 4: d3, d4
    group = sampler[0]
    assert len(group.doc_ids) == 6 and set(group.doc_ids[1:]) <= {"d3", "d4"}
    assert sampler.stats.short_queries == 1


def test_pairwise_groups_follow_conformer_kernel():
    sampler = PairwiseSampler.of(QRELS, RUN, COLLECTION, seed=2)
    groups = sampler.examples()
    assert [g.doc_ids[0] for g in groups] == ["d1", "d2", "d9"]
    for group in groups:
        positive, top, *randoms = group.doc_ids
        assert len(randoms) == 2 and len(set(randoms)) == 2
        # Random documents: from the collection, never a candidate nor a relevant document.
        assert all(d in COLLECTION and d not in RUN["q1"] and d != "d9" for d in randoms)
        assert top in RUN["q1"] and QRELS["q1"].get(top, 0) < QRELS["q1"][positive]
        assert group.labels[0] == QRELS["q1"][positive] and group.labels[2:] == (RANDOM_LABEL, RANDOM_LABEL)
        # Positive above the three negatives, top-100 negative above both random ones: 5 pairs.
        assert group.pairs == ((0, 1), (0, 2), (0, 3), (1, 2), (1, 3))
        assert all(group.labels[a] > group.labels[b] for a, b in group.pairs)
        assert group.triples()[0] == ("q1", positive, top)
    # Graded qrels: the label-2 positive may be paired with the label-1 candidate d2.
    tops = Counter(g.doc_ids[1] for epoch in range(60) for g in sampler.examples(epoch) if g.doc_ids[0] == "d1")
    assert tops["d2"] > 0 and "d1" not in tops


def test_pairwise_without_weak_supervision_or_random_documents():
    plain = PairwiseSampler.of(QRELS, RUN, COLLECTION, weak_supervision=False, seed=0)
    assert plain[0].pairs == ((0, 1), (0, 2), (0, 3))
    top_only = PairwiseSampler.of(QRELS, RUN, top_negatives=2, random_negatives=0, seed=0)
    group = top_only[1]  # anchor d2 (label 1): only label-0 candidates below it
    assert len(group.doc_ids) == 3 and set(group.doc_ids[1:]) <= Q1_NEGATIVES
    assert group.pairs == ((0, 1), (0, 2))


def test_impossible_configurations_fail_clearly():
    with pytest.raises(ValueError, match="negatives must be at least 1"):
        PointwiseSampler.of(QRELS, RUN, negatives=0)
    with pytest.raises(ValueError, match="depth must be positive"):
        SoftmaxSampler.of(QRELS, RUN, depth=0)
    with pytest.raises(ValueError, match="no training examples"):
        PointwiseSampler.of({"q2": {"d5": 1}}, RUN)
    with pytest.raises(ValueError, match="needs the collection's document ids"):
        PairwiseSampler.of(QRELS, RUN)
    with pytest.raises(ValueError, match="fewer than 2 documents outside"):
        PairwiseSampler.of(QRELS, RUN, Q1_DOCS + ["d9", "r00"])
    with pytest.raises(ValueError, match="need at least one negative"):
        PairwiseSampler.of(QRELS, RUN, COLLECTION, top_negatives=0, random_negatives=0)
    with pytest.raises(IndexError):
        PointwiseSampler.of(QRELS, RUN)[3]
    with pytest.raises(ValueError, match="unknown sampler"):
        from_source("listwise", None)


def _file_source(folder, topics, qrels, run, collection) -> FileSource:
    """A task of TREC files in `folder`; each document's text is ``text of <id>``."""
    write_topics(folder / "topics.tsv", topics)
    write_qrels(folder / "qrels.txt", qrels)
    write_run(folder / "run.trec", run)
    write_collection(folder / "docs.jsonl", [Document(d, f"text of {d}") for d in collection])
    return FileSource(folder / "topics.tsv", folder / "qrels.txt", folder / "run.trec", folder / "docs.jsonl",
                      cache_dir=folder / "cache")


def test_topics_restrict_the_anchors_and_from_source(tmp_path):
    with pytest.raises(ValueError, match="no training examples"):
        PointwiseSampler.of(QRELS, RUN, topics={"q2": "x", "q3": "y"})

    source = _file_source(tmp_path, {"q1": "first query", "q2": "second"}, QRELS, RUN, COLLECTION)
    sampler = from_source("pairwise", source, seed=2)
    assert sampler.examples() == PairwiseSampler.of(QRELS, RUN, COLLECTION, seed=2).examples()
    assert isinstance(sampler[0], TrainingGroup)


# --- LabelGroupSampler (the official Conformer-Kernel TRECSupervisedTrainDataset) ---
#
# qa: candidates by score c2 (rel 2), u1 (unjudged), c1 (rel 1), c0 (judged 0), n (judged -1), u2 (unjudged);
#     official labels max(rel, 0) + 1: c2 -> 3, c1 -> 2, u1/c0/n/u2 -> 1: three label groups, so three
#     possible picks {3, 2}, {3, 1}, {2, 1}. "out" is relevant but not retrieved: never in a group.
# qb: only unjudged candidates v1..v3 -> one label group (label 1); its relevant "p" is not retrieved.
# qc: relevant document, no candidates -> skipped. qd: no relevant document -> no item, not counted.
LG_QRELS = {
    "qa": {"c2": 2, "c1": 1, "c0": 0, "n": -1, "out": 1},
    "qb": {"p": 2},
    "qc": {"x": 1},
    "qd": {"y": 0},
}
LG_RUN = {
    "qa": {"c2": 6.0, "u1": 5.0, "c1": 4.0, "c0": 3.0, "n": 2.0, "u2": 1.0},
    "qb": {"v1": 3.0, "v2": 2.0, "v3": 1.0},
    "qd": {"y": 1.0},
}
LG_RANDOM = [f"r{i:02d}" for i in range(10)]
LG_COLLECTION = list(LG_RUN["qa"]) + list(LG_RUN["qb"]) + ["out", "p", "x", "y"] + LG_RANDOM
QA_LABEL_ONE = {"u1", "c0", "n", "u2"}
# Random documents: the collection less the query's candidates and relevant documents.
QA_RANDOM_POOL = {"v1", "v2", "v3", "p", "x", "y", *LG_RANDOM}
QB_RANDOM_POOL = {"c2", "u1", "c1", "c0", "n", "u2", "out", "x", "y", *LG_RANDOM}


def test_label_groups_one_item_per_query_with_two_label_groups_and_two_random_documents():
    sampler = LabelGroupSampler.of(LG_QRELS, LG_RUN, LG_COLLECTION, seed=0)
    assert len(sampler) == 2
    stats = sampler.stats
    assert (stats.anchors, stats.queries, stats.skipped_queries, stats.skipped_anchors, stats.short_queries) == (
        2, 2, 1, 1, 0)
    for epoch in range(20):
        qa, qb = sampler.examples(epoch)
        assert qa.qid == "qa" and qb.qid == "qb"
        # qa: the higher-label candidate, then the lower one, then 2 distinct random documents of label 0.
        high, low, *randoms = qa.doc_ids
        expected_label = {"c2": 3.0, "c1": 2.0, **dict.fromkeys(QA_LABEL_ONE, 1.0)}
        assert qa.labels == (expected_label[high], expected_label[low], 0.0, 0.0)
        assert qa.labels[0] > qa.labels[1]
        assert len(set(randoms)) == 2 and set(randoms) <= QA_RANDOM_POOL  # not a qa candidate, not "out"
        # Every pair with a label difference, row-major: 0>1, 0>2, 0>3, 1>2, 1>3 (the two randoms tie).
        assert qa.pairs == ((0, 1), (0, 2), (0, 3), (1, 2), (1, 3))
        # qb: one label group -> 1 candidate + 3 random documents; "p" (relevant) is excluded from them.
        candidate, *randoms = qb.doc_ids
        assert candidate in {"v1", "v2", "v3"} and qb.labels == (1.0, 0.0, 0.0, 0.0)
        assert len(set(randoms)) == 3 and set(randoms) <= QB_RANDOM_POOL
        assert qb.pairs == ((0, 1), (0, 2), (0, 3))
    # Over many epochs the random documents cover exactly the allowed pool (another query's candidates included).
    assert {d for epoch in range(200) for d in sampler.item(0, epoch).doc_ids[2:]} == QA_RANDOM_POOL


def test_label_groups_are_picked_uniformly():
    sampler = LabelGroupSampler.of(LG_QRELS, LG_RUN, LG_COLLECTION, seed=11)
    groups = [sampler.item(0, epoch) for epoch in range(600)]
    picks = Counter(group.labels[:2] for group in groups)
    # 3 label groups -> 3 unordered pairs, each with probability 1/3 (200 of 600; sd about 12).
    assert set(picks) == {(3.0, 2.0), (3.0, 1.0), (2.0, 1.0)}
    assert all(150 <= count <= 250 for count in picks.values()), picks
    # Within the label-1 group (4 candidates), each is drawn about 1/4 of the time it is picked (~100 of ~400).
    label_one = Counter(group.doc_ids[1] for group in groups if group.labels[1] == 1.0)
    assert set(label_one) == QA_LABEL_ONE
    assert all(60 <= count <= 140 for count in label_one.values()), label_one


def test_label_groups_depth_and_group_size():
    # Top 2 of qa: c2 (label 3) and u1 (label 1): the only possible pick, in that order.
    shallow = LabelGroupSampler.of({"qa": LG_QRELS["qa"]}, LG_RUN, LG_COLLECTION, depth=2, seed=0)
    for group in shallow.examples(0) + shallow.examples(1):
        assert group.doc_ids[:2] == ("c2", "u1") and group.labels == (3.0, 1.0, 0.0, 0.0)
        # Random documents exclude only the top-2 candidates and the relevant documents (c1, out).
        assert not set(group.doc_ids[2:]) & {"c2", "u1", "c1", "out"}
    # group_size 3: two candidates and one random document; pairs 0>1, 0>2, 1>2.
    three = LabelGroupSampler.of(LG_QRELS, LG_RUN, LG_COLLECTION, group_size=3, seed=0)
    qa, qb = three.examples()
    assert len(qa.doc_ids) == 3 and qa.labels[2] == 0.0 and qa.pairs == ((0, 1), (0, 2), (1, 2))
    assert len(qb.doc_ids) == 3 and qb.labels == (1.0, 0.0, 0.0)
    # group_size 2: a query with two label groups needs no random document, hence no collection.
    two = LabelGroupSampler.of({"qa": LG_QRELS["qa"]}, LG_RUN, group_size=2, seed=0)
    group = two[0]
    assert len(group.doc_ids) == 2 and group.labels[0] > group.labels[1] > 0.0 and group.pairs == ((0, 1),)


def test_label_groups_are_deterministic():
    first = LabelGroupSampler.of(LG_QRELS, LG_RUN, LG_COLLECTION, seed=5)
    again = LabelGroupSampler.of(dict(reversed(LG_QRELS.items())), LG_RUN, list(LG_COLLECTION), seed=5)
    assert first.item(0, 3) == again.item(0, 3) and first.examples(7) == again.examples(7)
    first.set_epoch(2)
    assert [first[i] for i in (1, 0)] == list(reversed(first.examples(2)))
    epochs = [first.examples(epoch) for epoch in range(4)]
    assert any(epochs[0] != later for later in epochs[1:])
    assert first.examples(0) != LabelGroupSampler.of(LG_QRELS, LG_RUN, LG_COLLECTION, seed=6).examples(0)


def test_label_groups_impossible_configurations_fail_clearly(tmp_path):
    with pytest.raises(ValueError, match="group_size must be at least 2"):
        LabelGroupSampler.of(LG_QRELS, LG_RUN, LG_COLLECTION, group_size=1)
    with pytest.raises(ValueError, match="needs the collection's document ids"):
        LabelGroupSampler.of(LG_QRELS, LG_RUN)
    # qb needs one random document even at group_size 2 (a single label group).
    with pytest.raises(ValueError, match="needs the collection's document ids"):
        LabelGroupSampler.of(LG_QRELS, LG_RUN, group_size=2)
    # One document outside qa's candidates and relevant documents, but qa needs 2.
    with pytest.raises(ValueError, match="query 'qa': the collection has fewer than 2 documents outside"):
        LabelGroupSampler.of(LG_QRELS, LG_RUN, list(LG_RUN["qa"]) + ["out", "r00"])
    with pytest.raises(ValueError, match="no training examples"):
        LabelGroupSampler.of({"qc": {"x": 1}, "qd": {"y": 0}}, LG_RUN, LG_COLLECTION)
    with pytest.raises(IndexError):
        LabelGroupSampler.of(LG_QRELS, LG_RUN, LG_COLLECTION)[2]


def test_label_groups_respect_topics_and_from_source(tmp_path):
    only_qb = LabelGroupSampler.of(LG_QRELS, LG_RUN, LG_COLLECTION, topics={"qb": "b", "qc": "c"})
    assert len(only_qb) == 1 and only_qb[0].qid == "qb" and only_qb.stats.skipped_queries == 1

    source = _file_source(tmp_path, {qid: f"query {qid}" for qid in LG_QRELS}, LG_QRELS, LG_RUN, LG_COLLECTION)
    sampler = from_source("label_groups", source, seed=4)
    assert isinstance(sampler, LabelGroupSampler)
    assert sampler.examples() == LabelGroupSampler.of(LG_QRELS, LG_RUN, LG_COLLECTION, seed=4).examples()
