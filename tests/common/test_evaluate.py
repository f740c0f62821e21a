"""``python -m common.evaluate``: options, output format, and clean failures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from common.evaluate import main
from common.metrics import DEFAULT_MEASURES

REPO = Path(__file__).resolve().parents[2]
QRELS = "trec_dl/qrels/qrels.dl19-passage.txt"
RUN = "trec_dl/runs/rank_llm_data_top100/BM25.trec_results_dl19_top100.txt"


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "common.evaluate", *map(str, args)], capture_output=True, text=True, env=env, timeout=60
    )


def run_main(capsys, *args) -> tuple[int, str, str]:
    """`main`'s exit status (returned, or raised as SystemExit by a refusal), stdout and stderr."""
    try:
        code = main([str(a) for a in args])
    except SystemExit as exit_info:
        code = exit_info.code
    out, err = capsys.readouterr()
    return code, out, err


def summary(out: str) -> dict[str, str]:
    return {name.strip(): value for name, qid, value in (line.split("\t") for line in out.splitlines()) if qid == "all"}


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_default_measures_as_a_module(shared_data):
    """TREC DL 2019 passage, BM25 (Anserini regression): nDCG@10 0.5058, R@100 0.4910 with -c -l 2."""
    done = cli(shared_data / QRELS, shared_data / RUN, "-c", "-l", "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "ndcg_cut_10           \tall\t0.5058"
    values = summary(done.stdout)
    assert list(values) == list(DEFAULT_MEASURES)
    assert (values["ndcg_cut_10"], values["recall_100"], values["mrr@10"]) == ("0.5058", "0.4910", "0.7024")


def test_trec_eval_option_syntax(shared_data, capsys):
    code, out, _ = run_main(
        capsys, "-l2", "-M10", "-mndcg_cut.10", "-m", "recall.100,1000", "-m", "num_rel_ret", shared_data / QRELS,
        shared_data / RUN,
    )
    assert code == 0
    # -M10 leaves 10 documents per query: recall_100 = recall_1000 = recall at 10; 43 queries x 10 retrieved
    values = summary(out)
    assert list(values) == ["ndcg_cut_10", "recall_100", "recall_1000", "num_rel_ret"]
    assert values["ndcg_cut_10"] == "0.5058" and values["recall_100"] == values["recall_1000"]


def test_per_query_lines_then_summary(capsys, tmp_path):
    qrels = write(tmp_path / "qrels", "1 0 a 2\n1 0 b 0\n2 0 c 1\n")
    run = write(tmp_path / "run", "1 Q0 b 1 2.0 t\n1 Q0 a 2 1.0 t\n2 Q0 c 1 5.0 t\n")
    code, out, _ = run_main(capsys, "-q", "-m", "recip_rank", "-m", "num_ret", "-m", "gdeval_err@5", qrels, run)
    assert code == 0
    assert out.splitlines() == [
        "recip_rank            \t1\t0.5000",
        "num_ret               \t1\t2",
        "gdeval_err@5          \t1\t0.09375",  # b (0) first, a (2) second: (2^2 - 1)/16 / 2
        "recip_rank            \t2\t1.0000",
        "num_ret               \t2\t1",
        "gdeval_err@5          \t2\t0.06250",
        "recip_rank            \tall\t0.7500",
        "num_ret               \tall\t3",
        "gdeval_err@5          \tall\t0.07812",  # 0.078125 exactly: printf rounds the tie to even
    ]


def test_help_explains_every_option():
    done = cli("--help")
    assert done.returncode == 0
    for text in ("-m MEASURE", "-q", "-l LEVEL", "-c", "-M DEPTH", "mrr@K", "gdeval_ndcg@K", "gdeval_err@K", "ncg@K",
                 "ndcg_cut.10,20", " ".join(DEFAULT_MEASURES), "4 decimals", "Exit status 2"):
        assert text in done.stdout


def test_malformed_qrels_line_names_file_and_line(tmp_path):
    qrels = write(tmp_path / "qrels", "1 0 a 1\n1 0 b\n")
    run = write(tmp_path / "run", "1 Q0 a 1 1.0 t\n")
    done = cli(qrels, run)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"{qrels}:2: expected 4 fields" in done.stderr


def test_malformed_run_line_names_file_and_line(tmp_path, capsys):
    qrels = write(tmp_path / "qrels", "1 0 a 1\n")
    run = write(tmp_path / "run", "1 Q0 a 1 1.0 t\n1 Q0 b 2 high t\n")
    code, out, err = run_main(capsys, qrels, run)
    assert (code, out) == (2, "")
    assert err == f"error: {run}:2: score 'high' is not a number\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-m", "nope"], "argument -m/--measure: unknown measure 'nope'"),
        (["-M", "0"], "argument -M/--depth: must be a positive integer, got 0"),
        (["-l", "two"], "invalid int value"),
    ],
)
def test_usage_errors_exit_2(tmp_path, capsys, args, message):
    qrels = write(tmp_path / "qrels", "1 0 a 1\n")
    run = write(tmp_path / "run", "1 Q0 a 1 1.0 t\n")
    with pytest.raises(SystemExit) as exit_info:
        main([*args, str(qrels), str(run)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1 and message in err


@pytest.mark.parametrize(
    ("qrels_text", "run_text", "message"),
    [
        (None, "1 Q0 a 1 1.0 t\n", "argument qrels: no such file: {qrels}"),
        ("1 0 a 1\n", "2 Q0 a 1 1.0 t\n", "run {run}, qrels {qrels}: no query has both results and relevance"),
        ("1 0 a 1\n", "", "run {run}, qrels {qrels}: no query has both results and relevance judgments"),
        ("q1 0 a 1\n", "q1 Q0 a 1 1.0 t\n", "run {run}, qrels {qrels}: gdeval measures need numeric topic ids"),
    ],
)
def test_input_errors_exit_2_with_one_line(tmp_path, capsys, qrels_text, run_text, message):
    qrels = tmp_path / "qrels"
    if qrels_text is not None:
        write(qrels, qrels_text)
    run = write(tmp_path / "run", run_text)
    code, out, err = run_main(capsys, "-m", "map", "-m", "gdeval_ndcg@10", qrels, run)
    assert (code, out) == (2, "")
    assert err.startswith("error: ") and message.format(qrels=qrels, run=run) in err and err.count("\n") == 1


def test_no_arguments_evaluates_builtin_bm25_test_run(tmp_path, monkeypatch, capsys):
    """The README's quick-start line: BM25 top-100 on the built-in collection's test queries."""
    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path))
    assert main([]) == 0
    captured = capsys.readouterr()
    assert str(tmp_path / "builtin" / "seed0-v1" / "bm25.test.trec") in captured.err
    lines = dict(line.split("\t")[0::2] for line in captured.out.splitlines())
    # python -m common.data.builtin reports BM25 nDCG@10 0.2341, MRR@10 0.2663 on the test split.
    assert lines["ndcg_cut_10           "] == "0.2341" and lines["mrr@10                "] == "0.2663"
    assert lines["recall_100            "] == "1.0000"


def test_only_one_of_qrels_and_run_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([str(write(tmp_path / "qrels.txt", "1 0 a 1\n"))])
    assert exit_info.value.code == 2 and "give both QRELS and RUN, or neither" in capsys.readouterr().err
