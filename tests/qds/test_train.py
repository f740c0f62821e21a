"""`python -m qds.train` and `python -m qds.evaluate` end to end on the built-in collection, with a tiny model.

(A killed and resumed run: `test_qds_resume`.)
"""

import pytest

from common.data.formats import read_run
from qds import evaluate, train
from tests.train_runs import TINY_RUN, check_reranked_run, tiny_run

pytestmark = pytest.mark.slow  # the second tier (README, "Tests")

TINY = [
    "--model.num_layers", "1", "--model.hidden_size", "32", "--model.num_heads", "1",
    "--model.intermediate_size", "64", "--model.window", "8", "--model.impl", "portable",
    "--data.max_length", "192", *TINY_RUN,
]  # fmt: skip


trained = tiny_run(train.main, TINY)


def test_training_writes_a_valid_run_and_its_metrics(trained):
    out, metrics = trained
    written = check_reranked_run(out, metrics, "qds", ["ndcg_cut_10", "map", "mrr@10"])
    assert set(written) == {"qds", "bm25"}
    assert all(len(docs) == 100 for docs in read_run(out / "run.trec").values())  # the other 90 below the top 10
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


def test_every_checkpoint_carries_what_scoring_needs_and_loads_to_the_runs_scores(trained):
    """Lightning saves the data module's hyper-parameters before `QDSRanker.on_save_checkpoint`, which adds the
    `common.portable` entry; `common.api.load` scores the trained run's re-ranked pairs as the run did."""
    import torch

    from common.api import load
    from common.data.builtin import builtin_source
    from common.portable import KEY

    out, _ = trained
    checkpoints = sorted((out / "checkpoints").glob("*.ckpt"))
    assert checkpoints and all(torch.load(c, weights_only=True)[KEY]["package"] == "qds" for c in checkpoints)
    source, run = builtin_source("test"), read_run(out / "run.trec")
    topics, documents = source.topics(), source.documents()
    pairs = [(q, d) for q, scores in sorted(run.items()) for d in sorted(scores, key=scores.get, reverse=True)[:10]]
    ranker = load(next((out / "checkpoints").glob("best-step=*.ckpt")))
    got = ranker.score_pairs([topics[q] for q, _ in pairs], [documents[d] for _, d in pairs])
    assert got.tolist() == pytest.approx([run[q][d] for q, d in pairs], abs=1e-5)
