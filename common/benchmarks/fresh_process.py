"""A measurement in a fresh process, whose peak resident set is its own (`measure_in_child`; the child: `answer`). A
failure, in a child or in this process (`guarded`), is a row skipped with its reason, so a sweep goes on."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable


def guarded(measure: Callable[..., dict], /, *args, **kwargs) -> dict:
    """``measure(*args, **kwargs)``, or ``{"skipped": its error's first line}``; what it left is freed either way."""
    try:
        return measure(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - any failure is the row's, with its reason
        return {"skipped": f"{type(error).__name__}: {error}".splitlines()[0][:300]}
    finally:
        import gc

        import torch

        gc.collect()  # the measurement's model, optimizer and inputs
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()


def measure_in_child(module: str, spec: dict, timeout: float, env: dict[str, object] | None = None) -> dict:
    """``python -m module --_one SPEC`` (`spec`: keyword arguments, as JSON) under `env`, or ``{"skipped": reason}``."""
    command = [sys.executable, "-m", module, "--_one", json.dumps(spec)]
    if env:
        command = ["env", *(f"{key}={value}" for key, value in env.items()), *command]
    result = run_isolated(command, timeout)
    if result.get("skipped", "").startswith("over the"):
        result["skipped"] += " (--timeout)"
    return result


def answer(spec: str, measure: Callable[..., dict]) -> int:
    """The child's side of `measure_in_child`: ``measure(**spec)``, `guarded`, printed as one JSON line."""
    print(json.dumps(guarded(measure, **json.loads(spec))))
    return 0


def run_isolated(command: list[str], timeout: float) -> dict:
    """The JSON object `command` prints last, or ``{"skipped": its error's last line}`` (failed, or past `timeout`)."""
    import subprocess

    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"skipped": f"over the {timeout:.0f} s time limit"}
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return {"skipped": lines[-1] if lines else f"exit status {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])
