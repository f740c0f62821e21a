"""The machine a measurement ran on: the CPU's model and vector extensions (runs on machines that differ compare by
them), the GPU, torch's threads and the load average."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

#: The x86 vector extensions that decide a kernel's peak rate, as /proc/cpuinfo names them.
VECTOR_EXTENSIONS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
                     "avx512_fp16", "amx_tile", "amx_bf16")


def _cpuinfo(path: Path) -> dict[str, str]:
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError), open(path) as f:
        for line in f:
            if not line.strip():
                break  # the first processor's block describes them all
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    return fields


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's marketing name (``model name`` of Linux's `cpuinfo`; elsewhere `platform.processor()`)."""
    import platform

    return _cpuinfo(cpuinfo).get("model name") or platform.processor() or platform.machine()


def cpu_description(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """'MODEL (family F, model M), N logical CPUs, EXT EXT ...' with the `VECTOR_EXTENSIONS` the CPU has."""
    fields = _cpuinfo(cpuinfo)
    name = cpu_model(cpuinfo)
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    flags = set(fields.get("flags", "").split())
    extensions = [e for e in VECTOR_EXTENSIONS if e in flags]
    return f"{name}, {os.cpu_count()} logical CPUs" + (f", {' '.join(extensions)}" if extensions else "")


def gpu_description(device: str) -> str | None:
    import torch

    return torch.cuda.get_device_name() if device == "cuda" else None


def machine() -> dict:
    """What a row records of the machine now: torch's ``threads``, the ``cpu`` and the 1-minute ``load_1min``."""
    import torch

    return {"threads": torch.get_num_threads(), "cpu": cpu_model(), "load_1min": round(os.getloadavg()[0], 2)}


def describe_machine() -> str:
    here = machine()
    return f"{here['cpu']}, {here['threads']} thread(s); load {here['load_1min']:.2f}"
