"""Running a command on bad input, as a user would, and checking how it refuses.

Every command answers bad input with exactly one line on stderr, ``error: <what>`` naming the
option or the file (and line), exit status 2, nothing on stdout and nothing written: no output
file or folder in the working folder, nothing beside the inputs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def write_inputs(folder: Path, files: dict[str, str]) -> Path:
    """Write each ``{relative path: text}`` of `files` under `folder`; returns `folder`."""
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def refused(module: str, args: list[str], tmp_path: Path, expect: str, *, inputs: Path | None = None,
            timeout: float = 300, env: dict | None = None) -> str:
    """Run ``python -m module *args`` in an empty folder ``tmp_path/work`` and assert that it refused.

    `expect` is a part of the one line the command must print; `inputs`, where given, is the folder holding
    the case's input files, which must be left as it was, and ``{in}`` in `args` and `expect` stands for it;
    `env`, variables set for the command. Returns the line.
    """
    if inputs:
        args, expect = [arg.replace("{in}", str(inputs)) for arg in args], expect.replace("{in}", str(inputs))
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    before = _listing(inputs) if inputs else []
    env = {**os.environ, "EFFICIENT_RANKERS_CACHE": str(tmp_path / "cache"), **(env or {})}
    done = subprocess.run([sys.executable, "-m", module, *args], cwd=work, env=env, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip
    said = f"{module} {' '.join(args)}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.returncode == 2, said
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), said
    assert expect in lines[0], said
    assert done.stdout == "", said
    assert _listing(work) == [], said
    if inputs:
        assert _listing(inputs) == before, said
    return lines[0]


def refused_in_process(main, args: list[str], capsys, expect: str) -> str:
    """`main` (a command's ``main(argv)``) on `args`, in this process (so that a test's fixtures stay loaded), exits
    with status 2 and ``error: <expect>`` as the last line on stderr, its only error line; returns the line."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert errors == [err.splitlines()[-1]] and len(errors) == 1, err
    assert expect in errors[0], err
    return errors[0]
