"""A training run's folder, and which run ``--ckpt_path`` names, told from the command line alone.

``--ckpt_path last --output_dir DIR`` resumes the run in DIR (its ``config.yaml`` and ``checkpoints/last.ckpt``); a
finished run says so and exits 0; anything else is refused in one line. Only global rank zero checks and creates the
folder. A requeued SLURM job continues its run: `requeued` adds ``--ckpt_path last``, or lets it start again in its
folder where no ``last.ckpt`` was written (`restarts_in_place`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from common.refusals import checkpoint_file, usage_error

CONFIG = "config.yaml"
#: Written last by a training command's test: a run whose folder holds it has finished.
FINISHED = "metrics.json"
LAST = "last.ckpt"
#: What SLURM sets in a job it runs again (``--requeue``): how many times it did.
RESTARTS = "SLURM_RESTART_COUNT"


def flag(given: list[str], name: str) -> str | None:
    """The value of ``--name`` on a command line (``--name v`` or ``--name=v``; the last one given)."""
    value = None
    for i, arg in enumerate(given):
        if arg == f"--{name}" and i + 1 < len(given):
            value = given[i + 1]
        elif arg.startswith(f"--{name}="):
            value = arg.split("=", 1)[1]
    return value


def resumed_run(given: list[str]) -> Path | None:
    """The folder of the run that ``--ckpt_path last --output_dir DIR`` on the command line `given` resumes."""
    ckpt, out = flag(given, "ckpt_path"), flag(given, "output_dir")
    if ckpt is None:
        return None
    if ckpt != "last":
        try:
            checkpoint_file(ckpt)
        except argparse.ArgumentTypeError as error:
            usage_error(f"--ckpt_path: {error}")
        return None
    if out is None:
        usage_error("--ckpt_path last resumes a run: give its --output_dir")
    folder = Path(out)
    if (folder / FINISHED).is_file():
        print(f"{folder} holds a finished run (its {FINISHED} is written): nothing to resume", flush=True)
        raise SystemExit(0)
    for needed in (folder / CONFIG, folder / "checkpoints" / LAST):
        if not needed.is_file():
            usage_error(f"nothing to resume in {folder}: {needed} does not exist")
    return folder


def requeued(given: list[str]) -> list[str]:
    """`given` with ``--ckpt_path last`` added where SLURM reruns it in its run's folder."""
    out = flag(given, "output_dir")
    folder = Path(out or ".")
    if (slurm_restarts() and flag(given, "ckpt_path") is None and out is not None and (folder / CONFIG).is_file()
            and ((folder / "checkpoints" / LAST).is_file() or (folder / FINISHED).is_file())):
        return [*given, "--ckpt_path", "last"]
    return given


def restarts_in_place(folder: Path) -> bool:
    """Whether a new run may start in `folder`, which is not empty."""
    return slurm_restarts() > 0 and (folder / CONFIG).is_file() and not (folder / "checkpoints" / LAST).is_file()


def slurm_restarts() -> int:
    count = os.environ.get(RESTARTS, "").strip()
    return int(count) if count.isdigit() else 0


#: What launchers (torchrun, Lightning, srun, LSF, MPI) set; a process with none of them is global rank zero.
LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_NTASKS", "LSB_JOBID",
                      "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")


def launched_as_global_zero() -> bool:
    """Whether this process is global rank zero, told from the environment as Lightning tells it."""
    if not any(name in os.environ for name in LAUNCHER_VARIABLES):
        return True
    from lightning.fabric.plugins.environments import (LSFEnvironment, MPIEnvironment, SLURMEnvironment,
                                                       TorchElasticEnvironment)

    for environment in (TorchElasticEnvironment, SLURMEnvironment, LSFEnvironment, MPIEnvironment):
        if environment.detect():
            return environment().global_rank() == 0
    node = os.environ.get("NODE_RANK", os.environ.get("GROUP_RANK", "0"))
    return int(node) == 0 and int(os.environ.get("LOCAL_RANK", "0")) == 0
