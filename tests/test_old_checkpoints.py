"""Checkpoints written before the packages were rebuilt on one `common` still load in ``evaluate`` and
score as they did: each fixture in ``tests/fixtures/checkpoints`` was written, and evaluated, by commit c474d3c
(how: ``tests/fixtures/checkpoints/README.md``); today's ``evaluate`` must give the same scores, and the same metrics
where the scores decide them.

The tiny models score many candidates within a few millionths of each other (the DE's top ten often share a score
to float32's last bit), and the order of such near-ties is the CPU's rounding: one CPU's sums put D1616 above
D1157, another's below, and MRR@10 moves by 0.05. So every score is compared within `TOLERANCE`, which fixes
every order but those of near-ties; a run's metrics are compared only where its re-ranked documents are clearly
separated (no two of a query's top `DEPTH` within twice the tolerance: then no rounding can reorder them), and
BM25's always (its scores are the candidates')."""

import gzip
import json
from pathlib import Path

import pytest

from common.data.formats import read_run

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints"

#: fixture -> (evaluate command's module, its arguments after --checkpoint, the runs it writes)
CASES = {
    "qds": ("qds.evaluate", ["--task", "builtin:test", "--depth", "10", "--devices", "1"], ["run.trec"]),
    "conformer_kernel": ("conformer_kernel.evaluate",
                         ["--task", "builtin:test", "--modes", "rerank", "fullrank", "--depth", "10",
                          "--test_queries", "10", "--devices", "1"], ["run.rerank.trec", "run.fullrank.trec"]),
    "earl": ("earl.evaluate", ["--task", "builtin:test", "--depth", "10", "--test_queries", "10", "--accelerator", "cpu"],
             ["run.trec"]),
    **{name: ("mva.evaluate", ["--task", "builtin:test", "--depth", "10", "--test_queries", "10", "--accelerator", "cpu"],
              ["run.trec"]) for name in ("mva", "mva-de", "mva-ca")},
}  # fmt: skip
#: Every case re-ranks (or full-ranks) this many documents per query.
DEPTH = 10
#: How far a score may move between CPUs (float32 sums in another order).
TOLERANCE = 1e-5


def expected_run(name: str, run: str, tmp_path: Path) -> dict:
    path = FIXTURES / "expected" / name / run
    if not path.exists():  # qds's 10,000 lines are kept gzipped
        plain = tmp_path / run
        plain.write_bytes(gzip.decompress((path.parent / f"{run}.gz").read_bytes()))
        path = plain
    return read_run(path)


def clearly_separated(run: dict) -> bool:
    """Whether no two of a query's top `DEPTH` documents (and the next) lie within twice `TOLERANCE` of each other."""
    for scores in run.values():
        top = sorted(scores.values(), reverse=True)[: DEPTH + 1]
        if any(a - b <= 2 * TOLERANCE for a, b in zip(top, top[1:])):
            return False
    return True


def run_of(system: str, runs: list[str]) -> str:
    """The run file of `system` in metrics.json: ``run.<mode>.trec`` for a mode's (``ndrm3-rerank``), else the one."""
    mode = system.rsplit("-", 1)[-1]
    return f"run.{mode}.trec" if f"run.{mode}.trec" in runs else runs[0]


def test_near_ties_are_told_apart_from_separated_scores():
    assert clearly_separated({"q": {"a": 3.0, "b": 2.0, "c": 1.0}})
    assert not clearly_separated({"q": {"a": 3.0, "b": 3.0 - 1.5 * TOLERANCE, "c": 1.0}})
    assert clearly_separated({"q": {f"d{i}": float(-i) for i in range(DEPTH + 1)} | {"tie": -DEPTH - 1e-9}})


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_checkpoint_of_the_old_layout_evaluates_as_it_did(name, tmp_path):
    import importlib

    module, args, runs = CASES[name]
    out = tmp_path / "eval"
    importlib.import_module(module).main(["--checkpoint", str(FIXTURES / f"{name}.ckpt"), *args,
                                          "--output_dir", str(out)])
    wanted = {run: expected_run(name, run, tmp_path) for run in runs}
    for run, want in wanted.items():
        got = read_run(out / run)
        assert got.keys() == want.keys()
        for qid, scores in want.items():
            assert got[qid] == pytest.approx(scores, abs=TOLERANCE), (run, qid)
    metrics = json.loads((out / "metrics.json").read_text())
    expected = json.loads((FIXTURES / "expected" / name / "metrics.json").read_text())
    assert metrics.keys() == expected.keys()
    compared = [s for s in expected if s == "bm25" or clearly_separated(wanted[run_of(s, runs)])]
    assert "bm25" in compared
    for system in compared:
        assert metrics[system] == pytest.approx(expected[system], abs=1e-6), system
