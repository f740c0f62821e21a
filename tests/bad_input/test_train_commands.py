"""``python -m qds.train``, ``python -m conformer_kernel.train``, ``python -m earl.train`` and ``python -m mva.train``
refuse bad options in one line, before anything is built or written: most at the front door (`common.commands.help`),
the rest at the real parser or on its resolved config (`common.commands.cli.RankerCLI`)."""

import pytest

from tests.bad_input.refusal import refused

pytestmark = pytest.mark.slow  # the second tier (README, "Tests")

QDS = [
    (["--model.pattern", "nonsense"], "--model.pattern: must be one of sparse, longformer_qa, qds_s, qds_q, qds, "
                                      "firstp, maxp, got nonsense"),
    (["--data.max_length", "-5"], "--data.max_length: must be a positive integer, got -5"),
    (["--model.window", "0"], "--model.window: must be a positive integer, got 0"),
    (["--model.window", "33"], "--model.window: must be even"),
    (["--model.num_heads", "3"], "--model.num_heads: must divide --model.hidden_size (64), got 3"),
    (["--model.patern", "qds"], "unknown option --model.patern (did you mean --model.pattern?)"),
    (["--model.window", "wide"], "--model.window: must be a positive integer, got wide"),
    (["--model.dropout", "1.5"], "--model.dropout: must be a number >= 0 and <= 1, got 1.5"),
    (["--model.betas", "[0.9, 1.5]"], "--model.betas: each must be at least 0 and below 1"),
    (["--model.impl", "cuda"], "--model.impl: must be one of auto, reference, portable, tvm, flex, got cuda"),
    (["--data.dev_queries", "0"], "--data.dev_queries: must be a positive integer or null, got 0"),
    (["--data.missing_documents", "warn"], "--data.missing_documents: must be one of skip, error, got warn"),
    (["--trainer.max_steps", "many"], "--trainer.max_steps: must be an integer, got many"),
    (["--model.window"], "--model.window: expected a value"),
    (["32"], "unrecognized argument 32"),
]  # fmt: skip

CK = [
    (["--model.model", "ndrm9"], "--model.model: must be one of ndrm1, ndrm2, ndrm3, got ndrm9"),
    (["--data.embedding_dim", "-4"], "--data.embedding_dim: must be a positive integer, got -4"),
    (["--test_modes", "bogus"], "--test_modes: must be a list ([a, b]), each item one of rerank, fullrank, got bogus"),
    (["--test_modes", "[rerank, everything]"], "--test_modes: must be a list"),
    (["--model.num_heads", "3"], "--model.num_heads: must divide the hidden size 64 (2 x --data.embedding_dim), "
                                 "got 3"),
    (["--model.conv_window", "30"], "--model.conv_window: must be odd"),
    (["--data.group_size", "1"], "--data.group_size: must be an integer >= 2, got 1"),
    (["--model.sigma", "0"], "--model.sigma: must be a positive number, got 0"),
    (["--data.batch_size", "0"], "--data.batch_size: must be a positive integer, got 0"),
    (["--model.head", "4"], "unknown option --model.head (did you mean --model.num_heads?)"),
]  # fmt: skip

EARL = [
    (["--model.architecture", "colbert"], "--model.architecture: must be one of earl, bert_ranker, bert_siamese, "
                                          "got colbert"),
    (["--model.pool", "max"], "--model.pool: must be one of cls, mean, got max"),
    (["--model.num_blocks", "0"], "--model.num_blocks: must be a positive integer, got 0"),
    (["--model.num_heads", "3"], "--model.num_heads: must divide --model.hidden_size (64), got 3"),
    (["--model.query_layers", "5"], "--model.query_layers: T_qry takes at most T_doc's 2 layers (--model.num_layers), "
                                    "got 5"),
    (["--model.loss", "softmax"], "--model.loss: must be one of hinge, cross_entropy, got softmax"),
    (["--data.passage_length", "0"], "--data.passage_length: must be a positive integer, got 0"),
    (["--data.query_length", "2"], "--data.query_length: must leave room for [CLS], a token and [SEP] (at least 3), "
                                   "got 2"),
    (["--compare_with", "null"], "--compare_with: must be a list ([a, b]), each item a string, got null"),
    (["--compare_with", "[colbert]"], "--compare_with: must list bert_ranker and/or bert_siamese, got colbert"),
]  # fmt: skip


MVA = [
    (["--model.architecture", "colbert"], "--model.architecture: must be one of mva, de, ca, got colbert"),
    (["--model.doc_pooling", "max"], "--model.doc_pooling: must be one of all, first_k, cls, temporal, got max"),
    (["--model.doc_pooling", "cls"], "--model.doc_timesteps: cls pooling keeps K timesteps: give K"),
    (["--model.query_pooling", "temporal"], "--model.query_factor: temporal pooling needs its factor rho"),
    (["--model.projection", "0"], "--model.projection: must be a positive integer, got 0"),
    (["--model.num_heads", "3"], "--model.num_heads: must divide --model.hidden_size (64), got 3"),
    (["--data.query_length", "2"], "--data.query_length: must leave room for [CLS], a token and [SEP] (at least 3), "
                                   "got 2"),
    (["--compare_with", "[earl]"], "--compare_with: must list de and/or ca, got earl"),
]  # fmt: skip


@pytest.mark.parametrize("args, expect", QDS)
def test_qds_train_refuses(tmp_path, args, expect):
    refused("qds.train", args, tmp_path, expect)


@pytest.mark.parametrize("args, expect", CK)
def test_conformer_kernel_train_refuses(tmp_path, args, expect):
    refused("conformer_kernel.train", args, tmp_path, expect)


@pytest.mark.parametrize("args, expect", EARL)
def test_earl_train_refuses(tmp_path, args, expect):
    refused("earl.train", args, tmp_path, expect)


@pytest.mark.parametrize("module, config, expect", [
    ("qds.train", "model:\n  window: 0\n", "--model.window: not of type PositiveInt: 0 does not conform"),
    ("conformer_kernel.train", "data:\n  group_size: 1\n", "--data.group_size: not of type GroupSize"),
])  # fmt: skip
def test_a_bad_value_in_a_config_file_is_the_real_parsers_one_line(tmp_path, module, config, expect):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "bad.yaml").write_text(config)
    refused(module, ["--config", str(inputs / "bad.yaml")], tmp_path, expect, inputs=inputs)


def test_what_only_the_resolved_config_shows_is_refused_before_anything_is_built(tmp_path):
    """A section's own config file (``--model FILE``) is not resolved at the front door: the parsed config is
    checked before the classes are built."""
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "model.yaml").write_text("num_heads: 3\n")
    refused("qds.train", ["--model", str(inputs / "model.yaml")], tmp_path,
            "--model.num_heads: must divide --model.hidden_size (64), got 3", inputs=inputs)


@pytest.mark.parametrize("args, expect", MVA)
def test_mva_train_refuses(tmp_path, args, expect):
    refused("mva.train", args, tmp_path, expect)
