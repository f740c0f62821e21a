"""What lets a killed training run resume (``--ckpt_path last``) to the uninterrupted run's result, byte for byte.

- `LastCheckpoint`: ``last.ckpt`` only where Lightning 2.6 resumes exactly; a save due at a step that validation
  follows or that ends its epoch (Lightning would skip that validation, or the next epoch) is made a step later.
- `AtomicCheckpointIO`: checkpoints written to a temporary file and renamed, replaced, not versioned.
- `RunLogger`: ``logs/metrics.csv`` keeps its history; a resumed run drops the rows logged after its checkpoint.
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
    """``last.ckpt`` every `every_n_train_steps` training steps, written where a resumed run continues exactly."""

    def __init__(self, dirpath: str | os.PathLike, every_n_train_steps: int):
        super().__init__(dirpath=dirpath, save_top_k=0, save_last=True, every_n_train_steps=every_n_train_steps,
                         enable_version_counter=False)
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
        for logger in trainer.loggers:
            logger.save()
        self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))


def _validates_after_this_batch(trainer) -> bool:
    """Whether the training loop runs validation once the current batch has ended (Lightning's own test)."""
    loop = trainer.fit_loop.epoch_loop
    if not loop._should_check_val_fx(trainer.fit_loop._data_fetcher):
        return False
    loop.val_loop.setup_data()
    return not loop.val_loop.skip


class _HistoryWriter(ExperimentWriter):
    """Lightning's CSV writer appending to ``metrics.csv``, first dropping rows of steps from `resume_step`."""

    def __init__(self, log_dir: str, resume_step: int | None):
        super().__init__(log_dir)
        if resume_step is not None and os.path.isfile(self.metrics_file_path):
            self.metrics_keys = _keep_rows_before(Path(self.metrics_file_path), resume_step)

    def _check_log_dir_exists(self) -> None:
        """Lightning's warns and deletes the log of the run being resumed; here it stays."""


def _keep_rows_before(path: Path, step: int) -> list[str]:
    """Rewrite the CSV log at `path` without its rows of step `step` or later (and any row a kill cut short)."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        columns = list(reader.fieldnames or [])
        rows = [r for r in reader if None not in r.values() and int(r["step"]) < step]
    with atomic_write(path, overwrite=True) as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return columns


class RunLogger(CSVLogger):

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
    return torch.load(path, map_location="cpu", mmap=True, weights_only=False)


def checkpoint_step(path: str | os.PathLike) -> int:
    """The global step a Lightning checkpoint was saved at, read without loading its tensors."""
    return int(checkpoint_contents(path)["global_step"])


def discard_unfinished_writes(folder: str | os.PathLike) -> None:
    """Remove the temporary files that writes a kill interrupted left in `folder` (`common.io.atomic_write`)."""
    for partial in Path(folder).glob(".*.tmp"):
        partial.unlink()
