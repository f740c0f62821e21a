"""A training run's folder, and which run ``--ckpt_path`` names: told from the command line alone.

Checked at a training command's front door (`common.commands.help`), before Lightning is imported, and again by
`common.commands.cli.RankerCLI`: ``--ckpt_path last --output_dir DIR`` resumes the run in DIR, which needs its
``config.yaml`` and ``checkpoints/last.ckpt``; a finished run (its ``metrics.json`` written) says so and exits
with status 0; a ``--ckpt_path FILE`` to start from must be a checkpoint. Anything else is one line and exit
status 2 (`common.refusals`), with nothing written.

On several processes only global rank zero checks, creates and writes the run's folder (`launched_as_global_zero`):
the others never refuse the folder this launch made.
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
