"""`common.commands.cli.RankerCLI` with a tiny model and data module: default config, output folder, resume, outputs."""

import re
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from common.commands.cli import RankerCLI

DEFAULT = """\
trainer:
  accelerator: cpu
  devices: 1
  max_steps: 2
  num_sanity_val_steps: 0
  enable_progress_bar: false
  enable_model_summary: false
model:
  lr: 0.5
data:
  width: 3
save_every_n_steps: 1
"""


class Tiny(L.LightningModule):
    def __init__(self, width: int = 4, lr: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.layer = nn.Linear(width, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.log("dev/score", -self.layer(batch).pow(2).mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class TinyData(L.LightningDataModule):
    """Four random rows of `width` features: two training steps an epoch at batch size 2."""

    def __init__(self, width: int = 4):
        super().__init__()
        self.rows = torch.randn(4, width, generator=torch.Generator().manual_seed(0))

    def train_dataloader(self):
        return DataLoader(self.rows, batch_size=2)

    def val_dataloader(self):
        return DataLoader(self.rows, batch_size=4)


class TinyCLI(RankerCLI):
    def __init__(self, args, default_config: Path):
        super().__init__(Tiny, TinyData, default_config=default_config, run_name=lambda c: f"tiny-w{c.data.width}",
                         monitor="dev/score", args=args)

    def add_arguments_to_parser(self, parser) -> None:
        super().add_arguments_to_parser(parser)
        parser.link_arguments("data.width", "model.width")


@pytest.fixture(autouse=True)
def bare_argv(monkeypatch):
    """pytest's own command line is not the CLI's (Lightning warns when both are there)."""
    monkeypatch.setattr(sys, "argv", ["tiny"])


@pytest.fixture
def default_config(tmp_path) -> Path:
    path = tmp_path / "default.yaml"
    path.write_text(DEFAULT)
    return path


def test_the_default_config_is_used_without_config(tmp_path, default_config):
    cli = TinyCLI(["--output_dir", str(tmp_path / "a")], default_config)
    assert cli.model.hparams.lr == 0.5 and cli.model.hparams.width == 3  # width linked from data
    assert cli.config.seed_everything == 0 and cli.config.save_every_n_steps == 1
    assert cli.resume_from is None and cli.output_dir == tmp_path / "a" and cli.output_dir.is_dir()
    other = tmp_path / "other.yaml"
    other.write_text("trainer:\n  accelerator: cpu\nmodel:\n  lr: 0.25\n")
    cli = TinyCLI(["--config", str(other), "--output_dir", str(tmp_path / "b")], default_config)
    assert cli.model.hparams.lr == 0.25 and cli.model.hparams.width == 4  # nothing of the default config
    assert cli.config.save_every_n_steps == 100


def test_the_default_output_folder_is_named_after_the_run(tmp_path, default_config, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli = TinyCLI(["--data.width", "5"], default_config)
    assert cli.output_dir.parent == Path("outputs")
    assert re.fullmatch(r"tiny-w5-\d{8}-\d{6}", cli.output_dir.name)
    assert (tmp_path / cli.output_dir).is_dir()


def _refusal(capsys, args, default_config) -> str:
    """The one line `TinyCLI(args)` refuses with (exit status 2)."""
    capsys.readouterr()  # what came before
    with pytest.raises(SystemExit) as exit:
        TinyCLI(args, default_config)
    assert exit.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    return err[0]


def test_a_used_output_folder_and_a_missing_checkpoint_are_refused(tmp_path, default_config, capsys):
    used = tmp_path / "used"
    used.mkdir()
    (used / "run.trec").write_text("")
    assert "used is not empty" in _refusal(capsys, ["--output_dir", str(used)], default_config)
    assert "give its --output_dir" in _refusal(capsys, ["--ckpt_path", "last"], default_config)
    fresh = tmp_path / "fresh"
    line = _refusal(capsys, ["--output_dir", str(fresh), "--ckpt_path", "last"], default_config)
    assert line == f"error: nothing to resume in {fresh}: {fresh / 'config.yaml'} does not exist"
    line = _refusal(capsys, ["--output_dir", str(fresh), "--ckpt_path", str(tmp_path / "none.ckpt")], default_config)
    assert line == f"error: --ckpt_path: no such checkpoint file: {tmp_path / 'none.ckpt'}"
    line = _refusal(capsys, ["--output_dir", str(fresh), "--ckpt_path", str(used / "run.trec")], default_config)
    assert line == f"error: --ckpt_path: {used / 'run.trec'} is not a checkpoint (not a file torch.save wrote)"
    assert not fresh.exists()


def test_a_two_step_fit_writes_checkpoints_logs_and_config(tmp_path, default_config, capsys):
    out = tmp_path / "run"
    cli = TinyCLI(["--output_dir", str(out)], default_config)
    assert cli.write_config() == out / "config.yaml"
    cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=cli.resume_from)
    assert cli.trainer.global_step == 2
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["best-step=2.ckpt", "last.ckpt"]
    assert Path(cli.checkpoint.best_model_path) == out / "checkpoints" / "best-step=2.ckpt"
    assert "dev/score" in (out / "logs" / "metrics.csv").read_text().splitlines()[0]
    config = (out / "config.yaml").read_text()
    assert "lr: 0.5" in config and "save_every_n_steps: 1" in config and f"output_dir: {out}" in config
    written = config
    cli.write_config()  # present: left as it is
    assert (out / "config.yaml").read_text() == written
    resumed = TinyCLI(["--output_dir", str(out), "--ckpt_path", "last"], default_config)
    assert resumed.resume_from == out / "checkpoints" / "last.ckpt" and resumed.resuming
    assert resumed.model.hparams.lr == 0.5
    assert "not empty" in _refusal(capsys, ["--output_dir", str(out)], default_config)


def test_a_resumed_run_takes_its_config_and_refuses_other_settings(tmp_path, default_config, capsys):
    out = tmp_path / "run"
    cli = TinyCLI(["--output_dir", str(out), "--model.lr", "0.25"], default_config)
    cli.write_config()
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    resumed = TinyCLI(["--output_dir", str(out), "--ckpt_path", "last"], default_config)
    assert resumed.model.hparams.lr == 0.25  # config.yaml's, not the default config's 0.5
    TinyCLI(["--output_dir", str(out), "--ckpt_path", "last", "--model.lr", "0.25"], default_config)  # the same
    line = _refusal(capsys, ["--output_dir", str(out), "--ckpt_path", "last", "--model.lr", "0.5",
                             "--data.width", "2"], default_config)
    assert line == (f"error: --ckpt_path last resumes {out} with its config.yaml; other settings given: "
                    "data.width: 3 there, 2 here; model.lr: 0.25 there, 0.5 here")
    (out / "metrics.json").write_text("{}")
    with pytest.raises(SystemExit) as exit:
        TinyCLI(["--output_dir", str(out), "--ckpt_path", "last"], default_config)
    assert exit.value.code == 0
    assert capsys.readouterr().out == f"{out} holds a finished run (its metrics.json is written): nothing to resume\n"


def test_a_run_resumes_only_on_the_processes_it_was_written_by(tmp_path, default_config, capsys, monkeypatch):
    """The loader's position is a count of one process's examples and each process's generators are saved: a resume
    on another number of processes (``devices: auto`` on another node) is refused before any step."""
    out = tmp_path / "run"
    cli = TinyCLI(["--output_dir", str(out)], default_config)
    cli.write_config()
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    written = (out / "checkpoints" / "last.ckpt").stat().st_mtime_ns
    monkeypatch.setattr(L.Trainer, "world_size", property(lambda trainer: 2))
    line = _refusal(capsys, ["--output_dir", str(out), "--ckpt_path", "last"], default_config)
    assert line.startswith("error: --ckpt_path last: the checkpoint was written by 1 process accumulating 1, this "
                           "run has 2 accumulating 1: resume it on 1 process")
    assert (out / "checkpoints" / "last.ckpt").stat().st_mtime_ns == written
