"""``python -m common.gpu_check``: what the CPU test tiers cannot run, run on a GPU in about ten minutes, into a report.

Checks: ``kernels-flex`` (FlexAttention against the dense reference, float32 and bfloat16), ``kernels-auto``,
``kernels-compilations`` (`common.kernels.checks`); ``train-<package>-<precision>`` (tiny runs in ``bf16-mixed`` and
``16-mixed``); ``evaluate-<package>``; ``resume`` (a QDS run killed and resumed ends byte for byte as an
uninterrupted one); ``kernels-benchmark``; ``two-gpus-<package>``. Each runs in turn within ``--budget`` seconds;
``report.json`` and ``report.md`` go to ``--output_dir`` (commit a GPU's under ``results/gpu/``); exit status 1
where a check failed. ``--device cpu`` runs what a CPU can; ``--dry_run`` prints the commands. Details:
docs/kernels.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from common.refusals import ArgumentParser, output_folder_problem, usage_error

PACKAGES = ("qds", "conformer_kernel", "earl", "mva")
PRECISIONS = ("bf16-mixed", "16-mixed")
#: Every tiny run: the built-in collection, two steps, a dev check after the first, the top 10 of 4 test queries.
RUN = ["--data.depth", "10", "--data.dev_queries", "3", "--data.dev_depth", "5", "--data.test_queries", "4",
       "--data.batch_size", "2", "--data.eval_batch_size", "16", "--trainer.max_steps", "2",
       "--trainer.val_check_interval", "1", "--trainer.enable_progress_bar", "false", "--save_every_n_steps", "1"]
BERT = ["--model.num_layers", "1", "--model.hidden_size", "32", "--model.num_heads", "2", "--model.intermediate_size",
        "64", "--data.passage_length", "48", "--compare_with", "[]"]
#: Each package's tiny model (from scratch) and its run.
TINY = {
    "qds": ["--model.num_layers", "1", "--model.hidden_size", "64", "--model.num_heads", "2",
            "--model.intermediate_size", "64", "--model.window", "8", "--data.max_length", "192", *RUN],
    "conformer_kernel": ["--data.embedding_dim", "16", "--model.num_heads", "4", "--model.num_layers", "1",
                         "--test_modes", "[rerank]", *RUN[:4], *RUN[6:], "--data.batch_size", "8"],
    "earl": [*BERT, "--model.num_blocks", "1", "--model.query_layers", "1", *RUN],
    "mva": [*BERT, "--model.projection", "8", *RUN],
}
#: The largest relative error of FlexAttention's output and gradients against the reference: float32 (its matmuls
#: may run in TF32, 10 bits of mantissa) and bfloat16 (8 bits).
FLEX_TOLERANCE = {"float32": 5e-3, "bfloat16": 5e-2}
#: (B, N) shapes a QDS training run meets: length sub-batches of every size.
SHAPES = [(1, 300), (2, 700), (3, 1024), (4, 1500), (2, 2048), (8, 511), (5, 1900), (7, 130), (6, 1100)]


class CheckFailed(AssertionError):
    """A check's finding: what differs from what it asserts."""


class Skipped(Exception):
    """A check that cannot run here (no GPU, one GPU, the budget spent): why."""


@dataclass
class Context:
    """Where and how the checks run: the device, the output folder, the deadline, the visible GPUs."""

    device: str
    out: Path
    deadline: float
    gpus: int
    dry_run: bool = False
    env: dict = field(default_factory=dict)

    def needs_gpu(self, count: int = 1) -> None:
        if self.device != "cuda":
            raise Skipped("needs a CUDA device")
        if self.gpus < count:
            raise Skipped(f"needs {count} GPUs, {self.gpus} visible")

    def command(self, args: list[str], timeout: float) -> subprocess.CompletedProcess:
        """Run ``python *args`` within `timeout` and the deadline; CheckFailed with the end of its output."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Skipped("the time budget is spent")
        done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=min(timeout, left),
                              env={**os.environ, **self.env})
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip().splitlines()[-15:]
            raise CheckFailed(f"python {' '.join(args[:3])} ... exited with {done.returncode}: " + " | ".join(tail))
        return done


@dataclass(frozen=True)
class Check:
    """One check: its name, what it shows, how it runs and the command lines it runs (None: in process, dry run too)."""

    name: str
    what: str
    run: Callable[[Context], dict]
    commands: Callable[[Context], list[list[str]]] | None = None


def _flex(context: Context) -> dict:
    import torch

    from common.kernels.checks import flex_errors

    found = {}
    for dtype in (torch.float32,) if context.device == "cpu" else (torch.float32, torch.bfloat16):
        name = str(dtype).removeprefix("torch.")
        found[name] = errors = flex_errors(context.device, dtype)
        worst = max(errors.values())
        if not worst <= FLEX_TOLERANCE[name]:  # NaN fails too
            raise CheckFailed(f"flex in {name}: relative error {worst:.3g} > {FLEX_TOLERANCE[name]} ({errors})")
    return found


def _auto(context: Context) -> dict:
    from common.kernels.checks import auto_choice

    chosen, reason = auto_choice(context.device)
    wanted = "flex" if context.device == "cuda" else "tvm"
    if chosen != wanted:
        raise CheckFailed(f"impl='auto' runs {chosen} on {context.device}, not {wanted}"
                          + (f": {reason}" if reason else ""))
    return {"auto": chosen}


def _compilations(context: Context) -> dict:
    from common.kernels.checks import count_compilations

    gpu = context.device == "cuda"
    found = count_compilations(SHAPES, context.device, backend="inductor" if gpu else "eager", gradients=gpu)
    if not (found["graphs"] <= 2 and found["graph_calls"] == found["flex_calls"]
            and found["max_error"] <= FLEX_TOLERANCE["float32"]):
        raise CheckFailed(f"FlexAttention over {len(SHAPES)} shapes: {found} (at most 2 graphs, every call one of "
                          "them, within the float32 tolerance)")
    return found


def _accelerator(context: Context) -> list[str]:
    return ["--trainer.accelerator", "gpu" if context.device == "cuda" else "cpu", "--trainer.devices", "1"]


def _run(name: str, what: str, folder: str, args: Callable[[Context, Path], list[str]], gpus: int = 0) -> Check:
    """A check running ``python *args(context, out)`` (on `gpus` GPUs or more) whose ``out/metrics.json`` is finite."""
    def run(context: Context) -> dict:
        if gpus:
            context.needs_gpu(gpus)
        context.command(args(context, context.out / "runs" / folder), timeout=300)
        path = context.out / "runs" / folder / "metrics.json"
        metrics = json.loads(path.read_text())
        values = [v for system in metrics.values() for v in system.values()]
        if not values or not all(math.isfinite(v) for v in values):
            raise CheckFailed(f"{path}: not every metric is finite: {metrics}")
        return {"metrics": metrics}

    return Check(name, what, run, lambda context: [args(context, context.out / "runs" / folder)])


def _train(package: str, precision: str) -> Check:
    return _run(f"train-{package}-{precision}", f"{package}.train's tiny run in {precision}", f"{package}-{precision}",
                lambda context, out: ["-m", f"{package}.train", *TINY[package], *_accelerator(context),
                                      "--trainer.precision", precision, "--output_dir", str(out)],
                gpus=int(precision == "16-mixed"))


def _evaluate(package: str) -> Check:
    def args(context: Context, out: Path) -> list[str]:
        checkpoint = context.out / "runs" / f"{package}-bf16-mixed" / "checkpoints" / "last.ckpt"
        device = ["--accelerator", "gpu" if context.device == "cuda" else "cpu", "--devices", "1"]
        modes = ["--modes", "rerank"] if package == "conformer_kernel" else []
        return ["-m", f"{package}.evaluate", "--checkpoint", str(checkpoint), "--task", "builtin:test", *modes,
                "--depth", "10", "--precision", "bf16-mixed", *device, "--output_dir", str(out)]

    return _run(f"evaluate-{package}", f"{package}.evaluate of the bf16 run's checkpoint, in bf16-mixed",
                f"{package}-evaluate", args)


#: The resumed run: the portable kernel (its kernels deterministic), 6 steps, last.ckpt every 2.
RESUME = [*TINY["qds"][:-len(RUN)], "--model.impl", "portable", *RUN[:-6], "--trainer.max_steps", "6",
          "--trainer.val_check_interval", "3", "--trainer.enable_progress_bar", "false", "--save_every_n_steps", "2"]
OUTPUTS = ("run.trec", "metrics.json")


def _resume_args(context: Context, folder: Path, resumed: bool = False) -> list[str]:
    run = ["--ckpt_path", "last"] if resumed else [*RESUME, *_accelerator(context)]
    return ["-m", "qds.train", *run, "--output_dir", str(folder)]


def _resume(context: Context) -> dict:
    root = context.out / "resume"
    for name in ("whole", "again"):
        context.command(_resume_args(context, root / name), timeout=300)
    if differ := [o for o in OUTPUTS if (root / "whole" / o).read_bytes() != (root / "again" / o).read_bytes()]:
        raise CheckFailed(f"two uninterrupted runs differ in {differ}: the run is not deterministic on this device")
    killed = root / "killed"
    process = subprocess.Popen([sys.executable, *_resume_args(context, killed)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env={**os.environ, **context.env})
    last = killed / "checkpoints" / "last.ckpt"
    while process.poll() is None and not last.exists():
        time.sleep(0.05)
    if process.poll() is not None:
        raise CheckFailed(f"the run to kill ended (status {process.returncode}) before writing {last}")
    process.send_signal(signal.SIGKILL)
    process.wait()
    from common.training.resume import checkpoint_step

    step = checkpoint_step(last)
    context.command(_resume_args(context, killed, resumed=True), timeout=300)
    if differ := [o for o in OUTPUTS if (killed / o).read_bytes() != (root / "whole" / o).read_bytes()]:
        raise CheckFailed(f"killed after step {step} and resumed, the run differs from the uninterrupted one in "
                          f"{differ}")
    return {"killed_after_step": step, "equal": list(OUTPUTS)}


def _benchmark_args(context: Context) -> list[str]:
    return ["-m", "common.kernels.benchmark", "--device", context.device, "--repeats", "3", "--lengths", "1024",
            "2048", "4096", "--impls", "reference", "portable", "flex", "sdpa_dense", "--timeout", "120",
            "--output_dir", str(context.out / "kernels"), "--json"]


def _benchmark(context: Context) -> dict:
    context.needs_gpu()
    done = context.command(_benchmark_args(context), timeout=420)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    measured = [r for r in rows if r.get("ms") is not None]
    if not any(r["impl"] == "flex" for r in measured):
        raise CheckFailed(f"the kernel benchmark measured no flex row ({len(rows)} rows)")
    return {"rows": rows}


def _two_gpus(package: str, what: str, extra: list[str]) -> Check:
    return _run(f"two-gpus-{package}", f"{what} trained on 2 GPUs (DDP)", f"{package}-2-gpus",
                lambda context, out: ["-m", f"{package}.train", *TINY[package], *extra, "--trainer.accelerator", "gpu",
                                      "--trainer.devices", "2", "--trainer.strategy", "ddp", "--output_dir", str(out)],
                gpus=2)


CHECKS = [
    Check("kernels-flex", "FlexAttention against the reference: output and gradients, float32 and bfloat16", _flex),
    Check("kernels-auto", "impl='auto' picks FlexAttention on a GPU", _auto),
    Check("kernels-compilations", f"one compiled graph for {len(SHAPES)} shapes, never the dense fallback",
          _compilations),
    *[_train(package, precision) for package in PACKAGES for precision in PRECISIONS],
    *[_evaluate(package) for package in PACKAGES],
    Check("resume", "a QDS run killed after its first last.ckpt resumes to the uninterrupted run's bytes", _resume,
          lambda context: [_resume_args(context, context.out / "resume" / "whole"),
                           _resume_args(context, context.out / "resume" / "killed", resumed=True)]),
    Check("kernels-benchmark", "the kernel benchmark's rows on the GPU", _benchmark,
          lambda context: [_benchmark_args(context)]),
    _two_gpus("conformer_kernel", "NDRM2", ["--model.model", "ndrm2"]),
    _two_gpus("qds", "QDS-Transformer", ["--data.batch_size", "2"]),
]


def machine(device: str) -> dict:
    """What the checks ran on."""
    import torch

    found = {"python": platform.python_version(), "torch": torch.__version__, "cpu": platform.processor() or
             platform.machine(), "device": device, "cuda": torch.version.cuda}
    if device == "cuda" and torch.cuda.is_available():
        found |= {"gpu": torch.cuda.get_device_name(), "gpus": torch.cuda.device_count(),
                  "capability": ".".join(map(str, torch.cuda.get_device_capability()))}
    return found


def run_checks(context: Context, checks: list[Check] = CHECKS) -> dict:
    """Run `checks` in turn (a dry run prints the commands), writing the report after each; returns it."""
    report = {"machine": machine(context.device), "dry_run": context.dry_run, "checks": []}
    for check in checks:
        entry = {"name": check.name, "what": check.what}
        start = time.monotonic()
        if context.dry_run and check.commands is not None:
            entry |= {"status": "planned", "commands": [["python", *c] for c in check.commands(context)]}
        else:
            try:
                entry |= {"status": "passed", **check.run(context)}
            except Skipped as why:
                entry |= {"status": "skipped", "why": str(why)}
            except CheckFailed as finding:
                entry |= {"status": "failed", "why": str(finding)}
            except subprocess.TimeoutExpired as late:
                entry |= {"status": "failed", "why": f"timed out after {late.timeout:.0f} s"}
            except Exception as error:
                entry |= {"status": "failed", "why": f"{type(error).__name__}: {error}"}
        entry["seconds"] = round(time.monotonic() - start, 1)
        report["checks"].append(entry)
        why = f": {entry['why']}" if "why" in entry else ""
        print(f"{entry['status']:>8}  {check.name}  ({entry['seconds']} s){why}", flush=True)
        for command in entry.get("commands", []):
            print(f"          {' '.join(command)}", flush=True)
        write_report(context.out, report)
    return report


def write_report(out: Path, report: dict) -> None:
    from common.io import atomic_write

    with atomic_write(out / "report.json", overwrite=True) as f:
        json.dump(report, f, indent=1, default=str)
        f.write("\n")
    lines = ["# GPU check", "", "| | |", "|---|---|", *[f"| {k} | {v} |" for k, v in report["machine"].items()], "",
             "| check | status | seconds | |", "|---|---|---:|---|",
             *[f"| {c['name']} | {c['status']} | {c['seconds']} | {c.get('why', c['what'])} |"
               for c in report["checks"]]]
    with atomic_write(out / "report.md", overwrite=True) as f:
        f.write("\n".join(lines) + "\n")


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m common.gpu_check", description=__doc__.split("\n\n")[0],
                            epilog="Checks: " + ", ".join(c.name for c in CHECKS))
    parser.add_argument("--output_dir", default=None, help="default: a new outputs/gpu-check-<time>")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cuda (default), or cpu to run the harness without a GPU (GPU-only checks skipped)")
    parser.add_argument("--budget", type=float, default=600, help="seconds for every check together (default 600)")
    parser.add_argument("--dry_run", action="store_true",
                        help="print what would run; run only the in-process kernel checks")
    parser.add_argument("--checks", nargs="+", choices=[c.name for c in CHECKS], default=None,
                        help="these checks only (default: all)")
    return parser


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    out = Path(args.output_dir or f"outputs/gpu-check-{time.strftime('%Y%m%d-%H%M%S')}")
    if problem := output_folder_problem(out):
        usage_error(f"--output_dir: {problem}")
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        usage_error("--device cuda: no CUDA device is visible (--device cpu runs the harness on the CPU)")
    out.mkdir(parents=True, exist_ok=True)
    checks = [c for c in CHECKS if args.checks is None or c.name in args.checks]
    context = Context(args.device, out, time.monotonic() + args.budget, torch.cuda.device_count(), args.dry_run,
                      {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "4")})
    report = run_checks(context, checks)
    failed = [c["name"] for c in report["checks"] if c["status"] == "failed"]
    print(f"\n{len(report['checks']) - len(failed)} of {len(report['checks'])} checks did not fail; report: "
          f"{out / 'report.md'}")
    if failed:
        raise SystemExit(1)
    return report


if __name__ == "__main__":
    main()
