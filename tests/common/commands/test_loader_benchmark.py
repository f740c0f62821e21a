"""``python -m common.commands.loader_benchmark`` on a tiny setting: EARL's training and index loaders, in the main
process and with one worker, two batches timed after the first. The examples it counts are held against what the
settings make (a training batch: 16 groups of a positive and a negative; an index shard: its documents), and its
files against the harness's conventions. No timing is asserted."""

import csv
import json

import pytest

from common.commands import loader_benchmark
from tests.benchmark_runs import assert_refuses_to_overwrite, run_main

pytestmark = pytest.mark.usefixtures("one_thread")

CLI = ["--loaders", "earl.train", "earl.index", "--workers", "0", "1", "--batches", "2", "--repeats", "1",
       "--shard_size", "50", "--threads", "1"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("loaders")
    code, stdout = run_main(loader_benchmark.main, [*CLI, "--json", "--output_dir", str(out)])
    return code, out, stdout


def test_the_rows_count_what_the_loaders_make(run):
    code, out, stdout = run
    assert code == 0
    rows = [json.loads(line) for line in (out / "loaders.jsonl").read_text().splitlines()]
    assert [(r["impl"], r["workers"]) for r in rows] == [("earl.train", 0), ("earl.train", 1), ("earl.index", 0),
                                                         ("earl.index", 1)]
    for row in rows:
        assert row["skipped"] is None and row["batches"] == 2
        assert row["examples_per_s"] > 0 and row["startup_s"] > 0 and row["ms_min"] <= row["ms"] <= row["ms_max"]
    train = [r for r in rows if r["impl"] == "earl.train"]
    # earl's embedded default: 16 groups a batch, a positive and one negative each, passages cut to 128 tokens
    assert all((r["examples"], r["batch_size"], r["n"], r["pass"]) == (2 * 16 * 2, 16, 128, "train") for r in train)
    index = [r for r in rows if r["impl"] == "earl.index"]
    # two shards of 50 documents after the first; earl.index's default batch of 128 documents a forward pass
    assert all((r["examples"], r["batch_size"], r["n"], r["pass"]) == (100, 128, 128, "infer") for r in index)
    # ms: what one model step consumes, from the same clock as the rate
    for r in train:
        assert r["ms"] == pytest.approx(1000 * 32 / r["examples_per_s"], rel=1e-3)
    for r in index:
        assert r["ms"] == pytest.approx(1000 * 128 / r["examples_per_s"], rel=1e-3)
    # --json: the rows on stdout, each with the keys every benchmark prints
    printed = [json.loads(line) for line in stdout.splitlines()]
    assert printed == rows
    assert all({"bench", "impl", "n", "pass", "ms", "peak_mb"} <= set(r) and r["bench"] == "loaders" for r in rows)


def test_the_files_are_the_harness_ones(run):
    _, out, _ = run
    assert sorted(p.name for p in out.iterdir()) == ["loaders.csv", "loaders.jsonl", "loaders.png"]
    with open(out / "loaders.csv", newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == loader_benchmark.FIELDS and len(list(reader)) == 4


def test_earlier_results_are_kept_without_overwrite(run):
    _, out, _ = run
    assert_refuses_to_overwrite(loader_benchmark.main, [*CLI, "--output_dir", str(out)], out)


def test_a_loader_that_is_not_one_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        loader_benchmark.main(["--loaders", "qds.index"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("error: argument --loaders: invalid choice: 'qds.index'") and error.count("\n") == 1
