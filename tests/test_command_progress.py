"""The evaluate and index commands show their progress as training does where the output is no terminal: a line
when a loop starts and ends and, between, one every `common.commands.commands_progress.LOG_EVERY` seconds (0 here: one
after every batch or query) counting what is done out of the total, the time elapsed and the time left.

The tiny checkpoints are `tests/fixtures/checkpoints`' (tests/fixtures/checkpoints/README.md)."""

import re
from pathlib import Path

import pytest

from common.commands import progress as commands_progress

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]  # tests/conftest.py

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints"
LINE = r"{what} (\d+)/(\d+) · \d+s elapsed · ~\d+s left"


def counted(lines: list[str], what: str) -> list[tuple[int, int]]:
    """The (done, total) of each `what` progress line, every line that starts so (but a loop's last) being one."""
    pattern = re.compile(LINE.format(what=what))
    found = [line for line in lines if line.startswith(f"{what} ") and not line.endswith(" done")]
    assert all(pattern.fullmatch(line) for line in found), found
    return [tuple(map(int, pattern.fullmatch(line).groups())) for line in found]


@pytest.fixture
def every_batch(monkeypatch):
    monkeypatch.setattr(commands_progress, "LOG_EVERY", 0.0)


def test_conformer_kernel_evaluate_counts_its_test_and_index_batches(every_batch, tmp_path, capsys):
    from conformer_kernel import evaluate

    evaluate.main(["--checkpoint", str(FIXTURES / "conformer_kernel.ckpt"), "--task", "builtin:test", "--modes",
                   "rerank", "fullrank", "--depth", "10", "--test_queries", "3", "--devices", "1",
                   "--output_dir", str(tmp_path / "eval")])
    lines = capsys.readouterr().err.splitlines()

    (start,) = [line for line in lines if line.startswith("test: ")]
    total = int(start.split()[1])  # re-ranking 3 queries' top 10
    assert counted(lines, "test batch") == [(k, total) for k in range(1, total + 1)]
    assert f"test done: {total} batches in " in "\n".join(lines)
    (start,) = [line for line in lines if line.startswith("predict: ")]  # full ranking's index, shard by shard
    shards = int(start.split()[1])
    assert counted(lines, "predict batch") == [(k, shards) for k in range(1, shards + 1)]


def test_earl_index_counts_its_shards_and_earl_evaluate_its_queries(every_batch, tmp_path, capsys):
    from earl import evaluate, index

    collection = tmp_path / "collection.tsv"
    collection.write_text("".join(f"D{i}\tpassage number {i} about topic {i % 3}\n" for i in range(10)))
    index.main(["--checkpoint", str(FIXTURES / "earl.ckpt"), "--strategy", "s1", "--collection", str(collection),
                "--output_dir", str(tmp_path / "store"), "--shard_size", "4", "--accelerator", "cpu", "--devices", "1"])
    lines = capsys.readouterr().err.splitlines()
    assert "predict: 3 batches" in lines and counted(lines, "predict batch") == [(1, 3), (2, 3), (3, 3)]

    evaluate.main(["--checkpoint", str(FIXTURES / "earl.ckpt"), "--task", "builtin:test", "--depth", "5",
                   "--test_queries", "3", "--accelerator", "cpu", "--output_dir", str(tmp_path / "eval")])
    lines = capsys.readouterr().err.splitlines()
    assert counted(lines, "query") == [(1, 3), (2, 3), (3, 3)]
    assert re.fullmatch(r"query 3/3 · \d+s elapsed · done", lines[-1]), lines
