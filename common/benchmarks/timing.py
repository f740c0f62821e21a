"""Timing: milliseconds of calls (CUDA synchronised), their median and spread, CPU time, the parts of a call, a model's
training or inference step, and FLOPs counted."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterable, Sequence

from common.benchmarks.memory import peak_mb


def times_ms(step: Callable[[], object], repeats: int, device: str) -> list[float]:
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
    return statistics.median(times_ms(step, repeats, device))


def spread_ms(times: Sequence[float]) -> dict[str, float]:
    """``ms`` (the median), ``ms_min`` and ``ms_max`` of timed calls."""
    return {"ms": statistics.median(times), "ms_min": min(times), "ms_max": max(times)}


def wall_and_cpu_ms(step: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median wall-clock ms of `repeats` calls of `step` on the CPU, and their median process CPU ms (all threads)."""
    cpu = []

    def step_with_cpu_time():
        start = time.process_time()
        step()
        cpu.append((time.process_time() - start) * 1000)

    return median_ms(step_with_cpu_time, repeats, "cpu"), statistics.median(cpu)


class PartTimes:
    """Milliseconds spent in the named parts of a timed call: ``with parts("read_ms"): ...``; `ms` by name."""

    def __init__(self, names: Iterable[str]):
        self.ms = dict.fromkeys(names, 0.0)

    @contextlib.contextmanager
    def __call__(self, name: str):
        start = time.perf_counter()
        yield
        self.ms[name] += (time.perf_counter() - start) * 1000


def training_step(model, loss: Callable[[object], object], lr: float) -> Callable[[object], None]:
    """A training step of `model` (train mode): ``loss(batch)``, backward, an Adam step, gradients cleared."""
    import torch

    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)

    def step(batch) -> None:
        loss(batch).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def inference_step(model) -> Callable[[object], object]:
    """A forward of `model` (in eval mode) on a batch, in inference mode."""
    import torch

    model.eval()

    def step(batch):
        with torch.inference_mode():
            return model(batch)

    return step


def measure_step(step: Callable[[object], object], batch, *, warmup: int, repeats: int, device: str) -> dict:
    """``peak_mb`` of the first call of `step`, `warmup` - 1 untimed calls, then ``ms``: the median of `repeats`."""
    peak = peak_mb(lambda: step(batch), device)
    for _ in range(warmup - 1):
        step(batch)
    return {"ms": median_ms(lambda: step(batch), repeats, device), "peak_mb": peak}


def count_flops(step: Callable[[], object]) -> int:
    """FLOPs `torch.utils.flop_counter.FlopCounterMode` counts in one call of `step`, SDPA's CPU flash kernel (which
    its table lacks) counted as its other SDPA kernels are."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

    def cpu_flash(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return sdpa_flop_count(query_shape, key_shape, value_shape)

    custom = {}
    if hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu"):
        custom[torch.ops.aten._scaled_dot_product_flash_attention_for_cpu] = cpu_flash
    with FlopCounterMode(display=False, custom_mapping=custom) as counter:
        step()
    return counter.get_total_flops()
