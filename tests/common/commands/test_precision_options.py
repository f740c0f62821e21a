"""`common.commands.task_options`' precision: ``--precision``'s default is the checkpoint's run's (its run folder's
config.yaml, else a gradient scaler in the checkpoint, else 32-true), ``16-mixed`` is refused or left where there is
no CUDA GPU, torch's float32 matmul precision is set as training sets it, and the autocast of what scores outside a
Trainer is Lightning's."""

import argparse

import pytest
import torch
import yaml

from common.commands.task_options import (add_precision_arguments, add_process_arguments, add_workers_argument,
                                          autocast, resolve_precision, trained_precision, trainer_options)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_process_arguments(parser)
    add_precision_arguments(parser)
    add_workers_argument(parser, "read the documents")
    return parser.parse_args(list(argv))


def run_folder(tmp_path, precision) -> str:
    """A checkpoint where `common.commands.cli.RankerCLI` writes one, its run's config.yaml training in `precision`
    (None: a config without the setting)."""
    (tmp_path / "checkpoints").mkdir()
    trainer = {"max_steps": 10} if precision is None else {"max_steps": 10, "precision": precision}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"trainer": trainer, "model": {"lr": 0.1}}))
    return str(tmp_path / "checkpoints" / "best-step=10.ckpt")


@pytest.fixture(autouse=True)
def matmul_precision():
    """Each test leaves torch's float32 matmul precision as it found it."""
    before = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(before)


@pytest.mark.parametrize("written, read", [("bf16-mixed", "bf16-mixed"), ("16-mixed", "16-mixed"),
                                           ("bf16", "bf16-mixed"), (16, "16-mixed"), ("32", "32-true"),
                                           ("bf16-true", "bf16-true"), (None, None)])
def test_the_trained_precision_is_the_run_folders_config(tmp_path, written, read):
    assert trained_precision(run_folder(tmp_path, written), {}) == read


def test_without_a_run_folder_a_gradient_scaler_says_16_mixed(tmp_path):
    loose = tmp_path / "copied.ckpt"  # no checkpoints/ folder, no config.yaml
    assert trained_precision(loose, {"state_dict": {}}) is None
    assert trained_precision(loose, {"state_dict": {}, "MixedPrecision": {"scale": 65536.0}}) == "16-mixed"
    # a config.yaml beside a checkpoint that is not in checkpoints/ is not the run's
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"trainer": {"precision": "bf16-mixed"}}))
    assert trained_precision(loose, {}) is None


@pytest.mark.parametrize("trained, cuda, chosen, why", [
    ("bf16-mixed", False, "bf16-mixed", "as the checkpoint's run trained"),
    ("16-mixed", True, "16-mixed", "as the checkpoint's run trained"),
    ("16-mixed", False, "32-true", "its run trained in 16-mixed, which needs a CUDA GPU"),
    ("bf16-true", True, "32-true", "its run trained in bf16-true, not one of 32-true, bf16-mixed, 16-mixed"),
    (None, True, "32-true", "the checkpoint does not say what its run trained with"),
])
def test_the_default_precision(tmp_path, trained, cuda, chosen, why):
    args = parse()
    line = resolve_precision(args, run_folder(tmp_path, trained), {}, cuda)
    assert args.precision == chosen
    assert line == f"precision {chosen} ({why}); float32 matmuls: high"
    options = trainer_options(args)
    options.pop("callbacks")  # the command's progress (tests/common/commands/test_progress.py)
    assert options == {"accelerator": "auto", "devices": "auto", "num_nodes": 1, "precision": chosen}


def test_a_given_precision_wins_over_the_runs(tmp_path):
    args = parse("--precision", "32-true", "--matmul_precision", "highest")
    assert resolve_precision(args, run_folder(tmp_path, "bf16-mixed"), {}, False) == (
        "precision 32-true (--precision); float32 matmuls: highest")
    assert torch.get_float32_matmul_precision() == "highest"


def test_tf32_is_set_as_training_sets_it(tmp_path):
    torch.set_float32_matmul_precision("highest")
    resolve_precision(parse(), tmp_path / "x.ckpt", {}, False)
    assert torch.get_float32_matmul_precision() == "high"  # common.commands.train.run_command's


def test_16_mixed_without_a_cuda_gpu_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        resolve_precision(parse("--precision", "16-mixed"), tmp_path / "x.ckpt", {}, False)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == ("error: --precision: 16-mixed needs a CUDA GPU (float16 autocast runs on none "
                                       "here); bf16-mixed runs on CPUs\n")


def test_precision_and_workers_are_checked_by_the_parser():
    assert (parse().precision, parse().matmul_precision, parse().num_workers) == (None, "high", 0)
    assert parse("--num_workers", "4").num_workers == 4
    for bad in (["--precision", "bf16"], ["--precision", "64-true"], ["--matmul_precision", "medium"],
                ["--num_workers", "-1"]):
        with pytest.raises(SystemExit):
            parse(*bad)


def test_the_autocast_is_lightnings():
    layer = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    with autocast("bf16-mixed", "cpu"):
        assert torch.is_autocast_enabled("cpu") and layer(x).dtype == torch.bfloat16
    with autocast("32-true", "cpu"):
        assert not torch.is_autocast_enabled("cpu") and layer(x).dtype == torch.float32
    # Lightning's MixedPrecision plugin enters the same context for a test step
    from lightning.pytorch.plugins.precision import MixedPrecision

    with MixedPrecision("bf16-mixed", "cpu").forward_context():
        assert layer(x).dtype == torch.bfloat16 and torch.get_autocast_dtype("cpu") == torch.bfloat16
