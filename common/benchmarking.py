"""What every benchmark measures the same way (median wall-clock milliseconds, peak memory), and checks the same way.

- `times_ms(step, repeats, device)`: the milliseconds of `repeats` timed calls (CUDA synchronised around
  each); `median_ms` their median, `spread_ms` their minimum, median and maximum.
- `cpu_description()`: the CPU a measurement ran on (model, vector extensions, logical CPUs), for the
  results of machines that differ in CPU model.
- CPU memory (Linux): `rss_mb` (resident set now), `max_rss_mb` (lifetime peak, ``ru_maxrss``: a
  call's own peak only in a fresh process), `reset_peak_rss` + `peak_rss_mb` (reset the peak to
  the current resident set, so the next peak belongs to what runs after it, within one process).
- CUDA memory: `cuda_peak_mb(step)`, the allocator's peak above what was allocated before.
- `run_isolated(command, timeout)`: one measurement in a fresh process.
- `write_rows(rows, fields, csv_path, jsonl_path, overwrite)`: a sweep's rows as CSV and JSONL.

The command lines' shared checks, which answer bad input in one line before anything is measured
(`common.refusals` has the rest): argparse types `probability` and `fraction`, `DEVICES` and
`resolve_device` (the default device, cuda where available), `refuse_repeats` (a value given twice in a
list option) and `refuse_existing` (results that ``--overwrite`` alone may replace). Torch is imported only
inside what needs it: a benchmark's ``--help`` and its argument errors do not wait for it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from common.refusals import number_in, usage_error

DEVICES = ("cpu", "cuda")


def times_ms(step: Callable[[], object], repeats: int, device: str) -> list[float]:
    """Milliseconds of each of `repeats` calls of `step`, in order."""
    import torch

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        step()
        sync()
        times.append((time.perf_counter() - start) * 1000)
    return times


def median_ms(step: Callable[[], object], repeats: int, device: str) -> float:
    """Median milliseconds of `repeats` calls of `step`."""
    return statistics.median(times_ms(step, repeats, device))


def spread_ms(times: Sequence[float]) -> dict[str, float]:
    """``ms`` (the median), ``ms_min`` and ``ms_max`` of timed calls: how far a run's calls differ."""
    return {"ms": statistics.median(times), "ms_min": min(times), "ms_max": max(times)}


#: The x86 vector extensions that decide a kernel's peak rate, as /proc/cpuinfo names them.
VECTOR_EXTENSIONS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
                     "avx512_fp16", "amx_tile", "amx_bf16")


def cpu_description(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """'MODEL (family F, model M), N logical CPUs, EXT EXT ...': the CPU this process runs on (Linux's
    `cpuinfo`; elsewhere `platform.processor()`), with the vector extensions of `VECTOR_EXTENSIONS` it has."""
    import platform

    fields: dict[str, str] = {}
    with contextlib.suppress(OSError), open(cpuinfo) as f:
        for line in f:
            if not line.strip():
                break  # the first processor's block describes them all
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    name = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    flags = set(fields.get("flags", "").split())
    extensions = [e for e in VECTOR_EXTENSIONS if e in flags]
    return f"{name}, {os.cpu_count()} logical CPUs" + (f", {' '.join(extensions)}" if extensions else "")


def cuda_peak_mb(step: Callable[[], object]) -> float:
    """Peak CUDA memory one call of `step` allocates above what was allocated before it."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    step()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2**20


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def reset_peak_rss() -> bool:
    """Return freed heap pages to the system and reset the peak resident set (VmHWM) to the current one.

    The peak above the resident set before a call is then that call's alone, as in a fresh
    process. False where Linux's ``/proc/self/clear_refs`` cannot be written: then only
    `max_rss_mb` is left, right only in a fresh process.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)  # glibc keeps freed small blocks resident otherwise
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # 5: reset the peak resident set size
        return True
    except OSError:
        return False


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024  # kB


def run_isolated(command: list[str], timeout: float) -> dict:
    """Run one measurement as `command` in a fresh process (its peak resident set is then its own).

    The command prints a JSON object as its last line; a failure or a timeout gives
    ``{"skipped": reason}`` (the last line of its error output), so a sweep goes on.
    """
    import json
    import subprocess

    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"skipped": f"over the {timeout:.0f} s time limit"}
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return {"skipped": lines[-1] if lines else f"exit status {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_rows(rows: list[dict], fields: Sequence[str], csv_path: Path, jsonl_path: Path | None = None,
               overwrite: bool = False) -> None:
    """Write a benchmark's measurement `rows`: CSV with the `fields` columns in order (other keys left out,
    a missing one empty) and, where `jsonl_path` is given, one JSON object per row with every key.

    Atomic (`common.io.atomic_write`); an existing file is replaced only with `overwrite`.
    """
    import csv
    import json

    from common.io import atomic_write

    with atomic_write(csv_path, overwrite=overwrite) as f:
        writer = csv.DictWriter(f, fieldnames=list(fields), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    if jsonl_path is not None:
        with atomic_write(jsonl_path, overwrite=overwrite) as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)


# --------------------------------------------------------------------------- command-line checks


#: A dropout rate: from 0 to 1.
probability = number_in(0, 1)
#: A share of a budget: above 0, at most 1.
fraction = number_in(0, 1, above_low=True)


def resolve_device(requested: str | None) -> str:
    """`requested` (one of `DEVICES`), or cuda where available when None; cuda requested without CUDA ends the
    command (`common.refusals.usage_error`)."""
    import torch

    available = torch.cuda.is_available()
    if requested == "cuda" and not available:
        usage_error("argument --device: cuda is not available here")
    return requested or ("cuda" if available else "cpu")


def refuse_repeats(option: str, values: Iterable) -> None:
    """End the command if a value of the list `option` is given twice (it would be measured twice)."""
    seen = set()
    for value in values:
        if value in seen:
            usage_error(f"argument {option}: {value} is given twice")
        seen.add(value)


def refuse_existing(paths: Iterable[Path], overwrite: bool) -> None:
    """End the command if any of `paths` exists and `overwrite` is off: results are replaced only on request."""
    existing = [str(p) for p in paths if p.exists()]
    if existing and not overwrite:
        usage_error(f"refusing to overwrite {', '.join(existing)} (pass --overwrite)")
