"""A `conformer_kernel.train` run killed (SIGKILL) and resumed with ``--ckpt_path last`` ends as the uninterrupted run.

As `tests/qds/test_resume.py`, with the kills this command adds to what `common.training.resume` covers: during the
full-ranking index build (its shards: `conformer_kernel.index`) and between the run files and ``metrics.json``.
The run: 8 steps, dev evaluation every 4, ``last.ckpt`` every 2 (the save due at 4 comes a step late) and
when training ends.
"""

import subprocess
import sys
from pathlib import Path

import pytest

from common.training.resume import checkpoint_step

pytestmark = pytest.mark.slow  # the second tier (README, "Tests")

SMALL = [
    "--data.embedding_dim", "16", "--model.num_heads", "4", "--model.num_layers", "1", "--data.batch_size", "8",
    "--data.min_count", "2", "--data.depth", "10", "--data.dev_queries", "10", "--data.test_queries", "25",
    "--trainer.max_steps", "8", "--trainer.val_check_interval", "4", "--save_every_n_steps", "2",
    "--trainer.enable_progress_bar", "false",
]
KILLS = [("train-batch:3", 2), ("index-shard", 8), ("writing-outputs", 8)]
KILL_RUN = Path(__file__).parents[1] / "tools" / "kill_run.py"
OUTPUTS = ("run.rerank.trec", "run.fullrank.trec", "metrics.json", "logs/metrics.csv", "index/data.npy",
           "index/indices.npy", "index/indptr.npy")


def _run(args: list[str], cwd: Path, kill: str | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, str(KILL_RUN), "conformer_kernel.train", kill] if kill else [
        sys.executable, "-m", "conformer_kernel.train"]
    return subprocess.run([*command, *args], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ck-resume")
    done = _run([*SMALL, "--output_dir", "whole"], root)
    assert done.returncode == 0, done.stderr
    steps = []
    for i, (kill, _) in enumerate(KILLS):
        killed = _run([*(["--ckpt_path", "last"] if i else SMALL), "--output_dir", "killed"], root, kill)
        assert killed.returncode == -9, killed.stderr
        steps.append(checkpoint_step(root / "killed" / "checkpoints" / "last.ckpt"))
    assert (root / "killed" / "run.rerank.trec").is_file() and not (root / "killed" / "metrics.json").exists()
    resumed = _run(["--output_dir", "killed", "--ckpt_path", "last"], root)
    assert resumed.returncode == 0, resumed.stderr
    return root / "whole", root / "killed", steps


def test_each_kill_resumes_from_the_checkpoint_before_it(runs):
    assert runs[2] == [step for _, step in KILLS]


@pytest.mark.parametrize("output", OUTPUTS)
def test_the_resumed_run_ends_as_the_uninterrupted_one_byte_for_byte(runs, output):
    whole, killed, _ = runs
    assert (killed / output).read_bytes() == (whole / output).read_bytes()
