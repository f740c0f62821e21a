"""`qds.evaluate` and `qds.train.paper_tables`: the re-ranking depth a checkpoint carries, task.json, and the paper's
tables compared only on the paper's dataset (a built-in or file task says there is nothing to compare with)."""

import argparse
import json
import subprocess
import sys
from typing import get_args

import lightning as L
import pytest
import torch

from common.commands.outputs import NO_QRELS, write_results
from common.data.builtin import builtin_source
from common.report import load_reported
from qds import evaluate
from qds.model import Impl
from qds.ranker import QDSRanker
from qds.train import DATASETS, paper_tables
from tests.unjudged import assert_reranked_without_metrics, unjudged_task

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]  # tests/conftest.py

METRICS = {"qds": {"ndcg_cut_10": 0.7, "map": 0.3, "mrr@10": 0.4}, "bm25": {"ndcg_cut_10": 0.5, "map": 0.25,
                                                                          "mrr@10": 0.3}}
NOTHING = "Nothing in the paper to compare with: "


def test_depth_comes_from_the_flag_then_the_checkpoint_then_100(tmp_path):
    assert evaluate.resolve_depth(10, {"depth": 30}) == (10, "--depth")
    assert evaluate.resolve_depth(None, {"depth": 30, "tokenizer": "builtin"}) == (
        30, "the checkpoint's data.depth, as in training")
    # the official release holds no data settings: the paper's top 100
    assert evaluate.resolve_depth(None, {"tokenizer": "roberta-base"})[0] == 100
    checkpoint = tmp_path / "c.ckpt"
    torch.save({}, checkpoint)  # the parser checks that the file is one torch.save wrote
    args = evaluate.build_parser().parse_args(["--checkpoint", str(checkpoint), "--task", "builtin:test"])
    assert args.depth is None


def test_datasets_are_those_of_tables_2_and_4():
    assert set(DATASETS) == set(load_reported("qds", table=[2, 4])["dataset"])


def test_the_choices_the_parser_reads_without_torch_are_the_papers_and_the_models():
    usage = evaluate.build_parser().format_usage()
    assert f"--dataset {{{','.join(DATASETS)}}}" in usage
    assert [evaluate._implementation(impl) for impl in get_args(Impl)] == list(get_args(Impl))
    with pytest.raises(argparse.ArgumentTypeError, match="invalid choice: 'cuda'"):
        evaluate._implementation("cuda")


def test_a_builtin_task_has_nothing_to_compare_with_but_shows_the_reported_rows_as_another_datasets():
    text = paper_tables(METRICS, "builtin:test", None)
    first, rest = text.split("\n", 1)
    assert first == (f"{NOTHING}builtin:test is none of its datasets (trec-dl-2019-doc, msmarco-doc-dev; "
                     "qds.evaluate --dataset names the one a task from files is).")
    assert "Reported in the paper, for reference only: another dataset" in rest
    assert "Reproduced vs reported" not in text and "0.667" in rest  # QDS-Transformer's NDCG@10, not diffed


def test_a_file_task_has_nothing_to_compare_with():
    task = {"topics_path": "my/topics.tsv", "qrels_path": "q", "candidates_path": "r", "collection_path": "c"}
    assert paper_tables(METRICS, task, None) == (
        f"{NOTHING}the task from files my/topics.tsv is none of its datasets (trec-dl-2019-doc, msmarco-doc-dev; "
        "qds.evaluate --dataset names the one a task from files is).")


def test_trec_dl_2019_is_compared_with_tables_2_and_4():
    text = paper_tables(METRICS, "irds:msmarco-document/trec-dl-2019/judged", "trec-dl-2019-doc")
    lines = text.splitlines()
    assert lines[0] == "Reproduced vs reported (trec-dl-2019-doc)"
    rows = {tuple(c.strip() for c in line.strip("|").split("|")) for line in lines[4:]}
    assert ("2", "QDS-Transformer", "ndcg_cut_10", "0.667", "0.7", "0.033") in rows
    assert ("4", "QDS-Transformer", "map", "0.278", "0.3", "0.022") in rows
    assert ("2", "BM25", "ndcg_cut_10", "0.488", "0.5", "0.012") in rows
    assert not any("mrr@10" in row for row in rows)  # MS MARCO dev's column is another dataset


def test_ms_marco_dev_is_compared_on_mrr_only_and_table_4_has_none():
    text = paper_tables(METRICS, "irds:msmarco-document/dev", "msmarco-doc-dev")
    lines = text.splitlines()
    assert lines[0] == "Reproduced vs reported (msmarco-doc-dev)"
    rows = {tuple(c.strip() for c in line.strip("|").split("|")) for line in lines[4:]}
    assert rows == {("2", "QDS-Transformer", "mrr@10", "0.36", "0.4", "0.04"),
                    ("2", "BM25", "mrr@10", "0.252", "0.3", "0.048")}


def test_write_results_writes_task_json_beside_metrics_json(tmp_path):
    qrels = {"q1": {"d1": 1, "d2": 0}}
    run, candidates = {"q1": {"d1": 2.0, "d2": 1.0}}, {"q1": {"d2": 2.0, "d1": 1.0}}
    metrics = write_results(tmp_path, "qds", run, qrels, candidates, 1, measures=QDSRanker.measures,
                            task="irds:msmarco-document/trec-dl-2019/judged", dataset="trec-dl-2019-doc")
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    assert metrics == {"qds": {"ndcg_cut_10": 1.0, "map": 1.0, "mrr@10": 1.0},
                       "bm25": {"ndcg_cut_10": pytest.approx(0.6309298), "map": 0.5, "mrr@10": 0.5}}
    assert json.loads((tmp_path / "task.json").read_text()) == {
        "test": "irds:msmarco-document/trec-dl-2019/judged", "dataset": "trec-dl-2019-doc"}


# --------------------------------------------------------------------------- the command, with a tiny checkpoint
@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A `qds.train`-shaped checkpoint of an untrained tiny model whose data settings re-rank the top 2."""
    torch.manual_seed(0)
    model = QDSRanker(pattern="qds", tokenizer="builtin", window=8, num_layers=1, hidden_size=32, num_heads=1,
                           intermediate_size=64, max_length=192, impl="portable")
    path = tmp_path_factory.mktemp("qds-ckpt") / "best.ckpt"
    torch.save({"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams),
                "pytorch-lightning_version": L.__version__,
                "datamodule_hyper_parameters": {"tokenizer": "builtin", "max_length": 192, "depth": 2}}, path)
    return path


def test_evaluate_builtin_uses_the_checkpoints_depth_and_compares_nothing(checkpoint, tmp_path, capsys):
    out = tmp_path / "eval"
    evaluate.main(["--checkpoint", str(checkpoint), "--task", "builtin:test", "--output_dir", str(out),
                   "--devices", "1"])
    printed = capsys.readouterr().out
    assert "re-ranking the top 2 candidates per query (the checkpoint's data.depth, as in training)" in printed
    assert "top 2 re-ranked" in printed
    assert f"\n{NOTHING}builtin:test is none of its datasets" in printed
    assert "for reference only: another dataset" in printed and "Reproduced vs reported" not in printed
    assert json.loads((out / "task.json").read_text()) == {"test": "builtin:test", "dataset": None}
    assert set(json.loads((out / "metrics.json").read_text())) == {"qds", "bm25"}


def test_evaluate_files_compares_nothing_unless_told_the_dataset(checkpoint, tmp_path, capsys):
    source = builtin_source("test")
    files = ["--topics", str(source.topics_path), "--qrels", str(source.qrels_path),
             "--run", str(source.candidates_path), "--collection", str(source.collection_path)]
    out = tmp_path / "files"
    evaluate.main(["--checkpoint", str(checkpoint), *files, "--depth", "1", "--output_dir", str(out), "--devices", "1"])
    printed = capsys.readouterr().out
    assert "re-ranking the top 1 candidates per query (--depth)" in printed
    assert f"\n{NOTHING}the task from files {source.topics_path} is none of its datasets" in printed
    assert "Reported in the paper" not in printed and "Reproduced vs reported" not in printed
    assert json.loads((out / "task.json").read_text()) == {
        "test": {"topics_path": str(source.topics_path), "qrels_path": str(source.qrels_path),
                 "candidates_path": str(source.candidates_path), "collection_path": str(source.collection_path)},
        "dataset": None}
    # --dataset says what files are: compared with the paper, and task.json says so
    told = tmp_path / "told"
    evaluate.main(["--checkpoint", str(checkpoint), *files, "--depth", "1", "--dataset", "trec-dl-2019-doc",
                   "--output_dir", str(told), "--devices", "1"])
    assert "Reproduced vs reported (trec-dl-2019-doc)" in capsys.readouterr().out
    assert json.loads((told / "task.json").read_text())["dataset"] == "trec-dl-2019-doc"


def test_evaluate_without_qrels_writes_the_run_of_every_query_and_no_metrics(checkpoint, tmp_path, capsys):
    """--topics --run --collection and no --qrels: every query re-ranked (one that no qrels judge among them), every
    candidate in run.trec, task.json, no metrics.json nor comparison."""
    flags, candidates = unjudged_task(tmp_path)
    out = tmp_path / "out"
    assert evaluate.main(["--checkpoint", str(checkpoint), *flags, "--depth", "3", "--output_dir", str(out),
                          "--devices", "1"]) is None
    printed = capsys.readouterr().out
    assert NO_QRELS in printed and "Nothing in the paper" not in printed
    assert_reranked_without_metrics(out, candidates)


def test_the_command_prints_no_lightning_tips_nor_their_deprecation_warnings(checkpoint, tmp_path):
    """`common.commands.quiet.quiet_lightning`: the run's output is about the run."""
    done = subprocess.run([sys.executable, "-m", "qds.evaluate", "--checkpoint", str(checkpoint), "--task",
                           "builtin:test", "--output_dir", str(tmp_path / "out"), "--devices", "1"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "written: " in done.stdout, done.stderr
    for noise in ("Tip:", "set_vital", "LeafSpec"):
        assert noise not in done.stdout + done.stderr


# --------------------------------------------------------------------------- precision
#: How far bf16-mixed may move a score of the tiny checkpoint from fp32's: bfloat16 keeps 8 significant bits, and
#: the scores move by 0.0004 at most on a Zen 4; ten times that.
BF16_SCORE_TOLERANCE = 0.005


def _scores(folder) -> dict[tuple[str, str], float]:
    from common.data.formats import read_run

    return {(qid, doc_id): score for qid, scores in read_run(folder / "run.trec").items()
            for doc_id, score in scores.items()}


def test_bf16_mixed_scores_near_fp32_and_is_the_default_of_a_run_that_trained_so(checkpoint, tmp_path, capsys):
    """``--precision bf16-mixed`` against ``32-true`` (the independent reference): every re-ranked score within
    `BF16_SCORE_TOLERANCE`, not all the same; and the same checkpoint in a run folder whose config.yaml trained in
    bf16-mixed evaluates in it without the flag, to the same run file."""
    import shutil

    import yaml

    common = ["--task", "builtin:test", "--depth", "3", "--devices", "1", "--accelerator", "cpu"]
    for precision in ("32-true", "bf16-mixed"):
        evaluate.main(["--checkpoint", str(checkpoint), *common, "--precision", precision,
                       "--output_dir", str(tmp_path / precision)])
    assert "precision bf16-mixed (--precision); float32 matmuls: high" in capsys.readouterr().out
    fp32, bf16 = _scores(tmp_path / "32-true"), _scores(tmp_path / "bf16-mixed")
    assert fp32.keys() == bf16.keys()
    differences = [abs(bf16[pair] - fp32[pair]) for pair in fp32]
    assert 0 < max(differences) < BF16_SCORE_TOLERANCE

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(checkpoint, run / "checkpoints" / "best-step=1.ckpt")
    (run / "config.yaml").write_text(yaml.safe_dump({"trainer": {"precision": "bf16-mixed"}}))
    evaluate.main(["--checkpoint", str(run / "checkpoints" / "best-step=1.ckpt"), *common,
                   "--output_dir", str(tmp_path / "default")])
    assert "precision bf16-mixed (as the checkpoint's run trained)" in capsys.readouterr().out
    assert (tmp_path / "default" / "run.trec").read_bytes() == (tmp_path / "bf16-mixed" / "run.trec").read_bytes()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU: 16-mixed runs on one")
def test_16_mixed_on_a_gpu_scores_near_fp32(checkpoint, tmp_path):
    """``--precision 16-mixed`` on a GPU (its loader's batches pinned) against ``32-true`` on the CPU: every score
    within `BF16_SCORE_TOLERANCE` (float16 keeps 11 significant bits, more than bfloat16's 8)."""
    common = ["--task", "builtin:test", "--depth", "3", "--devices", "1", "--num_workers", "2"]
    evaluate.main(["--checkpoint", str(checkpoint), *common, "--accelerator", "cpu", "--precision", "32-true",
                   "--output_dir", str(tmp_path / "cpu")])
    evaluate.main(["--checkpoint", str(checkpoint), *common, "--accelerator", "gpu", "--precision", "16-mixed",
                   "--output_dir", str(tmp_path / "gpu")])
    cpu, gpu = _scores(tmp_path / "cpu"), _scores(tmp_path / "gpu")
    assert cpu.keys() == gpu.keys()
    assert max(abs(gpu[pair] - cpu[pair]) for pair in cpu) < BF16_SCORE_TOLERANCE
