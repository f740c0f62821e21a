"""`common.benchmarking`: the median and spread of the timed calls, the CPU named, and a peak resident set that sees
one call's memory."""

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


def test_spread_of_the_timed_calls(monkeypatch):
    ticks = iter([0.0, 0.003, 1.0, 1.001, 2.0, 2.002])
    monkeypatch.setattr(benchmarking.time, "perf_counter", lambda: next(ticks))
    times = benchmarking.times_ms(lambda: None, repeats=3, device="cpu")
    assert times == pytest.approx([3.0, 1.0, 2.0])
    assert benchmarking.spread_ms(times) == pytest.approx({"ms": 2.0, "ms_min": 1.0, "ms_max": 3.0})


def test_cpu_description_names_the_model_and_its_vector_extensions(tmp_path):
    """From the first processor's block of /proc/cpuinfo; only the extensions that set a kernel's peak rate."""
    cpuinfo = tmp_path / "cpuinfo"
    block = ("processor\t: {}\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
             "model name\t: AMD EPYC 9R14\nflags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw avx512vl "
             "avx512_vnni avx512_bf16 sha_ni\n\n")
    cpuinfo.write_text(block.format(0) + block.format(1).replace("avx512f ", ""))
    assert benchmarking.cpu_description(cpuinfo) == (
        f"AMD EPYC 9R14 (family 25, model 17), {benchmarking.os.cpu_count()} logical CPUs, "
        "avx avx2 fma avx512f avx512bw avx512vl avx512_vnni avx512_bf16")


def test_peak_rss_after_a_reset_sees_a_temporary_allocation():
    if not benchmarking.reset_peak_rss():
        pytest.skip("/proc/self/clear_refs cannot be written here: the peak cannot be reset")
    before = benchmarking.rss_mb()
    block = bytearray(64 * 2**20)  # 64 MiB, touched
    del block
    assert benchmarking.peak_rss_mb() - before >= 60
    assert benchmarking.max_rss_mb() >= benchmarking.peak_rss_mb() - 1
