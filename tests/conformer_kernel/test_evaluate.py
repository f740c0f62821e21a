"""`conformer_kernel.evaluate` and `conformer_kernel.train.paper_tables`: the re-ranking depth a checkpoint carries,
task.json, and Table 1 compared only on TREC DL 2020 documents (a built-in or file task says there is nothing to
compare with)."""

import json

import lightning as L
import pytest
import torch

from common.commands.outputs import NO_QRELS, write_mode_results
from common.data.builtin import builtin_source
from common.report import load_reported, paper_dataset
from conformer_kernel import evaluate, hidden_size
from conformer_kernel.data import ConformerKernelDataModule
from conformer_kernel.train import DATASET, DEPTH, PAPER, paper_tables
from conformer_kernel.ranker import MEASURES, ConformerKernelRanker
from tests.unjudged import assert_reranked_without_metrics, unjudged_task

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]  # tests/conftest.py

METRICS = {"ndrm3-rerank": {"ndcg_cut_10": 0.6, "ncg@100": 0.6283, "map": 0.4, "recip_rank": 0.9},
           "bm25": {"ndcg_cut_10": 0.5, "ncg@100": 0.6283, "map": 0.3, "recip_rank": 0.8}}
NOTHING = "Nothing in the paper to compare with: "
AFTER = (" is not trec-dl-2020-doc, Table 1's dataset (conformer_kernel.evaluate --dataset names it for a task "
         "from files).")


def test_depth_comes_from_the_flag_then_the_checkpoint_then_100(tmp_path):
    assert evaluate.resolve_depth(10, {"depth": 30}) == (10, "--depth")
    assert evaluate.resolve_depth(None, {"depth": 30}) == (30, "the checkpoint's data.depth, as in training")
    assert evaluate.resolve_depth(None, {}) == (100, "the checkpoint has no data.depth; the paper's top 100")
    checkpoint = tmp_path / "c.ckpt"
    torch.save({}, checkpoint)  # the parser checks that the file is one torch.save wrote
    assert evaluate.build_parser().parse_args(["--checkpoint", str(checkpoint), "--task", "builtin:test"]).depth is None


def test_table_1_has_one_dataset():
    assert set(load_reported(PAPER)["dataset"]) == {DATASET}
    assert f"--dataset {{{DATASET}}}" in evaluate.build_parser().format_usage()  # its choices, read without torch
    assert paper_dataset(PAPER, "irds:msmarco-document/trec-dl-2020/judged") == DATASET
    assert paper_dataset(PAPER, "irds:msmarco-document/trec-dl-2019/judged") is None


def test_trec_dl_2020_is_compared_with_table_1():
    text = paper_tables(METRICS, "irds:msmarco-document/trec-dl-2020/judged", DATASET)
    lines = text.splitlines()
    assert lines[0] == "Reproduced vs reported (Table 1, TREC DL 2020 documents)"
    rows = [tuple(c.strip() for c in line.strip("|").split("|")) for line in lines[4:]]
    assert rows == [("NDRM3", "rerank", "NDCG@10", "0.6162", "0.6", "-0.0162"),
                    ("NDRM3", "rerank", "NCG@100", "0.6283", "0.6283", "0"),
                    ("NDRM3", "rerank", "AP", "0.4122", "0.4", "-0.0122"),
                    ("NDRM3", "rerank", "RR", "0.9333", "0.9", "-0.0333")]


def test_another_task_has_nothing_to_compare_with():
    assert paper_tables(METRICS, "irds:msmarco-document/trec-dl-2019/judged", None) == (
        f"{NOTHING}irds:msmarco-document/trec-dl-2019/judged{AFTER}")
    assert paper_tables(METRICS, {"topics_path": "t.tsv", "qrels_path": "q.txt"}, None) == (
        f"{NOTHING}the task from files t.tsv{AFTER}")
    builtin = paper_tables(METRICS, "builtin:test", None)
    first, rest = builtin.split("\n", 1)
    assert first == f"{NOTHING}builtin:test{AFTER}"
    assert rest.startswith("\nReported in the paper, for reference only: another dataset (Table 1, TREC DL 2020")
    assert "Reproduced vs reported" not in builtin


def test_write_results_writes_task_json_beside_metrics_json(tmp_path):
    qrels = {"q1": {"d1": 1, "d2": 0}}
    runs, candidates = {"rerank": {"q1": {"d1": 2.0, "d2": 1.0}}}, {"q1": {"d2": 2.0, "d1": 1.0}}
    metrics = write_mode_results(tmp_path, "ndrm3", runs, qrels, candidates, 1, measures=MEASURES, task="builtin:test",
                                 dataset=None, depth=DEPTH)
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    assert metrics["ndrm3-rerank"] == {"ndcg_cut_10": 1.0, "ncg@100": 1.0, "map": 1.0, "recip_rank": 1.0}
    assert json.loads((tmp_path / "task.json").read_text()) == {"test": "builtin:test", "dataset": None}


# --------------------------------------------------------------------------- the command, with a tiny checkpoint
@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A `conformer_kernel.train`-shaped checkpoint of an untrained tiny NDRM3 whose data settings re-rank the top 7."""
    torch.manual_seed(0)
    data = ConformerKernelDataModule(dev=None, min_count=2, embedding_dim=16, depth=7)
    model = ConformerKernelRanker(vocab_size=data.vocab_size, hidden_size=hidden_size(16), num_heads=4, num_layers=1)
    model.use_resources(data.resources)
    state = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams),
             "pytorch-lightning_version": L.__version__, "datamodule_hyper_parameters": dict(data.hparams)}
    model.on_save_checkpoint(state)
    path = tmp_path_factory.mktemp("ck-ckpt") / "best.ckpt"
    torch.save(state, path)
    return path


def test_evaluate_builtin_uses_the_checkpoints_depth_and_compares_nothing(checkpoint, tmp_path, capsys):
    out = tmp_path / "eval"
    evaluate.main(["--checkpoint", str(checkpoint), "--task", "builtin:test", "--modes", "rerank",
                   "--test_queries", "5", "--output_dir", str(out), "--devices", "1"])
    printed = capsys.readouterr().out
    assert "re-ranking the top 7 candidates per query (the checkpoint's data.depth, as in training)" in printed
    assert f"\n{NOTHING}builtin:test{AFTER}\n" in printed
    assert "for reference only: another dataset" in printed and "Reproduced vs reported" not in printed
    assert json.loads((out / "task.json").read_text()) == {"test": "builtin:test", "dataset": None}
    assert sorted(json.loads((out / "metrics.json").read_text())) == ["bm25", "ndrm3-rerank"]


def test_evaluate_files_compares_nothing_unless_told_the_dataset(checkpoint, tmp_path, capsys):
    source = builtin_source("test")
    files = ["--topics", str(source.topics_path), "--qrels", str(source.qrels_path),
             "--run", str(source.candidates_path), "--collection", str(source.collection_path)]
    common = ["--checkpoint", str(checkpoint), *files, "--modes", "rerank", "--test_queries", "5", "--depth", "3",
              "--devices", "1"]
    out = tmp_path / "files"
    evaluate.main([*common, "--output_dir", str(out)])
    printed = capsys.readouterr().out
    assert "re-ranking the top 3 candidates per query (--depth)" in printed
    assert f"\n{NOTHING}the task from files {source.topics_path}{AFTER}\n" in printed
    assert "Reported in the paper" not in printed and "Reproduced vs reported" not in printed
    info = json.loads((out / "task.json").read_text())
    assert info["dataset"] is None and info["test"]["topics_path"] == str(source.topics_path)
    told = tmp_path / "told"
    evaluate.main([*common, "--dataset", "trec-dl-2020-doc", "--output_dir", str(told)])
    assert "Reproduced vs reported (Table 1, TREC DL 2020 documents)" in capsys.readouterr().out
    assert json.loads((told / "task.json").read_text())["dataset"] == DATASET


def test_reranking_without_qrels_writes_the_run_of_every_query_and_no_metrics(checkpoint, tmp_path, capsys):
    """--modes rerank, --topics --run --collection and no --qrels: every query re-ranked (one that no qrels judge
    among them), every candidate in run.rerank.trec, task.json, no metrics.json nor comparison."""
    flags, candidates = unjudged_task(tmp_path)
    out = tmp_path / "out"
    assert evaluate.main(["--checkpoint", str(checkpoint), *flags, "--modes", "rerank", "--depth", "3",
                          "--output_dir", str(out), "--devices", "1"]) is None
    printed = capsys.readouterr().out
    assert NO_QRELS in printed and "Nothing in the paper" not in printed
    assert_reranked_without_metrics(out, candidates, "run.rerank.trec")
