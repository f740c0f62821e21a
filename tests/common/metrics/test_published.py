"""Published Anserini regression values (PUBLISHED_REFERENCE_VALUES.tsv), through the command line's options."""

from __future__ import annotations

import csv
import shlex
from pathlib import Path

from common.data.formats import read_qrels, read_run
from common.evaluate import build_parser
from common.metrics import evaluate
from tests.conftest import SHARED_DATA


def published_rows(data: Path) -> list[dict[str, str]]:
    with open(data / "PUBLISHED_REFERENCE_VALUES.tsv", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def pytest_generate_tests(metafunc):
    if "published" in metafunc.fixturenames:
        data = SHARED_DATA  # what the shared_data fixture serves; parametrising needs it at collection
        rows = published_rows(data) if data.is_dir() else []
        ids = [f"{Path(r['run']).name}|{r['eval_options']}" for r in rows]
        metafunc.parametrize("published", rows, ids=ids)


def test_published_value(shared_data, published):
    args = build_parser().parse_args([*shlex.split(published["eval_options"]), published["qrels"], published["run"]])
    name = published["measure"].split()[0]  # "map (AP@1000)" -> map
    results = evaluate(
        read_qrels(shared_data / args.qrels),
        read_run(shared_data / args.run),
        args.measures,
        relevance_level=args.relevance_level,
        complete=args.complete,
        depth=args.depth,
    )
    printed = results[name].format(results[name].summary)
    assert printed == published["published_value"] == published["value_from_our_trec_eval_9.0.8_and_10.0"]


def test_all_published_rows_are_covered(shared_data):
    assert len(published_rows(shared_data)) == 12
