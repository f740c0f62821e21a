"""`common.pyterrier.PyTerrierRanker` in a real PyTerrier pipeline: a first stage ``% depth >>`` the ranker, the rest
of the first stage concatenated below (``^``), measured by ``pt.Experiment`` through ir_measures, gives the measures
``qds.evaluate`` writes for the same checkpoint and candidates."""

import json

import numpy as np
import pandas as pd
import pytest

pt = pytest.importorskip("pyterrier", reason="PyTerrier is the optional extra pyterrier (also in the test extra)")

from ir_measures import AP, RR, nDCG  # noqa: E402

from common.api import load  # noqa: E402
from common.data.formats import read_qrels, read_run, read_topics  # noqa: E402
from common.data.specs import source_from_spec  # noqa: E402
from common.pyterrier import PyTerrierRanker  # noqa: E402
from tests.qds.test_portable import DEPTH, save_checkpoint, task  # noqa: E402,F401  (task: a fixture)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def frames(task):
    """The task's topics, qrels and candidate run as PyTerrier's frames, and its documents' text by id."""
    topics = pd.DataFrame([(q, t) for q, t in read_topics(task["topics_path"]).items()], columns=["qid", "query"])
    qrels = pd.DataFrame([(q, d, r) for q, docs in read_qrels(task["qrels_path"]).items() for d, r in docs.items()],
                         columns=["qid", "docno", "label"])
    run = read_run(task["candidates_path"])
    first = pd.DataFrame([(q, d, s) for q, docs in run.items() for d, s in docs.items()], columns=["qid", "docno", "score"])
    documents = source_from_spec(task).documents()
    return topics, qrels, first, documents


def test_a_pipeline_measures_what_evaluate_writes(task, tmp_path):
    from qds import evaluate

    checkpoint = tmp_path / "best.ckpt"
    save_checkpoint(checkpoint)
    out = tmp_path / "eval"
    evaluate.main(["--checkpoint", str(checkpoint), "--topics", task["topics_path"], "--qrels", task["qrels_path"],
                   "--run", task["candidates_path"], "--collection", task["collection_path"], "--depth", str(DEPTH),
                   "--output_dir", str(out), "--devices", "1", "--accelerator", "cpu"])
    expected = json.loads((out / "metrics.json").read_text())["qds"]

    topics, qrels, first, documents = frames(task)
    bm25 = pt.Transformer.from_df(pt.model.add_ranks(first.merge(topics, on="qid")), uniform=True)
    text = pt.apply.generic(lambda frame: frame.assign(text=[documents[d].text for d in frame["docno"]],
                                                       title=[documents[d].title for d in frame["docno"]]))
    ranker = PyTerrierRanker(load(checkpoint))
    pipeline = (bm25 % DEPTH >> text >> ranker) ^ bm25
    table = pt.Experiment([pipeline], topics, qrels, eval_metrics=[nDCG @ 10, AP, RR @ 10], names=["qds"])
    got = table.set_index("name").loc["qds"]
    assert got["nDCG@10"] == pytest.approx(expected["ndcg_cut_10"], abs=1e-6)
    assert got["AP"] == pytest.approx(expected["map"], abs=1e-6)
    assert got["RR@10"] == pytest.approx(expected["mrr@10"], abs=1e-6)

    # the pipeline's own re-ranked documents are run.trec's, in its order
    results = pipeline.transform(topics)
    run, reordered = read_run(out / "run.trec"), 0
    for qid, rows in results.groupby("qid"):
        ours = rows.sort_values("rank")["docno"].tolist()[:DEPTH]
        theirs = sorted(run[qid], key=lambda d: -run[qid][d])[:DEPTH]
        assert ours == theirs
        reordered += ours != first[first.qid == qid].sort_values("score", ascending=False)["docno"].tolist()[:DEPTH]
        np.testing.assert_allclose(rows.sort_values("rank")["score"].to_numpy()[:DEPTH],
                                   [run[qid][d] for d in theirs], rtol=1e-6, atol=1e-6)
    assert reordered  # the ranker changed the first stage's order somewhere: the check above could fail
