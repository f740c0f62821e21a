"""`srun_tasks`: a command started as ``srun --ntasks 2`` on one node would start it, without SLURM."""

import os
import socket
import subprocess
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def srun_tasks(command: list[str], cwd: Path, env: dict | None = None) -> list[subprocess.CompletedProcess]:
    """Run `command` as two processes on this machine, each with the variables ``srun`` sets for its task (which
    Lightning's ``SLURMEnvironment`` reads: rank, world size, node list, a job id), from `cwd` with `env` (default:
    this process's) and one thread each; the two finished processes, rank 0's first."""
    port, procs = _free_port(), []
    for rank in range(2):
        task = {**(os.environ if env is None else env), "OMP_NUM_THREADS": "1", "SLURM_NTASKS": "2",
                "SLURM_NTASKS_PER_NODE": "2", "SLURM_NNODES": "1", "SLURM_PROCID": str(rank),
                "SLURM_LOCALID": str(rank), "SLURM_NODEID": "0", "SLURM_NODELIST": "localhost",
                "SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "train", "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port)}
        procs.append(subprocess.Popen(command, cwd=cwd, env=task, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        results.append(subprocess.CompletedProcess(command, proc.returncode, out, err))
    return results
