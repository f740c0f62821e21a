"""Peak memory of one call above what was in use before it: CUDA's allocator peak, or on CPU the rise of the peak
resident set (reset through Linux's ``/proc/self/clear_refs``; where it cannot be, the lifetime peak, right only in a
fresh process). `limit_data_segment` keeps a measurement that would not fit from waking the OOM killer."""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
from collections.abc import Callable

MB = 2**20


def peak_mb(step: Callable[[], object], device: str) -> float:
    """Peak memory in MB of one call of `step` above what was in use before it."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - before) / MB
    reset = reset_peak_rss()
    before = rss_mb()
    step()
    return max((peak_rss_mb() if reset else max_rss_mb()) - before, 0.0)


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MB


def max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def reset_peak_rss() -> bool:
    """Return freed heap to the system and reset the peak resident set (VmHWM); False where it cannot be reset."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)  # glibc keeps freed small blocks resident otherwise
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # 5: reset the peak resident set size
        return True
    except OSError:
        return False


def status_mb(key: str, path: str = "/proc/self/status") -> float:
    """The `key` line of Linux's `path` (kB), in MB."""
    with open(path) as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key)) / 1024


def peak_rss_mb() -> float:
    return status_mb("VmHWM:")


def available_mb() -> float:
    """MemAvailable of /proc/meminfo (what the kernel can give without swapping), in MB."""
    return status_mb("MemAvailable:", "/proc/meminfo")


def limit_data_segment(share: float) -> None:
    """RLIMIT_DATA = data segment + `share` of MemAvailable: an allocation beyond it fails, not the OOM killer."""
    limit = int(status_mb("VmData:") * MB) + int(share * available_mb() * MB)
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
