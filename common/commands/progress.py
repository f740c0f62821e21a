"""How a command shows the progress of its Lightning loops in global steps out of ``max_steps`` (Lightning's bar reads
``Epoch 0/-2`` for the one long epoch): `StepProgressBar` in a terminal (with the loss and the monitored dev measure),
`ProgressLog` elsewhere, a line every `every` seconds (``step 120/600 · loss 0.512 · dev/mrr@10 0.431 · 1m23s elapsed
· ~5m10s left``; tests and predictions by batches); `progress_callback` picks one.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable

from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar

from common.commands import loop_progress
from common.commands.durations import duration
from common.commands.loop_progress import count, status_line, terminal_output

#: The key every package logs its training loss under.
LOSS = "train/loss"


def progress_callback(monitor: str | None = None, *, loss: str = LOSS, terminal: bool | None = None) -> ProgressBar:
    if terminal is None:
        terminal = terminal_output()
    return StepProgressBar(monitor, loss=loss) if terminal else ProgressLog(monitor, loss=loss)


def total_steps(trainer) -> int | None:
    total = trainer.estimated_stepping_batches
    return int(total) if math.isfinite(total) and total > 0 else None


def latest(trainer, loss: str, monitor: str | None) -> dict[str, float]:
    """The loss of the last training step as ``loss`` and the monitored measure of the last validation, where logged."""
    metrics = trainer.callback_metrics
    return {shown: float(metrics[key]) for shown, key in (("loss", loss), (monitor, monitor)) if key in metrics}


class StepProgressBar(TQDMProgressBar):
    """Lightning's tqdm bar, its training bar counting global steps out of the run's total."""

    def __init__(self, monitor: str | None = None, *, loss: str = LOSS, every: float = 1.0,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.monitor, self.loss, self.every, self.clock = monitor, loss, every, clock
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
        return latest(trainer, self.loss, self.monitor)


class ProgressLog(ProgressBar):
    """Progress as lines on stderr (flushed, in order with Lightning's messages) where output is not a terminal.

    `monitor`: the logged dev measure to show (None: none); `every`: seconds between lines (None: `LOG_EVERY`);
    `clock`: a monotonic clock (injectable for tests). Time left is estimated from this run's own rate.
    """

    def __init__(self, monitor: str | None = None, *, loss: str = LOSS, every: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.monitor, self.loss, self.clock = monitor, loss, clock
        self.every = loop_progress.LOG_EVERY if every is None else every
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
                           first=self._first_step, done=done, shown=latest(trainer, self.loss, self.monitor))

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
        self._stage_start("test", trainer.num_test_batches)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._stage_batch("test", trainer.num_test_batches)

    def on_test_end(self, trainer, pl_module) -> None:
        self._stage_end("test")

    def on_predict_start(self, trainer, pl_module) -> None:
        self._stage_start("predict", trainer.num_predict_batches)

    def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._stage_batch("predict", trainer.num_predict_batches)

    def on_predict_end(self, trainer, pl_module) -> None:
        self._stage_end("predict")

    def _stage_start(self, stage: str, batches: list) -> None:
        """``test: 40 batches`` (``test starts`` where the loaders cannot tell)."""
        self._stage_started, self._batches = self.clock(), 0
        total = sum(batches)
        self.say(f"{stage}: {int(total)} batches" if math.isfinite(total) else f"{stage} starts")

    def _stage_batch(self, stage: str, batches: list) -> None:
        """``test batch 12/40 · 1m23s elapsed · ~3m54s left``, where one is due."""
        self._batches += 1
        if self._due():
            self.say(status_line(f"{stage} batch", self._batches, sum(batches), self.clock() - self._stage_started))

    def _stage_end(self, stage: str) -> None:
        self.say(f"{stage} done: {self._batches} batches in {duration(self.clock() - self._stage_started)}")
