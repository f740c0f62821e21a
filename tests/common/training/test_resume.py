"""`common.training.resume`: when ``last.ckpt`` is written, that it is written whole, and the log's history on resuming."""

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from common.training.resume import AtomicCheckpointIO, LastCheckpoint, RunLogger, _keep_rows_before, checkpoint_step


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        loss = self.layer(batch).pow(2).mean()
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("dev/score", -self.layer(batch).pow(2).mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Rows(L.LightningDataModule):
    """Twenty rows, one per training step; a dev split or none."""

    def __init__(self, dev: bool):
        super().__init__()
        self.rows, self.dev = torch.randn(20, 3, generator=torch.Generator().manual_seed(0)), dev

    def train_dataloader(self):
        return DataLoader(self.rows, batch_size=1)

    def val_dataloader(self):
        return DataLoader(self.rows[:2], batch_size=2) if self.dev else []


def _saved_steps(tmp_path, *, dev: bool, every: int, val_every: int = 4, steps: int = 10) -> list[int]:
    """The global steps at which `LastCheckpoint` wrote ``last.ckpt`` in a run of `steps` steps."""
    saved = []

    class Recorded(LastCheckpoint):
        def _save_last_checkpoint(self, trainer, candidates):
            saved.append(trainer.global_step)
            super()._save_last_checkpoint(trainer, candidates)

    trainer = L.Trainer(max_steps=steps, val_check_interval=val_every, check_val_every_n_epoch=None,
                        num_sanity_val_steps=0, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[Recorded(tmp_path, every)], plugins=[AtomicCheckpointIO()])
    trainer.fit(Tiny(), datamodule=Rows(dev))
    return saved


def test_a_save_due_at_a_validation_step_is_made_one_step_later(tmp_path):
    assert _saved_steps(tmp_path, dev=True, every=2) == [2, 5, 6, 9, 10]  # dev evaluations after steps 4 and 8
    assert checkpoint_step(tmp_path / "last.ckpt") == 10


def test_without_validation_saves_are_on_time(tmp_path):
    assert _saved_steps(tmp_path, dev=False, every=2) == [2, 4, 6, 8, 10]


def test_saves_at_every_validation_step_are_each_one_step_late(tmp_path):
    assert _saved_steps(tmp_path, dev=True, every=4, steps=12) == [5, 9, 12]  # the last when training ends


def test_a_save_due_at_an_epochs_last_step_is_made_one_step_later(tmp_path):
    """Epochs of 20 steps: the saves due at steps 20 and 40 are made at 21 and 41."""
    assert _saved_steps(tmp_path, dev=False, every=5, steps=45) == [5, 10, 15, 21, 25, 30, 35, 41, 45]


def test_lightning_skips_an_epoch_when_resumed_from_an_epochs_last_step(tmp_path):
    """Why the save waits: Lightning 2.6 resumed from a checkpoint written as an epoch's last step ends, with a
    stateful loader (torchdata's, as the training commands'), counts that epoch as ended twice: the run trains 20
    steps fewer than it should."""
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torchdata.stateful_dataloader import StatefulDataLoader

    class StatefulRows(Rows):
        def train_dataloader(self):
            return StatefulDataLoader(self.rows, batch_size=1)

    def fit(ckpt_path=None) -> int:
        trained = []

        class Counted(Tiny):
            def training_step(self, batch, batch_idx):
                trained.append(self.global_step)
                return super().training_step(batch, batch_idx)

        save = ModelCheckpoint(tmp_path, filename="at-{step}", every_n_train_steps=20, save_top_k=-1)
        trainer = L.Trainer(max_epochs=3, logger=False, enable_progress_bar=False, enable_model_summary=False,
                            callbacks=[save], limit_val_batches=0)
        trainer.fit(Counted(), datamodule=StatefulRows(False), ckpt_path=ckpt_path)
        return len(trained)

    assert fit() == 60
    assert fit(tmp_path / "at-step=20.ckpt") == 20  # 40 are left: epoch 1 is skipped
    assert fit(tmp_path / "at-step=40.ckpt") == 0


def test_a_failed_write_leaves_the_previous_checkpoint_whole(tmp_path):
    path, io = tmp_path / "last.ckpt", AtomicCheckpointIO()
    io.save_checkpoint({"global_step": 3}, path)
    with pytest.raises(Exception):
        io.save_checkpoint({"global_step": 4, "unpicklable": lambda: None}, path)
    assert checkpoint_step(path) == 3
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_rows_of_the_resumed_step_and_later_and_a_cut_row_are_dropped(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("dev/score,step,train/loss\r\n,9,0.5\r\n0.25,9,\r\n,19,0.4\r\n,29,0.3\r\n,3")
    assert _keep_rows_before(path, 20) == ["dev/score", "step", "train/loss"]
    assert path.read_bytes().decode() == "dev/score,step,train/loss\r\n,9,0.5\r\n0.25,9,\r\n,19,0.4\r\n"


def test_the_log_keeps_its_history_when_the_run_resumes(tmp_path):
    first = RunLogger(tmp_path)
    first.log_metrics({"train/loss": 0.5}, step=9)
    first.log_metrics({"train/loss": 0.4}, step=19)  # logged after the checkpoint at step 15: dropped
    log = tmp_path / "logs" / "metrics.csv"
    assert log.read_bytes().decode() == "step,train/loss\r\n9,0.5\r\n19,0.4\r\n"  # each row written as it is logged
    resumed = RunLogger(tmp_path, resume_step=15)
    resumed.log_metrics({"train/loss": 0.41, "dev/score": 0.2}, step=19)
    assert log.read_bytes().decode() == "dev/score,step,train/loss\r\n,9,0.5\r\n0.2,19,0.41\r\n"
