"""`common.commands.run_folder.requeued`: which command lines a requeued SLURM job continues with ``--ckpt_path last``."""

import pytest

from common.commands.run_folder import requeued


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "config.yaml").write_text("seed_everything: 1\n")
    (tmp_path / "checkpoints").mkdir()
    return tmp_path


@pytest.mark.parametrize("restarts, written, extra, continues", [
    ("1", "checkpoints/last.ckpt", [], True),  # a run stopped mid-way resumes from its last checkpoint
    ("1", "metrics.json", [], True),  # a finished run says so
    ("1", None, [], False),  # no checkpoint yet: the run starts again in its folder
    ("0", "checkpoints/last.ckpt", [], False),  # not requeued
    ("", "checkpoints/last.ckpt", [], False),
    ("1", "checkpoints/last.ckpt", ["--ckpt_path", "other.ckpt"], False),  # a checkpoint named already
])
def test_a_requeued_job_resumes_its_folder(folder, monkeypatch, restarts, written, extra, continues):
    monkeypatch.setenv("SLURM_RESTART_COUNT", restarts)
    if written:
        (folder / written).write_text("x")
    given = ["--output_dir", str(folder), *extra]
    assert requeued(given) == ([*given, "--ckpt_path", "last"] if continues else given)


def test_a_requeued_job_without_a_folder_or_config_runs_as_given(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_text("x")
    assert requeued(["--seed", "1"]) == ["--seed", "1"]
    assert requeued([f"--output_dir={tmp_path}"]) == [f"--output_dir={tmp_path}"]  # no config.yaml
    (tmp_path / "config.yaml").write_text("seed_everything: 1\n")
    assert requeued([f"--output_dir={tmp_path}"]) == [f"--output_dir={tmp_path}", "--ckpt_path", "last"]
