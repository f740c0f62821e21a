"""``--data.batch_size`` is the global batch of an optimizer step, however many processes train
(`common.training.global_batch`): a tiny ``python -m qds.train`` (dropout off, the same seed) on one process, on
two under Lightning's launcher and under torchrun (2 CPU processes over gloo), and on two accumulating two batches
each. Every run's optimizer steps train on the same examples, and the first step's gradients (DDP's mean over the
processes) are one process's within 1e-6; a global batch the processes do not divide is refused in one line
before launch.

A callback given on the command line (`StepRecorder`, ``--trainer.callbacks+=``) records, in every process, the
(query, document) pairs of each optimizer step and the gradients of the first.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

from tests.train_runs import TINY_RUN

pytestmark = pytest.mark.slow  # the second tier (README, "Tests")

REPO = Path(__file__).resolve().parents[2]
#: The qds tiny run (tests/qds/test_train.py), dropout off, 4 steps of 4 groups (two of 2 per process).
TINY = [
    "--model.num_layers", "1", "--model.hidden_size", "32", "--model.num_heads", "1",
    "--model.intermediate_size", "64", "--model.window", "8", "--model.impl", "portable",
    "--data.max_length", "192", *TINY_RUN, "--model.dropout", "0", "--data.batch_size", "4",
    "--trainer.max_steps", "4", "--trainer.accelerator", "cpu",
]
TWO = ["--trainer.devices", "2", "--trainer.strategy", "ddp"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
            "-m", "qds.train"]


class StepRecorder(L.Callback):
    """Writes ``examples-<rank>.json`` (optimizer step -> the (qid, doc_id) pairs of its batches in this process)
    and ``gradients-<rank>.pt`` (the first step's gradients, after DDP's reduction) into `folder`."""

    def __init__(self, folder: str):
        self.folder, self.examples = Path(folder), {}

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        self.examples.setdefault(trainer.global_step, []).extend(zip(batch["qids"], batch["doc_ids"]))

    def on_before_optimizer_step(self, trainer, module, optimizer) -> None:
        if trainer.global_step == 0:
            gradients = {name: p.grad.detach().clone() for name, p in module.named_parameters() if p.grad is not None}
            torch.save(gradients, self.folder / f"gradients-{trainer.global_rank}.pt")

    def on_train_end(self, trainer, module) -> None:
        (self.folder / f"examples-{trainer.global_rank}.json").write_text(json.dumps(self.examples))


def train(folder: Path, args: list[str], launcher: list[str] | None = None) -> subprocess.CompletedProcess:
    folder.mkdir(parents=True)
    recorder = ["--trainer.callbacks+=tests.distributed.test_global_batch.StepRecorder",
                f"--trainer.callbacks.folder={folder}"]
    command = [*(launcher or [sys.executable, "-m", "qds.train"]), *TINY, *args, *recorder,
               "--output_dir", str(folder / "run")]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def steps(folder: Path, processes: int) -> list[list[tuple[str, str]]]:
    """Each optimizer step's pairs over every process, in rank order."""
    records = [json.loads((folder / f"examples-{rank}.json").read_text()) for rank in range(processes)]
    return [[tuple(pair) for record in records for pair in record[step]] for step in sorted(records[0], key=int)]


def max_difference(folder: Path, reference: dict) -> float:
    gradients = torch.load(folder / "gradients-0.pt")
    assert gradients.keys() == reference.keys()
    return max((gradients[name] - reference[name]).abs().max().item() for name in reference)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("global-batch")
    return {
        "one": (root / "one", 1, train(root / "one", [])),
        "two": (root / "two", 2, train(root / "two", TWO)),
        "torchrun": (root / "torchrun", 2, train(root / "torchrun", TWO, TORCHRUN)),
        "accumulated": (root / "accumulated", 2,
                        train(root / "accumulated", [*TWO, "--trainer.accumulate_grad_batches", "2"])),
    }


@pytest.mark.parametrize("run", ["two", "torchrun", "accumulated"])
def test_each_optimizer_step_trains_on_the_examples_of_one_process(runs, run):
    one, _, _ = runs["one"]
    folder, processes, _ = runs[run]
    expected = steps(one, 1)
    assert len(expected) == 4 and all(len(step) == 4 * 2 for step in expected)  # 4 groups of a positive, a negative
    assert steps(folder, processes) == expected  # the same pairs, the global batch's slices in rank order


@pytest.mark.parametrize("run", ["two", "torchrun", "accumulated"])
def test_the_first_steps_gradients_are_one_processs(runs, run):
    one, _, _ = runs["one"]
    folder, processes, _ = runs[run]
    reference = torch.load(one / "gradients-0.pt")
    assert max(t.abs().max().item() for t in reference.values()) > 1e-3  # gradients worth comparing
    assert max_difference(folder, reference) <= 1e-6
    for rank in range(1, processes):  # the same mean in every process
        assert all(torch.equal(g, torch.load(folder / "gradients-0.pt")[name])
                   for name, g in torch.load(folder / f"gradients-{rank}.pt").items())


@pytest.mark.parametrize("run, printed", [
    ("one", "global batch 4 = 1 process x 4"), ("two", "global batch 4 = 2 processes x 2"),
    ("torchrun", "global batch 4 = 2 processes x 2"),
    ("accumulated", "global batch 4 = 2 processes x 1 x 2 accumulated"),
])
def test_the_split_is_printed_once(runs, run, printed):
    _, _, done = runs[run]
    assert done.stdout.splitlines().count(printed) == 1
    assert sum(line.startswith("global batch") for line in done.stdout.splitlines()) == 1


@pytest.mark.parametrize("launcher", [None, TORCHRUN], ids=["lightning", "torchrun"])
def test_a_global_batch_the_processes_do_not_divide_is_refused_before_launch(launcher, tmp_path):
    command = [*(launcher or [sys.executable, "-m", "qds.train"]), *TINY, *TWO, "--data.batch_size", "3",
               "--output_dir", str(tmp_path / "run")]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode != 0
    line = ("error: --data.batch_size 3 is the global batch of an optimizer step: it must divide among 2 processes; "
            "give --data.batch_size 2 or 4, or keep 3 on 1 process (--trainer.devices x --trainer.num_nodes)")
    if launcher is None:  # the command itself, before Lightning starts the second process
        assert done.returncode == 2 and done.stderr.splitlines()[-1] == line
    assert done.stderr.splitlines().count(line) == 1
    assert not (tmp_path / "run").exists()
