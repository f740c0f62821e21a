"""`common.data.query_split`: the training and held-out parts of a task's judged queries, read through a task spec's
``queries`` (`common.data.specs`). On a made rank_llm file and qrels (8 judged queries, q<k> judging k relevant
passages, and one unjudged) the parts are counted by hand; on TREC DL 2020's files (../shared/data) the sizes and
the noise figure the module docstring gives are measured."""

import hashlib
import json
import random
from pathlib import Path

import numpy as np
import pytest

from common.data.formats import write_collection, write_run, write_topics
from common.data.query_split import SplitError, heldout_queries
from common.data.specs import TaskSpecError, check_spec, source_from_spec
from common.metrics.evaluation import per_query
from common.report import task_label
from mva.data import MVADataModule

SHARED = Path(__file__).parents[3].parent / "shared" / "data" / "trec_dl"
JUDGED = [f"q{k}" for k in range(1, 9)]
#: The held-out part of the made queries: q4 and q6 have the two smallest SHA-256 digests of "0:<qid>"
#: (12decef2... and 3b8e01cb...; the next, q5, 745387bb...); 8 // 4 = 2 held out.
HELDOUT = {"q4", "q6"}


def made_entries() -> list[dict]:
    """Query q<k> (k = 1..8): hits q<k>-r1..q<k>-r<k> (judged 2) and q<k>-n1, q<k>-n2 (judged 0); q9: one unjudged
    hit."""
    entries = []
    for k in range(1, 10):
        ids = [f"q{k}-r{i}" for i in range(1, k + 1)] + [f"q{k}-n1", f"q{k}-n2"] if k < 9 else ["q9-x"]
        hits = [{"qid": f"q{k}", "docid": d, "rank": r, "score": 100.0 - r, "content": f"passage {d}"}
                for r, d in enumerate(ids, start=1)]
        entries.append({"query": f"query {k}", "hits": hits})
    return entries


def made_qrels() -> list[str]:
    return [f"q{k} 0 q{k}-{doc} {label}" for k in range(1, 9)
            for doc, label in [*((f"r{i}", 2) for i in range(1, k + 1)), ("n1", 0), ("n2", 0)]]


def write_task(folder: Path, order: random.Random | None = None) -> dict:
    """The made task's files in `folder`, entries and qrels lines shuffled by `order` (None: as made); its spec."""
    entries, qrels = made_entries(), made_qrels()
    if order is not None:
        order.shuffle(entries)
        order.shuffle(qrels)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task.json").write_text(json.dumps(entries))
    (folder / "qrels.txt").write_text("\n".join(qrels) + "\n")
    return {"rank_llm_path": str(folder / "task.json"), "qrels_path": str(folder / "qrels.txt")}


def test_the_rule_is_the_documented_one():
    """The two of 8 with the smallest SHA-256 of "0:<qid>", computed here with hashlib alone."""
    digests = sorted(hashlib.sha256(f"0:{qid}".encode()).hexdigest() for qid in JUDGED)
    assert {q for q in JUDGED if hashlib.sha256(f"0:{q}".encode()).hexdigest() in digests[:2]} == HELDOUT
    assert heldout_queries(JUDGED) == HELDOUT
    assert heldout_queries(JUDGED, seed=0, one_in=8) == {"q4"}  # the smallest digest alone
    assert len(heldout_queries(JUDGED, seed=1)) == 2 and heldout_queries(JUDGED, seed=1) != HELDOUT


def test_the_split_is_the_same_whatever_the_order_of_the_queries_in_the_files(tmp_path):
    for trial in range(5):
        spec = write_task(tmp_path / str(trial), random.Random(trial))
        assert set(source_from_spec({**spec, "queries": "heldout"}).topics()) == HELDOUT, trial
        assert set(source_from_spec({**spec, "queries": "train"}).topics()) == set(JUDGED) - HELDOUT, trial
    shuffled = JUDGED[:]
    random.Random(9).shuffle(shuffled)
    assert heldout_queries(shuffled) == heldout_queries(reversed(JUDGED)) == HELDOUT


def test_the_parts_are_disjoint_and_cover_every_judged_query(tmp_path):
    spec = write_task(tmp_path)
    held, train, whole = (source_from_spec({**spec, "queries": part}) for part in ("heldout", "train", "all"))
    assert len(whole.topics()) == 9 and len(whole.qrels()) == 8  # q9 has hits but no judgment
    assert sorted(held.topics()) == ["q4", "q6"] and sorted(train.topics()) == ["q1", "q2", "q3", "q5", "q7", "q8"]
    assert set(held.topics()).isdisjoint(train.topics())
    assert set(held.topics()) | set(train.topics()) == set(whole.qrels())  # q9 in neither part
    for part in (held, train):  # qrels and candidates cut to the same queries; documents the task's own
        assert set(part.qrels()) == set(part.candidates()) == set(part.topics())
        assert len(list(part.documents())) == len(list(whole.documents())) == 8 * 2 + 36 + 1
    assert held.candidates()["q6"] == whole.candidates()["q6"] and held.qrels()["q4"] == whole.qrels()["q4"]
    assert (held.name, train.name) == ("task-heldout", "task-train")
    assert source_from_spec({**spec, "queries": "heldout", "name": "mine"}).name == "mine"


def as_files(spec: dict, folder: Path) -> dict:
    """The rank_llm task `spec` as TREC files (topics, qrels, the hits as a run, their text as a collection)."""
    whole = source_from_spec(spec)
    write_topics(folder / "topics.tsv", whole.topics())
    write_run(folder / "run.trec", whole.candidates())
    write_collection(folder / "collection.tsv", (whole.documents()[d] for d in whole.documents()))
    return {"topics_path": str(folder / "topics.tsv"), "qrels_path": spec["qrels_path"],
            "candidates_path": str(folder / "run.trec"), "collection_path": str(folder / "collection.tsv")}


@pytest.mark.parametrize("form", ["rank_llm", "files"])
def test_a_training_run_on_the_training_part_never_reads_a_heldout_query(form, tmp_path, monkeypatch):
    """MVA's data module (EARL's is the same class): one group per (query, relevant passage) with a negative; q<k>
    judges k passages relevant, so the training part's groups are 1 + 2 + 3 + 5 + 7 + 8 = 26 of the whole's 36, and
    the held-out test task re-ranks q4's 6 and q6's 8 candidates. A task of files has a training table of its own
    (every query of its files), which its training part does not read."""
    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "cache"))  # a task of files' table and store
    spec = write_task(tmp_path)
    if form == "files":
        spec = as_files(spec, tmp_path)

    def data(train: dict, test: dict | None = None) -> MVADataModule:
        module = MVADataModule(train=train, dev=None, test=test, tokenizer="builtin", depth=100, negatives=1,
                               batch_size=2)
        module.check_tasks()
        return module

    assert len(data(spec).dataset("train")) == 36  # every judged query's pairs where nothing is held out
    module = data({**spec, "queries": "train"}, {**spec, "queries": "heldout"})
    sampler = module.dataset("train").sampler
    assert len(sampler) == 26
    groups = [sampler.item(i, epoch) for epoch in range(3) for i in range(len(sampler))]
    assert {(g.qid, g.doc_ids[0]) for g in groups} == {(f"q{k}", f"q{k}-r{i}") for k in (1, 2, 3, 5, 7, 8)
                                                       for i in range(1, k + 1)}
    assert {g.doc_ids[1] for g in groups} <= {f"q{k}-n{i}" for k in (1, 2, 3, 5, 7, 8) for i in (1, 2)}
    assert module.eval_queries("test") == ["q4", "q6"]
    pairs = module.eval_pairs("test")
    assert len(pairs) == 6 + 8 and {qid for qid, _ in pairs} == HELDOUT


def test_a_split_that_holds_out_nothing_is_refused_naming_the_split(tmp_path):
    spec = write_task(tmp_path)
    module = MVADataModule(train=spec, dev=None, test={**spec, "queries": "heldout", "heldout_one_in": 9},
                           tokenizer="builtin", depth=100, batch_size=2)
    with pytest.raises(SplitError) as error:
        module.check_tasks()
    assert str(error.value) == ("data.test.heldout_one_in: task-heldout: the qrels judge 8 queries, fewer than "
                                "heldout_one_in (9): none would be held out")


@pytest.mark.parametrize("keys, message", [
    ({"queries": "foo"}, "data.test.queries: expected one of all, train, heldout; got 'foo'"),
    ({"queries": "heldout", "heldout_one_in": 1}, "data.test.heldout_one_in: expected an integer of at least 2; got 1"),
    ({"queries": "train", "split_seed": "one"}, "data.test.split_seed: expected an integer; got 'one'"),
    ({"queries": "train", "split_seed": True}, "data.test.split_seed: expected an integer; got True"),
    ({"split_seed": 3}, "data.test.split_seed: a parameter of the split of the judged queries; give data.test.queries "
                        "train or heldout"),
    ({"queries": "heldout", "qrels_path": None}, "data.test.queries: heldout is a part of the task's judged queries; "
                                                 "give its qrels_path"),
    ({"query": "train"}, "data.test.query: unknown key; a task from files takes"),
])
def test_bad_split_options_are_refused_in_one_line(keys, message):
    spec = {"rank_llm_path": "absent.json", "qrels_path": "absent.txt", **keys}  # refused before the files are looked at
    with pytest.raises(TaskSpecError) as error:
        check_spec(spec, "data.test")
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_messages_name_the_part():
    assert task_label({"rank_llm_path": "r.json", "queries": "heldout"}) == "the task from files r.json, its held-out " \
                                                                            "queries"
    assert task_label({"topics_path": "t.tsv", "queries": "train"}) == "the task from files t.tsv, its training queries"
    assert task_label({"rank_llm_path": "r.json", "queries": "all"}) == "the task from files r.json"


def test_the_split_of_trec_dl_2020():
    """54 judged passage queries: 13 held out (54 // 4), 41 to train on; BM25's per-query NDCG@10 over the 54 has a
    standard deviation of 0.26, a mean over 13 a standard error of 0.07 (the module docstring's figures)."""
    if not SHARED.is_dir():
        pytest.skip(f"real evaluation data not found at {SHARED} (shared/ beside the checkout)")
    spec = {"rank_llm_path": str(SHARED / "candidates_with_text/rank_llm.BM25.retrieve_results_dl20.json"),
            "qrels_path": str(SHARED / "qrels/qrels.dl20-passage.txt")}
    judged = {line.split()[0] for line in Path(spec["qrels_path"]).read_text().splitlines() if line.strip()}
    held, train = (source_from_spec({**spec, "queries": part}) for part in ("heldout", "train"))
    assert len(judged) == 54 and len(held.topics()) == 13 and len(train.topics()) == 41
    assert set(held.topics()) == {"1064670", "1071750", "1136043", "121171", "141630", "169208", "174463", "258062",
                                  "336901", "640502", "701453", "911232", "997622"}
    assert set(held.topics()) | set(train.topics()) == judged
    whole = source_from_spec(spec)
    ndcg = per_query(whole.qrels(), whole.candidates(), ["ndcg_cut_10"], relevance_level=2)["value"].to_numpy()
    assert len(ndcg) == 54
    assert ndcg.std(ddof=1) == pytest.approx(0.26, abs=0.005)
    assert ndcg.std(ddof=1) / np.sqrt(13) == pytest.approx(0.07, abs=0.005)
