"""What the benchmark commands' tests share: a command's ``main`` run in this process with its stdout captured, and
its refusal to replace earlier results without ``--overwrite``."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest


def run_main(main, argv: list[str]) -> tuple[int, str]:
    """``main(argv)``'s exit status and what it printed on stdout."""
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(argv)
    return code, stdout.getvalue()


def assert_refuses_to_overwrite(main, argv: list[str], folder: Path) -> None:
    """``main(argv)``, writing into `folder` where earlier results are, ends with status 2 and leaves every file of
    `folder` as it was."""
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(SystemExit) as refused:
        main(argv)
    assert refused.value.code == 2
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
