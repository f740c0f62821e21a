"""What lets a killed training run resume to the uninterrupted run's result, byte for byte.

A run may be killed at any moment (``kill -9``, a cluster's pre-emption). ``--ckpt_path last``
(`common.commands.cli.RankerCLI`) then resumes it from ``checkpoints/last.ckpt``; for the resumed run to
select the same checkpoint on dev and write the same test run and metrics, three things are needed
beyond the generator states every package saves (`common.training.rng`):

- `LastCheckpoint`: ``last.ckpt`` is written only where Lightning resumes exactly. Lightning (2.6)
  saves at the end of a training batch; when validation follows that batch, a run resumed from it
  takes the validation as done (`_TrainingEpochLoop.advance` fast-forwards it), so the dev measure
  of that step is never computed and model selection can differ; and when that batch is its epoch's
  last, a run resumed from it with torchdata's stateful loader counts the epoch as ended twice and
  skips the whole next epoch (`tests/common/training/test_resume.py` shows it). A save due at such a step is made
  at the end of the next step instead (a kill before then resumes from the previous ``last.ckpt``
  and repeats the validation). Saving when validation ends is no way out: a run resumed from there
  does not see the same training batches as the uninterrupted one.
- `AtomicCheckpointIO`: every checkpoint is written to a temporary file and renamed, so a kill
  while writing leaves the previous ``last.ckpt`` whole (Lightning's own writes in place). Files are
  replaced, not versioned (``last-v1.ckpt``): a resumed run rewrites the same checkpoints.
- `RunLogger`: ``logs/metrics.csv`` keeps its history (Lightning's CSV logger deletes the file
  when its folder exists): each row is written as it is logged, and a resumed run first drops the
  rows logged after its checkpoint, which it logs again.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.plugins.io import TorchCheckpointIO

from common.io import atomic_write


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes each checkpoint to a temporary file beside it and renames it into place."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        with atomic_write(path, "wb", overwrite=True) as f:
            torch.save(checkpoint, f)


class LastCheckpoint(ModelCheckpoint):
    """``last.ckpt`` every `every_n_train_steps` training steps, written where a resumed run continues exactly.

    A save due at a step followed by validation, or at an epoch's last step, is made at the end of the next training
    step instead (see the module docstring); and one more when training ends. The loggers are flushed first, so that the log holds every
    row the checkpoint has seen.
    """

    def __init__(self, dirpath: str | os.PathLike, every_n_train_steps: int):
        super().__init__(dirpath=dirpath, save_top_k=0, save_last=True, every_n_train_steps=every_n_train_steps,
                         enable_version_counter=False)  # fmt: skip
        self._deferred = False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        due = self._every_n_train_steps >= 1 and trainer.global_step % self._every_n_train_steps == 0
        if not (due or self._deferred) or self._should_skip_saving_checkpoint(trainer):
            return
        if _validates_after_this_batch(trainer) or trainer.fit_loop.epoch_loop.batch_progress.is_last_batch:
            self._deferred = True
            return
        self._deferred = False
        self._save(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        """Training has ended, its last validation too: a run killed from here on (while testing) resumes here."""
        if not self._should_skip_saving_checkpoint(trainer):
            self._save(trainer)

    def _save(self, trainer) -> None:
        _flush(trainer)
        self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))


def _validates_after_this_batch(trainer) -> bool:
    """Whether the training loop runs validation once the current batch has ended (Lightning's own test)."""
    loop = trainer.fit_loop.epoch_loop
    if not loop._should_check_val_fx(trainer.fit_loop._data_fetcher):
        return False
    loop.val_loop.setup_data()  # as validation would on starting; tells whether there is anything to validate
    return not loop.val_loop.skip


def _flush(trainer) -> None:
    for logger in trainer.loggers:
        logger.save()


class _HistoryWriter(ExperimentWriter):
    """Lightning's CSV writer, appending to an existing ``metrics.csv`` instead of deleting it, from which it first
    drops the rows of steps `resume_step` and later."""

    def __init__(self, log_dir: str, resume_step: int | None):
        super().__init__(log_dir)
        if resume_step is not None and os.path.isfile(self.metrics_file_path):
            self.metrics_keys = _keep_rows_before(Path(self.metrics_file_path), resume_step)

    def _check_log_dir_exists(self) -> None:
        """Lightning's warns and deletes the log of the run being resumed; here it stays."""


def _keep_rows_before(path: Path, step: int) -> list[str]:
    """Rewrite the CSV log at `path` without its rows of step `step` or later (and any row a kill cut short);
    returns its columns."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        columns = list(reader.fieldnames or [])
        rows = [r for r in reader if None not in r.values() and int(r["step"]) < step]
    with atomic_write(path, overwrite=True) as f:
        writer = csv.DictWriter(f, fieldnames=columns)  # as Lightning writes it
        writer.writeheader()
        writer.writerows(rows)
    return columns


class RunLogger(CSVLogger):
    """``<save_dir>/logs/metrics.csv``: Lightning's CSV log, each row written as it is logged, its history kept when
    the run resumes at global step `resume_step` (None for a new run)."""

    def __init__(self, save_dir: str | os.PathLike, resume_step: int | None = None):
        super().__init__(save_dir, name="logs", version="", flush_logs_every_n_steps=1)
        self._resume_step = resume_step

    @property
    @rank_zero_experiment
    def experiment(self) -> _HistoryWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _HistoryWriter(self.log_dir, self._resume_step)
        return self._experiment


def checkpoint_contents(path: str | os.PathLike) -> dict:
    """A Lightning checkpoint's contents, its tensors memory-mapped, not read."""
    return torch.load(path, map_location="cpu", mmap=True, weights_only=False)


def checkpoint_step(path: str | os.PathLike) -> int:
    """The global step a Lightning checkpoint was saved at, read without loading its tensors."""
    return int(checkpoint_contents(path)["global_step"])


def discard_unfinished_writes(folder: str | os.PathLike) -> None:
    """Remove the temporary files that writes a kill interrupted left in `folder` (`common.io.atomic_write`)."""
    for partial in Path(folder).glob(".*.tmp"):
        partial.unlink()
