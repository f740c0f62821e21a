"""`common.benchmarking`: the median of the timed calls, and a peak resident set that sees one call's memory."""

import itertools

import pytest

from common import benchmarking


def test_median_of_the_timed_calls(monkeypatch):
    # a fake clock: the calls last 3, 1 and 2 ms
    ticks = iter([0.0, 0.003, 1.0, 1.001, 2.0, 2.002])
    monkeypatch.setattr(benchmarking.time, "perf_counter", lambda: next(ticks))
    calls = itertools.count()
    assert benchmarking.median_ms(lambda: next(calls), repeats=3, device="cpu") == pytest.approx(2.0)
    assert next(calls) == 3


def test_peak_rss_after_a_reset_sees_a_temporary_allocation():
    if not benchmarking.reset_peak_rss():
        pytest.skip("/proc/self/clear_refs cannot be written here: the peak cannot be reset")
    before = benchmarking.rss_mb()
    block = bytearray(64 * 2**20)  # 64 MiB, touched
    del block
    assert benchmarking.peak_rss_mb() - before >= 60
    assert benchmarking.max_rss_mb() >= benchmarking.peak_rss_mb() - 1
