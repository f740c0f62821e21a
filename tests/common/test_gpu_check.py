"""`common.gpu_check`: its dry run on a CPU (the plan, and the kernel checks a CPU can run), its refusals, its report
and exit status, and (slow tier) the harness run whole on the CPU, the GPU-only checks skipped."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from common import gpu_check
from common.gpu_check import CHECKS, Check, CheckFailed, Context, run_checks

REPO = Path(__file__).parents[2]


def test_the_dry_run_plans_every_check_and_runs_the_kernel_checks_on_the_cpu(tmp_path, capsys):
    report = gpu_check.main(["--device", "cpu", "--dry_run", "--output_dir", str(tmp_path / "check")])
    checks = {c["name"]: c for c in report["checks"]}
    assert list(checks) == [c.name for c in CHECKS]
    assert {name for name, c in checks.items() if c["status"] == "passed"} == {
        "kernels-flex", "kernels-auto", "kernels-compilations"}
    assert checks["kernels-flex"]["float32"]["out"] < 1e-5  # FlexAttention's eager forward against the reference
    assert checks["kernels-auto"]["auto"] == "tvm"
    counted = checks["kernels-compilations"]
    assert counted["graphs"] == 1 and counted["graph_calls"] == counted["flex_calls"] == len(gpu_check.SHAPES)
    for package in gpu_check.PACKAGES:
        for precision in gpu_check.PRECISIONS:
            planned = checks[f"train-{package}-{precision}"]
            assert planned["status"] == "planned"
            (command,) = planned["commands"]
            assert command[:3] == ["python", "-m", f"{package}.train"]
            assert command[command.index("--trainer.precision") + 1] == precision
        (evaluate,) = checks[f"evaluate-{package}"]["commands"]
        assert evaluate[:3] == ["python", "-m", f"{package}.evaluate"] and "bf16-mixed" in evaluate
    printed = capsys.readouterr().out
    assert "python -m qds.train" in printed and "python -m common.kernels.benchmark" in printed
    written = json.loads((tmp_path / "check" / "report.json").read_text())
    assert [c["status"] for c in written["checks"]] == [c["status"] for c in report["checks"]]
    assert "| kernels-flex | passed |" in (tmp_path / "check" / "report.md").read_text()


def test_cuda_without_a_gpu_is_refused_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "common.gpu_check", "--output_dir", str(tmp_path / "check")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["error: --device cuda: no CUDA device is visible (--device cpu runs the "
                                        "harness on the CPU)"]
    assert not (tmp_path / "check").exists()


def test_a_failed_a_skipped_and_a_crashed_check_are_reported_and_the_failure_ends_in_status_1(tmp_path, monkeypatch):
    def fails(context):
        raise CheckFailed("found 2, wanted 1")

    def crashes(context):
        raise KeyError("absent")

    def needs_two(context):
        context.needs_gpu(2)

    checks = [Check("fails", "a finding", fails), Check("crashes", "a crash", crashes),
              Check("skips", "no GPU here", needs_two), Check("passes", "nothing wrong", lambda context: {"x": 1})]
    context = Context("cpu", tmp_path, deadline=1e18, gpus=0)
    report = run_checks(context, checks)
    assert [(c["status"], c.get("why")) for c in report["checks"]] == [
        ("failed", "found 2, wanted 1"), ("failed", "KeyError: 'absent'"), ("skipped", "needs a CUDA device"),
        ("passed", None)]
    assert report["checks"][3]["x"] == 1
    monkeypatch.setattr(gpu_check, "CHECKS", checks)
    with pytest.raises(SystemExit) as exit:
        gpu_check.main(["--device", "cpu", "--output_dir", str(tmp_path / "again")])
    assert exit.value.code == 1


def test_a_check_past_the_budget_is_skipped(tmp_path):
    context = Context("cpu", tmp_path, deadline=0, gpus=0)
    check = Check("late", "a command", lambda context: context.command(["-c", "pass"], timeout=10))
    assert run_checks(context, [check])["checks"][0]["status"] == "skipped"


@pytest.mark.slow
def test_the_harness_runs_on_the_cpu_with_the_gpu_only_checks_skipped(tmp_path):
    """Training, evaluating, killing and resuming as on a GPU, on the CPU: every check passes or, needing a GPU, is
    skipped."""
    names = ["train-qds-bf16-mixed", "train-qds-16-mixed", "evaluate-qds", "resume", "kernels-benchmark",
             "two-gpus-conformer_kernel"]
    done = subprocess.run([sys.executable, "-m", "common.gpu_check", "--device", "cpu", "--budget", "1500",
                           "--output_dir", str(tmp_path / "check"), "--checks", *names], cwd=REPO,
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "check" / "report.json").read_text())
    status = {c["name"]: c["status"] for c in report["checks"]}
    assert status == {"train-qds-bf16-mixed": "passed", "train-qds-16-mixed": "skipped", "evaluate-qds": "passed",
                      "resume": "passed", "kernels-benchmark": "skipped", "two-gpus-conformer_kernel": "skipped"}
    resumed = next(c for c in report["checks"] if c["name"] == "resume")
    assert resumed["killed_after_step"] >= 2 and resumed["equal"] == ["run.trec", "metrics.json"]
