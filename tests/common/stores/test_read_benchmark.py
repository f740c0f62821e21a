"""``python -m common.stores.read_benchmark``: one row per store, its size counted by hand (fp32: 4·width bytes a row;
int8: width + 4), the median query's cold and warm reads timed over seeded draws (the shards they fall in counted
here from `draw_candidates`), written as CSV and JSONL; a query drawing more candidates than a
store holds is refused in one line. No timing is asserted."""

import csv
import json

import numpy as np
import pytest

from common.benchmarks.store_reads import draw_candidates
from common.stores import read_benchmark
from common.stores.representations import StoreWriter

DOCUMENTS, ROWS, WIDTH, SHARD_SIZE = 300, 5, 16, 50


def build(folder, dtype: str):
    writer = StoreWriter(folder, doc_ids=[f"p{i}" for i in range(DOCUMENTS)], width=WIDTH, dtype=dtype,
                         shard_size=SHARD_SIZE, identity={"checkpoint": "noise", "strategy": "toy"})
    rng = np.random.default_rng(0)
    for shard in writer.pending():
        writer.write_shard(shard, [rng.standard_normal((ROWS, WIDTH)) for _ in writer.shard_doc_ids(shard)])
    return writer.finish()


def test_each_store_gets_a_row_of_its_size_and_read_times(tmp_path, capsys):
    stores = [str(build(tmp_path / dtype, dtype).folder) for dtype in ("float32", "int8")]
    out = tmp_path / "out"
    assert read_benchmark.main([*stores, "--candidates", "20", "--batch_size", "8", "--repeats", "3",
                                "--seed", "4", "--output_dir", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "store_reads.jsonl").read_text().splitlines()]
    with open(out / "store_reads.csv", newline="") as f:
        assert [r["dtype"] for r in csv.DictReader(f)] == ["float32", "int8"]
    fp32, int8 = rows
    assert (fp32["dtype"], fp32["bytes_per_document"], int8["bytes_per_document"]) == (
        "float32", ROWS * WIDTH * 4, ROWS * (WIDTH + 4))  # 320 and 100 bytes
    shards = sorted(len(np.unique(draw_candidates(DOCUMENTS, 20, 4, repeat) // SHARD_SIZE)) for repeat in range(3))
    for row, folder in zip(rows, stores):
        assert (row["store"], row["documents"], row["width"], row["rows_per_document"]) == (folder, DOCUMENTS, WIDTH,
                                                                                            ROWS)
        assert (row["candidates"], row["batch_size"], row["repeats"], row["candidate_shards"]) == (20, 8, 3, shards[1])
        assert row["read_ms"] > 0 and row["warm_read_ms"] > 0
        assert row["store_cached"] is None or 0 <= row["store_cached"] <= 1
    assert "int8" in capsys.readouterr().out  # the printed table


def test_more_candidates_than_a_store_holds_are_refused(tmp_path, capsys):
    folder = build(tmp_path / "store", "int8").folder
    with pytest.raises(SystemExit) as refused:
        read_benchmark.main([str(folder), "--candidates", "301", "--output_dir", str(tmp_path / "out")])
    assert refused.value.code == 2
    assert capsys.readouterr().err == (f"error: argument --candidates: {folder} holds 300 documents, fewer than the "
                                       "301 a query draws\n")
    assert not (tmp_path / "out" / "store_reads.csv").exists()
