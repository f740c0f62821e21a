"""``python -m common.scale``: the extrapolation worked by hand, and a tiny sweep end to end whose bytes follow from
the layouts (4 bytes a candidate and the offsets; the stored rows' bytes), plus its one-line refusals."""

import json
import subprocess
import sys

import pytest

from common.scale import CANDIDATES, PASSAGES, extrapolate, main


def test_the_extrapolation_by_hand():
    rows = [{"part": "training", "candidates": n, "private_mb": 10.0 * n / 1e6, "draw_us": 50.0 + n / 1e6,
             "build_s": 7.0} for n in (1e6, 2e6, 4e6)]
    found = extrapolate(rows)["training"]
    assert found["private_mb"]["cost"] == "linear"
    assert found["private_mb"]["at_msmarco"] == pytest.approx(10.0 * CANDIDATES / 1e6, rel=1e-3)  # 4,780 MB
    assert found["draw_us"] == {"at_msmarco": 54.0, "cost": "flat", "r2": 1.0,  # a time: the largest size's
                                "measured": [[1e6, 51.0], [2e6, 52.0], [4e6, 54.0]]}
    assert found["build_s"]["cost"] == "flat" and found["build_s"]["at_msmarco"] == 7.0
    stores = [{"part": "store", "documents": n, "bytes": 100 * n + 40 * n, "row_bytes": 100 * n,
               "scattered_ms": 2.0, "scattered_cold_ms": 3.0, "bytes_per_query": 1e5} for n in (1000, 10_000)]
    paper = {"part": "paper_store", "documents": 1000, "scattered_ms": 102.0, "scattered_cold_ms": 203.0,
             "bytes_per_query": 1000 * 3072 * 76}  # EARL S1's bytes per query
    at = extrapolate(stores + [paper])
    assert at["store"]["bytes"]["at_msmarco"] == pytest.approx(140 * PASSAGES, rel=1e-3)
    earl = at["stores_at_paper_widths"]["earl_s1"]
    assert earl["bytes"] == pytest.approx(PASSAGES * (3072 * 76 + 40), rel=1e-3) and not earl["fits_1tb_page_cache"]
    assert (earl["read_ms_per_query_warm"], earl["read_ms_per_query_cold"]) == (102.0, 203.0)
    de = at["stores_at_paper_widths"]["de"]  # 1/76 of EARL S1's bytes: the small store's cost plus 1/76 of the rest
    assert de["read_ms_per_query_warm"] == pytest.approx(2.0 + 100.0 / 76, rel=1e-3) and de["fits_1tb_page_cache"]
    # fp16: 2 bytes a column; int8: a byte a column and a 4-byte scale a row; the same 40 bytes a document of ids
    assert earl["float16"]["bytes"] == pytest.approx(PASSAGES * (768 * 2 * 76 + 40), rel=1e-3)
    assert earl["int8"]["bytes"] == pytest.approx(PASSAGES * ((768 + 4) * 76 + 40), rel=1e-3)  # 519 GB
    assert earl["int8"]["read_bytes_per_query"] == pytest.approx(1000 * 772 * 76, rel=1e-3)  # 4 significant digits
    assert earl["int8"]["fits_1tb_page_cache"]
    s2 = at["stores_at_paper_widths"]["earl_s2"]["int8"]
    assert s2["bytes"] == pytest.approx(PASSAGES * ((3072 + 4) * 76 + 40), rel=1e-3)  # 2.07 TB
    assert not s2["fits_1tb_page_cache"]


def test_a_tiny_sweep_end_to_end(tmp_path):
    out = tmp_path / "out"
    status = main(["--candidates", "20000", "--dict_candidates", "20000", "--per_query", "500", "--documents", "1500",
                   "--paper_documents", "0", "--width", "4", "--rows", "3", "--queries", "2", "--per_query_read", "50",
                   "--draws", "50", "--output_dir", str(out), "--work_dir", str(tmp_path / "work")])
    assert status == 0
    assert sorted(p.name for p in out.iterdir()) == ["extrapolation.json", "scale.csv", "scale.jsonl", "scale.png"]
    training, store = (json.loads(line) for line in (out / "scale.jsonl").read_text().splitlines())
    assert not any(row.get("skipped") for row in (training, store))
    # 40 queries: 4 bytes a candidate, 8 a query's offset in each of two offset arrays, 8 a judgment; npy headers
    assert training["column_bytes"] == 20000 * 4 + 2 * 41 * 8 + 40 * 8 + 5 * 128
    assert training["queries"] == 40 and training["dicts_private_mb"] > training["private_mb"]
    assert store["row_bytes"] == store["rows"] * 4 * 2 and store["shards_per_query"] == 2.0
    assert not (tmp_path / "work" / "training-20000").exists()  # inputs removed once measured
    found = json.loads((out / "extrapolation.json").read_text())
    assert set(found["stores_at_paper_widths"]) == {"earl_s1", "earl_s2", "mva1", "mva2", "de"}


@pytest.mark.parametrize("argv, message", [
    (["--candidates", "0"], "argument --candidates: must be a positive integer, got 0"),
    (["--documents", "10", "10"], "argument --documents: 10 is given twice"),
])
def test_bad_options_are_refused_in_one_line(tmp_path, argv, message):
    done = subprocess.run([sys.executable, "-m", "common.scale", *argv, "--output_dir", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (2, f"error: {message}\n") and not (tmp_path / "out").exists()
