"""How a command shows its progress: a tqdm bar in a terminal, else a line on stderr every `LOG_EVERY` seconds and at
the end. A loop no ``Trainer`` runs has `LoopProgress` (``query 120/600 · 1m23s elapsed · ~5m10s left``); Lightning's
loops count global steps out of ``max_steps`` (Lightning's bar reads ``Epoch 0/-2`` for the one long epoch):
`StepProgressBar` in a terminal, `ProgressLog` elsewhere (``step 120/600 · loss 0.512 · dev/mrr@10 0.431 · ...``).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sized

from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar

#: Seconds between two progress lines where the output is not a terminal.
LOG_EVERY = 30.0
#: The key every package logs its training loss under.
LOSS = "train/loss"


def duration(seconds: float) -> str:
    """``45s``, ``1m23s``, ``2h05m``."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


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
    """A loop over `total` items called `what`: a tqdm bar where `terminal` (None: `terminal_output`), else a line on
    stderr every `every` seconds (None: `LOG_EVERY`) of `clock`."""

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
        """The `n`-th item is done; `shown`: values printed beside the count."""
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


def progress_callback(monitor: str | None = None, *, terminal: bool | None = None) -> ProgressBar:
    return StepProgressBar(monitor) if (terminal_output() if terminal is None else terminal) else ProgressLog(monitor)


def total_steps(trainer) -> int | None:
    total = trainer.estimated_stepping_batches
    return int(total) if math.isfinite(total) and total > 0 else None


def latest(trainer, monitor: str | None) -> dict[str, float]:
    """The last training step's `LOSS` as ``loss`` and the monitored measure of the last validation, where logged."""
    metrics = trainer.callback_metrics
    return {shown: float(metrics[key]) for shown, key in (("loss", LOSS), (monitor, monitor)) if key in metrics}


class StepProgressBar(TQDMProgressBar):
    """Lightning's tqdm bar, its training bar counting global steps out of the run's total."""

    def __init__(self, monitor: str | None = None, *, every: float = 1.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.monitor, self.every, self.clock = monitor, every, clock
        self._drawn = -math.inf

    @property
    def train_description(self) -> str:
        return "train"

    def on_train_start(self, trainer, pl_module) -> None:
        super().on_train_start(trainer, pl_module)
        bar = self.train_progress_bar
        bar.reset(total=total_steps(trainer))
        bar.initial = bar.n = trainer.global_step
        bar.set_description(self.train_description)

    def on_train_epoch_start(self, trainer, *_) -> None:
        """Nothing: Lightning's bar starts over at each epoch; this one spans the run."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        bar, step = self.train_progress_bar, trainer.global_step
        if not self._should_update(step, bar.total):
            return
        bar.n = step
        if step == bar.total or self.clock() - self._drawn >= self.every:
            self._drawn = self.clock()
            bar.set_postfix(self.get_metrics(trainer, pl_module))

    def get_metrics(self, trainer, pl_module) -> dict[str, float]:
        return latest(trainer, self.monitor)


class ProgressLog(ProgressBar):
    """Progress as lines on stderr (flushed, in order with Lightning's messages), with the `monitor` dev measure, every
    `every` seconds (None: `LOG_EVERY`) of `clock`; time left is estimated from this run's own rate."""

    def __init__(self, monitor: str | None = None, *, every: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.monitor, self.clock = monitor, clock
        self.every = LOG_EVERY if every is None else every
        self._enabled = True
        self._last = self._started = self._stage_started = 0.0
        self._first_step, self._total, self._batches = 0, None, 0

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def say(self, line: str) -> None:
        """Print `line` on stderr at once, and count the next interval from now."""
        self._last = self.clock()
        if self._enabled:
            print(line, file=sys.stderr, flush=True)

    def _due(self) -> bool:
        return self.clock() - self._last >= self.every

    def status(self, trainer, *, done: bool = False) -> str:
        """``step 120/600 · loss 0.512 · dev/mrr@10 0.431 · 1m23s elapsed · ~5m10s left`` (or ``· done``)."""
        return status_line("step", trainer.global_step, self._total, self.clock() - self._started,
                           first=self._first_step, done=done, shown=latest(trainer, self.monitor))

    def on_train_start(self, trainer, pl_module) -> None:
        self._started, self._first_step, self._total = self.clock(), trainer.global_step, total_steps(trainer)
        self.say(f"training from step {self._first_step}" + (f" to {self._total}" if self._total else ""))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._due():
            self.say(self.status(trainer))

    def on_train_end(self, trainer, pl_module) -> None:
        self.say(self.status(trainer, done=True))

    def on_validation_start(self, trainer, pl_module) -> None:
        self._batches = 0

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._batches += 1
        if not trainer.sanity_checking and self._due():
            step, batch = count(trainer.global_step, self._total), count(self._batches, sum(trainer.num_val_batches))
            self.say(f"step {step} · validation batch {batch}")

    def on_validation_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking and trainer.state.fn == "fit":
            self.say(self.status(trainer))

    def on_test_start(self, trainer, pl_module) -> None:
        """``test: 40 batches`` (``test starts`` where the loaders cannot tell); predictions alike."""
        self._stage_started, self._batches = self.clock(), 0
        stage, total = trainer.state.stage.value, sum(_stage_batches(trainer))
        self.say(f"{stage}: {int(total)} batches" if math.isfinite(total) else f"{stage} starts")

    def on_test_batch_end(self, trainer, *_) -> None:
        """``test batch 12/40 · 1m23s elapsed · ~3m54s left``, where one is due."""
        self._batches += 1
        if self._due():
            self.say(status_line(f"{trainer.state.stage.value} batch", self._batches, sum(_stage_batches(trainer)),
                                 self.clock() - self._stage_started))

    def on_test_end(self, trainer, pl_module) -> None:
        self.say(f"{trainer.state.stage.value} done: {self._batches} batches in "
                 f"{duration(self.clock() - self._stage_started)}")

    on_predict_start, on_predict_batch_end, on_predict_end = on_test_start, on_test_batch_end, on_test_end


def _stage_batches(trainer) -> list:
    """The batches of each loader of the test or predict stage running."""
    return trainer.num_test_batches if trainer.state.stage.value == "test" else trainer.num_predict_batches
