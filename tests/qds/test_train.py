"""`python -m qds.train` and `python -m qds.evaluate` end to end on the built-in collection, with a tiny model.

(A killed and resumed run: `test_qds_resume`.)
"""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from common.data.formats import read_run
from qds import evaluate, train
from tests.project import project_field
from tests.train_runs import TINY_RUN, check_reranked_run, tiny_run

pytestmark = pytest.mark.slow  # the second tier (README, "Tests")

REPO = Path(__file__).resolve().parents[2]

TINY = [
    "--model.num_layers", "1", "--model.hidden_size", "32", "--model.num_heads", "1",
    "--model.intermediate_size", "64", "--model.window", "8", "--model.impl", "portable",
    "--data.max_length", "192", *TINY_RUN,
]


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
    metrics = evaluate.main(["--checkpoint", str(best), "--task", "builtin:test", "--depth", "10",
                             "--output_dir", str(tmp_path / "eval")])
    trained_run, evaluated = read_run(out / "run.trec"), read_run(tmp_path / "eval" / "run.trec")
    assert len(evaluated) == 100
    for qid, scores in trained_run.items():  # the same model gives the same scores to the same pairs
        top = sorted(scores, key=scores.get, reverse=True)[:10]
        assert [evaluated[qid][d] for d in top] == pytest.approx([scores[d] for d in top], abs=1e-5)
    assert set(metrics) == {"qds", "bm25"}
    evaluated = json.loads((tmp_path / "eval" / "provenance.json").read_text())
    assert evaluated["command"] == (f"python -m qds.evaluate --checkpoint {best} --task builtin:test --depth 10 "
                                    f"--output_dir {tmp_path / 'eval'}")
    assert evaluated["commit"] == json.loads((out / "provenance.json").read_text())["commit"]


def test_the_model_card_names_the_command_version_and_commit_of_the_run(trained):
    """The card of a ranker exported from the run (`common.api.model_card`, given the run folder) says what
    provenance.json holds."""
    from common.api import model_card
    from common.portable import Portable

    out, _ = trained
    record = json.loads((out / "provenance.json").read_text())
    card = model_card(Portable("qds", {}, {}, "0.0.0", {}), "QDS-Transformer", out, "qds-tiny")
    at = f" at commit `{record['commit']}`" if record["commit"] else ""
    changes = ", with uncommitted changes" if record["dirty"] else ""
    command = " ".join(["python", "-m", "qds.train", *TINY, "--output_dir", str(out)])
    assert f"## Command\n\n    {command}\n\n(efficient-rankers {record['version']}{at}{changes})\n" in card


def test_the_run_records_its_command_version_and_commit(trained):
    """provenance.json: the command line given, pyproject's version, and this checkout's HEAD and whether its tracked
    files differ from it (git's own answer), or null outside a checkout (as the wheel's run, `tests.test_wheel`)."""
    out, _ = trained
    record = json.loads((out / "provenance.json").read_text())
    assert record["command"] == " ".join(["python", "-m", "qds.train", *TINY, "--output_dir", str(out)])
    assert record["version"] == project_field("version")
    git = ["git", "-C", str(REPO)]
    if shutil.which("git") is None or subprocess.run([*git, "rev-parse"], capture_output=True).returncode:
        assert (record["commit"], record["dirty"]) == (None, None)
    else:
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        changed = subprocess.run([*git, "diff", "HEAD", "--quiet"]).returncode == 1
        assert (record["commit"], record["dirty"]) == (head, changed)


def test_loggers_given_write_beside_the_runs_own_log(trained, tmp_path):
    """``--trainer.logger`` CSVLogger and TensorBoardLogger each write under their save_dir what was logged, and the
    run's own logs/metrics.csv is the one written without them, byte for byte."""
    import csv

    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    alone, _ = trained
    out = tmp_path / "run"
    train.main([*TINY, "--output_dir", str(out),
                "--trainer.logger+", "lightning.pytorch.loggers.CSVLogger",
                "--trainer.logger.save_dir", str(tmp_path / "csv"),
                "--trainer.logger+", "lightning.pytorch.loggers.TensorBoardLogger",
                "--trainer.logger.save_dir", str(tmp_path / "tb")])
    assert (out / "logs" / "metrics.csv").read_bytes() == (alone / "logs" / "metrics.csv").read_bytes()
    with open(alone / "logs" / "metrics.csv", newline="") as f:
        dev = {int(r["step"]): float(r["dev/mrr@10"]) for r in csv.DictReader(f) if r["dev/mrr@10"]}
    assert sorted(dev) == [2, 5]  # --trainer.val_check_interval 3 of 6 steps (steps counted from 0)
    with open(tmp_path / "csv" / "lightning_logs" / "version_0" / "metrics.csv", newline="") as f:
        assert {int(r["step"]): float(r["dev/mrr@10"]) for r in csv.DictReader(f) if r["dev/mrr@10"]} == dev
    events = accumulator.EventAccumulator(str(tmp_path / "tb" / "lightning_logs" / "version_0"))
    events.Reload()
    logged = {e.step: e.value for e in events.Scalars("dev/mrr@10")}
    assert logged == pytest.approx(dev, abs=1e-7)  # float32 in the event file


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
