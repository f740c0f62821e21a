"""`python -m qds.train` and `python -m qds.evaluate` end to end on the built-in collection, with a tiny model.

(A killed and resumed run: `test_qds_resume`.)
"""

import json

import pytest

from common.data.formats import read_run
from common.metrics import evaluate_run
from qds import evaluate, train

TINY = [
    "--model.num_layers", "1", "--model.hidden_size", "32", "--model.num_heads", "1",
    "--model.intermediate_size", "64", "--model.window", "8", "--model.impl", "portable",
    "--data.max_length", "192", "--data.depth", "10", "--data.dev_queries", "3", "--data.dev_depth", "5",
    "--data.test_queries", "4", "--data.batch_size", "2", "--data.eval_batch_size", "16",
    "--trainer.max_steps", "6", "--trainer.val_check_interval", "3", "--trainer.enable_progress_bar", "false",
    "--save_every_n_steps", "2",
]  # fmt: skip


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("qds") / "run"
    metrics = train.main([*TINY, "--output_dir", str(out)])
    return out, metrics


def test_training_writes_a_valid_run_and_its_metrics(trained):
    out, metrics = trained
    run = read_run(out / "run.trec")
    assert len(run) == 4  # --data.test_queries
    assert all(len(docs) == 100 for docs in run.values())  # top 10 re-ranked, the other 90 below in BM25 order
    from common.data.builtin import builtin_source

    source = builtin_source("test")
    bm25 = source.candidates()
    for qid, scores in run.items():
        order = sorted(scores, key=scores.get, reverse=True)
        top10 = sorted(bm25[qid], key=bm25[qid].get, reverse=True)[:10]
        assert set(order[:10]) == set(top10)
        assert order[10:] == sorted(bm25[qid], key=bm25[qid].get, reverse=True)[10:]
    written = json.loads((out / "metrics.json").read_text())
    assert set(written) == {"qds", "bm25"}
    assert written["qds"] == pytest.approx(evaluate_run(source.qrels(), run, ["ndcg_cut_10", "map", "mrr@10"]))
    assert written == metrics
    assert (out / "config.yaml").is_file() and (out / "checkpoints" / "last.ckpt").is_file()
    assert list((out / "checkpoints").glob("best-step=*.ckpt"))


def test_a_used_output_folder_is_refused(trained, capsys):
    out, _ = trained
    with pytest.raises(SystemExit) as exit:
        train.main([*TINY, "--output_dir", str(out)])
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: {out} is not empty: choose a new --output_dir, or pass --ckpt_path last to resume the run in it")


def test_evaluate_re_ranks_with_the_best_checkpoint(trained, tmp_path):
    out, _ = trained
    best = next((out / "checkpoints").glob("best-step=*.ckpt"))
    metrics = evaluate.main(["--checkpoint", str(best), "--candidates", "builtin:test", "--depth", "10",
                             "--output_dir", str(tmp_path / "eval")])
    trained_run, evaluated = read_run(out / "run.trec"), read_run(tmp_path / "eval" / "run.trec")
    assert len(evaluated) == 100
    for qid, scores in trained_run.items():  # the same model gives the same scores to the same pairs
        top = sorted(scores, key=scores.get, reverse=True)[:10]
        assert [evaluated[qid][d] for d in top] == pytest.approx([scores[d] for d in top], abs=1e-5)
    assert set(metrics) == {"qds", "bm25"}
