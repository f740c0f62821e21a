"""`common.commands.progress`: what the log prints while a tiny model trains and tests, and what the terminal bar counts.

The log's clock is two seconds per training step, so its elapsed and remaining times follow the steps, not the
machine: the lines can be compared whole.
"""

import io
import math

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

from common.commands.progress import duration
from common.commands.progress import ProgressLog, StepProgressBar, progress_callback

pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.filterwarnings("ignore:The '\\w+_dataloader' does not have many workers")]

MONITOR = "dev/mrr@10"
ROWS = torch.randn(16, 4, generator=torch.Generator().manual_seed(0))


class Tiny(L.LightningModule):
    """One linear layer; it keeps the loss of each step and the dev measure of each validation, by global step."""

    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.losses, self.dev = {}, {}

    def training_step(self, batch, batch_idx):
        loss = self.layer(batch).pow(2).mean()
        self.log("train/loss", loss)
        self.losses[self.global_step + 1] = loss.item()  # the step this batch makes
        return loss

    def validation_step(self, batch, batch_idx):  # one batch: the logged measure is this one
        value = 1 / (1 + self.layer(batch).pow(2).mean())
        self.log(MONITOR, value)
        self.dev[self.global_step] = value.item()

    def test_step(self, batch, batch_idx):
        self.log("test/mrr@10", self.layer(batch).mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Unsized(IterableDataset):
    """The rows, of a number a data loader cannot tell."""

    def __iter__(self):
        return iter(ROWS)


class StepClock:
    """Two seconds per global step of `trainer`."""

    trainer = None

    def __call__(self) -> float:
        return 2.0 * self.trainer.global_step if self.trainer else 0.0


def trainer_with(callback, tmp_path, clock: StepClock | None = None, **options) -> L.Trainer:
    settings = dict(max_steps=10, val_check_interval=5, check_val_every_n_epoch=None, log_every_n_steps=1,
                    logger=False, enable_checkpointing=False, enable_model_summary=False, accelerator="cpu",
                    default_root_dir=tmp_path)
    trainer = L.Trainer(callbacks=[callback], **{**settings, **options})
    if clock is not None:
        clock.trainer = trainer
    return trainer


def log_lines(capsys) -> list[str]:
    """The log's lines, on stderr (Lightning's own messages go through its logging handler, to the stream it was
    given on import: not capsys's)."""
    return capsys.readouterr().err.splitlines()


def fit(tmp_path, *, every: float = math.inf, ckpt_path=None, train=ROWS, **options) -> tuple[Tiny, L.Trainer]:
    clock = StepClock()
    log = ProgressLog(MONITOR, every=every, clock=clock)
    model, trainer = Tiny(), trainer_with(log, tmp_path, clock, **options)
    trainer.fit(model, DataLoader(train, batch_size=1), DataLoader(ROWS, batch_size=16), ckpt_path=ckpt_path)
    return model, trainer


def test_a_line_at_each_validation_and_at_the_end(tmp_path, capsys):
    model, trainer = fit(tmp_path)

    loss, dev = model.losses, model.dev
    assert log_lines(capsys) == [
        "training from step 0 to 10",
        f"step 5/10 · loss {loss[5]:.4g} · {MONITOR} {dev[5]:.4g} · 10s elapsed · ~10s left",
        f"step 10/10 · loss {loss[10]:.4g} · {MONITOR} {dev[10]:.4g} · 20s elapsed · ~0s left",
        f"step 10/10 · loss {loss[10]:.4g} · {MONITOR} {dev[10]:.4g} · 20s elapsed · done",
    ]
    # Lightning adds no bar of its own beside it.
    assert [c for c in trainer.callbacks if isinstance(c, ProgressBar)] == [trainer.progress_bar_callback]
    assert isinstance(trainer.progress_bar_callback, ProgressLog)


def test_lines_every_so_often(tmp_path, capsys):
    # Every 4 s, which is 2 steps, counted from the last line: a validation's line puts off the next one.
    model, _ = fit(tmp_path, every=4)

    lines = log_lines(capsys)
    assert [line.split(" · ")[0] for line in lines[1:]] == [f"step {s}/10" for s in (2, 4, 5, 7, 9, 10, 10)]
    assert lines[2] == f"step 4/10 · loss {model.losses[4]:.4g} · 8s elapsed · ~12s left"  # no validation yet


def test_a_resumed_run_times_its_own_steps(tmp_path, capsys):
    _, first = fit(tmp_path, max_steps=5)
    first.save_checkpoint(tmp_path / "at5.ckpt")
    capsys.readouterr()

    model, _ = fit(tmp_path, every=4, ckpt_path=tmp_path / "at5.ckpt")

    lines = log_lines(capsys)
    assert lines[0] == "training from step 5 to 10"
    # Step 7 is 2 steps, 4 s, into this run: 3 steps to go take 6 s.
    assert f"step 7/10 · loss {model.losses[7]:.4g} · 4s elapsed · ~6s left" in lines


def test_a_run_bounded_by_epochs(tmp_path, capsys):
    fit(tmp_path, max_steps=-1, max_epochs=2, val_check_interval=None, check_val_every_n_epoch=1)

    lines = log_lines(capsys)
    assert lines[0] == "training from step 0 to 32"
    assert lines[-1].startswith("step 32/32 · ")


def test_a_run_of_unknown_length(tmp_path, capsys):
    # Neither max_steps nor the number of batches: steps without a total, and no estimate.
    model, _ = fit(tmp_path, every=4, max_steps=-1, max_epochs=1, train=Unsized(), val_check_interval=None,
                   check_val_every_n_epoch=1, num_sanity_val_steps=0)

    lines = log_lines(capsys)
    assert lines[0] == "training from step 0"
    assert lines[1] == f"step 2 · loss {model.losses[2]:.4g} · 4s elapsed"
    assert not any("left" in line for line in lines)


def test_lines_when_the_test_starts_and_ends(tmp_path, capsys):
    model, trainer = fit(tmp_path, max_steps=2)
    capsys.readouterr()

    trainer.test(model, DataLoader(ROWS, batch_size=4), verbose=False)

    assert log_lines(capsys) == ["test: 4 batches", "test done: 4 batches in 0s"]


@pytest.mark.parametrize("resume", [False, True])
def test_the_terminal_bar_counts_steps_to_max_steps(tmp_path, capsys, resume):
    ckpt = None
    if resume:
        _, first = fit(tmp_path, max_steps=5)
        first.save_checkpoint(ckpt := tmp_path / "at5.ckpt")
    bar = StepProgressBar(MONITOR)
    model, trainer = Tiny(), trainer_with(bar, tmp_path)

    trainer.fit(model, DataLoader(ROWS, batch_size=1), DataLoader(ROWS, batch_size=16), ckpt_path=ckpt)

    train = bar.train_progress_bar
    assert (train.desc, train.initial, train.n, train.total) == ("train: ", 5 if resume else 0, 10, 10)
    assert train.postfix == f"loss={Tqdm.format_num(model.losses[10])}, {MONITOR}={Tqdm.format_num(model.dev[10])}"
    assert "10/10" in capsys.readouterr().out  # drawn on stdout, as Lightning's bars


def test_progress_callback_picks_by_terminal():
    assert isinstance(progress_callback(MONITOR, terminal=True), StepProgressBar)
    log = progress_callback(MONITOR, terminal=False)
    assert isinstance(log, ProgressLog) and log.monitor == MONITOR


def test_progress_callback_logs_where_output_is_captured(capsys):
    assert isinstance(progress_callback(MONITOR), ProgressLog)  # capsys's streams are no terminal


@pytest.mark.parametrize("seconds, shown", [(0.4, "0s"), (45, "45s"), (83, "1m23s"), (7500, "2h05m")])
def test_duration(seconds, shown):
    assert duration(seconds) == shown


# --------------------------------------------------------------------------- reading the loss without a sync a step
class CountedLoss:
    """A logged loss that counts how often it is read as a Python number (each read of a CUDA tensor waits for the
    device)."""

    def __init__(self, value: float):
        self.value, self.reads = value, 0

    def __float__(self) -> float:
        self.reads += 1
        return self.value

    def item(self) -> float:
        return float(self)


class FakeTrainer:
    """What the progress callbacks ask of a trainer while it trains: the step, and the logged metrics."""

    def __init__(self, loss: CountedLoss, total: int):
        self.global_step, self.callback_metrics, self.estimated_stepping_batches = 0, {"train/loss": loss}, total


class Ticks:
    """A clock the test sets."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


STEPS, SECONDS_PER_STEP = 1000, 0.01  # ten seconds of training, a step every 10 ms


def test_the_terminal_bar_reads_the_loss_once_a_draw_not_once_a_step(monkeypatch):
    loss, clock = CountedLoss(0.5), Ticks()
    trainer = FakeTrainer(loss, STEPS)
    bar = StepProgressBar(MONITOR, every=1.0, clock=clock)
    bar.train_progress_bar = Tqdm(total=STEPS, file=io.StringIO(), mininterval=0)
    draws = []
    monkeypatch.setattr(bar.train_progress_bar, "set_postfix", lambda postfix, **_: draws.append(postfix))

    for step in range(1, STEPS + 1):
        clock.now, trainer.global_step = step * SECONDS_PER_STEP, step
        bar.on_train_batch_end(trainer, None, None, None, step - 1)

    # drawn at the first step, then every second (every 100 steps) and at the last: 11 draws, one read each
    assert len(draws) == 11 and loss.reads == 11
    assert draws[-1] == {"loss": 0.5} and bar.train_progress_bar.n == STEPS


def test_the_log_reads_the_loss_once_a_line(capsys):
    loss, clock = CountedLoss(0.5), Ticks()
    trainer = FakeTrainer(loss, STEPS)
    log = ProgressLog(MONITOR, every=30.0, clock=clock)
    log.on_train_start(trainer, None)

    for step in range(1, STEPS + 1):
        clock.now, trainer.global_step = step * SECONDS_PER_STEP, step
        log.on_train_batch_end(trainer, None, None, None, step - 1)

    lines = log_lines(capsys)
    assert lines[0] == "training from step 0 to 1000" and len(lines) == 1  # 10 s of training: no line due in 30 s
    assert loss.reads == 0
    clock.now = 40.0
    log.on_train_batch_end(trainer, None, None, None, STEPS)
    assert log_lines(capsys) == ["step 1000/1000 · loss 0.5 · 40s elapsed · ~0s left"] and loss.reads == 1


# --------------------------------------------------------------------------- an evaluate or index command's loops
class Scorer(L.LightningModule):
    """What an evaluate command tests and an index command predicts with: one linear layer over the rows; it
    counts the batches it has computed, which `BatchClock` reads."""

    def __init__(self):
        super().__init__()
        self.layer, self.batches = nn.Linear(4, 1), 0

    def test_step(self, batch, batch_idx):
        self.batches += 1

    def predict_step(self, batch, batch_idx):
        self.batches += 1
        return self.layer(batch)


class BatchClock:
    """Two seconds per batch `model` has computed."""

    def __init__(self, model: Scorer):
        self.model = model

    def __call__(self) -> float:
        return 2.0 * self.model.batches


def evaluation_trainer(callback, tmp_path) -> L.Trainer:
    return L.Trainer(callbacks=[callback], logger=False, enable_model_summary=False, accelerator="cpu",
                     default_root_dir=tmp_path)


@pytest.mark.parametrize("stage", ["test", "predict"])
def test_an_evaluation_logs_its_batches_done_and_left(tmp_path, capsys, stage):
    # 4 batches of 4 rows, 2 s each; a line every 4 s, i.e. every 2 batches, counted from the first line.
    model = Scorer()
    log = ProgressLog(every=4.0, clock=BatchClock(model))
    getattr(evaluation_trainer(log, tmp_path), stage)(model, DataLoader(ROWS, batch_size=4))

    assert log_lines(capsys) == [
        f"{stage}: 4 batches",
        f"{stage} batch 2/4 · 4s elapsed · ~4s left",
        f"{stage} batch 4/4 · 8s elapsed · ~0s left",
        f"{stage} done: 4 batches in 8s",
    ]


@pytest.mark.parametrize("stage", ["test", "predict"])
def test_an_evaluation_in_a_terminal_shows_lightnings_bar(tmp_path, capsys, stage):
    bar = progress_callback(terminal=True)
    model = Scorer()
    getattr(evaluation_trainer(bar, tmp_path), stage)(model, DataLoader(ROWS, batch_size=4))

    shown = getattr(bar, f"{stage}_progress_bar")
    assert (shown.n, shown.total) == (4, 4) and model.batches == 4
    assert "4/4" in capsys.readouterr().out  # drawn on stdout, as the training bar


def test_evaluate_and_index_commands_get_the_progress_with_their_trainer_options(tmp_path, capsys):
    from argparse import Namespace

    from common.commands.task_options import trainer_options

    options = trainer_options(Namespace(accelerator="cpu", devices="1", num_nodes=1))
    (log,) = options["callbacks"]
    assert isinstance(log, ProgressLog) and log.monitor is None and log.every == 30.0  # capsys: no terminal
    assert trainer_options(Namespace(accelerator="cpu", devices="1", num_nodes=1))["callbacks"][0] is not log
    # The Trainer takes it as its progress: Lightning adds no bar of its own.
    trainer = L.Trainer(**options, logger=False, enable_model_summary=False, default_root_dir=tmp_path)
    assert trainer.progress_bar_callback is log
