"""Every KEY_METRICS.tsv value of trec_eval 9.0.8, gdeval.pl 1.3 and the NCG@100 helper, one test per row.

A row's options column is parsed with the command line's own parser
(``-c``, ``-l 2``, ``-M 10``, ``-m ...``); gdeval rows (``-k K``) ask for
``gdeval_ndcg@K`` / ``gdeval_err@K``; the helper's NCG@100 for ``ncg@100``.
The value we print must equal the row's. Each (qrels, run, options) is
evaluated once.
"""

from __future__ import annotations

import csv
import functools
import shlex
from pathlib import Path

from common.data.formats import read_qrels, read_run
from common.evaluate import build_parser
from common.metrics import MeasureResult, evaluate
from tests.conftest import SHARED_DATA

TOOLS = {("trec_eval", "9.0.8"), ("gdeval.pl", "1.3"), ("helper-python", "-")}


def key_metric_rows(data: Path) -> list[dict[str, str]]:
    with open(data / "KEY_METRICS.tsv", newline="") as f:
        return [row for row in csv.DictReader(f, delimiter="\t") if (row["tool"], row["version"]) in TOOLS]


def pytest_generate_tests(metafunc):
    if "row" in metafunc.fixturenames:
        data = SHARED_DATA  # what the shared_data fixture serves; parametrising needs it at collection
        rows = key_metric_rows(data) if data.is_dir() else []
        ids = [f"{Path(r['qrels']).name}|{Path(r['run']).name}|{r['options'][:40]}|{r['measure']}" for r in rows]
        metafunc.parametrize("row", rows, ids=ids)


@functools.cache
def inputs(data: Path, qrels: str, run: str):
    return read_qrels(data / qrels), read_run(data / run)


@functools.cache
def results(data: Path, qrels: str, run: str, tool: str, options: str) -> dict[str, MeasureResult]:
    judged, ranked = inputs(data, qrels, run)
    if tool == "gdeval.pl":
        k = int(shlex.split(options)[1])
        return evaluate(judged, ranked, [f"gdeval_ndcg@{k}", f"gdeval_err@{k}"])
    if tool == "helper-python":
        return evaluate(judged, ranked, ["ncg@100"])
    args = build_parser().parse_args([*shlex.split(options), qrels, run])
    return evaluate(
        judged, ranked, args.measures, relevance_level=args.relevance_level, complete=args.complete, depth=args.depth
    )


def our_name(row: dict[str, str]) -> str:
    if row["tool"] == "gdeval.pl":
        return f"gdeval_{row['measure']}"  # ndcg@10 -> gdeval_ndcg@10
    return {"recip_rank(MRR@10)": "recip_rank", "NCG@100": "ncg@100"}.get(row["measure"], row["measure"])


def test_key_metric(shared_data, row):
    result = results(shared_data, row["qrels"], row["run"], row["tool"], row["options"])[our_name(row)]
    assert result.format(result.summary) == row["value"]


def test_mrr_at_10_is_recip_rank_at_depth_10(shared_data):
    """``mrr@10`` without -M equals every ``trec_eval -M 10 -m recip_rank [-l 2]`` row."""
    rows = [row for row in key_metric_rows(shared_data) if row["measure"] == "recip_rank(MRR@10)"]
    assert len(rows) == 32  # 17 without -l, 15 with -l 2
    for row in rows:
        level = 2 if "-l 2" in row["options"] else 1
        result = evaluate(*inputs(shared_data, row["qrels"], row["run"]), ["mrr@10"], relevance_level=level)["mrr@10"]
        assert result.format(result.summary) == row["value"], row


def test_rows_cover_every_pair_and_tool(shared_data):
    """Guards the parametrisation: all 17 qrels/run pairs, all three tools, all 723 rows."""
    rows = key_metric_rows(shared_data)
    assert len(rows) == 723
    assert len({(row["qrels"], row["run"]) for row in rows}) == 17
    assert {row["tool"] for row in rows} == {tool for tool, _ in TOOLS}
