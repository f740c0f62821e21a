"""`python -m earl.train` end to end on the built-in collection with a tiny model, and a baseline trained beside it.

(The embedded default against BM25: `test_earl_default`; the indexed stores: `test_index_evaluate`.)
"""

import json

import pytest

from common.data.builtin import builtin_source
from common.data.formats import read_run
from common.metrics import evaluate_run
from earl import train
from earl.ranker import MEASURES

TINY = [
    "--model.num_layers", "1", "--model.hidden_size", "32", "--model.num_heads", "2",
    "--model.intermediate_size", "64", "--model.num_blocks", "1", "--model.query_layers", "1",
    "--data.passage_length", "48", "--data.depth", "10", "--data.dev_queries", "3", "--data.dev_depth", "5",
    "--data.test_queries", "4", "--data.batch_size", "2", "--data.eval_batch_size", "16",
    "--trainer.max_steps", "6", "--trainer.val_check_interval", "3", "--trainer.enable_progress_bar", "false",
    "--save_every_n_steps", "2", "--compare_with", "[bert_siamese]",
]  # fmt: skip


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("earl") / "run"
    metrics = train.main([*TINY, "--output_dir", str(out)])
    return out, metrics


def test_training_writes_a_valid_run_and_its_metrics(trained):
    out, metrics = trained
    run = read_run(out / "run.trec")
    assert len(run) == 4  # --data.test_queries
    source = builtin_source("test")
    bm25 = source.candidates()
    for qid, scores in run.items():
        order = sorted(scores, key=scores.get, reverse=True)
        first_stage = sorted(bm25[qid], key=bm25[qid].get, reverse=True)
        assert set(order[:10]) == set(first_stage[:10])  # the top 10 re-ranked, the rest below in BM25 order
        assert order[10:] == first_stage[10:]
    written = json.loads((out / "metrics.json").read_text())
    assert set(written) == {"earl_cls_tied", "bm25", "bert_siamese"}
    assert written["earl_cls_tied"] == pytest.approx(evaluate_run(source.qrels(), run, MEASURES))
    assert written == metrics
    assert (out / "config.yaml").is_file() and (out / "checkpoints" / "last.ckpt").is_file()


def test_the_baseline_is_trained_the_same_way_beside_it(trained):
    out, metrics = trained
    folder = out / "bert_siamese"
    baseline = json.loads((folder / "metrics.json").read_text())
    assert metrics["bert_siamese"] == baseline["bert_siamese"]
    assert baseline["bm25"] == metrics["bm25"]  # the same test queries
    run = read_run(folder / "run.trec")
    assert baseline["bert_siamese"] == pytest.approx(evaluate_run(builtin_source("test").qrels(), run, MEASURES))
    import yaml

    mine, its = (yaml.safe_load((f / "config.yaml").read_text()) for f in (out, folder))
    assert its["model"]["architecture"] == "bert_siamese" and its["compare_with"] == []
    assert its["data"] == mine["data"]  # data.architecture follows model.architecture (a link, not saved)
    assert its["trainer"] == mine["trainer"] and its["seed_everything"] == mine["seed_everything"]


def test_a_finished_run_is_not_trained_again(trained, capsys):
    out, _ = trained
    with pytest.raises(SystemExit) as exit:
        train.main(["--ckpt_path", "last", "--output_dir", str(out)])
    assert exit.value.code == 0
    assert capsys.readouterr().out.strip() == f"{out} holds a finished run (its metrics.json is written): nothing to resume"


def test_init_checkpoint_starts_from_a_trained_models_weights_only(trained):
    """``--model.init_checkpoint``: the weights of an earl.train checkpoint (the ClueWeb09-B transfer's start)."""
    import torch

    from earl.ranker import EARLRanker

    out, _ = trained
    checkpoint = torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    settings = {k: v for k, v in checkpoint["hyper_parameters"].items() if not k.startswith("_")}
    model = EARLRanker(**settings | {"init_checkpoint": str(out / "checkpoints" / "last.ckpt")})
    state = model.state_dict()
    assert state.keys() == checkpoint["state_dict"].keys()
    assert all(torch.equal(state[k], v) for k, v in checkpoint["state_dict"].items())
