"""EARL's model (`earl.model`) against references that share none of its code (Gao, Dai, Callan 2020, Secs. 3.1-3.4):

- the judge blocks (Eqs. 17-21) against MORES's interaction layer (the authors' successor of EARL: luyug/MORES,
  ``bert_mores.MORES_BertLayer.forward``: cross-attention from the query to the document, then query
  self-attention, then the FFN) built from Hugging Face ``transformers``' own BERT modules, with EARL's weights
  copied in; and the score (Eq. 22, ClsPool and AvePool) on top of them;
- T_qry and T_doc (Eqs. 6-16) against the ``BertModel`` they are initialised from (Sec. 3.4), its own hidden states;
- EARL end to end (Eqs. 6-8, 17-22) against the paper written out with plain tensor operations (`tests.earl.by_hand`),
  through `EARL.forward` and through the S1 and S2 store paths (`earl.store.representation`'s rows, scored by
  `earl.query_scorer.QueryScorer` as ``earl.evaluate`` scores them); and each of `earl.model`'s stated departures from
  the printed equations (Eq. 1's scale, Eq. 4's ReLU, Eq. 19's LayerNorm) shown to change the score, so that a model
  computing the printed equation instead would fail here.

Everything in float64, evaluation mode (no dropout).
"""

import copy
import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from common.data.specs import source_from_spec
from common.encoders.pretrained import bert_config
from earl.model import build_earl
from earl.query_scorer import QueryScorer
from earl.store import data_encoder, document_row_counts, representation
from tests.earl import by_hand
from tests.earl.paper import quoted
from tests.token_rows import PAD, VOCAB_SIZE, tokens

pytestmark = pytest.mark.usefixtures("one_thread")


def small_bert(layers: int = 4, hidden: int = 16, heads: int = 2, seed: int = 0, vocab_size: int = VOCAB_SIZE,
               pad: int = PAD):
    """A random BERT without pooler, as `earl.ranker` builds one from scratch: float32, as `earl.model.build_earl`
    expects (it makes T_qry and the judge blocks in the default dtype, copying BERT's weights into them); the model
    built from it is then made float64 whole."""
    from transformers import BertModel

    torch.manual_seed(seed)
    config = bert_config(vocab_size=vocab_size, pad_token_id=pad, num_layers=layers, hidden_size=hidden,
                         num_heads=heads, intermediate_size=2 * hidden, dropout=0.1, max_length=128)
    return BertModel(config, add_pooling_layer=False)


def spread(module: nn.Module, seed: int, scale: float = 1.5) -> None:
    """Redraw every parameter of `module`, each distinct, so that a weight read in the wrong place, or a part left
    out, shows: a matrix N(0, scale^2 / fan_in) (attention neither uniform nor one-hot), an embedding N(0, 1), a
    bias N(0, 0.09), a LayerNorm's gain 1 + N(0, 0.09) and shift N(0, 0.09)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for part in module.modules():
            for name, parameter in part.named_parameters(recurse=False):
                draw = torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype)
                if isinstance(part, nn.LayerNorm):
                    parameter.copy_((1.0 if name == "weight" else 0.0) + 0.3 * draw)
                elif isinstance(part, nn.Embedding):
                    parameter.copy_(draw)
                elif name == "bias":
                    parameter.copy_(0.3 * draw)
                else:
                    parameter.copy_(draw * scale / parameter.shape[-1] ** 0.5)


def lengths_mask(lengths: list[int], width: int) -> torch.Tensor:
    return torch.arange(width) < torch.tensor(lengths)[:, None]


# --- the judge blocks against transformers' BERT modules in MORES's order (Eqs. 17-22) -----------------------


class MoresLayer(nn.Module):
    """MORES's interaction block from ``transformers.models.bert.modeling_bert``'s own modules: ``crossattention``
    (a ``BertAttention`` for cross-attention: its ``BertCrossAttention`` takes the queries from the hidden states and
    the keys and values from ``encoder_hidden_states``; its ``BertSelfOutput`` adds the residual of the hidden states
    and normalises), ``attention`` (a ``BertAttention``: self-attention of the query), ``intermediate`` and
    ``output`` (``BertIntermediate``, ``BertOutput``: the FFN, its residual and LayerNorm), called in the order of
    MORES's ``MORES_BertLayer.forward`` (luyug/MORES, bert_mores.py; modeling.py makes ``crossattention`` a copy of
    a BERT layer's ``attention``). Attention is transformers' eager implementation: scores times head_size^-0.5,
    plus an additive mask, softmax, times the values."""

    def __init__(self, config):
        super().__init__()
        from transformers.models.bert.modeling_bert import BertAttention, BertIntermediate, BertOutput

        self.crossattention = BertAttention(config, is_cross_attention=True)
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, hidden, self_mask, documents, cross_mask):
        """`self_mask` (B, 1, 1, q) and `cross_mask` (B, 1, 1, d): BERT's additive masks (`additive_mask`)."""
        crossed, _ = self.crossattention(hidden, None, documents, cross_mask)
        selfed, _ = self.attention(crossed, self_mask)
        return self.output(self.intermediate(selfed), selfed)


def additive_mask(mask: torch.Tensor) -> torch.Tensor:
    """BERT's extended attention mask of a (B, n) mask (True at real tokens): 0 at real keys, the dtype's most
    negative number at padding, (B, 1, 1, n)."""
    return (1.0 - mask[:, None, None, :].double()) * torch.finfo(torch.float64).min


def mores_copy(block, config) -> MoresLayer:
    """A `MoresLayer` holding `block`'s weights: the cross-attention's W_X, W_Y, W_Z, W^O and LayerNorm into
    ``crossattention``, the self-attention's into ``attention``, the FFN's two layers and LayerNorm into
    ``intermediate`` and ``output``."""
    layer = MoresLayer(config).double().eval()
    state = {}
    for mores, part in (("crossattention", block.cross), ("attention", block.self_attention)):
        for name in ("query", "key", "value"):
            state.update({f"{mores}.self.{name}.{p}": getattr(getattr(part, name), p) for p in ("weight", "bias")})
        state.update({f"{mores}.output.dense.{p}": getattr(part.dense, p) for p in ("weight", "bias")})
        state.update({f"{mores}.output.LayerNorm.{p}": getattr(part.norm, p) for p in ("weight", "bias")})
    for mores, part in (("intermediate.dense", block.ffn.intermediate), ("output.dense", block.ffn.output),
                        ("output.LayerNorm", block.ffn.norm)):
        state.update({f"{mores}.{p}": getattr(part, p) for p in ("weight", "bias")})
    layer.load_state_dict({k: v.detach().clone() for k, v in state.items()}, strict=True)  # every weight, once
    return layer


def reference_pool(hidden: torch.Tensor, lengths: list[int], kind: str) -> torch.Tensor:
    """ClsPool: row 0; AvePool: the mean of each query's first `lengths` rows (its real tokens), summed in a loop."""
    if kind == "cls":
        return hidden[:, 0]
    return torch.stack([sum(hidden[i, j] for j in range(n)) / n for i, n in enumerate(lengths)])


@pytest.mark.parametrize("pool_kind", ["cls", "mean"])
def test_judge_blocks_and_score_equal_mores_layers_of_transformers_modules(pool_kind):
    """Eqs. 17-21 for K = 2 stacked blocks, with query and document padding, against `MoresLayer` s of transformers'
    modules holding each block's weights (every weight redrawn: none shared by accident), block by block and at
    every query position (padded ones included: they attend like the others); then Eq. 22's score from
    `EARL.judge` over the documents' keys and values (`EARL.document_keys_values`), against w^T of the reference's
    [CLS] row or the mean of its real rows. Float64: agreement to rounding, 1e-10 (measured about 4e-15).

    An earlier reading's 1.5e-7 is float32 rounding, not a formula's difference (an epsilon or a mask value would
    show at 1e-6 and above, or not at all: BERT's finfo.min mask and -10000 give the same here): `build_earl` makes
    T_qry and the blocks in torch's default dtype, so weights it copies from a float64 BERT are rounded to float32.
    Hence the model is built from a float32 BERT and then made float64 whole, and its weights redrawn after."""
    bert = small_bert()
    model = build_earl(bert, num_blocks=2, pool=pool_kind).double().eval()  # T_doc, bert, is float64 too
    spread(model.blocks, seed=1)
    spread(model.score, seed=2)
    config = copy.deepcopy(bert.config)
    config._attn_implementation = "eager"  # transformers' own attention code, not torch's fused kernel
    layers = [mores_copy(block, config) for block in model.blocks]
    torch.manual_seed(3)
    query_lengths, doc_lengths = [3, 5], [7, 4, 6]
    q, d = torch.randn(2, 5, 16, dtype=torch.float64), torch.randn(3, 7, 16, dtype=torch.float64)
    query_mask, doc_mask = lengths_mask(query_lengths, 5), lengths_mask(doc_lengths, 7)
    query_index = torch.tensor([1, 0, 1])
    spread_q, spread_mask = q[query_index], query_mask[query_index]
    with torch.no_grad():
        keys_values = model.document_keys_values(d)
        got, expected = spread_q, spread_q
        for i, (block, layer) in enumerate(zip(model.blocks, layers)):
            got = block(got, spread_mask, keys_values[..., 32 * i : 32 * (i + 1)], doc_mask)
            expected = layer(expected, additive_mask(spread_mask), d, additive_mask(doc_mask))
            torch.testing.assert_close(got, expected, atol=1e-10, rtol=0, msg=f"block {i + 1}")
        scores = model.judge(q, query_mask, keys_values, doc_mask, query_index)
        pooled = reference_pool(expected, [query_lengths[i] for i in query_index.tolist()], pool_kind)
        expected_scores = pooled @ model.score.weight[0]
    assert model.score.bias is None
    torch.testing.assert_close(scores, expected_scores, atol=1e-10, rtol=0)
    assert len({round(s, 6) for s in scores.tolist()}) == 3 and expected_scores.abs().min() > 1e-3


def test_the_mores_reference_sees_padding_only_through_its_masks():
    """The reference is not vacuous about padding: without its masks (every key real) its output changes, by far
    more than the agreement above; and the padded keys it masks contribute exactly nothing."""
    bert = small_bert()
    model = build_earl(bert, num_blocks=1).double().eval()
    spread(model.blocks, seed=4)
    config = copy.deepcopy(bert.config)
    config._attn_implementation = "eager"
    layer = mores_copy(model.blocks[0], config)
    torch.manual_seed(5)
    q, d = torch.randn(1, 4, 16, dtype=torch.float64), torch.randn(1, 6, 16, dtype=torch.float64)
    query_mask, doc_mask = lengths_mask([3], 4), lengths_mask([4], 6)
    with torch.no_grad():
        masked = layer(q, additive_mask(query_mask), d, additive_mask(doc_mask))
        unmasked = layer(q, additive_mask(torch.ones_like(query_mask)), d, additive_mask(torch.ones_like(doc_mask)))
        cut = layer(q[:, :3], additive_mask(query_mask[:, :3]), d[:, :4], additive_mask(doc_mask[:, :4]))
    assert (masked[0, :3] - unmasked[0, :3]).abs().max() > 1e-2
    torch.testing.assert_close(masked[:, :3], cut, atol=1e-12, rtol=0)


# --- T_qry and T_doc against the BertModel they come from (Eqs. 6-16, Sec. 3.4) --------------------------------


@pytest.mark.parametrize("tied", [False, True])
def test_query_encoder_is_berts_first_l_layers_and_document_encoder_is_bert(tied):
    """Sec. 3.4's initialisation, on a padded batch: T_qry(qry) is the ``BertModel``'s own hidden state after its
    first l = L - K layers (``output_hidden_states``), at every position; T_doc(doc) is its last hidden state. Each
    row also equals the BertModel on that row alone, its padding cut off (the masks are passed on). 1e-12."""
    bert = small_bert(seed=6)
    spread(bert, seed=7)  # layers that differ a lot: a layer taken from the wrong depth shows
    model = build_earl(bert, num_blocks=2, tied=tied).double().eval()  # L = 4, K = 2: l = 2; bert float64 too
    ids, mask = tokens([5, 3, 4], width=5, seed=8)
    with torch.no_grad():
        reference = bert(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        got_q, got_d = model.encode_queries(ids, mask), model.encode_documents(ids, mask)
        alone = [bert(input_ids=ids[i : i + 1, :n], output_hidden_states=True) for i, n in enumerate([5, 3, 4])]
    assert len(reference.hidden_states) == 5  # the embeddings, then each of the 4 layers
    torch.testing.assert_close(got_q, reference.hidden_states[2], atol=1e-12, rtol=0)
    torch.testing.assert_close(got_d, reference.last_hidden_state, atol=1e-12, rtol=0)
    for i, (n, out) in enumerate(zip([5, 3, 4], alone)):
        torch.testing.assert_close(got_q[i, :n], out.hidden_states[2][0], atol=1e-12, rtol=0)
        torch.testing.assert_close(got_d[i, :n], out.last_hidden_state[0], atol=1e-12, rtol=0)
    assert (reference.hidden_states[2] - reference.hidden_states[3]).abs().max() > 1e-1  # the depth matters


# --- EARL end to end, written out (Eqs. 6-8, 17-22), through forward and the store paths ------------------------


class RowsStore:
    """What ``earl.index`` writes and `QueryScorer` reads, in memory and in float64: each document's rows over its
    real tokens from `earl.store.representation` (S1: D; S2: D'), returned zero-padded with their mask as
    `common.stores.representations.RepresentationStore.padded` returns them."""

    def __init__(self, model, encoder, documents, doc_ids, strategy):
        rep = representation(SimpleNamespace(model=model, name="earl"), encoder, strategy)
        batch = encoder.documents(documents.get_many(doc_ids))
        with torch.no_grad():
            rows, keep = rep.represent(batch["doc_tokens"], batch["doc_mask"])
        counts = document_row_counts(batch["doc_mask"]).tolist()
        assert keep.sum(1).tolist() == counts
        self.rows = {doc_id: rows[i, :n].clone() for i, (doc_id, n) in enumerate(zip(doc_ids, counts))}
        self.identity, self.width, self.folder, self.dtype = {"strategy": strategy}, rep.width, "memory", "float64"

    def padded(self, doc_ids):
        matrices = [self.rows[doc_id] for doc_id in doc_ids]
        longest = max(len(m) for m in matrices)
        batch = torch.zeros(len(matrices), longest, self.width, dtype=torch.float64)
        mask = torch.zeros(len(matrices), longest, dtype=torch.bool)
        for i, matrix in enumerate(matrices):
            batch[i, : len(matrix)], mask[i, : len(matrix)] = matrix, True
        return batch, mask


@pytest.fixture(scope="module")
def collection():
    """The built-in test collection encoded as a checkpoint's data settings say (12 query and 128 passage tokens,
    `earl.store.data_encoder`): two queries of different lengths (padded in a batch), each with two of its
    candidates, one cut at the passage length and one shorter (padded in a batch); `pairs` (query text, doc id)
    alternate between the queries."""
    source = source_from_spec("builtin:test")
    topics, documents, candidates = source.topics(), source.documents(), source.candidates()
    encoder = data_encoder({"tokenizer": "builtin", "query_length": 12, "passage_length": 128})
    qids, lengths = sorted(candidates), {}
    for qid in qids:
        lengths.setdefault(int(encoder.queries([topics[qid]])["query_mask"].sum()), qid)
        if len(lengths) == 2:
            break
    chosen = {}
    for qid in lengths.values():
        ranked = list(candidates[qid])[:40]
        counts = encoder.documents(documents.get_many(ranked))["doc_mask"].sum(1).tolist()
        cut = next(doc_id for doc_id, n in zip(ranked, counts) if n == 128)
        short = next(doc_id for doc_id, n in zip(ranked, counts) if n < 128)
        chosen[topics[qid]] = [cut, short]
    (first, (a, b)), (second, (c, d)) = chosen.items()
    return SimpleNamespace(queries=chosen, pairs=[(first, a), (second, d), (first, b), (second, c)],
                           documents=documents, encoder=encoder)


def earl_of_builtin_vocabulary(encoder, pool_kind: str, loss: str = "hinge"):
    """A float64 EARL (L = 3, K = 2, l = 1, h = 16, 4 heads of 4) over the built-in tokenizer's vocabulary, every
    weight redrawn (`spread`)."""
    tokenizer = encoder.tokenizer
    bert = small_bert(layers=3, heads=4, seed=9, vocab_size=len(tokenizer), pad=tokenizer.pad_token_id)
    model = build_earl(bert, num_blocks=2, pool=pool_kind, loss=loss).double().eval()
    spread(model, seed=10)
    return model


def real(row: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return row[mask.bool()]


@pytest.mark.parametrize("pool_kind, loss", [("cls", "hinge"), ("mean", "hinge"), ("cls", "cross_entropy")])
def test_earl_end_to_end_and_from_s1_and_s2_rows_is_the_paper_written_out(collection, pool_kind, loss):
    """Eqs. 6-8 and 17-22 by hand (`tests.earl.by_hand.model_score`: T_qry and T_doc, ``BertModel`` s, on the
    unpadded query and passage; then each judge block with explicit heads, softmax(Q K^T / sqrt(h / H)),
    residual, LayerNorm and BERT's GELU FFN; w^T Pool) for four (query, passage) pairs of two queries, against:
    `EARL.forward` on the batch of the four pairs (queries and passages padded, the queries spread by
    ``query_index``); and, per query, `QueryScorer` end to end (``earl.evaluate`` without a store) and reading S1
    rows (D, whose keys and values it computes) and S2 rows (D', Eq. 25), each document's rows over its real tokens
    as `earl.store.representation` makes them. 1e-10. The attention scale is BERT's, sqrt(h / H) per head
    (`test_the_departures_from_the_printed_equations_each_change_the_score`)."""
    encoder = collection.encoder
    model = earl_of_builtin_vocabulary(encoder, pool_kind, loss)
    texts, doc_ids = zip(*collection.pairs)
    batch = encoder(list(texts), collection.documents.get_many(list(doc_ids)))
    for mask in (batch["query_mask"], batch["doc_mask"]):
        lengths = mask.sum(1).tolist()
        assert min(lengths) < max(lengths) == mask.shape[1]  # padding in the batch
    assert batch["query_index"].tolist() == [0, 1, 0, 1]
    expected = torch.tensor([by_hand.model_score(model, real(batch["query_tokens"][i], batch["query_mask"][i]),
                                                 real(batch["doc_tokens"][j], batch["doc_mask"][j]), pool_kind)
                             for j, i in enumerate(batch["query_index"].tolist())], dtype=torch.float64)
    with torch.no_grad():
        forward = model(batch)
    torch.testing.assert_close(forward, expected, atol=1e-10, rtol=0)
    every = [doc_id for ids in collection.queries.values() for doc_id in ids]
    scorers = {"end to end": QueryScorer(model, encoder, batch_size=3, documents=collection.documents)}
    for strategy in ("s1", "s2"):
        store = RowsStore(model, encoder, collection.documents, every, strategy)
        scorers[strategy] = QueryScorer(model, encoder, batch_size=3, store=store)
    for name, scorer in scorers.items():
        for text, ids in collection.queries.items():
            want = torch.stack([expected[k] for k, pair in enumerate(collection.pairs) if pair[0] == text])
            order = [pair[1] for pair in collection.pairs if pair[0] == text]
            assert sorted(order) == sorted(ids)
            torch.testing.assert_close(scorer(text, order), want, atol=1e-10, rtol=0, msg=name)
    assert scorers["s2"].store.width == 2 * 2 * scorers["s1"].store.width  # D' is 2 K times D's width
    assert expected.abs().min() > 1e-3 and len({round(s, 6) for s in expected.tolist()}) == 4


def test_the_departures_from_the_printed_equations_each_change_the_score(collection):
    """Computing a printed equation where `earl.model` computes as BERT changes the score by far more than the tests'
    1e-10 (so the by-hand reference tells them apart): Eq. 1's scale sqrt(d_model) (BERT: sqrt(d_model / h) per
    head), Eq. 4's ReLU (BERT: GELU), Eq. 19's LayerNorm(FFN(Q_self)) + Q_self (BERT: LayerNorm(FFN(Q_self) + Q_self))."""
    encoder = collection.encoder
    model = earl_of_builtin_vocabulary(encoder, "cls")
    text, doc_id = collection.pairs[0]
    batch = encoder([text], collection.documents.get_many([doc_id]))
    query, document = real(batch["query_tokens"][0], batch["query_mask"][0]), real(batch["doc_tokens"][0],
                                                                                   batch["doc_mask"][0])
    with torch.no_grad():
        got = model(batch).item()
    assert got == pytest.approx(by_hand.model_score(model, query, document, "cls"), abs=1e-10)
    for printed in (by_hand.Printed(scale=True), by_hand.Printed(relu=True),
                    by_hand.Printed(norm_before_residual=True)):
        assert abs(by_hand.model_score(model, query, document, "cls", printed) - got) > 1e-3, printed
    heads, width = model.doc_encoder.config.num_attention_heads, model.hidden_size
    assert heads > 1 and math.sqrt(width) != math.sqrt(width // heads)  # the two scales differ at this size


def test_the_paper_prints_the_equations_the_model_departs_from():
    """The printed equations `earl.model` states it departs from (skipped where the paper's text is absent): Eq. 1's
    softmax(X Y^T / sqrt(d_model)) Z, Eq. 4's ReLU, Eq. 19's LayerNorm(FFN(Q_self)) + Q_self."""
    quoted(r"\\text\{softmax\}\\left\(\\frac\{XY\^T\}\{\\sqrt\{d_\{\\text\{model\}\}\}\}\\right\)Z")
    quoted(r"\\text\{FFN\}\(x\) = \\text\{ReLU\}\(xW_1 \+ b_1\)W_2 \+ b_2")
    quoted(r"\\text\{LayerNorm\}\(\\text\{FFN\}\(Q_\{self\}\)\) \+ Q_\{self\}")
