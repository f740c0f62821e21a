"""Whole trec_eval 9.0.8 outputs, per query and summary, reproduced line for line.

Our output must equal trec_eval's with its two non-numeric measures (``runid``,
``relstring``) removed: same measures, same queries, same order, same
padding and digits. Sources: trec_eval's quicktest expectations at tag
v9.0.8 and the ``-q -m all_trec [-l2]`` outputs generated for every qrels/run
pair in shared/data (see shared/data/SOURCES.md).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from common.data.formats import read_qrels, read_run
from common.evaluate import format_results
from common.metrics import evaluate
from tests.conftest import SHARED_DATA

NON_NUMERIC = re.compile(r"^(runid|relstring(_\d+)?)\s")
DL_QRELS = {"dl19": "trec_dl/qrels/qrels.dl19-passage.txt", "dl20": "trec_dl/qrels/qrels.dl20-passage.txt"}


def numeric_lines(path: Path) -> str:
    return "".join(line for line in path.read_text().splitlines(keepends=True) if not NON_NUMERIC.match(line))


@functools.cache
def load(qrels: Path, run: Path):
    return read_qrels(qrels), read_run(run)


def our_output(qrels: Path, run: Path, measures, per_query: bool, **options) -> str:
    return format_results(evaluate(*load(qrels, run), measures, **options), per_query)


QUICKTEST = [
    # (expected file, qrels, run, measures, per-query, options): the Makefile's quicktest commands.
    ("out.test", "qrels.test", "results.test", ["official"], False, {}),
    ("out.test.a", "qrels.test", "results.test", ["all_trec"], False, {}),
    ("out.test.aq", "qrels.test", "results.test", ["all_trec"], True, {}),
    ("out.test.aqc", "qrels.test", "results.trunc", ["all_trec"], True, {"complete": True}),
    ("out.test.aqcM", "qrels.test", "results.trunc", ["all_trec"], True, {"complete": True, "depth": 100}),
    ("out.test.aql", "qrels.rel_level", "results.test", ["all_trec"], True, {"relevance_level": 2}),
]


@pytest.mark.parametrize(("expected", "qrels", "run", "measures", "per_query", "options"), QUICKTEST)
def test_trec_eval_quicktest_outputs(shared_data, expected, qrels, run, measures, per_query, options):
    inputs = shared_data / "trec_eval_test" / "inputs"
    ours = our_output(inputs / qrels, inputs / run, measures, per_query, **options)
    assert ours == numeric_lines(shared_data / "trec_eval_test" / "expected_v9.0.8" / expected)


def test_measure_parameters_as_in_trec_eval_quicktest(shared_data):
    """out.test.meas_params, except the parameters we do not take: utility's coefficients,
    11pt_avg's recall levels, ndcg's gain map and the fractional cutoff ndcg_cut.23.4."""
    inputs = shared_data / "trec_eval_test" / "inputs"
    measures = [
        "iprec_at_recall..10,.20,.25,.75,.50", "P.5,7,3", "recall.20,2000", "Rprec_mult.5.0,0.2,0.35",
        "ndcg_cut.10,20", "success.2,5,20",
    ]
    ours = our_output(inputs / "qrels.test", inputs / "results.test", measures, True)
    expected = numeric_lines(shared_data / "trec_eval_test" / "expected_v9.0.8" / "out.test.meas_params")
    unsupported = re.compile(r"^(utility_|11pt_avg_|ndcg_1=|ndcg_cut_23)")
    assert ours == "".join(line for line in expected.splitlines(keepends=True) if not unsupported.match(line))


def test_complete_flag_in_9_0_8_scores_the_missing_query_only_in_the_summary(shared_data):
    """results.trunc lacks topic 302: without -c 9.0.8 averages 2 topics, with -c all 3."""
    inputs = shared_data / "trec_eval_test" / "inputs"
    qrels, run = inputs / "qrels.test", inputs / "results.trunc"
    partial = evaluate(*load(qrels, run), ["map", "num_q", "num_rel"])
    complete = evaluate(*load(qrels, run), ["map", "num_q", "num_rel"], complete=True)
    assert (partial["map"].format(partial["map"].summary), partial["num_q"].summary) == ("0.1523", 2)
    assert (complete["map"].format(complete["map"].summary), complete["num_q"].summary) == ("0.1016", 3)
    assert complete["num_rel"].summary == 561  # 302's relevant documents count too
    assert list(complete["map"].values) == ["301", "303"] and complete["map"].missing == {"302": 0.0}


def generated_cases(data: Path) -> list[tuple[str, str, str, int]]:
    """(output file, qrels, run, relevance level) for every generated 9.0.8 ``-q`` output."""
    cases = []
    for path in sorted(data.glob("trec_eval_test/generated_trec_eval_v9.0.8/*.all_trec.q*.txt")):
        qrels, run = path.name.split(".all_trec")[0].split("__")
        cases.append((str(path.relative_to(data)), f"trec_eval_test/inputs/{qrels}", f"trec_eval_test/inputs/{run}"))
    for path in sorted(data.glob("trec_dl/generated_trec_eval_v9.0.8/*.all_trec.q*.txt")):
        run = path.name.split(".all_trec")[0] + ".txt"
        folder = "trec_dl/runs/rank_llm_data_top100" if "_top100" in run else "trec_dl/runs"
        cases.append((str(path.relative_to(data)), DL_QRELS[re.search(r"dl(19|20)", run)[0]], f"{folder}/{run}"))
    return [(out, qrels, run, 2 if out.endswith(".l2.txt") else 1) for out, qrels, run in cases]


def pytest_generate_tests(metafunc):
    if "generated" in metafunc.fixturenames:
        data = SHARED_DATA  # what the shared_data fixture serves; parametrising needs it at collection
        cases = generated_cases(data) if data.is_dir() else []
        metafunc.parametrize("generated", cases, ids=[Path(case[0]).name for case in cases])


def test_generated_per_query_outputs(shared_data, generated):
    output, qrels, run, level = generated
    ours = our_output(shared_data / qrels, shared_data / run, ["all_trec"], True, relevance_level=level)
    assert ours == numeric_lines(shared_data / output)


def test_every_generated_output_is_covered(shared_data):
    """All 9.0.8 -q outputs in shared/data are parametrised (6 trec_eval_test + 26 trec_dl)."""
    assert len(generated_cases(shared_data)) == 32
