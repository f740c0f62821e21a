"""Checkpoints written before the packages were rebuilt on one `common` still load in ``evaluate`` and
score as they did: each fixture in ``tests/fixtures/checkpoints`` was written, and evaluated, by commit c474d3c
(how: ``tests/fixtures/checkpoints/README.md``); today's ``evaluate`` must give the same metrics and scores."""

import gzip
import json
from pathlib import Path

import pytest

from common.data.formats import read_run

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints"

#: fixture -> (evaluate command's module, its arguments after --checkpoint, the runs it writes)
CASES = {
    "qds": ("qds.evaluate", ["--candidates", "builtin:test", "--depth", "10", "--devices", "1"], ["run.trec"]),
    "conformer_kernel": ("conformer_kernel.evaluate",
                         ["--task", "builtin:test", "--modes", "rerank", "fullrank", "--depth", "10",
                          "--test_queries", "10", "--devices", "1"], ["run.rerank.trec", "run.fullrank.trec"]),
    "earl": ("earl.evaluate", ["--task", "builtin:test", "--depth", "10", "--test_queries", "10", "--device", "cpu"],
             ["run.trec"]),
    **{name: ("mva.evaluate", ["--task", "builtin:test", "--depth", "10", "--test_queries", "10", "--device", "cpu"],
              ["run.trec"]) for name in ("mva", "mva-de", "mva-ca")},
}  # fmt: skip


def expected_run(name: str, run: str, tmp_path: Path) -> dict:
    path = FIXTURES / "expected" / name / run
    if not path.exists():  # qds's 10,000 lines are kept gzipped
        plain = tmp_path / run
        plain.write_bytes(gzip.decompress((path.parent / f"{run}.gz").read_bytes()))
        path = plain
    return read_run(path)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_checkpoint_of_the_old_layout_evaluates_as_it_did(name, tmp_path):
    """On two threads, as the expected files were written: the tiny DE scores two of its top ten documents within
    4e-6 of each other, and one thread's sums (pytest-xdist's workers run on one) break that tie the other way."""
    import importlib

    import torch

    torch.set_num_threads(2)  # the conftest's autouse fixture restores the count after the test
    module, args, runs = CASES[name]
    out = tmp_path / "eval"
    importlib.import_module(module).main(["--checkpoint", str(FIXTURES / f"{name}.ckpt"), *args,
                                          "--output_dir", str(out)])
    metrics = json.loads((out / "metrics.json").read_text())
    expected = json.loads((FIXTURES / "expected" / name / "metrics.json").read_text())
    assert metrics.keys() == expected.keys()
    for system, values in expected.items():
        assert metrics[system] == pytest.approx(values, abs=1e-6), system
    for run in runs:
        got, want = read_run(out / run), expected_run(name, run, tmp_path)
        assert got.keys() == want.keys()
        for qid, scores in want.items():
            assert got[qid] == pytest.approx(scores, abs=1e-5), (run, qid)
