"""A user's own data on the `qds.train` command line: task forms in --help, nested task flags, one-line errors for
a bad task spec and for judged documents without text, before any output is written."""

import json
import subprocess
import sys

import pytest

from common.data.builtin import ensure_builtin
from common.data.formats import iter_collection, write_collection

pytestmark = pytest.mark.slow  # the second tier (README, "Tests")


def _train(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "qds.train", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def _error_line(result) -> str:
    """The one line of a bad input (beside progress bars of a document store being built)."""
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("indexing ")]
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(lines) == 1, result.stderr[-2000:]
    return lines[0]


def test_help_explains_the_task_forms(tmp_path):
    result = _train("--help", cwd=tmp_path)
    text = " ".join(result.stdout.split())
    assert result.returncode == 0
    for words in ("--data.train TRAIN", "builtin:<split>", "irds:<id>", "TREC files or a rank_llm file",
                  '(README, "Your own data")'):
        assert words in text, words


def test_nested_task_flags_make_one_task(tmp_path):
    root = ensure_builtin()
    result = _train("--data.train.topics_path", str(root / "topics.train.tsv"), "--data.train.qrels_path",
                    str(root / "qrels.train.txt"), "--print_config", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    train = result.stdout.split("\ndata:\n", 1)[1].split("\n  dev:", 1)[0]
    topics, qrels = root / "topics.train.tsv", root / "qrels.train.txt"
    assert train == f"  train:\n    topics_path: {topics}\n    qrels_path: {qrels}"


def test_a_misspelt_key_is_one_line_and_nothing_is_written(tmp_path):
    result = _train("--data.train.topics_path", "t.tsv", "--data.train.qrel_path", "q.txt", "--output_dir", "out",
                    cwd=tmp_path)
    assert _error_line(result) == (
        "error: data.train.qrel_path: unknown key; a task from files takes topics_path, qrels_path, "
        "candidates_path, collection_path, name (topics_path required), one from a rank_llm file takes "
        "rank_llm_path, qrels_path, name (rank_llm_path required), either queries, split_seed, heldout_one_in"
    )
    assert not (tmp_path / "out").exists()


def test_a_missing_file_is_one_line(tmp_path):
    result = _train("--data.test.topics_path", "nowhere.tsv", "--output_dir", "out", cwd=tmp_path)
    assert _error_line(result) == "error: data.test.topics_path: no such file: nowhere.tsv"
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def without_positives(tmp_path_factory) -> dict:
    """The built-in training task with a collection lacking a third of its relevant documents."""
    root, folder = ensure_builtin(), tmp_path_factory.mktemp("task")
    relevant = sorted({line.split()[2] for line in (root / "qrels.train.txt").read_text().splitlines()
                       if int(line.split()[3]) >= 1})
    gone = set(relevant[::3])
    kept = [d for d in iter_collection(root / "collection.jsonl") if d.doc_id not in gone]
    write_collection(folder / "docs.jsonl", kept)
    return {"topics_path": str(root / "topics.train.tsv"), "qrels_path": str(root / "qrels.train.txt"),
            "candidates_path": str(root / "bm25.train.trec"), "collection_path": str(folder / "docs.jsonl"),
            "name": "mine", "gone": len(gone), "relevant": len(relevant)}


def test_judged_documents_without_text_stop_before_training(tmp_path, without_positives):
    spec = {k: v for k, v in without_positives.items() if k not in ("gone", "relevant")}
    result = _train("--data.train", json.dumps(spec), "--data.missing_documents", "error", "--output_dir", "out",
                    cwd=tmp_path)
    line = _error_line(result)
    gone, relevant = without_positives["gone"], without_positives["relevant"]
    assert line.startswith(f"error: data.train (mine): {gone:,} of {relevant:,} relevant judged documents "
                           f"(label >= 1)"), line
    assert line.endswith("; data.missing_documents=skip leaves them out")
    assert not (tmp_path / "out").exists()


def test_a_train_tokenizer_sizes_the_model_and_travels_in_its_hyperparameters(tmp_path, monkeypatch):
    from common.encoders.tokenizers import resolved_tokenizer_task
    from qds.data import QDSDataModule
    from qds.ranker import QDSRanker
    from common.encoders.tokenizers import load_tokenizer

    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "cache"))
    root = ensure_builtin()
    task = {"topics_path": str(root / "topics.train.tsv"), "collection_path": str(root / "collection.jsonl")}
    assert resolved_tokenizer_task("train", None, task) == task
    assert resolved_tokenizer_task("train", "builtin:dev", task) == "builtin:dev"
    assert resolved_tokenizer_task("builtin", None, task) is None
    tokenizer = load_tokenizer("train", task=task)
    model = QDSRanker(tokenizer="train", tokenizer_task=task, num_layers=1, hidden_size=16, num_heads=1,
                           intermediate_size=16, max_length=64, window=4)
    assert model.model.encoder.embeddings.word_embeddings.num_embeddings == len(tokenizer)
    assert model.hparams.tokenizer_task == task
    data = QDSDataModule(train=task, dev=None, test=None, tokenizer="train", max_length=64)
    assert data.hparams.tokenizer_task == task  # as the model's, so Lightning merges the two
    assert data.encoder.tokenizer.get_vocab() == tokenizer.get_vocab()
