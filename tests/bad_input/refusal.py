"""Running a command on bad input and checking how it refuses: exactly one line on stderr, ``error: <what>`` naming
the option or the file (and line), exit status 2, nothing on stdout and nothing written (no file or folder in the
working folder, nothing beside the inputs). In this process by default (the command's ``main``); in a fresh one
where a test needs the real exit status."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from importlib import import_module
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


@contextlib.contextmanager
def _environment(cwd: Path, env: dict):
    saved, before, argv = dict(os.environ), os.getcwd(), sys.argv
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = [sys.argv[0]]  # the command line is the args given (LightningCLI warns of both)
    try:
        yield
    finally:
        sys.argv = argv
        os.chdir(before)
        os.environ.clear()
        os.environ.update(saved)


def _run_in_process(module: str, args: list[str], cwd: Path, env: dict) -> tuple[int, str, str]:
    """``sys.exit(main(args))`` as ``python -m module`` runs it: its exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with _environment(cwd, env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = import_module(module).main(args)
        except SystemExit as done:
            code = done.code
    return code, out.getvalue(), err.getvalue()


def refused(module: str, args: list[str], tmp_path: Path, expect: str, *, inputs: Path | None = None,
            timeout: float = 300, env: dict | None = None, fresh_process: bool = False) -> str:
    """Run `module`'s command on `args` in an empty folder ``tmp_path/work`` and assert that it refused.

    `expect` is a part of the one line the command must print; `inputs`, where given, is the folder holding
    the case's input files, which must be left as it was, and ``{in}`` in `args` and `expect` stands for it;
    `env`, variables set for the command (a fresh process also gets its own cache, ``tmp_path/cache``). Returns
    the line.
    """
    if inputs:
        args, expect = [arg.replace("{in}", str(inputs)) for arg in args], expect.replace("{in}", str(inputs))
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    before = _listing(inputs) if inputs else []
    if fresh_process:
        done = subprocess.run([sys.executable, "-m", module, *args], cwd=work, capture_output=True, text=True,
                              env={**os.environ, "EFFICIENT_RANKERS_CACHE": str(tmp_path / "cache"), **(env or {})},
                              timeout=timeout)
        code, stdout, stderr = done.returncode, done.stdout, done.stderr
    else:
        code, stdout, stderr = _run_in_process(module, args, work, env or {})
    said = f"{module} {' '.join(args)}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    assert code == 2, said
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), said
    assert expect in lines[0], said
    assert stdout == "", said
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
