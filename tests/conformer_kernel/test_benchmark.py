"""conformer_kernel.benchmark (Figure 2): the --json convention, output files, --overwrite, skips, fits, and the
analytic memory of TK's attention, on a tiny model.

No timing or memory threshold is asserted: only that the measurements exist and are consistent.
"""

import csv
import json
import sys

import pytest
import torch

from common.benchmarks import fresh_process
from conformer_kernel import benchmark
from tests.benchmark_runs import assert_refuses_to_overwrite, run_main

pytestmark = pytest.mark.slow  # the second tier (README, "Tests")

HIDDEN, HEADS, LAYERS, VOCAB = 32, 4, 2, 500
TINY = ["--hidden_size", str(HIDDEN), "--num_heads", str(HEADS), "--num_layers", str(LAYERS), "--vocab_size",
        str(VOCAB), "--pool_window", "32", "--pool_stride", "16", "--device", "cpu", "--threads", "1",
        "--timeout", "120"]
KEYS = {"bench", "impl", "n", "pass", "ms", "peak_mb", "device", "queries", "docs"}


def settings(**changes) -> dict:
    args = benchmark.parse_args([*TINY, *(f"--{k}={v}" for k, v in changes.items())])
    return {k: getattr(args, k) for k in benchmark.SETTINGS}


def in_process(monkeypatch):
    """Measure in this process instead of a fresh subprocess per row (the tests' speed)."""
    monkeypatch.setattr(benchmark, "measure_isolated", lambda *args: fresh_process.guarded(benchmark.measure, *args))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One --json run of tk and ck at n = 64, 128 (in process)."""
    out, patch = tmp_path_factory.mktemp("ck_memory"), pytest.MonkeyPatch()
    in_process(patch)
    try:
        code, stdout = run_main(benchmark.main, [*TINY, "--lengths", "64", "128", "--json", "--output_dir", str(out)])
    finally:
        patch.undo()
    return code, out, stdout


def test_json_rows_follow_the_convention(run):
    code, out, stdout = run
    assert code == 0
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert all(line.startswith("{") for line in lines)  # --json: nothing else on stdout
    rows = [json.loads(line) for line in lines]
    assert [(r["impl"], r["n"]) for r in rows] == [("tk", 64), ("ck", 64), ("tk", 128), ("ck", 128)]
    for r in rows:
        assert KEYS <= set(r) and "skipped" not in r
        assert r["bench"] == "conformer_kernel_memory" and r["pass"] == "train" and r["device"] == "cpu"
        assert (r["queries"], r["docs"], r["hidden"], r["heads"], r["layers"]) == (1, 2, HIDDEN, HEADS, LAYERS)
        assert r["ms"] > 0 and r["peak_mb"] >= 0 and r["state_mb"] > 0
        assert r["estimate_mb"] == pytest.approx(benchmark.estimate_mb(r["impl"], r["n"], settings()), abs=0.05)
    assert [json.loads(line) for line in (out / "memory.jsonl").read_text().splitlines()] == rows


def test_output_files(run):
    _, out, _ = run
    assert sorted(p.name for p in out.iterdir()) == ["memory.csv", "memory.jsonl", "memory.png", "memory_fits.json"]
    with open(out / "memory.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == benchmark.FIELDS and len(rows) == 4
    assert all(r["skipped"] == "" for r in rows)
    assert (out / "memory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fits = json.loads((out / "memory_fits.json").read_text())
    assert fits["fits"]["tk"] is None  # a quadratic needs three lengths
    assert fits["fits"]["ck"]["degree"] == 1 and len(fits["fits"]["ck"]["coefficients"]) == 2
    assert [r["n"] for r in fits["ratios"]] == [64, 128] and not any(r["extrapolated"] for r in fits["ratios"])
    assert "4000" in fits["note"]


def test_refuses_to_overwrite_without_flag(run, monkeypatch):
    in_process(monkeypatch)
    assert_refuses_to_overwrite(benchmark.main, [*TINY, "--lengths", "32", "--impls", "ck", "--output_dir",
                                                 str(run[1])], run[1])


def test_overwrite_replaces_a_file(tmp_path, monkeypatch):
    (tmp_path / "memory.csv").write_text("old\n")
    in_process(monkeypatch)
    code, stdout = run_main(benchmark.main, [*TINY, "--lengths", "32", "--impls", "ck", "--output_dir", str(tmp_path),
                             "--overwrite"])
    assert code == 0 and "TK/CK peak-memory ratio at n = 4000" in stdout
    rows = list(csv.DictReader((tmp_path / "memory.csv").open()))
    assert [(r["impl"], r["n"]) for r in rows] == [("ck", "32")]


def test_a_measurement_that_would_not_fit_is_a_skipped_row(tmp_path, monkeypatch):
    """TK at 512 needs 2·4·512²·4·7 B = 56 MB by the estimate: above 85% of a pretended 20 MB, so skipped (with the
    reason); the quadratic fit over 32..96 then gives an extrapolated TK/CK ratio at 512."""
    in_process(monkeypatch)
    monkeypatch.setattr(benchmark, "available_mb", lambda: 20.0)
    code, stdout = run_main(benchmark.main, [*TINY, "--lengths", "32", "64", "96", "512", "--json", "--output_dir",
                                             str(tmp_path)])
    assert code == 0
    rows = {(r["impl"], r["n"]): r for r in map(json.loads, stdout.splitlines())}
    skipped = rows[("tk", 512)]
    assert skipped["ms"] is None and skipped["peak_mb"] is None and "MemAvailable" in skipped["skipped"]
    assert skipped["estimate_mb"] == pytest.approx(2 * HEADS * 512**2 * 4 * (3 * LAYERS + 1) / 2**20, abs=0.05)
    assert all("skipped" not in r for key, r in rows.items() if key != ("tk", 512))
    all_rows = list(rows.values())
    fitted = benchmark.fits(all_rows)
    assert fitted["tk"]["lengths"] == [32, 64, 96]
    at_512 = next(r for r in benchmark.ratios(all_rows, fitted) if r["n"] == 512)
    assert at_512["extrapolated"] and at_512["tk_mb"] == pytest.approx(benchmark.fit_value(fitted["tk"], 512))
    assert "extrapolated" in benchmark.closing_note(all_rows, fitted, at=512)


def test_fits_recover_exact_polynomials():
    rows = [{"impl": "ck", "n": n, "peak_mb": 10 + 0.5 * n} for n in (100, 200, 300)]
    rows += [{"impl": "tk", "n": n, "peak_mb": 5 + 0.1 * n + 0.002 * n * n} for n in (100, 200, 300, 400)]
    fitted = benchmark.fits(rows)
    assert fitted["ck"]["coefficients"] == pytest.approx([10, 0.5])
    assert fitted["tk"]["coefficients"] == pytest.approx([5, 0.1, 0.002], rel=1e-6, abs=1e-6)
    assert fitted["ck"]["r2"] == pytest.approx(1.0) and fitted["tk"]["r2"] == pytest.approx(1.0)
    ratio = {r["n"]: r["ratio"] for r in benchmark.ratios(rows, fitted)}
    assert ratio[200] == pytest.approx((5 + 20 + 80) / 110)


def _saved_square_tensors(impl: str, n: int) -> list[tuple]:
    """Distinct tensors saved for backward by one forward whose last two dimensions are (n, n)."""
    s = settings()
    model = benchmark.build_model(impl, n, s)
    features, _ = benchmark.make_batch(n, s["queries"], s["docs"], s["query_terms"], s["vocab_size"], s["seed"])
    saved = {}

    def pack(t):
        if t.dim() >= 2 and t.shape[-2:] == (n, n):
            saved[t.untyped_storage().data_ptr()] = (t.numel(), t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(features)
    return list(saved.values())


def test_tk_saves_three_n_by_n_tensors_per_layer_and_ck_none():
    """The analytic part of the estimate: TK keeps 3 (B, heads, n, n) fp32 tensors per layer for backward
    (softmax output, dropout mask, dropped-out probabilities); CK's separable attention keeps no n x n tensor."""
    n, documents = 40, 2
    tk = _saved_square_tensors("tk", n)
    assert len(tk) == 3 * LAYERS
    assert all(numel == documents * HEADS * n * n and size == 4 for numel, size in tk)
    assert _saved_square_tensors("ck", n) == []


def test_isolated_measurement_in_a_fresh_process():
    result = benchmark.measure_isolated("ck", 32, settings(), "cpu")
    assert "skipped" not in result, result
    assert result["ms"] > 0 and result["peak_mb"] >= 0


def test_the_child_runs_with_a_fixed_mmap_threshold(monkeypatch):
    commands = []
    monkeypatch.setattr(fresh_process, "run_isolated", lambda command, timeout: commands.append(command) or {"ms": 1})
    benchmark.measure_isolated("ck", 32, settings(), "cpu")
    benchmark.measure_isolated("ck", 32, settings(mmap_threshold=0), "cpu")
    assert commands[0][:2] == ["env", f"MALLOC_MMAP_THRESHOLD_={128 * 1024}"]
    assert commands[1][0] == sys.executable and "--_one" in commands[1]
