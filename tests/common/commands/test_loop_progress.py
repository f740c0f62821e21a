"""`common.commands.progress.LoopProgress`: the lines a loop without Lightning prints where the output is no terminal, and
its bar in a terminal."""

import io

import pytest

from common.commands import progress as commands_progress
from common.commands.progress import LoopProgress, status_line, tracked


class Ticks:
    """A clock the test sets."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_lines_every_so_often_with_the_time_left(capsys):
    clock = Ticks()
    progress = LoopProgress(10, "query", desc="re-rank", terminal=False, every=30.0, clock=clock)
    for n in range(1, 11):  # 10 s a query: a line at 30 s and 60 s, counted from the last line
        clock.now = 10.0 * n
        progress.update(n)
    progress.close()

    assert capsys.readouterr().err.splitlines() == [
        "query 3/10 · 30s elapsed · ~1m10s left",
        "query 6/10 · 1m00s elapsed · ~40s left",
        "query 9/10 · 1m30s elapsed · ~10s left",
        "query 10/10 · 1m40s elapsed · done",
    ]


def test_shown_values_and_an_unknown_total():
    assert status_line("step", 7, None, 83.0, shown={"loss": 0.51234}) == "step 7 · loss 0.5123 · 1m23s elapsed"
    assert status_line("step", 7, 10, 6.0, first=5) == "step 7/10 · 6s elapsed · ~9s left"  # 3 s a step since 5


def test_tracked_yields_every_item_and_reads_log_every_when_it_starts(monkeypatch, capsys):
    monkeypatch.setattr(commands_progress, "LOG_EVERY", 0.0)
    assert list(tracked({"q1": 1, "q2": 2}.items(), "query", desc="re-rank", terminal=False)) == [("q1", 1), ("q2", 2)]
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" · ")[0] for line in lines] == ["query 1/2", "query 2/2", "query 2/2"]
    assert lines[0].endswith(" left") and lines[-1].endswith(" done")


def test_a_terminal_shows_a_bar_and_no_lines(monkeypatch, capsys):
    drawn = io.StringIO()
    from tqdm import tqdm

    monkeypatch.setattr("tqdm.tqdm", lambda *a, **k: tqdm(*a, **{**k, "file": drawn, "mininterval": 0}))
    progress = LoopProgress(4, "step", desc="pretrain", terminal=True, every=0.0)
    for n in range(1, 5):
        progress.update(n, loss=1.0 / n)
    progress.close(loss=0.25)

    assert (progress.bar.n, progress.bar.total) == (4, 4) and progress.bar.postfix == "loss=0.25"
    assert "pretrain" in drawn.getvalue() and "4/4" in drawn.getvalue()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("every", [None, 5.0])
def test_the_interval_is_log_every_unless_given(every):
    progress = LoopProgress(1, "query", desc="x", terminal=False, every=every)
    assert progress.every == (commands_progress.LOG_EVERY if every is None else every) and commands_progress.LOG_EVERY == 30.0
