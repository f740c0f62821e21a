"""Every ``python -m <package>.train`` on 2 CPU processes over gloo, under Lightning's own launcher
(``--trainer.devices 2 --trainer.strategy ddp``: it runs the command line again in a second process when fitting
begins), under ``torchrun`` and under SLURM (two processes started here with the variables ``srun`` sets), fresh and
resumed, against 1 process.

The 1-vs-2 comparisons train with ``--model.lr 0``: every step runs (DDP's all-reduce, ``last.ckpt``, the dev
evaluations and the choice of the best checkpoint) but the weights stay those the seed made, so 1 and 2 processes
test the same model and must write the same run files and ``metrics.json``, byte for byte, and log the same dev
measures: the test step's assembly of every process's share (`common.training.reranking`). With a learning rate the
runs part by the order of floating-point sums (one step's gradients agree: tests/distributed/test_global_batch.py).
The Conformer-Kernel runs NDRM1 there. NDRM3's batch statistics (NDRM2's BatchScale, its BatchNorm) are the global
batch's on any number of processes, but they are taken in training mode, after dropout, whose masks each process
draws from its own generator: NDRM3 is compared with dropout off, its scores within float rounding of 1 process's
(the statistics' sums are added in another order).

The resumed case: a 2-process ``qds.train`` under torchrun killed (SIGKILL, `tests/tools/kill_run.py`) after step 3,
with ``last.ckpt`` at step 2, and resumed with ``--ckpt_path last`` under Lightning's launcher ends as the
uninterrupted 2-process run, byte for byte (each process's random generators are restored:
`common.training.reranking`). The SLURM case and a used folder's refusal run ``qds.train`` too.
"""

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from common.training.resume import checkpoint_step
from tests.distributed.slurm import srun_tasks

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
KILL_RUN = ROOT / "tests" / "tools" / "kill_run.py"
TINY_RUN = [
    "--data.depth", "10", "--data.dev_queries", "3", "--data.test_queries", "4", "--data.batch_size", "2",
    "--data.eval_batch_size", "16", "--trainer.max_steps", "6", "--trainer.val_check_interval", "3",
    "--trainer.enable_progress_bar", "false", "--save_every_n_steps", "2", "--trainer.accelerator", "cpu",
]
BERT = ["--model.num_layers", "1", "--model.hidden_size", "32", "--model.num_heads", "2",
        "--model.intermediate_size", "64", "--data.passage_length", "48", "--data.dev_depth", "5"]
MVA = [*BERT, "--model.projection", "8", "--model.doc_pooling", "temporal", "--model.doc_factor", "2", *TINY_RUN]
#: Each package's tiny run (tests/<package>/test_train.py's) and the test outputs it writes.
RUNS = {
    "qds": ([
        "--model.num_layers", "1", "--model.hidden_size", "32", "--model.num_heads", "1",
        "--model.intermediate_size", "64", "--model.window", "8", "--model.impl", "portable",
        "--data.max_length", "192", "--data.dev_depth", "5", *TINY_RUN,
    ], ["run.trec"]),
    "conformer_kernel": ([
        "--model.model", "ndrm1", "--data.embedding_dim", "16", "--model.num_heads", "4", "--model.num_layers", "1",
        "--data.min_count", "2", *TINY_RUN,
    ], ["run.rerank.trec", "run.fullrank.trec"]),
    "earl": ([*BERT, "--model.num_blocks", "1", "--model.query_layers", "1", *TINY_RUN, "--compare_with", "[]"],
             ["run.trec"]),
    "mva": ([*MVA, "--compare_with", "[]"], ["run.trec"]),
}
FROZEN = ["--model.lr", "0"]
TWO = ["--trainer.devices", "2", "--trainer.strategy", "ddp"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def _env(**more) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", **more}


def _check(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _run(command: list[str], **env) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, env=_env(**env), capture_output=True, text=True, timeout=600)


def _outputs(out: Path, runs: list[str]) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in [*runs, "metrics.json", "task.json"]}


def _dev_log(out: Path) -> list[dict]:
    """The dev measures of ``logs/metrics.csv``, by step (the training loss is global rank zero's own share's)."""
    with open(out / "logs" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return [{k: v for k, v in row.items() if k == "step" or k.startswith("dev/")} for row in rows
            if any(row[k] for k in row if k.startswith("dev/"))]


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    """``frozen(package, launcher)``: the folder of `package`'s frozen run (``--model.lr 0``) on 1 process (``one``),
    or on 2 under ``lightning``'s launcher, ``torchrun`` or ``slurm``; each run once, when first asked for."""
    root, folders = tmp_path_factory.mktemp("frozen"), {}

    def run(package: str, launcher: str) -> Path:
        if (package, launcher) not in folders:
            out = root / package / launcher
            args = [*RUNS[package][0], *FROZEN, *([] if launcher == "one" else TWO), "--output_dir", str(out)]
            module = ["-m", f"{package}.train"]
            if launcher == "slurm":
                for done in srun_tasks([sys.executable, *module, *args], ROOT):
                    _check(done)
            else:
                _check(_run([*(TORCHRUN if launcher == "torchrun" else [sys.executable]), *module, *args]))
            folders[package, launcher] = out
        return folders[package, launcher]

    return run


#: Every package under Lightning's launcher; torchrun's path is the same for all (common.commands.train): EARL's, the
#: run whose rank 1 once aborted at exit.
LAUNCHES = [*((package, "lightning") for package in RUNS), ("earl", "torchrun")]


@pytest.mark.parametrize("package, launcher", LAUNCHES)
def test_two_processes_write_what_one_writes(frozen, package, launcher):
    """Rank 0 made the folder; the other process took it as this launch's (exit status 0) and wrote nothing apart."""
    one, two = frozen(package, "one"), frozen(package, launcher)
    assert _outputs(two, RUNS[package][1]) == _outputs(one, RUNS[package][1])
    assert _dev_log(two) == _dev_log(one) and len(_dev_log(one)) == 2  # steps 3 and 6
    assert sorted(p.relative_to(two) for p in two.rglob("*")) == sorted(p.relative_to(one) for p in one.rglob("*"))


def test_srun_tasks_write_what_one_process_writes(frozen):
    assert _outputs(frozen("qds", "slurm"), ["run.trec"]) == _outputs(frozen("qds", "one"), ["run.trec"])


def test_a_used_folder_is_still_refused_on_two_processes(frozen):
    out = frozen("qds", "lightning")
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    done = _run([sys.executable, "-m", "qds.train", *RUNS["qds"][0], *TWO, "--output_dir", str(out)])
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (f"error: {out} is not empty: choose a new --output_dir, or pass "
                                            "--ckpt_path last to resume the run in it")
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before


def test_a_killed_two_process_run_resumes_to_the_uninterrupted_one(tmp_path):
    args = [*RUNS["qds"][0], *TWO]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    _check(_run([*TORCHRUN, "-m", "qds.train", *args, "--output_dir", str(whole)]))
    died = _run([*TORCHRUN, str(KILL_RUN), "qds.train", "train-batch:3", *args, "--output_dir", str(killed)])
    assert died.returncode != 0 and not (killed / "metrics.json").exists()
    assert checkpoint_step(killed / "checkpoints" / "last.ckpt") == 2
    # Resumed under Lightning's launcher: config.yaml's --trainer.devices 2 --trainer.strategy ddp.
    _check(_run([sys.executable, "-m", "qds.train", "--ckpt_path", "last", "--output_dir", str(killed)]))
    assert _outputs(killed, ["run.trec"]) == _outputs(whole, ["run.trec"])
    assert (killed / "logs" / "metrics.csv").read_bytes() == (whole / "logs" / "metrics.csv").read_bytes()


def test_baselines_on_two_processes_are_refused_before_anything_is_written(tmp_path):
    done = _run([sys.executable, "-m", "mva.train", *MVA, *TWO, "--output_dir", str(tmp_path / "run")])
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "error: --compare_with: baselines are trained on one process, this run has 2: give --compare_with [] and "
        "train each baseline as its own run (--model.architecture NAME)")
    assert not (tmp_path / "run").exists()


def test_ndrm3_on_two_processes_scores_as_on_one(tmp_path):
    """NDRM3 without dropout, frozen: the BatchNorm and BatchScale statistics of the 6 training steps are the global
    batch's (`conformer_kernel.model.BatchNorm`), so the test scores are 1 process's within float rounding (they
    differed by up to 0.055 when each process kept its own share's statistics) and the metrics are the same."""
    from common.data.formats import read_run

    args = [*RUNS["conformer_kernel"][0], "--model.model", "ndrm3", "--model.dropout", "0", *FROZEN]
    one, two = tmp_path / "one", tmp_path / "two"
    _check(_run([sys.executable, "-m", "conformer_kernel.train", *args, "--output_dir", str(one)]))
    _check(_run([sys.executable, "-m", "conformer_kernel.train", *args, *TWO, "--output_dir", str(two)]))
    assert (two / "metrics.json").read_bytes() == (one / "metrics.json").read_bytes()
    for name in RUNS["conformer_kernel"][1]:
        got, want = read_run(two / name), read_run(one / name)
        assert got.keys() == want.keys()
        for qid in want:
            assert got[qid].keys() == want[qid].keys()
            assert max(abs(got[qid][d] - want[qid][d]) for d in want[qid]) < 1e-5
