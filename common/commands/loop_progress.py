"""How a command shows the progress of a loop no ``Trainer`` runs: a tqdm bar in a terminal, else a line on stderr every
`LOG_EVERY` seconds and at the end (``query 120/600 · 1m23s elapsed · ~5m10s left``), without torch or Lightning.
`LoopProgress`, `tracked` (an iterable with one) and `status_line`, which `common.commands.progress` prints too.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sized

from common.commands.durations import duration

#: Seconds between two progress lines where the output is not a terminal.
LOG_EVERY = 30.0


def terminal_output() -> bool:
    """Whether both stdout and stderr are terminals: a bar is drawn only where neither ends in a file."""
    return sys.stdout.isatty() and sys.stderr.isatty()


def count(n: int, total: int | float | None) -> str:
    return f"{n}/{int(total)}" if total is not None and math.isfinite(total) else str(n)


def status_line(what: str, n: int, total: int | float | None, elapsed: float, *, first: int = 0, done: bool = False,
                shown: dict[str, float] | None = None) -> str:
    """``what n/total · name value ..."""
    parts = [f"{what} {count(n, total)}"] if what else []
    parts += [f"{name} {value:.4g}" for name, value in (shown or {}).items()]
    parts.append(f"{duration(elapsed)} elapsed")
    if done:
        parts.append("done")
    elif total is not None and math.isfinite(total) and n > first:
        parts.append(f"~{duration(elapsed / (n - first) * (total - n))} left")
    return " · ".join(parts)


class LoopProgress:
    """The progress of a loop over `total` items, each called `what`: a tqdm bar where `terminal` (None:
    `terminal_output`), else a line on stderr every `every` seconds (None: `LOG_EVERY`) of `clock`."""

    def __init__(self, total: int | None, what: str, *, desc: str, terminal: bool | None = None,
                 every: float | None = None, clock: Callable[[], float] = time.monotonic):
        self.total, self.what, self.clock = total, what, clock
        self.every = LOG_EVERY if every is None else every
        self.started = self.last = clock()
        self.n, self.bar = 0, None
        if terminal_output() if terminal is None else terminal:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit=what, dynamic_ncols=True)

    def update(self, n: int, **shown: float) -> None:
        """The `n`-th item is done; `shown`: values to print beside the count."""
        step, self.n = n - self.n, n
        if self.bar is not None:
            self.bar.update(step)
            if shown:
                self.bar.set_postfix({k: f"{v:.4g}" for k, v in shown.items()}, refresh=False)
        elif self.clock() - self.last >= self.every:
            self._say(shown)

    def close(self, **shown: float) -> None:
        """The loop has ended: the bar closes, or a last line says ``done``."""
        if self.bar is not None:
            self.bar.close()
        else:
            self._say(shown, done=True)

    def _say(self, shown: dict[str, float], *, done: bool = False) -> None:
        self.last = self.clock()
        print(status_line(self.what, self.n, self.total, self.last - self.started, done=done, shown=shown),
              file=sys.stderr, flush=True)


def tracked(items: Iterable, what: str, *, desc: str, **options) -> Iterator:
    """`items` one at a time, with a `LoopProgress` of them."""
    progress = LoopProgress(len(items) if isinstance(items, Sized) else None, what, desc=desc, **options)
    for n, item in enumerate(items, start=1):
        yield item
        progress.update(n)
    progress.close()
