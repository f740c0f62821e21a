"""`python -m earl.train` end to end on the built-in collection with a tiny model, and a baseline trained beside it.

(The embedded default against BM25: `test_earl_default`; the indexed stores: `test_index_evaluate`.)
"""

import pytest

from earl import train
from earl.ranker import MEASURES
from tests.train_runs import TINY_RUN, check_baseline, check_reranked_run, tiny_run

pytestmark = pytest.mark.slow  # the second tier (README, "Tests")

TINY = [
    "--model.num_layers", "1", "--model.hidden_size", "32", "--model.num_heads", "2",
    "--model.intermediate_size", "64", "--model.num_blocks", "1", "--model.query_layers", "1",
    "--data.passage_length", "48", *TINY_RUN, "--compare_with", "[bert_siamese]",
]


trained = tiny_run(train.main, TINY)


def test_training_writes_a_valid_run_and_its_metrics(trained):
    out, metrics = trained
    written = check_reranked_run(out, metrics, "earl_cls_tied", MEASURES)
    assert set(written) == {"earl_cls_tied", "bm25", "bert_siamese"}


def test_the_baseline_is_trained_the_same_way_beside_it(trained):
    check_baseline(*trained, "bert_siamese", MEASURES)


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


def test_the_tested_checkpoint_loads_with_common_api_and_scores_its_run(trained):
    from earl.data import EARLDataModule
    from tests.bert_portable_checks import assert_tested_checkpoint_scores_its_run

    assert_tested_checkpoint_scores_its_run(trained[0], EARLDataModule, "earl")
