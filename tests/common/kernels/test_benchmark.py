"""The benchmark command's outputs (not its timings: those are measured by running it, into results/kernels/)."""

import csv
import json

import pytest
import torch

from common.benchmarks.fresh_process import measure_in_child
from common.kernels.benchmark import densities, main, speedups, useful_gflop, with_rates
from common.kernels.patterns import density, global_tokens, nonzeros, synthetic_layout

pytestmark = pytest.mark.slow  # the second tier (README, "Tests")


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


def test_nonzeros_by_hand():
    """n = 6, w = 2 (one key each side), position 0 global. Ordinary rows 1-5 keep their non-global band keys
    ({1, 2}, {1, 2, 3}, {2, 3, 4}, {3, 4, 5}, {4, 5}: 13) and the global key (5); the global row keeps all 6."""
    is_global = torch.tensor([True, False, False, False, False, False])
    assert nonzeros(is_global, 2) == 13 + 5 + 6
    assert density(is_global, 2) == pytest.approx(24 / 36)


def test_useful_gflop_and_the_rate_against_dense_sdpa():
    """Forward: 4 flops per (query, key) pair and head dimension, 12 heads x 64. Dense at n = 2048: 4 x 2048² x 64
    x 12 = 12.884901888 GFLOP, 257.7 GFLOP/s in 50 ms. A sparse row's rate is a fraction of that: its pairs
    over n², times 50 ms over its own time."""
    assert useful_gflop("sdpa_dense", 2048, "fwd") == pytest.approx(12.884901888)
    assert useful_gflop("sdpa_dense", 2048, "fwdbwd") == pytest.approx(3 * 12.884901888)  # backward: 4 more products
    pairs = nonzeros(global_tokens("qds", synthetic_layout(2048, 20, 25)), 128)
    assert useful_gflop("tvm", 2048, "fwd") == pytest.approx(4 * pairs * 64 * 12 / 1e9)
    dense = with_rates({"impl": "sdpa_dense", "n": 2048, "pass": "fwd", "ms": 50.0}, None)
    assert dense["gflops"] == pytest.approx(257.7, abs=0.01) and dense["rate_vs_sdpa_dense"] is None
    tvm = with_rates({"impl": "tvm", "n": 2048, "pass": "fwd", "ms": 26.0}, dense)
    assert tvm["rate_vs_sdpa_dense"] == pytest.approx(pairs / 2048**2 * 50 / 26, abs=1e-4)
    # A rate far below dense SDPA's keeps 4 significant digits (a fast CPU's dense rate makes small fractions)
    slow = with_rates({"impl": "reference", "n": 2048, "pass": "fwd", "ms": 26000.0}, dense)
    expected = useful_gflop("reference", 2048, "fwd") / 26.0 / dense["gflops"]  # dense's rate as its row holds it
    assert slow["rate_vs_sdpa_dense"] == float(f"{expected:.4g}") and slow["rate_vs_sdpa_dense"] < 1e-3


def test_json_lines_csv_and_plot(tmp_path, capsys):
    code = main(["--lengths", "128", "256", "--impls", "portable", "sdpa_dense", "--passes", "fwd", "fwdbwd",
                 "--repeats", "1", "--output_dir", str(tmp_path), "--json"])
    assert code == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 8
    for row in lines:
        assert {"bench", "impl", "n", "pass", "ms", "peak_mb", "cpu"} <= row.keys()
        assert row["ms"] > 0 and row["peak_mb"] >= 0 and row["bench"] == "qds_attention"
        assert row["ms_min"] <= row["ms"] <= row["ms_max"]
        # Both ms (3 decimals) and gflops (4 significant digits) are rounded: 2e-3 covers the two.
        assert row["gflops"] == pytest.approx(useful_gflop(row["impl"], row["n"], row["pass"]) / row["ms"] * 1000,
                                              rel=2e-3)
        dense = next(r for r in lines if (r["impl"], r["n"], r["pass"]) == ("sdpa_dense", row["n"], row["pass"]))
        assert row["rate_vs_sdpa_dense"] == (
            None if row is dense else pytest.approx(row["gflops"] / dense["gflops"], rel=2e-3))
    assert {(r["impl"], r["n"], r["pass"]) for r in lines} == {
        (impl, n, p) for impl in ("portable", "sdpa_dense") for n in (128, 256) for p in ("fwd", "fwdbwd")
    }
    assert [json.loads(line) for line in (tmp_path / "bench_cpu.jsonl").read_text().splitlines()] == lines
    with open(tmp_path / "bench_cpu.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [(r["impl"], int(r["n"]), r["pass"]) for r in table] == [(r["impl"], r["n"], r["pass"]) for r in lines]
    assert (tmp_path / "bench_cpu.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_failed_measurement_is_skipped_with_its_error():
    # hf_longformer needs n to be a multiple of its window (128).
    spec = dict(impl="hf_longformer", n=200, pass_="fwd", device="cpu", repeats=1, threads=None)
    result = measure_in_child("common.kernels.benchmark", spec, 120)
    assert result["skipped"].startswith("ValueError: LongformerSelfAttention needs n to be a multiple")


def test_a_measurement_known_not_to_run_is_skipped_with_the_reason(tmp_path, capsys):
    assert main(["--lengths", "200", "256", "--impls", "hf_longformer", "--passes", "fwd", "--repeats", "1",
                 "--device", "cpu", "--output_dir", str(tmp_path)]) == 0
    assert "skipped hf_longformer n=200: LongformerSelfAttention needs n to be a multiple of the window (128)" in (
        capsys.readouterr().err
    )
