"""Every command of the repository starts as a user starts it (``python -m <command>`` in a fresh process, from
another folder): ``--help`` names the command and exits 0; a bad command line is refused in one line with exit
status 2 and nothing written. The quick tier's smoke test of each command; the corpora of bad inputs and the end-to-end
runs are in the slow tier (``tests/bad_input``, ``tests/<pkg>/test_train.py``...)."""

import re
import subprocess
import sys

import pytest

COMMANDS = [
    "qds.train", "qds.evaluate", "qds.benchmark", "qds.input_statistics",
    "conformer_kernel.train", "conformer_kernel.evaluate", "conformer_kernel.index", "conformer_kernel.benchmark",
    "earl.train", "earl.evaluate", "earl.index", "earl.benchmark",
    "mva.train", "mva.evaluate", "mva.index", "mva.benchmark", "mva.pretrain", "mva.costs",
    "common.evaluate", "common.report", "common.data.bm25", "common.data.builtin", "common.kernels.benchmark",
    "common.commands.loader_benchmark",
]


def run(command: str, *args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", command, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_names_the_command(command, tmp_path):
    answer = run(command, "--help", cwd=tmp_path)
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.startswith(f"usage: python -m {command} ")
    assert not re.findall(r"(?<![\w-])--[a-z0-9_.]+-[a-z0-9_.-]*", answer.stdout)  # one spelling: underscores
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_a_bad_command_line_is_refused_in_one_line(command, tmp_path):
    """The first problem is named: the unknown option, or a required option that is missing."""
    answer = run(command, "--no_such_option", "1", cwd=tmp_path)
    assert answer.returncode == 2, answer.stderr
    errors = [line for line in answer.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0] == answer.stderr.splitlines()[-1], answer.stderr
    assert "Traceback" not in answer.stderr and list(tmp_path.iterdir()) == []
