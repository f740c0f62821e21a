"""qds.benchmark (QDS-Transformer Table 5): output files, densities, ratios, --json and --overwrite on a tiny setting.

No timing is asserted: only that the measurements exist and are consistent with each other.
"""

import csv
import json

import pytest
import torch

from common.kernels.patterns import density
from qds import benchmark
from qds.inputs import FIRST_ORDINARY_ID, LAYOUTS, build_qds_input
from tests.benchmark_runs import assert_refuses_to_overwrite, run_main

pytestmark = pytest.mark.slow  # the second tier (README, "Tests")

N, WINDOW, QUERY, SENTENCE = 256, 128, 8, 25
TINY = ["--lengths", str(N), "--num_layers", "1", "--hidden_size", "64", "--num_heads", "1",
        "--intermediate_size", "128", "--vocab_size", "500", "--repeats", "1", "--window", str(WINDOW),
        "--query_tokens", str(QUERY), "--sentence_tokens", str(SENTENCE), "--device", "cpu", "--threads", "1"]
KEYS = {"bench", "impl", "n", "pass", "ms", "peak_mb", "system", "density", "ratio_to_dense"}
#: The columns of results/qds/efficiency_cpu.csv, in order.
FIELDS = ["bench", "system", "impl", "n", "pass", "ms", "peak_mb", "density", "ratio_to_dense", "batch_size", "device",
          "num_layers", "hidden_size", "num_heads", "intermediate_size", "window", "layout", "threads", "skipped"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One in-process run of dense, sparse and qds (portable kernel), train and infer, with --json."""
    out, threads = tmp_path_factory.mktemp("qds_bench"), torch.get_num_threads()
    code, stdout = run_main(benchmark.main, [*TINY, "--systems", "dense", "sparse", "qds", "--impls", "portable",
                                             "--json", "--output_dir", str(out)])
    assert torch.get_num_threads() == threads  # --threads 1 held for the run only
    return code, out, stdout


def expected_density(pattern: str) -> float:
    """Density of `pattern` on an input of N tokens laid out independently of the benchmark's helper."""
    sentences = [[7] * SENTENCE for _ in range(N)]
    layout = build_qds_input([9] * QUERY, sentences, bos=0, eos=2, max_length=N, max_sentences=N)
    assert len(layout.input_ids) == N
    return density(torch.tensor(layout.global_mask(pattern)), WINDOW)


def test_outputs_have_every_row_and_column(run):
    code, out, _ = run
    assert code == 0
    with open(out / "efficiency_cpu.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == FIELDS
    systems = [("dense", "sdpa"), ("sparse", "portable"), ("qds", "portable")]
    expected = {(system, impl, pass_) for system, impl in systems for pass_ in ("train", "infer")}
    assert {(r["system"], r["impl"], r["pass"]) for r in rows} == expected
    records = [json.loads(line) for line in (out / "efficiency_cpu.jsonl").read_text().splitlines()]
    assert len(records) == len(rows)
    for record in records:
        assert KEYS <= set(record)
        assert record["bench"] == "qds_efficiency" and record["n"] == N and record["pass"] in ("train", "infer")
        assert record["ms"] > 0 and record["peak_mb"] >= 0 and record["skipped"] is None
        assert (record["num_layers"], record["hidden_size"], record["batch_size"]) == (1, 64, 2)
    assert (out / "efficiency_cpu.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_density_matches_the_real_global_mask(run):
    records = [json.loads(line) for line in (run[1] / "efficiency_cpu.jsonl").read_text().splitlines()]
    for record in records:
        want = 1.0 if record["system"] == "dense" else expected_density(record["system"])
        assert record["density"] == pytest.approx(want, abs=1e-6)
    assert expected_density("sparse") < expected_density("qds") < 1.0


def test_ratio_to_dense_is_ms_over_dense_ms(run):
    records = [json.loads(line) for line in (run[1] / "efficiency_cpu.jsonl").read_text().splitlines()]
    dense = {r["pass"]: r["ms"] for r in records if r["system"] == "dense"}
    for record in records:
        assert record["ratio_to_dense"] == pytest.approx(record["ms"] / dense[record["pass"]], rel=1e-3)
        if record["system"] == "dense":
            assert record["ratio_to_dense"] == 1.0


def test_json_lines_parse_and_match_the_jsonl(run):
    _, out, stdout = run
    printed = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert printed == [json.loads(line) for line in (out / "efficiency_cpu.jsonl").read_text().splitlines()]
    assert all(line.startswith("{") for line in stdout.splitlines() if line.strip())  # --json: nothing else on stdout


def test_refuses_to_overwrite_without_flag(run):
    out = run[1]
    assert_refuses_to_overwrite(benchmark.main, [*TINY, "--systems", "dense", "--passes", "infer", "--output_dir",
                                                 str(out)], out)


def test_overwrite_and_isolated_measurement(tmp_path):
    """A fresh-subprocess measurement (the default) writes over existing files with --overwrite."""
    (tmp_path / "efficiency_cpu.csv").write_text("old\n")
    assert benchmark.main([*TINY, "--systems", "dense", "--passes", "infer", "--output_dir", str(tmp_path),
                           "--overwrite", "--isolate"]) == 0
    rows = list(csv.DictReader((tmp_path / "efficiency_cpu.csv").open()))
    assert [(r["system"], r["pass"], r["ratio_to_dense"]) for r in rows] == [("dense", "infer", "1.0")]
    assert float(rows[0]["ms"]) > 0


def test_unsupported_pass_is_recorded_as_skipped(tmp_path):
    """flex has no CPU backward: its train row is kept with the reason and no time; its infer row is measured."""
    assert benchmark.main([*TINY, "--systems", "qds", "--impls", "flex",
                           "--output_dir", str(tmp_path)]) == 0
    rows = {r["pass"]: r for r in csv.DictReader((tmp_path / "efficiency_cpu.csv").open())}
    assert rows["train"]["ms"] == "" and "backward" in rows["train"]["skipped"]
    assert float(rows["infer"]["ms"]) > 0 and rows["infer"]["skipped"] == ""
    assert rows["infer"]["ratio_to_dense"] == ""  # no dense row in this run


def test_the_options_constants_are_qds_inputs():
    """The benchmark names the layouts and the first ordinary id without importing qds.inputs (which loads torch)."""
    assert benchmark.LAYOUTS == LAYOUTS and benchmark.FIRST_ORDINARY_ID == FIRST_ORDINARY_ID
