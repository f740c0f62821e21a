"""``python -m qds.train``, ``python -m conformer_kernel.train``, ``python -m earl.train`` and ``python -m mva.train``
refuse bad options in one line, before anything is written: the parser's errors, a setting refused where it is used
(`common.refusals.SettingError`), Lightning's misconfiguration errors (`common.commands.cli.RankerCLI`)."""

import pytest

from tests.bad_input.refusal import refused

pytestmark = pytest.mark.slow  # the second tier (README, "Tests")

QDS = [
    (["--model.pattern", "nonsense"], "--model.pattern: expected a Literal['sparse', 'longformer_qa', 'qds_s', "
                                      "'qds_q', 'qds', 'firstp', 'maxp']. Got value: nonsense"),
    (["--data.max_length", "-5"], "--data.max_length: not of type PositiveInt: -5 does not conform"),
    (["--model.window", "0"], "--model.window: not of type PositiveInt: 0 does not conform"),
    (["--model.num_heads", "3"], "--model.num_heads: must divide --model.hidden_size (64), got 3"),
    (["--model.patern", "qds"], "unrecognized arguments: --model.patern qds"),
    (["--model.window", "wide"], "--model.window: not of type PositiveInt"),
    (["--model.dropout", "1.5"], "--model.dropout: not of type ClosedUnitInterval: 1.5 does not conform"),
    (["--model.betas", "[0.9, 1.5]"], "--model.betas: each must be at least 0 and below 1"),
    (["--model.impl", "cuda"], "--model.impl: expected a Literal['auto', 'reference', 'portable', 'tvm', 'flex']. "
                                 "Got value: cuda"),
    (["--data.dev_queries", "0"], "--data.dev_queries: does not validate against any of the Union subtypes"),
    (["--data.missing_documents", "warn"], "--data.missing_documents: expected a Literal['skip', 'error']. "
                                           "Got value: warn"),
    (["--trainer.max_steps", "many"], "--trainer.max_steps: expected a int. Got value: many"),
    (["--model.window"], "argument --model.window: expected one argument"),
    (["32"], "unrecognized arguments: 32"),
    (["--trainer.val_check_interval", "1.0"], "`val_check_interval` should be an integer or a time-based duration"),
]

CK = [
    (["--model.model", "ndrm9"], "--model.model: expected a Literal['ndrm1', 'ndrm2', 'ndrm3']. Got value: ndrm9"),
    (["--data.embedding_dim", "-4"], "--data.embedding_dim: not of type PositiveInt: -4 does not conform"),
    (["--test_modes", "bogus"], "--test_modes: expected a list. Got value: bogus"),
    (["--test_modes", "[rerank, everything]"], "--test_modes: expected a Literal['rerank', 'fullrank']. "
                                               "Got value: everything"),
    (["--model.num_heads", "3"], "--model.num_heads: must divide the hidden size 64 (2 x --data.embedding_dim), "
                                 "got 3"),
    (["--model.conv_window", "30"], "--model.conv_window: must be odd"),
    (["--data.group_size", "1"], "--data.group_size: not of type GroupSize: 1 does not conform"),
    (["--model.sigma", "0"], "--model.sigma: not of type PositiveFloat: 0 does not conform"),
    (["--data.batch_size", "0"], "--data.batch_size: not of type PositiveInt: 0 does not conform"),
    (["--model.head", "4"], "unrecognized arguments: --model.head 4"),
]

EARL = [
    (["--model.architecture", "colbert"], "--model.architecture: expected a Literal['earl', 'bert_ranker', "
                                          "'bert_siamese']. Got value: colbert"),
    (["--model.pool", "max"], "--model.pool: expected a Literal['cls', 'mean']. Got value: max"),
    (["--model.num_blocks", "0"], "--model.num_blocks: not of type PositiveInt: 0 does not conform"),
    (["--model.num_heads", "3"], "--model.num_heads: must divide --model.hidden_size (64), got 3"),
    (["--model.query_layers", "5"], "--model.query_layers: T_qry takes at most T_doc's 2 layers (--model.num_layers), "
                                    "got 5"),
    (["--model.loss", "softmax"], "--model.loss: expected a Literal['hinge', 'cross_entropy']. Got value: softmax"),
    (["--data.passage_length", "0"], "--data.passage_length: not of type PositiveInt: 0 does not conform"),
    (["--data.query_length", "2"], "--data.query_length: must leave room for [CLS], a token and [SEP] (at least 3), "
                                   "got 2"),
    (["--compare_with", "null"], "--compare_with: expected a list. Got value: None"),
    (["--compare_with", "[colbert]"], "--compare_with: expected a Literal['bert_ranker', 'bert_siamese']. Got value: "
                                    "colbert"),
    (["--data.test.rank_llm_path", "r.json", "--data.test.queries", "heldout", "--data.test.split_seed", "x"],
     "data.test.split_seed: expected an integer; got 'x'"),
]


MVA = [
    (["--model.architecture", "colbert"], "--model.architecture: expected a Literal['mva', 'de', 'ca']. "
                                          "Got value: colbert"),
    (["--model.doc_pooling", "max"], "--model.doc_pooling: expected a Literal['all', 'first_k', 'cls', 'temporal']. "
                                      "Got value: max"),
    (["--model.doc_pooling", "cls"], "--model.doc_timesteps: cls pooling keeps K timesteps: give K"),
    (["--model.query_pooling", "temporal"], "--model.query_factor: temporal pooling needs its factor rho"),
    (["--model.projection", "0"], "--model.projection: not of type PositiveInt: 0 does not conform"),
    (["--model.num_heads", "3"], "--model.num_heads: must divide --model.hidden_size (64), got 3"),
    (["--data.query_length", "2"], "--data.query_length: must leave room for [CLS], a token and [SEP] (at least 3), "
                                   "got 2"),
    (["--compare_with", "[earl]"], "--compare_with: expected a Literal['de', 'ca']. Got value: earl"),
    (["--data.test.rank_llm_path", "r.json", "--data.test.queries", "foo"],
     "data.test.queries: expected one of all, train, heldout; got 'foo'"),
    (["--data.train.rank_llm_path", "r.json", "--data.train.heldout_one_in", "4"],
     "data.train.heldout_one_in: a parameter of the split of the judged queries; give data.train.queries train or "
     "heldout"),
]


@pytest.mark.parametrize("args, expect", QDS)
def test_qds_train_refuses(tmp_path, args, expect):
    refused("qds.train", args, tmp_path, expect)


@pytest.fixture(scope="module")
def conformer_kernel_caches():
    """The default's vocabulary and features built once (``conformer_kernel.prepare``): the model's checks run once
    the data module has given it its vocabulary, and a cold cache prints its build's progress before the refusal."""
    from conformer_kernel import prepare

    prepare.main([])


@pytest.mark.parametrize("args, expect", CK)
def test_conformer_kernel_train_refuses(tmp_path, args, expect, conformer_kernel_caches):
    refused("conformer_kernel.train", args, tmp_path, expect)


@pytest.mark.parametrize("args, expect", EARL)
def test_earl_train_refuses(tmp_path, args, expect):
    refused("earl.train", args, tmp_path, expect)


@pytest.mark.parametrize("module, config, expect", [
    ("qds.train", "model:\n  window: 0\n", "--model.window: not of type PositiveInt: 0 does not conform"),
    ("conformer_kernel.train", "data:\n  group_size: 1\n", "--data.group_size: not of type GroupSize"),
])
def test_a_bad_value_in_a_config_file_is_the_real_parsers_one_line(tmp_path, module, config, expect):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "bad.yaml").write_text(config)
    refused(module, ["--config", str(inputs / "bad.yaml")], tmp_path, expect, inputs=inputs)


def test_what_only_the_resolved_config_shows_is_refused_before_anything_is_built(tmp_path):
    """A section's own config file (``--model FILE``) is refused as the flag would be."""
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "model.yaml").write_text("num_heads: 3\n")
    refused("qds.train", ["--model", str(inputs / "model.yaml")], tmp_path,
            "--model.num_heads: must divide --model.hidden_size (64), got 3", inputs=inputs)


@pytest.mark.parametrize("args, expect", MVA)
def test_mva_train_refuses(tmp_path, args, expect):
    refused("mva.train", args, tmp_path, expect)


@pytest.mark.parametrize("module, args, expect", [
    ("qds.train", ["--model.window", "0"], "--model.window: not of type PositiveInt"),
    ("conformer_kernel.train", ["--model.model", "ndrm9"], "--model.model: expected a Literal"),
    ("earl.train", ["--model.patern", "qds"], "unrecognized arguments: --model.patern qds"),
    ("mva.train", ["--compare_with", "[earl]"], "--compare_with: expected a Literal['de', 'ca']"),
])
def test_a_fresh_process_exits_with_status_2(tmp_path, module, args, expect):
    refused(module, args, tmp_path, expect, fresh_process=True)
