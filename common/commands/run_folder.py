"""A training run's folder, and which run ``--ckpt_path`` names: told from the command line alone.

Checked by `common.commands.cli.RankerCLI`: ``--ckpt_path last --output_dir DIR`` resumes the run in DIR, which needs its
``config.yaml`` and ``checkpoints/last.ckpt``; a finished run (its ``metrics.json`` written) says so and exits
with status 0; a ``--ckpt_path FILE`` to start from must be a checkpoint. Anything else is one line and exit
status 2 (`common.refusals`), with nothing written.

On several processes only global rank zero checks, creates and writes the run's folder (`launched_as_global_zero`):
the others never refuse the folder this launch made.

A SLURM job requeued (``#SBATCH --requeue``: after a pre-emption or a node's failure SLURM runs the same command line
again, with ``SLURM_RESTART_COUNT`` set) continues its run: where ``--output_dir DIR`` holds the run's
``config.yaml`` and no ``--ckpt_path`` is given, `requeued` adds ``--ckpt_path last`` (from ``last.ckpt``; a
finished run says so and exits 0), or, where no ``last.ckpt`` was written before the job was stopped, lets the run
start again in its folder (`restarts_in_place`). Either way the settings given must be those of ``config.yaml``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from common.refusals import checkpoint_file, usage_error

#: A run's resolved settings, in its output folder.
CONFIG = "config.yaml"
#: Written last by a training command's test: a run whose folder holds it has finished.
FINISHED = "metrics.json"
#: The checkpoint a run resumes from, in its ``checkpoints/`` folder.
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
    """The folder of the run that ``--ckpt_path last --output_dir DIR`` on the command line `given` resumes; None
    for a new run (see the module docstring for what is refused)."""
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
        print(f"{folder} holds a finished run (its {FINISHED} is written): nothing to resume")
        sys.stdout.flush()
        raise SystemExit(0)
    for needed in (folder / CONFIG, folder / "checkpoints" / LAST):
        if not needed.is_file():
            usage_error(f"nothing to resume in {folder}: {needed} does not exist")
    return folder


def requeued(given: list[str]) -> list[str]:
    """The command line `given`, with ``--ckpt_path last`` added where SLURM runs it again in a folder that holds its
    run's ``config.yaml`` and ``last.ckpt`` or ``metrics.json`` (module docstring); else `given` itself."""
    out = flag(given, "output_dir")
    if not slurm_restarts() or flag(given, "ckpt_path") is not None or out is None:
        return given
    folder = Path(out)
    if not (folder / CONFIG).is_file():
        return given
    if not ((folder / "checkpoints" / LAST).is_file() or (folder / FINISHED).is_file()):
        return given  # killed before its first save: `restarts_in_place`
    return [*given, "--ckpt_path", "last"]


def restarts_in_place(folder: Path) -> bool:
    """Whether a new run may start in `folder`, which is not empty: SLURM runs its job again and the run there wrote
    no ``last.ckpt`` before the job was stopped (only its ``config.yaml``, logs and maybe a best checkpoint, all
    written again the same)."""
    return slurm_restarts() > 0 and (folder / CONFIG).is_file() and not (folder / "checkpoints" / LAST).is_file()


def slurm_restarts() -> int:
    """How many times SLURM has run this job again (0: never, or not a SLURM job)."""
    count = os.environ.get(RESTARTS, "").strip()
    return int(count) if count.isdigit() else 0



#: What the launchers set in the environment of the processes they start (torchrun, Lightning's own launcher, srun,
#: LSF, MPI): a process with none of them was started alone, and is global rank zero.
LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_NTASKS", "LSB_JOBID",
                      "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")


def launched_as_global_zero() -> bool:
    """Whether this process is (or will be) global rank zero of its launch, told from the environment before any
    process group exists, as Lightning tells it when no cluster environment is configured
    (``_AcceleratorConnector._choose_and_init_cluster_environment``): under torchrun (``RANK``), srun
    (``SLURM_PROCID``), LSF or MPI their rank; else Lightning's own launcher, whose processes but the first get
    ``LOCAL_RANK`` (and ``NODE_RANK`` on other nodes), zero where unset. A process started alone (none of
    `LAUNCHER_VARIABLES` set) is rank zero without importing Lightning: its command line's refusals answer in
    seconds."""
    if not any(name in os.environ for name in LAUNCHER_VARIABLES):
        return True
    from lightning.fabric.plugins.environments import (LSFEnvironment, MPIEnvironment, SLURMEnvironment,
                                                       TorchElasticEnvironment)

    for environment in (TorchElasticEnvironment, SLURMEnvironment, LSFEnvironment, MPIEnvironment):
        if environment.detect():
            return environment().global_rank() == 0
    node = os.environ.get("NODE_RANK", os.environ.get("GROUP_RANK", "0"))
    return int(node) == 0 and int(os.environ.get("LOCAL_RANK", "0")) == 0
