"""How a command shows the progress of its Lightning loops: a bar in a terminal, a line now and then in a log file.

Lightning's own bar (rich's where rich is installed, else tqdm's) counts the batches of an epoch, and the training
commands run one long epoch bounded by ``trainer.max_steps``: in a terminal it reads ``Epoch 0/-2``, and in a file
(a cluster job's output) nothing shows until training ends; an evaluate or index command's test or predict bar, in
a file, is tqdm's redraws among the results on stdout. Here, both count global (optimizer) steps out of the run's
total, and a log counts a test's or prediction's batches on stderr:

- `StepProgressBar`, for a terminal: Lightning's tqdm bar whose training bar is ``train``, steps out of
  ``max_steps``, with the loss and the latest monitored dev measure, drawn every `every` seconds (one by default)
  and at the last step; its validation and test bars are Lightning's.
- `ProgressLog`, for anything else: one line every `every` seconds (`common.commands.loop_progress.LOG_EVERY`,
  30), at each validation's end and when training ends, e.g. ``step 120/600 · loss 0.512 · dev/mrr@10 0.431 ·
  1m23s elapsed · ~5m10s left``; a test or predict loop (an evaluate or index command's) has a line when it starts
  and ends and, between, ``test batch 12/40 · 1m23s elapsed · ~3m54s left`` every `every` seconds.
- `progress_callback` picks one of them; the evaluate and index commands get theirs with their ``Trainer``'s
  options (`common.commands.task_options.trainer_options`), without a monitored measure.

The loops no ``Trainer`` runs show theirs the same way (`common.commands.loop_progress`).

Both are Lightning ``ProgressBar`` callbacks, so that Lightning adds no bar of its own beside them; and Lightning
refuses one with ``Trainer(enable_progress_bar=False)``: a caller then adds none (see `progress_callback`).

Neither reads the logged loss more often than it shows it. The loss is a tensor on the device, and reading it as a
Python number waits for every kernel queued before it: read at each step, as Lightning's own bar does, it keeps
the host from queuing the next step while the device computes this one. So the bar reads it only when it draws
(`every` seconds: on a GPU a step takes milliseconds, and a bar redrawn faster than a second is not read by
anyone), and the log only when a line is due.

The total is ``trainer.estimated_stepping_batches``: ``max_steps`` when training is bounded by steps, else what
``max_epochs`` makes of the training batches; a run bounded by neither shows its step and no total or estimate.
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
    """The progress for where the output goes: `StepProgressBar` on a terminal, else `ProgressLog`; `monitor`: the
    dev measure training shows (None: a command that does not train).

    `terminal` (None: ask the streams) is whether both stdout and stderr are terminals: the bar draws on stdout, as
    Lightning's do, and the log writes on stderr, so a bar is only chosen where neither ends in a file.

    Lightning raises ``MisconfigurationException`` for a progress bar in the callbacks when the trainer is built
    with ``enable_progress_bar=False``, and for two of them: the caller adds this one only where
    ``trainer.enable_progress_bar`` is not False and the configured callbacks hold no ``ProgressBar``.
    """
    if terminal is None:
        terminal = terminal_output()
    return StepProgressBar(monitor, loss=loss) if terminal else ProgressLog(monitor, loss=loss)


def total_steps(trainer) -> int | None:
    """The global step training ends at, where it is known (see the module docstring)."""
    total = trainer.estimated_stepping_batches
    return int(total) if math.isfinite(total) and total > 0 else None


def latest(trainer, loss: str, monitor: str | None) -> dict[str, float]:
    """The loss of the last training step as ``loss`` and the monitored measure of the last validation, where logged."""
    metrics = trainer.callback_metrics
    return {shown: float(metrics[key]) for shown, key in (("loss", loss), (monitor, monitor)) if key in metrics}


class StepProgressBar(TQDMProgressBar):
    """Lightning's tqdm bar, its training bar counting global steps out of the run's total (`total_steps`) across
    epochs, from the step a resumed run starts at; its postfix is the loss and the monitored dev measure.

    The training bar is drawn, and the loss read, every `every` seconds of `clock` and at the last step (module
    docstring); Lightning's ``refresh_rate`` (steps) still applies on top, 0 turning the bar off."""

    def __init__(self, monitor: str | None = None, *, loss: str = LOSS, every: float = 1.0,
                 clock: Callable[[], float] = time.monotonic):  # fmt: skip
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
        # tqdm's rate and estimate count from `initial`: a resumed run's own steps.
        bar.initial = bar.n = trainer.global_step
        bar.set_description(self.train_description)

    def on_train_epoch_start(self, trainer, *_) -> None:
        """Nothing: Lightning's bar starts over at each epoch; this one spans the run."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        bar, step = self.train_progress_bar, trainer.global_step
        if not self._should_update(step, bar.total):
            return
        bar.n = step  # shown at the next draw
        if step == bar.total or self.clock() - self._drawn >= self.every:
            self._drawn = self.clock()
            bar.set_postfix(self.get_metrics(trainer, pl_module))  # reads the loss; refreshes the bar

    def get_metrics(self, trainer, pl_module) -> dict[str, float]:
        return latest(trainer, self.loss, self.monitor)


class ProgressLog(ProgressBar):
    """Training progress as lines on stderr, for output that is not a terminal (see the module docstring).

    Stderr, as Lightning's own messages (``Restoring states from the checkpoint...``, this repository's ``output
    folder: ...``), which the lines then keep their order with, each written at once (flushed: a file on a cluster
    shows it as it comes); stdout is left to the commands' results (the metric tables). Lightning draws its bars
    on stdout, but a bar is what this log replaces where there is no terminal.

    Args:
        monitor: the logged dev measure to show (the one that selects the best checkpoint); None: none.
        loss: the logged training loss to show.
        every: seconds between two lines while training, validating, testing or predicting (None:
            `common.commands.loop_progress.LOG_EVERY`).
        clock: seconds on a monotonic clock (injectable, so that tests need not wait).

    Training time is counted from the step the run starts at (a resumed run's own), and the time left is
    estimated from this run's rate, validation included; a test's or prediction's from its batches' rate.
    """

    def __init__(self, monitor: str | None = None, *, loss: str = LOSS, every: float | None = None,
                 clock: Callable[[], float] = time.monotonic):  # fmt: skip
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
