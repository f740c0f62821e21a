"""``provenance.json``: what ran, in every train and evaluate run folder, so that a result says which code made it.

``{"command": ..., "version": ..., "commit": ..., "dirty": ...}``:

- ``command``: the command line as run, ``python -m <module>`` and its arguments, each shell-quoted
  (`shlex.join`): pasted into a shell it runs the same command.
- ``version``: the installed version of the repository (``efficient-rankers``; `common.portable.package_version`).
- ``commit``: ``git rev-parse HEAD`` of the checkout the code runs from, None where the code is not a checkout's
  (an installed wheel). The checkout is the one whose top folder holds the code's packages: a wheel installed
  into a virtual environment that lies inside some checkout is no checkout's code.
- ``dirty``: whether that checkout's tracked files differ from its commit (``git describe --dirty``'s test:
  untracked files do not count, as ``outputs/`` or a cache never should), None outside a checkout. Where ``git``
  is missing or fails, both are None: the run goes on.

Written by global rank zero alone (the callers' rule for everything in the folder), atomically, once: a resumed run,
or a SLURM job run again, keeps the first one (`write_provenance`). `common.api.model_card` reads its command,
version and commit.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from common.io import atomic_write
from common.portable import package_version

#: The file, in a run folder.
PROVENANCE = "provenance.json"
#: The folder holding the packages (``common``, ``qds``, ...): a checkout's top folder where the code is one's.
CODE_ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str | None:
    """``git -C CODE_ROOT <args>``'s output, stripped; None where git is missing or fails."""
    try:
        done = subprocess.run(["git", "-C", str(CODE_ROOT), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def checkout_state() -> tuple[str | None, bool | None]:
    """The commit of the checkout the code runs from and whether its tracked files differ from it; (None, None)
    where the code is no checkout's (module docstring)."""
    top = _git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != CODE_ROOT:
        return None, None
    commit = _git("rev-parse", "HEAD")
    changes = _git("status", "--porcelain", "--untracked-files=no")
    return commit, None if commit is None or changes is None else bool(changes)


def provenance(module: str, args: list[str]) -> dict:
    """The provenance of ``python -m <module> <args>`` run from this code (module docstring)."""
    commit, dirty = checkout_state()
    return {"command": shlex.join(["python", "-m", module, *args]), "version": package_version(), "commit": commit,
            "dirty": dirty}  # fmt: skip


def write_provenance(folder: str | Path, module: str, args: list[str] | None = None) -> Path:
    """Write ``folder/provenance.json`` for ``python -m <module> <args>`` (None: ``sys.argv[1:]``), atomically,
    where the folder has none yet; one there (the run's first) is kept. Returns its path."""
    path = Path(folder) / PROVENANCE
    if not path.exists():
        record = provenance(module, sys.argv[1:] if args is None else list(args))
        with atomic_write(path) as f:
            f.write(json.dumps(record, indent=2) + "\n")
    return path
