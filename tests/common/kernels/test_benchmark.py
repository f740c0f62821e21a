"""The benchmark command's outputs (not its timings: those are measured by running it, into results/kernels/)."""

import csv
import json

import pytest

from common.kernels.benchmark import densities, main, measure_isolated, speedups


def test_speedups_are_ratios_of_the_same_run():
    rows = [
        {"impl": "sdpa_dense", "pass": "fwd", "n": 2048, "ms": 70.0},
        {"impl": "hf_longformer", "pass": "fwd", "n": 2048, "ms": 45.0},
        {"impl": "tvm", "pass": "fwd", "n": 2048, "ms": 17.5},
        {"impl": "tvm", "pass": "fwdbwd", "n": 2048, "ms": 90.0},
    ]
    assert speedups(rows) == [f"{'tvm':>12} {'fwd':>6} n=2048  4.00x vs sdpa_dense, 2.57x vs hf_longformer"]


def test_density_of_local_only_pattern_at_2048():
    local = next(r for r in densities([2048]) if r["pattern"] == "sparse")
    assert local["density"] == pytest.approx((2048 * 129 - 64 * 65) / 2048**2)
    assert local["ideal_speedup"] == pytest.approx(1 / local["density"])


def test_json_lines_csv_and_plot(tmp_path, capsys):
    code = main(["--lengths", "128", "256", "--impls", "portable", "sdpa_dense", "--passes", "fwd", "fwdbwd",
                 "--repeats", "1", "--out-dir", str(tmp_path), "--json"])
    assert code == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 8
    for row in lines:
        assert {"bench", "impl", "n", "pass", "ms", "peak_mb"} <= row.keys()
        assert row["ms"] > 0 and row["peak_mb"] >= 0 and row["bench"] == "qds_attention"
    assert {(r["impl"], r["n"], r["pass"]) for r in lines} == {
        (impl, n, p) for impl in ("portable", "sdpa_dense") for n in (128, 256) for p in ("fwd", "fwdbwd")
    }
    with open(tmp_path / "bench_cpu.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [(r["impl"], int(r["n"]), r["pass"]) for r in table] == [(r["impl"], r["n"], r["pass"]) for r in lines]
    assert (tmp_path / "bench_cpu.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_failed_measurement_is_skipped_with_its_error():
    # hf_longformer needs n to be a multiple of its window (128).
    result = measure_isolated("hf_longformer", 200, "fwd", "cpu", repeats=1, timeout=120)
    assert result["skipped"].startswith("ValueError: LongformerSelfAttention needs n to be a multiple")


def test_a_measurement_known_not_to_run_is_skipped_with_the_reason(tmp_path, capsys):
    assert main(["--lengths", "200", "256", "--impls", "hf_longformer", "--passes", "fwd", "--repeats", "1",
                 "--device", "cpu", "--out-dir", str(tmp_path)]) == 0
    assert "skipped hf_longformer n=200: LongformerSelfAttention needs n to be a multiple of the window (128)" in (
        capsys.readouterr().err
    )
