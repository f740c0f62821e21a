"""The scoring head by hand, a training step of every pattern, Table 8's parameter counts, and the length batches."""

import math

import pytest
import torch
from torch import nn

from common.encoders.bert_reranking import count_parameters
from common.refusals import SettingError
from qds.inputs import ALL_PATTERNS, build_qds_input, pad, pair_input
from qds.model import Ranker, RankingHead, build_encoder

from tests.gradients import assert_same_gradients

SIZES = dict(vocab_size=64, pad_token_id=1, max_length=64, window=4, num_layers=2, hidden_size=16, num_heads=2,
             intermediate_size=32)


def test_head_is_dropout_dense_tanh_dropout_linear():
    torch.manual_seed(0)
    head = RankingHead(3, dropout=0.0)
    with torch.no_grad():
        head.hidden.weight.copy_(torch.tensor([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, -1.0]]))
        head.hidden.bias.copy_(torch.tensor([0.0, 0.5, 0.0]))
        head.out.weight.copy_(torch.tensor([[1.0, 1.0, 2.0]]))
        head.out.bias.fill_(0.25)
    pooled = torch.tensor([[0.5, -0.25, 1.0]])
    # tanh([0.5, -0.5 + 0.5, -1.0]) . [1, 1, 2] + 0.25
    expected = math.tanh(0.5) + math.tanh(0.0) + 2 * math.tanh(-1.0) + 0.25
    assert head(pooled).item() == pytest.approx(expected, abs=1e-6)


def test_head_applies_dropout_before_both_linear_layers():
    head = RankingHead(4, dropout=0.5).train()
    calls = []
    head.dropout.register_forward_hook(lambda module, args, out: calls.append(args[0].shape))
    head(torch.ones(2, 4))
    assert calls == [torch.Size([2, 4]), torch.Size([2, 4])]


def batch_for(pattern: str) -> dict:
    if pattern in ("firstp", "maxp"):
        sequences = [pair_input([10, 11], list(range(20, 30)), bos=0, eos=2, max_length=16),
                     pair_input([10], [40, 41], bos=0, eos=2), pair_input([12], [42], bos=0, eos=2)]
        ids = pad(sequences, 1)
        batch = {"input_ids": ids, "attention_mask": (ids != 1).long()}
        if pattern == "maxp":  # document 0 has passages 0 and 1, document 1 has passage 2
            batch |= {"passage_doc": torch.tensor([0, 0, 1]), "num_docs": torch.tensor(2)}
        return batch
    inputs = [build_qds_input([10, 11], [[20, 21, 22], [30], [40, 41]], bos=0, eos=2),
              build_qds_input([12], [[50, 51]], bos=0, eos=2)]
    ids = pad([x.input_ids for x in inputs], 1)
    return {"input_ids": ids, "attention_mask": (ids != 1).long(),
            "global_attention_mask": pad([x.global_mask(pattern) for x in inputs], 0)}


@pytest.mark.parametrize("pattern", ALL_PATTERNS)
def test_a_training_step_of_every_pattern(pattern):
    torch.manual_seed(0)
    impl = "portable"
    ranker = Ranker(build_encoder(pattern, None, dropout=0.1, impl=impl, **SIZES), RankingHead(16, 0.1), pattern)
    batch = batch_for(pattern)
    scores = ranker(batch)[:2]  # FirstP scores each of the three sequences
    assert scores.shape == (2,) and torch.isfinite(scores).all()
    loss = nn.BCEWithLogitsLoss()(scores, torch.tensor([1.0, 0.0]))
    loss.backward()
    no_grad = [name for name, p in ranker.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    # Exceptions, each for a reason: a single token type is a constant under the LayerNorm; without
    # global tokens the global projections are unused; where [CLS] is global, the score reads only
    # its row, which the last layer computes with the global projections alone.
    unused = ("token_type_embeddings",)
    if pattern == "sparse":
        unused += ("query_global", "key_global", "value_global")
    elif pattern not in ("firstp", "maxp"):
        unused += tuple(f"layer.1.attention.self.{name}." for name in ("query", "key", "value"))
    assert [n for n in no_grad if not any(u in n for u in unused)] == []


def test_maxp_is_the_max_over_each_documents_passages():
    torch.manual_seed(0)
    ranker = Ranker(build_encoder("maxp", None, dropout=0.0, impl="portable", **SIZES), RankingHead(16, 0.0),
                    "maxp").eval()
    batch = batch_for("maxp")
    per_passage = Ranker(ranker.encoder, ranker.head, "firstp")(batch)  # the same network, no pooling
    assert ranker(batch).tolist() == [max(per_passage[0], per_passage[1]).item(), per_passage[2].item()]


def test_table8_parameter_counts_at_base_size():
    """Table 8: QDS-Transformer 149M (longformer-base-4096 + head), RoBERTa (FirstP/MaxP) 124M."""
    base = dict(vocab_size=50265, pad_token_id=1, num_layers=12, hidden_size=768, num_heads=12,
                intermediate_size=3072, dropout=0.1, impl="portable")
    with torch.device("meta"):
        qds = Ranker(build_encoder("qds", None, max_length=4096, window=512, **base), RankingHead(768, 0.1), "qds")
        roberta = Ranker(build_encoder("firstp", None, max_length=512, window=512, **base), RankingHead(768, 0.1),
                         "firstp")
    assert round(count_parameters(qds) / 1e6) == 149
    assert round(count_parameters(roberta) / 1e6) == 125  # 124.6M encoder + 0.6M head; the paper prints 124M


def _batch_of_lengths(pattern: str) -> dict:
    """Six inputs of 9 to 40 tokens (one query, documents of 1 to 9 sentences), padded to the longest."""
    if pattern in ("firstp", "maxp"):
        sequences = [pair_input([10, 11], list(range(20, 20 + k)), bos=0, eos=2) for k in (35, 3, 20, 6, 1, 28)]
        ids = pad(sequences, 1)
        return {"input_ids": ids, "attention_mask": (ids != 1).long()}
    inputs = [build_qds_input([10, 11], [[20 + s, 21, 22] for s in range(sentences)], bos=0, eos=2)
              for sentences in (9, 1, 5, 2, 7, 3)]
    ids = pad([x.input_ids for x in inputs], 1)
    return {"input_ids": ids, "attention_mask": (ids != 1).long(),
            "global_attention_mask": pad([x.global_mask(pattern) for x in inputs], 0)}


@pytest.mark.parametrize("pattern, impl",
                         [("qds", "portable"), ("qds", "tvm"), ("sparse", "tvm"), ("firstp", "portable")])
def test_rows_encoded_by_length_equal_the_padded_batch(pattern, impl, monkeypatch):
    """`Ranker.pooled` splits a batch into batches of similar length: every row's pooled output and every
    gradient equal those of the whole batch padded to its longest row."""
    import qds.model

    if impl == "tvm":
        pytest.importorskip("tvm")
    monkeypatch.setattr(qds.model, "ENCODER_CALL", 0)  # a split per distinct length: the most the DP can make
    torch.manual_seed(0)
    ranker = Ranker(build_encoder(pattern, None, dropout=0.0, impl=impl, **SIZES), RankingHead(16, 0.0),
                    pattern).double()
    batch = _batch_of_lengths(pattern)
    mask = batch["attention_mask"]
    assert len({int(n) for n in mask.sum(1)}) == 6  # six lengths: six parts
    for training in (True, False):
        ranker.train(training)
        got = ranker.pooled(batch)
        want = ranker.encoder(**batch).pooler_output
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
        upstream = torch.randn_like(want)
        assert_same_gradients(got, want, list(ranker.encoder.parameters()), upstream, rtol=1e-9, atol=1e-12)


def test_each_encoder_call_builds_its_attention_layout_once(monkeypatch):
    """`Ranker.pooled` calls the encoder once per length batch, each call with its own (B, N): the global tokens and
    the kernel's layout are built once per call and shared by its two layers (`common.kernels.layouts`)."""
    import common.kernels.layouts as layouts
    import common.kernels.portable as portable
    import qds.model

    monkeypatch.setattr(qds.model, "ENCODER_CALL", 0)  # a call per distinct length: six
    builds = {"global tokens": [], "portable": []}

    def counting(function, name):
        def counted(is_global, *args):
            builds[name].append(tuple(is_global.shape))
            return function(is_global, *args)

        return counted

    monkeypatch.setattr(layouts, "_global_tokens", counting(layouts._global_tokens, "global tokens"))
    monkeypatch.setattr(portable._Layout, "build", staticmethod(counting(portable._Layout.build, "portable")))
    torch.manual_seed(0)
    ranker = Ranker(build_encoder("qds", None, dropout=0.0, impl="portable", **SIZES), RankingHead(16, 0.0), "qds")
    calls = []
    ranker.encoder.register_forward_pre_hook(
        lambda module, args, kwargs: calls.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    with torch.no_grad():
        ranker.eval().pooled(_batch_of_lengths("qds"))
    assert len(calls) == 6 and len(set(calls)) == 6
    assert builds == {"global tokens": calls, "portable": calls}


@pytest.mark.parametrize("pattern", ["qds", "firstp"])
def test_an_odd_window_is_refused_naming_the_option(pattern):
    """Checked once, where the window is used: before transformers' own assertion, naming ``--model.window``."""
    with pytest.raises(SettingError, match=r"^model.window: must be even .*got 7$") as refused:
        build_encoder(pattern, None, dropout=0.0, impl="portable", **(SIZES | {"window": 7}))
    assert refused.value.option == "model.window"


def test_heads_not_dividing_the_hidden_size_are_refused_naming_the_option():
    with pytest.raises(SettingError, match=r"^model.num_heads: must divide --model.hidden_size \(16\), got 3$"):
        build_encoder("qds", None, dropout=0.0, impl="portable", **(SIZES | {"num_heads": 3}))
