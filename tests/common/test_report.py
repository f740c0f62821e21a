"""common.report: load_reported, compare (incl. percent scale and relevance levels), to_markdown, the datasets of tasks
(paper_dataset, task.json) and the CLI, with its notes when the metrics and the reported rows are on different datasets
or at different relevance levels."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from common import report
from common.report import (ReportError, compare, load_reported, main, paper_dataset, read_task_info, task_label,
                           to_markdown, write_task_info)

REPO = Path(__file__).resolve().parents[2]


def test_load_reported_filters():
    all_rows = load_reported()
    assert set(all_rows["paper"]) == {"qds", "conformer_kernel", "earl", "mva"}
    assert all_rows["value"].dtype == float
    t2 = load_reported("qds", table=2)
    assert set(t2["table"]) == {"2"} and len(t2) == 42
    assert len(load_reported("qds", table="2")) == 42 and len(load_reported("conformer_kernel")) == 40
    # table 3 selects EARL's sub-tables 3a and 3b; an exact sub-table works too
    assert set(load_reported("earl", table=3)["table"]) == {"3a", "3b"}
    assert set(load_reported("earl", table="3b")["table"]) == {"3b"}
    sel = load_reported("qds", table=[2, 4], method="QDS-Transformer", metric=["ndcg_cut_10"])
    assert list(sel["value"]) == [0.667, 0.667]


def test_load_reported_errors(tmp_path, monkeypatch):
    with pytest.raises(ReportError, match="unknown paper 'nope'"):
        load_reported("nope")
    with pytest.raises(ReportError, match="unknown paper 'ck'"):  # ids only, no aliases
        load_reported("ck")
    with pytest.raises(FileNotFoundError, match="reported results not found"):
        load_reported(root=tmp_path / "absent")
    (tmp_path / "qds.csv").write_text(",".join(report.COLUMNS) + "\nqds,2,d,test,s,BM25,map,0.3,percent,\n")
    with pytest.raises(ReportError, match="qds.csv: scale 'percent' is none of 0-1, 0-100, raw"):
        load_reported("qds", root=tmp_path)
    monkeypatch.setenv(report.ENV_VAR, str(tmp_path / "absent"))
    with pytest.raises(FileNotFoundError, match=report.ENV_VAR):
        load_reported()


def test_default_location_is_repo_root():
    assert report.reported_dir() == REPO / "results" / "reported"


def test_compare_fraction_scale():
    metrics = {"qds": {"ndcg_cut_10": 0.61, "map": 0.2, "recall_100": 0.5},
               "bm25": {"ndcg_cut_10": 0.5}, "unmatched": {"map": 0.1}}
    df = compare(metrics, "qds", tables=2, dataset="trec-dl-2019-doc", method_map={"qds": "QDS-Transformer"})
    got = {(r.method, r.metric): (r.reported, r.reproduced, r.diff, r.scale) for r in df.itertuples()}
    assert got == {
        ("QDS-Transformer", "ndcg_cut_10"): (0.667, 0.61, pytest.approx(-0.057), "0-1"),
        ("QDS-Transformer", "map"): (0.278, 0.2, pytest.approx(-0.078), "0-1"),
    }
    assert set(df["run"]) == {"qds"}  # "bm25" is no method's exact name: only a map matches it
    mapped = compare(metrics, "qds", tables="2", dataset="trec-dl-2019-doc", method_map={"bm25": "BM25"})
    assert [(r.run, r.method, r.metric, r.reported, r.reproduced) for r in mapped.itertuples()] == [
        ("bm25", "BM25", "ndcg_cut_10", 0.488, 0.5)]
    named = compare({"BM25": {"ndcg_cut_10": 0.5}}, "qds", tables=2, dataset="trec-dl-2019-doc")
    assert list(named["method"]) == ["BM25"]  # a run of a method's exact name
    # MVA¹, MVA² and MVA³ are three methods: a run "mva" is none of them without a map
    assert compare({"mva": {"mrr@10": 0.3}}, "mva", tables=5).empty
    assert list(df.columns) == ["paper", "table", "dataset", "split", "setting", "method", "metric",
                                "run", "reported", "reproduced", "diff", "scale", "reported_level", "reproduced_level",
                                "note"]


def test_compare_percent_scale():
    # MVA prints MRR@10 x 100; reproduced metrics are 0-1.
    metrics = {"mva2": {"mrr@10": 0.3512}, "de": {"mrr@10": 0.296, "storage_floats_per_doc": 768}}
    df = compare(metrics, "mva", tables=5, method_map={"mva2": "MVA²", "de": "DE (Ours)"})
    got = {(r.run, r.metric): (r.reported, r.reproduced, r.diff, r.scale) for r in df.itertuples()}
    assert got == {
        ("mva2", "mrr@10"): (34.7, 35.12, 0.42, "0-100"),
        ("de", "mrr@10"): (29.6, 29.6, 0.0, "0-100"),  # exactly 0, no float noise
        ("de", "storage_floats_per_doc"): (768.0, 768.0, 0.0, "raw"),  # not scaled
    }


def test_compare_include_missing_metric_map_and_path(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps({"ndrm1": {"ndcg@10": 0.62}}))
    df = compare(path, "conformer_kernel", method_map={"ndrm1": "NDRM1"},
                 metric_map={"ndcg@10": "ndcg_cut_10"}, include_missing=True)
    assert len(df) == 8  # NDRM1 x {fullrank, rerank} x 4 metrics
    have = df.dropna(subset=["reproduced"])
    assert sorted(have["setting"]) == ["fullrank", "rerank"]
    assert dict(zip(have["setting"], have["diff"])) == {"fullrank": pytest.approx(0.0209), "rerank": pytest.approx(0.0039)}


def test_compare_bad_inputs():
    with pytest.raises(ReportError, match="is not a number"):
        compare({"qds": {"map": "high"}}, "qds")
    with pytest.raises(ReportError, match="expected"):
        compare({"qds": 0.5}, "qds")
    with pytest.raises(ReportError, match="no reported rows for paper qds table 5"):
        compare({"qds": {"map": 0.5}}, "qds", tables=5)
    with pytest.raises(ReportError, match="unknown paper"):
        compare({"qds": {"map": 0.5}}, "bert")


@pytest.mark.parametrize(
    "paper, task, dataset",
    [
        ("qds", "irds:msmarco-document/trec-dl-2019/judged", "trec-dl-2019-doc"),
        ("qds", "irds:msmarco-document/trec-dl-2019", "trec-dl-2019-doc"),
        ("qds", "irds:msmarco-document/dev", "msmarco-doc-dev"),
        ("conformer_kernel", "irds:msmarco-document/trec-dl-2020/judged", "trec-dl-2020-doc"),
        ("conformer_kernel", "irds:msmarco-document/trec-dl-2020", "trec-dl-2020-doc"),
        # datasets the paper does not report
        ("qds", "irds:msmarco-document/trec-dl-2020/judged", None),
        ("conformer_kernel", "irds:msmarco-document/trec-dl-2019/judged", None),
        ("conformer_kernel", "irds:msmarco-document/dev", None),
        # other collections and ids
        ("qds", "irds:msmarco-document-v2/trec-dl-2019", None),
        ("qds", "irds:msmarco-document/trec-dl-hard", None),
        ("qds", "irds:msmarco-passage/trec-dl-2019/judged", None),
        ("qds", "irds:msmarco-document/train", None),
        # the built-in collection and files are none of the papers' datasets
        ("qds", "builtin:test", None),
        ("conformer_kernel", "builtin:test", None),
        ("qds", {"topics_path": "t.tsv", "qrels_path": "q.txt"}, None),
        ("qds", {"rank_llm_path": "r.json"}, None),
    ],
)
def test_paper_dataset(paper, task, dataset):
    assert paper_dataset(paper, task) == dataset


def test_task_label():
    assert task_label("builtin:test") == "builtin:test"
    assert task_label("irds:msmarco-document/dev") == "irds:msmarco-document/dev"
    assert task_label({"topics_path": "a/t.tsv", "qrels_path": None}) == "the task from files a/t.tsv"
    assert task_label({"rank_llm_path": "r.json"}) == "the task from files r.json"


def test_task_info_is_written_atomically_once_and_read_back(tmp_path):
    files = {"topics_path": tmp_path / "t.tsv", "qrels_path": None}
    path = write_task_info(tmp_path, files, None)
    assert path == tmp_path / "task.json"
    assert json.loads(path.read_text()) == {"test": {"topics_path": str(tmp_path / "t.tsv"), "qrels_path": None},
                                            "dataset": None}
    assert read_task_info(tmp_path / "metrics.json") == json.loads(path.read_text())
    with pytest.raises(FileExistsError):
        write_task_info(tmp_path, "builtin:test", None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["task.json"]  # no temp left, the first one kept
    assert read_task_info(tmp_path / "elsewhere" / "metrics.json") is None
    path.write_text('{"test": "builtin:test"}')
    with pytest.raises(ReportError, match="task.json: expected"):
        read_task_info(tmp_path / "metrics.json")


def test_to_markdown():
    df = pd.DataFrame({"method": ["a|b", "c"], "value": [0.33015, float("nan")], "n": [11000000.0, 2.0]})
    md = to_markdown(df)
    lines = md.splitlines()
    assert lines[0].startswith("| method") and md.endswith("\n")
    assert set(lines[1]) <= set("|-: ")
    assert "a\\|b" in lines[2] and "0.33015" in lines[2] and "11000000" in lines[2]
    assert "n/a" in lines[3]
    assert all(len(line) == len(lines[0]) for line in lines)  # aligned columns
    # numeric columns right-aligned in the separator row
    seps = [c.strip() for c in lines[1].strip("|").split("|")]
    assert not seps[0].endswith(":") and seps[1].endswith(":") and seps[2].endswith(":")


@pytest.fixture
def metrics_file(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps({"qds": {"ndcg_cut_10": 0.61, "map": 0.2}}))
    return path


ARGS = ["--paper", "qds", "--table", "2", "--dataset", "trec-dl-2019-doc", "--map", "qds=QDS-Transformer"]


def test_cli_prints_and_writes_atomically(metrics_file, tmp_path, capsys):
    out = tmp_path / "report.md"
    assert main([str(metrics_file), *ARGS, "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "QDS-Transformer" in printed and "-0.057" in printed
    assert out.read_text() == printed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json", "report.md"]  # no temp left


def test_cli_refuses_to_overwrite(metrics_file, tmp_path, capsys):
    out = tmp_path / "report.md"
    out.write_text("keep me")
    assert main([str(metrics_file), *ARGS, "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err == f"error: --output: {out} already exists; pass --overwrite to replace it"
    assert out.read_text() == "keep me"
    assert main([str(metrics_file), *ARGS, "--output", str(out), "--overwrite"]) == 0
    assert "QDS-Transformer" in out.read_text()


def test_cli_failed_write_leaves_target_untouched(metrics_file, tmp_path, monkeypatch, capsys):
    out = tmp_path / "report.md"
    out.write_text("old")

    def boom(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    assert main([str(metrics_file), *ARGS, "--output", str(out), "--overwrite"]) == 2
    captured = capsys.readouterr()
    assert "disk full" in captured.err and captured.out == ""  # the table is printed only once --output is written
    assert out.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json", "report.md"]
    new = tmp_path / "new.md"
    assert main([str(metrics_file), *ARGS, "--output", str(new)]) == 2
    assert not new.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json", "report.md"]


@pytest.mark.parametrize(
    "content, args, message",
    [
        (None, ["--paper", "qds"], "no such file"),
        ("{not json", ["--paper", "qds"], "invalid JSON"),
        ('[1, 2]', ["--paper", "qds"], "expected"),
        ('{"qds": {"map": 0.2}}', ["--paper", "bert"], "unknown paper 'bert'"),
        ('{"qds": {"map": 0.2}}', ["--paper", "qds", "--map", "qds"], "expected RUN=METHOD"),
        ('{"qds": {"map": 0.2}}', ["--paper", "qds", "--table", "5"], "no reported rows"),
    ],
)
def test_cli_bad_input(tmp_path, capsys, content, args, message):
    path = tmp_path / "metrics.json"
    if content is not None:
        path.write_text(content)
    assert _exit_status([str(path), *args]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]
    if message in {"no such file", "invalid JSON", "expected"}:
        assert str(path) in err[0]
    assert captured.out == ""


def _exit_status(argv: list[str]) -> int:
    """`main`'s exit status, returned or (for what the argument parser refuses) raised as SystemExit."""
    try:
        return main(argv)
    except SystemExit as exit_info:
        return exit_info.code


def test_cli_out_creates_missing_folder(metrics_file, tmp_path, capsys):
    out = tmp_path / "new" / "r.md"
    assert main([str(metrics_file), *ARGS, "--output", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == capsys.readouterr().out


def test_cli_nothing_matched(metrics_file, capsys):
    assert main([str(metrics_file), "--paper", "earl"]) == 1
    err = capsys.readouterr().err
    assert "EARL ClsPool" in err and "--map" in err


def test_python_dash_m(metrics_file):
    proc = subprocess.run([sys.executable, "-m", "common.report", str(metrics_file), *ARGS],
                          cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "| QDS-Transformer |" in proc.stdout
    helped = subprocess.run([sys.executable, "-m", "common.report", "--help"],
                            cwd=REPO, capture_output=True, text=True, check=False)
    assert helped.returncode == 0 and "--map RUN=METHOD" in helped.stdout and "--overwrite" in helped.stdout


BUILTIN_BM25 = {"bm25": {"ndcg_cut_10": 0.234, "map": 0.2, "mrr@10": 0.3}}
BM25_MAP = ["--map", "bm25=BM25"]


def _metrics_with_task(folder: Path, metrics: dict, task=None, dataset=None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.json").write_text(json.dumps(metrics))
    if task is not None:
        write_task_info(folder, task, dataset)
    return folder / "metrics.json"


def test_cli_notes_that_a_builtin_run_is_on_another_dataset(tmp_path, capsys):
    path = _metrics_with_task(tmp_path / "run", BUILTIN_BM25, "builtin:test")
    out = tmp_path / "report.md"
    assert main([str(path), "--paper", "qds", *BM25_MAP, "--table", "2", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert lines[0] == ("note: these metrics were measured on builtin:test; the reported rows are on trec-dl-2019-doc, "
                        "msmarco-doc-dev: different datasets, so diff is no reproduction gap")
    assert lines[1] == "" and lines[2].startswith("| paper")
    assert "-0.254" in printed  # the diff is still shown, under the note
    assert out.read_text() == printed
    # the same with --dataset: still another dataset
    assert main([str(path), "--paper", "qds", *BM25_MAP, "--dataset", "trec-dl-2019-doc"]) == 0
    assert capsys.readouterr().out.startswith(
        "note: these metrics were measured on builtin:test; the reported rows are on trec-dl-2019-doc: different")


def test_cli_no_note_when_the_task_is_the_rows_dataset(tmp_path, capsys):
    path = _metrics_with_task(tmp_path / "run", BUILTIN_BM25, "irds:msmarco-document/trec-dl-2019/judged",
                              "trec-dl-2019-doc")
    assert main([str(path), "--paper", "qds", *BM25_MAP, "--dataset", "trec-dl-2019-doc"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("| paper") and "note" not in printed and "-0.254" in printed
    # without --dataset the MS MARCO dev row is another dataset's
    assert main([str(path), "--paper", "qds", *BM25_MAP, "--table", "2"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "note: these metrics were measured on irds:msmarco-document/trec-dl-2019/judged (trec-dl-2019-doc); the "
        "reported rows on msmarco-doc-dev are on another dataset, so their diff is no reproduction gap "
        "(--dataset trec-dl-2019-doc leaves them out)")


def test_cli_notes_a_metrics_file_without_task_json(tmp_path, capsys):
    path = _metrics_with_task(tmp_path / "run", BUILTIN_BM25)
    assert main([str(path), "--paper", "qds", *BM25_MAP, "--table", "2"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        f"note: {path} does not say which dataset it was measured on (no task.json beside it); the reported rows are "
        "on trec-dl-2019-doc, msmarco-doc-dev: diff is a reproduction gap only where the metrics were measured on "
        "the row's dataset (--dataset keeps that one's rows)")
    # --dataset says which: no note
    assert main([str(path), "--paper", "qds", *BM25_MAP, "--table", "2", "--dataset", "trec-dl-2019-doc"]) == 0
    assert capsys.readouterr().out.startswith("| paper")


def test_cli_a_malformed_task_json_is_bad_input(tmp_path, capsys):
    path = _metrics_with_task(tmp_path / "run", BUILTIN_BM25)
    (tmp_path / "run" / "task.json").write_text("[]")
    assert main([str(path), "--paper", "qds", *BM25_MAP]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("error: ") and "task.json: expected" in captured.err


#: A hand-made EARL run on TREC DL 2019 passages (the BERT ranker's Table 2 columns, made-up values).
EARL_DL19 = {"bert_ranker": {"ndcg_cut_10": 0.70, "map": 0.44, "recip_rank": 0.84, "mrr@10": 0.83}}
EARL_ARGS = ["--paper", "earl", "--dataset", "trec-dl-2019-passage", "--map", "bert_ranker=BERT ranker"]


def test_compare_puts_each_sides_relevance_level_beside_the_numbers():
    df = compare(EARL_DL19, "earl", tables=2, dataset="trec-dl-2019-passage",
                 method_map={"bert_ranker": "BERT ranker"}, relevance_level=2)
    got = {r.metric: (r.reported, r.reproduced, r.reported_level, r.reproduced_level) for r in df.itertuples()}
    # results/reported/earl.csv's BERT ranker on TREC DL 2019; MRR and MAP measured at trec_eval's default level 1
    # (results/earl/README.md: only level 1 fits MRR 0.9349 and MAP 0.4836 beside NDCG@10 0.7032), NDCG graded
    assert got == {"recip_rank": (0.9349, 0.84, "1", "2"), "ndcg_cut_10": (0.7032, 0.70, "graded", "graded"),
                   "map": (0.4836, 0.44, "1", "2")}
    assert report.level_note(df) == (
        "note: recip_rank, map on trec-dl-2019-passage reported at relevance level 1 (labels >= 1 relevant), "
        "reproduced at level 2: different measures, so their diff is no reproduction gap (python -m common.evaluate "
        "QRELS RUN -l LEVEL measures the run at the paper's level)")
    same_level = compare(EARL_DL19, "earl", tables=2, dataset="trec-dl-2019-passage",
                         method_map={"bert_ranker": "BERT ranker"}, relevance_level=1)
    assert set(same_level["reproduced_level"]) == {"1", "graded"} and report.level_note(same_level) is None
    unknown = compare(EARL_DL19, "earl", tables=2, dataset="trec-dl-2019-passage",
                      method_map={"bert_ranker": "BERT ranker"})
    assert set(unknown["reproduced_level"]) == {"not given", "graded"} and report.level_note(unknown) is None


def test_reported_levels_of_other_rows():
    # MS MARCO dev qrels label every judged passage 1: level 1 is the only one (MVA prints MRR@10 in percent)
    df = compare({"de": {"mrr@10": 0.3}}, "mva", tables=5, method_map={"de": "DE (Ours)"}, relevance_level=1)
    assert list(zip(df["reported_level"], df["reproduced_level"])) == [("1", "1")]
    # QDS's TREC DL 2019 document MAP: the level is not determined here; NDCG graded
    df = compare({"qds": {"ndcg_cut_10": 0.6, "map": 0.2}}, "qds", tables=2, dataset="trec-dl-2019-doc",
                 method_map={"qds": "QDS-Transformer"}, relevance_level=1)
    assert dict(zip(df["metric"], df["reported_level"])) == {"ndcg_cut_10": "graded", "map": "not stated"}
    # timings have no relevance level
    df = compare({"earl": {"latency_s_per_query": 8.0}}, "earl", tables="3a", method_map={"earl": "EARL w/ S1"})
    assert set(df["reported_level"]) == set(df["reproduced_level"]) == {"-"}


def test_cli_prints_the_levels_and_a_note_where_they_differ(tmp_path, capsys):
    path = _metrics_with_task(tmp_path / "run", EARL_DL19, "irds:msmarco-passage/trec-dl-2019/judged",
                              "trec-dl-2019-passage")
    (tmp_path / "run" / "config.yaml").write_text("model:\n  loss: hinge\ndata:\n  relevance_level: 2\n")
    assert main([str(path), *EARL_ARGS]) == 0  # the level of config.yaml beside the metrics
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("note: recip_rank, map on trec-dl-2019-passage reported at relevance level 1 ")
    header = [cell.strip() for cell in lines[2].strip("|").split("|")]
    assert header[-2:] == ["reported_level", "reproduced_level"]
    rows = {cells[6]: cells[-2:] for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines[4:])}
    assert rows == {"recip_rank": ["1", "2"], "ndcg_cut_10": ["graded", "graded"], "map": ["1", "2"]}
    assert main([str(path), *EARL_ARGS, "--relevance_level", "1"]) == 0  # the flag wins: the paper's level
    printed = capsys.readouterr().out
    assert printed.startswith("| paper") and "note" not in printed
    (tmp_path / "run" / "config.yaml").unlink()
    assert main([str(path), *EARL_ARGS]) == 0
    assert "| not given " in capsys.readouterr().out
