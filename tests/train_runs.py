"""A tiny ``python -m <package>.train`` run on the built-in collection, and what every such run is checked for."""

import json
from pathlib import Path

import pytest

from common.data.builtin import builtin_source
from common.data.formats import read_run
from common.metrics import evaluate_run

#: The settings of every package's tiny run: 6 steps, dev (3 queries, their top 5) checked every 3 and a last.ckpt
#: every 2; the top 10 of 4 test queries re-ranked.
TINY_RUN = [
    "--data.depth", "10", "--data.dev_queries", "3", "--data.dev_depth", "5", "--data.test_queries", "4",
    "--data.batch_size", "2", "--data.eval_batch_size", "16", "--trainer.max_steps", "6",
    "--trainer.val_check_interval", "3", "--trainer.enable_progress_bar", "false", "--save_every_n_steps", "2",
]


def tiny_run(main, args: list[str]):
    """A module fixture: the output folder and test metrics of `main` (a package's ``train.main``) run on `args`."""

    @pytest.fixture(scope="module")
    def trained(tmp_path_factory) -> tuple[Path, dict]:
        out = tmp_path_factory.mktemp("train") / "run"
        return out, main([*args, "--output_dir", str(out)])

    return trained


def check_reranked_run(out: Path, metrics: dict, name: str, measures) -> dict:
    """``out/run.trec`` holds the 4 test queries, each's top 10 BM25 candidates re-ranked and the rest below them in
    BM25's order; ``out/metrics.json`` is `metrics`, its `name` entry the `measures` of run.trec (trec_eval's);
    ``config.yaml`` and ``checkpoints/last.ckpt`` are written. Returns the written metrics."""
    run = read_run(out / "run.trec")
    assert len(run) == 4  # --data.test_queries
    source = builtin_source("test")
    bm25 = source.candidates()
    for qid, scores in run.items():
        order = sorted(scores, key=scores.get, reverse=True)
        first_stage = sorted(bm25[qid], key=bm25[qid].get, reverse=True)
        assert set(order[:10]) == set(first_stage[:10])  # the top 10 re-ranked, the rest below in BM25 order
        assert order[10:] == first_stage[10:]
    written = json.loads((out / "metrics.json").read_text())
    assert written == metrics
    assert written[name] == pytest.approx(evaluate_run(source.qrels(), run, measures))
    assert (out / "config.yaml").is_file() and (out / "checkpoints" / "last.ckpt").is_file()
    return written


def check_baseline(out: Path, metrics: dict, baseline: str, measures) -> None:
    """The ``--compare_with`` `baseline` of the run in `out`, trained the same way into ``out/<baseline>/``: its
    metrics.json names it as the run's does, on the same test queries (BM25's the same), measured on its own run.trec;
    its config.yaml is the run's but for the architecture and an empty ``--compare_with``."""
    import yaml

    folder = out / baseline
    written = json.loads((folder / "metrics.json").read_text())
    assert metrics[baseline] == written[baseline] and written["bm25"] == metrics["bm25"]  # the same test queries
    run = read_run(folder / "run.trec")
    assert written[baseline] == pytest.approx(evaluate_run(builtin_source("test").qrels(), run, measures))
    mine, its = (yaml.safe_load((f / "config.yaml").read_text()) for f in (out, folder))
    assert its["model"]["architecture"] == baseline and its["compare_with"] == []
    assert its["data"] == mine["data"]  # data.architecture follows model.architecture (a link, not saved)
    assert its["trainer"] == mine["trainer"] and its["seed_everything"] == mine["seed_everything"]
