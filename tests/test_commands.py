"""Every command of the repository starts as a user starts it (``python -m <command>`` in a fresh process, from
another folder): ``--help`` names the command and exits 0; a bad command line is refused in one line with exit
status 2 and nothing written. The quick tier's smoke test of each command; the corpora of bad inputs and the end-to-end
runs are in the slow tier (``tests/bad_input``, ``tests/<pkg>/test_train.py``...)."""

import re
import subprocess
import sys
import zipfile

import pytest

COMMANDS = [
    "qds.train", "qds.evaluate", "qds.benchmark", "qds.input_statistics",
    "conformer_kernel.train", "conformer_kernel.evaluate", "conformer_kernel.index", "conformer_kernel.benchmark",
    "earl.train", "earl.evaluate", "earl.index", "earl.benchmark",
    "mva.train", "mva.evaluate", "mva.index", "mva.benchmark", "mva.pretrain", "mva.costs",
    "common.evaluate", "common.report", "common.data.bm25", "common.data.builtin", "common.kernels.benchmark",
    "common.commands.help", "common.commands.loader_benchmark",
]  # fmt: skip


def run(command: str, *args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", command, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_names_the_command(command, tmp_path):
    answer = run(command, "--help", cwd=tmp_path)
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.startswith(f"usage: python -m {command} ")
    assert not re.findall(r"(?<![\w-])--[a-z0-9_.]+-[a-z0-9_.-]*", answer.stdout)  # one spelling: underscores
    assert list(tmp_path.iterdir()) == []


def test_former_spellings_are_read_as_the_options_they_became(tmp_path):
    """The renamed options' former spellings, read alike and left out of the help (README, "Options every command
    shares")."""
    from common import evaluate, report
    from conformer_kernel import index

    metrics = tmp_path / "metrics.json"
    metrics.write_text("{}")
    parser = report._build_parser()
    old = parser.parse_args([str(metrics), "--paper", "qds", "--metric-map", "a=b", "--relevance-level", "2",
                             "--include-missing", "--out", "r.md"])  # fmt: skip
    new = parser.parse_args([str(metrics), "--paper", "qds", "--metric_map", "a=b", "--relevance_level", "2",
                             "--include_missing", "--output", "r.md"])  # fmt: skip
    assert vars(old) == vars(new) and new.metric_map == ["a=b"] and new.output == "r.md"
    assert not parser.parse_args([str(metrics), "--paper", "qds"]).include_missing
    parser = evaluate.build_parser()
    assert vars(parser.parse_args(["--per-query", "--level", "2"])) == vars(
        parser.parse_args(["--per_query", "--relevance_level", "2"]))
    assert (parser.parse_args([]).per_query, parser.parse_args([]).relevance_level) == (False, 1)
    checkpoint = tmp_path / "x.ckpt"
    zipfile.ZipFile(checkpoint, "w").close()  # what --checkpoint's type takes for a file torch.save wrote
    parser = index.build_parser()
    base = ["--checkpoint", str(checkpoint), "--collection", "builtin:test", "--output_dir", "x"]
    assert parser.parse_args([*base, "--topics", "builtin:test"]).query_tasks == ["builtin:test"]
    assert parser.parse_args(base).query_tasks == []
    for help_text in (report._build_parser().format_help(), evaluate.build_parser().format_help(),
                      index.build_parser().format_help()):
        assert not re.search(r"--(metric-map|relevance-level|include-missing|out |per-query|level |topics)", help_text)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_bad_command_line_is_refused_in_one_line(command, tmp_path):
    """The first problem is named: the unknown option, or a required option that is missing."""
    answer = run(command, "--no_such_option", "1", cwd=tmp_path)
    assert answer.returncode == 2, answer.stderr
    errors = [line for line in answer.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0] == answer.stderr.splitlines()[-1], answer.stderr
    assert "Traceback" not in answer.stderr and list(tmp_path.iterdir()) == []
