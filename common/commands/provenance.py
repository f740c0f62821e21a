"""``provenance.json``: what ran (``command``, shell-quoted; ``version``; ``commit`` and ``dirty`` of the checkout whose
top folder holds the code, None outside one or without git), in every train and evaluate run folder.
Written by global rank zero, atomically, once: a resumed run keeps the first (`write_provenance`).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from common.io import atomic_write
from common.portable import package_version

PROVENANCE = "provenance.json"
#: The folder holding the packages (``common``, ``qds``, ...): a checkout's top folder where the code is one's.
CODE_ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(CODE_ROOT), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def checkout_state() -> tuple[str | None, bool | None]:
    """The commit of the checkout the code runs from and whether its tracked files differ from it."""
    top = _git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != CODE_ROOT:
        return None, None
    commit = _git("rev-parse", "HEAD")
    changes = _git("status", "--porcelain", "--untracked-files=no")
    return commit, None if commit is None or changes is None else bool(changes)


def provenance(module: str, args: list[str]) -> dict:
    commit, dirty = checkout_state()
    return {"command": shlex.join(["python", "-m", module, *args]), "version": package_version(), "commit": commit,
            "dirty": dirty}


def write_provenance(folder: str | Path, module: str, args: list[str] | None = None) -> Path:
    """Write ``folder/provenance.json`` atomically, where the folder has none yet."""
    path = Path(folder) / PROVENANCE
    if not path.exists():
        record = provenance(module, sys.argv[1:] if args is None else list(args))
        with atomic_write(path) as f:
            f.write(json.dumps(record, indent=2) + "\n")
    return path
