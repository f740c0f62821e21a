"""NDRM1/2/3: Eq. 4 and BatchScale by hand, Eq. 3 against the module's BatchNorm statistics, and
query term independence (the index's per-term scores equal the re-ranking scores)."""

import functools
import random

import pytest
import torch
import torch.nn.functional as F

from common.encoders.length_batches import length_batches
from conformer_kernel.model import (
    NDRM1,
    NDRM2,
    NDRM3,
    BatchScale,
    DotProductSelfAttention,
    Features,
    ENCODER_CALL,
    build_ranker,
)
from conformer_kernel.ranker import ranknet_loss
from conformer_kernel.vocab import Resources

from tests.conformer_kernel import featurizer_of, model_settings, ndrm1_options
from tests.gradients import assert_same_gradients

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


EPS = 1e-6
SMALL = dict(hidden_size=16, num_heads=4, max_doc_terms=200, pool_window=30, pool_stride=10)


# --- NDRM2 and BatchScale ------------------------------------------------------------------------


def _ndrm2_features() -> Features:
    """One query (2 real terms, padded to 20) and 2 documents."""
    Tq = 20
    query_mask = torch.zeros(1, Tq)
    query_mask[0, :2] = 1.0
    query_idf = torch.zeros(1, Tq)
    query_idf[0, :2] = torch.tensor([2.0, 1.0])
    tf = torch.zeros(1, 2, Tq)
    tf[0, 0, :2] = torch.tensor([3.0, 0.0])
    tf[0, 1, :2] = torch.tensor([1.0, 2.0])
    query_ids = torch.zeros(1, Tq, dtype=torch.long)
    query_ids[0, :2] = torch.tensor([5, 7])
    return Features(query_ids=query_ids, query_mask=query_mask, query_idf=query_idf,
                    doc_ids=torch.ones(1, 2, 4, dtype=torch.long), doc_mask=torch.ones(1, 2, 4), tf=tf,
                    doc_length=torch.tensor([[100.0, 300.0]]))


def _eq4(idf: float, tf: float, length: float, mean_tf: float, mean_length: float) -> float:
    bs_tf = tf / (mean_tf + EPS)
    bs_len = length / (mean_length + EPS)
    return idf * bs_tf / (bs_tf + max(1.0 * bs_len + 0.0, 0.0) + EPS)


def test_ndrm2_hand_computed():
    model = NDRM2()
    assert model.length.weight.item() == 1.0 and model.length.bias.item() == 0.0
    f = _ndrm2_features()
    model.train()
    train_scores = model.term_scores(f)
    # E[tf] over all Q x D x 20 slots, the 38 padded ones as zeros: (3 + 0 + 1 + 2) / 40
    assert model.scale_tf.running_mean.item() == pytest.approx(6 / 40, rel=1e-6)
    assert model.scale_tf.count.item() == 40
    assert model.scale_length.running_mean.item() == pytest.approx(200.0, rel=1e-7)
    assert model.scale_length.count.item() == 2
    model.eval()
    scores = model.term_scores(f)
    m_tf, m_len = 0.15, 200.0
    want = torch.zeros(1, 2, 20, dtype=torch.float64)
    want[0, 0, 0] = _eq4(2.0, 3, 100, m_tf, m_len)  # 2 * 20 / (20 + 0.5) = 1.9512...
    want[0, 1, 0] = _eq4(2.0, 1, 300, m_tf, m_len)  # 2 * 6.667 / (6.667 + 1.5)
    want[0, 1, 1] = _eq4(1.0, 2, 300, m_tf, m_len)  # 13.333 / (13.333 + 1.5)
    assert want[0, 0, 0].item() == pytest.approx(2 * 20 / 20.5, rel=1e-5)
    torch.testing.assert_close(scores.double(), want, rtol=1e-6, atol=1e-7)
    assert torch.equal(scores[..., 2:], torch.zeros(1, 2, 18))  # padded query terms score 0
    assert scores[0, 0, 1].item() == 0.0  # tf = 0
    # training scales by the mean that already includes the batch
    torch.testing.assert_close(train_scores, scores)
    torch.testing.assert_close(model(f), scores.sum(-1))
    # eval does not move the means
    assert model.scale_tf.count.item() == 40 and model.scale_tf.running_mean.item() == pytest.approx(0.15, rel=1e-6)


def test_ndrm2_length_parameters():
    """w_dlen and b_dlen enter as ReLU(w BS(|d|) + b)."""
    model = NDRM2()
    f = _ndrm2_features()
    model.train()
    model.term_scores(f)
    model.eval()
    with torch.no_grad():
        model.length.weight.fill_(2.0)
        model.length.bias.fill_(-1.2)
    scores = model.term_scores(f)
    bs_tf, idf = 3 / (0.15 + EPS), 2.0
    # doc 0: ReLU(2 * 0.5 - 1.2) = 0; doc 1: ReLU(2 * 1.5 - 1.2) = 1.8
    assert scores[0, 0, 0].item() == pytest.approx(idf * bs_tf / (bs_tf + 0.0 + EPS), rel=1e-6)
    bs_tf1 = 1 / (0.15 + EPS)
    assert scores[0, 1, 0].item() == pytest.approx(idf * bs_tf1 / (bs_tf1 + 1.8 + EPS), rel=1e-5)


def test_batch_scale_cumulative_mean():
    bs = BatchScale().train()
    g = torch.Generator().manual_seed(0)
    batches = [torch.rand(3, generator=g) * 10, torch.rand(5, 2, generator=g) * 100, torch.rand(1, generator=g),
               torch.rand(7, 1, generator=g) * 3]
    seen = []
    for x in batches:
        y = bs(x)
        seen.append(x.double().flatten())
        mean = torch.cat(seen).mean().item()
        assert bs.running_mean.item() == pytest.approx(mean, rel=1e-6)
        assert bs.count.item() == sum(len(s) for s in seen)
        torch.testing.assert_close(y, x / (bs.running_mean + 1e-6))
    bs.eval()
    before = (bs.running_mean.clone(), bs.count.clone())
    x = torch.tensor([1.0, 2.0, 50.0])
    y = bs(x)
    assert torch.equal(bs.running_mean, before[0]) and torch.equal(bs.count, before[1])
    mean = torch.cat(seen).mean().item()
    torch.testing.assert_close(y.double(), x.double() / (mean + 1e-6), rtol=1e-6, atol=0)


def test_batch_scale_starts_at_zero():
    bs = BatchScale()
    assert bs.running_mean.item() == 0.0 and bs.count.item() == 0
    bs.eval()
    torch.testing.assert_close(bs(torch.tensor([2.0])), torch.tensor([2.0 / 1e-6]))


# --- a small collection for NDRM1 / NDRM3 ------------------------------------------------------


def _resources() -> Resources:
    words = [f"w{i}" for i in range(40)]
    rng = random.Random(0)
    idf = {w: rng.uniform(0.2, 3.0) for w in words}
    idf["oov"] = 3.0  # a query term outside the vocabulary keeps its IDF
    return Resources(["UNK", "<S>", "</S>", *words], idf)


QUERIES = [["w1", "w5", "w9"], ["w2", "w5", "w30", "w31", "oov"], ["w7", "w8"]]
LENGTHS = [[15, 60, 140], [30, 250, 8], [45, 100, 20]]


def _documents() -> list[list[list[str]]]:
    rng = random.Random(1)
    docs = []
    for q, lengths in zip(QUERIES, LENGTHS):
        row = []
        for n in lengths:
            terms = [f"w{rng.randrange(40)}" for _ in range(n - 2)]
            for t in q[: rng.randrange(1, len(q) + 1)]:  # some query terms, at random places
                terms[rng.randrange(len(terms))] = t
            row.append(["<S>", *terms, "</S>"])
        docs.append(row)
    return docs


@functools.lru_cache(maxsize=None)
def _trained(kind: str, encoder: str = "conformer", doc_padding: str = "official"):
    """A ranker after one RankNet step in train mode (BatchScale / BatchNorm statistics non-trivial),
    in eval mode; cached across tests, which only read it."""
    res = _resources()
    featurizer = featurizer_of(res, max_doc_terms=200)
    docs = _documents()
    torch.manual_seed(0)
    options = {} if kind == "ndrm2" else {"doc_padding": doc_padding}
    model = build_ranker(kind, len(res), **model_settings(encoder=encoder, dropout=0.2, **SMALL, **options))
    f = featurizer.batch(QUERIES, docs)
    labels = torch.tensor([[1.0, 0.0, 0.0]] * 3)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01) if list(model.parameters()) else None
    loss = ranknet_loss(model(f), labels)
    if optimizer is not None:
        loss.backward()
        optimizer.step()
    return model.eval(), featurizer, docs


def _pad_documents(f: Features, length: int) -> Features:
    extra = length - f.doc_ids.shape[-1]
    return Features(f.query_ids, f.query_mask, f.query_idf, F.pad(f.doc_ids, (0, extra)),
                    F.pad(f.doc_mask, (0, extra)), f.tf, f.doc_length)


def test_ndrm3_is_batchnorm_then_linear_over_ndrm1_and_ndrm2():
    res = _resources()
    featurizer = featurizer_of(res, max_doc_terms=200)
    f = featurizer.batch(QUERIES, _documents())
    torch.manual_seed(0)
    model = NDRM3(len(res), **ndrm1_options(dropout=0.0, **SMALL))
    captured = []
    model.norm.register_forward_hook(lambda module, args, out: captured.append(args[0].detach().clone()))
    model.train()
    model(f)
    pairs = captured[0]
    assert pairs.shape == (3 * 3 * 20, 2)  # every (query, document, query slot), padded slots included
    slot_mask = f.query_mask[:, None, :].expand(3, 3, 20).reshape(-1)
    assert torch.equal(pairs[slot_mask == 0], torch.zeros(int((slot_mask == 0).sum()), 2))
    # BatchNorm's running statistics: momentum 0.1 from (0, 1)
    torch.testing.assert_close(model.norm.running_mean, 0.1 * pairs.mean(0), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model.norm.running_var, 0.9 + 0.1 * pairs.var(0, unbiased=True), rtol=1e-5, atol=1e-6)

    model.eval()
    with torch.no_grad():
        latent = model.ndrm1.term_scores(f)
        explicit = model.ndrm2.term_scores(f)
        bn = model.norm
        mean, var, eps = bn.running_mean, bn.running_var, bn.eps
        z1 = (latent - mean[0]) / torch.sqrt(var[0] + eps) * bn.weight[0] + bn.bias[0]
        z2 = (explicit - mean[1]) / torch.sqrt(var[1] + eps) * bn.weight[1] + bn.bias[1]
        w, b = model.combine.weight[0], model.combine.bias[0]
        want = (w[0] * z1 + w[1] * z2 + b) * f.query_mask[:, None]
        torch.testing.assert_close(model.term_scores(f), want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(model(f), want.sum(-1), rtol=1e-5, atol=1e-5)
        # NDRM3's parts are NDRM1 and NDRM2 as such
        assert isinstance(model.ndrm1, NDRM1) and isinstance(model.ndrm2, NDRM2)


KINDS = [("ndrm1", "conformer", "official"), ("ndrm2", "conformer", "official"), ("ndrm3", "conformer", "official"),
         ("ndrm3", "conformer", "zeroed"), ("ndrm1", "transformer", "official")]


@pytest.mark.parametrize("kind,encoder,doc_padding", KINDS)
def test_index_scores_equal_term_scores(kind, encoder, doc_padding):
    """With either padding a document's term scores do not depend on its batch: with the official one, each batch
    is padded to its longest document + 2 x 15 terms (2 layers, window 31), here also to all 200 terms."""
    model, featurizer, docs = _trained(kind, encoder, doc_padding)
    if kind == "ndrm2":
        assert model.scale_tf.count.item() == 3 * 3 * 20
    elif kind == "ndrm3":
        assert model.norm.num_batches_tracked.item() == 1
    # one pseudo-query with every query's terms, over all 9 documents (padded to 200 terms)
    pseudo = [t for q in QUERIES for t in q]
    all_docs = [d for row in docs for d in row]
    fi = featurizer.batch([pseudo], [all_docs])
    assert fi.doc_ids.shape[-1] == 200
    with torch.no_grad():
        index = model.index_scores(fi, chunk=4)  # (9, 20)
        assert index.shape == (9, 20)
        assert torch.equal(index[:, len(pseudo):], torch.zeros(9, 20 - len(pseudo)))
        offset = 0
        for i, q in enumerate(QUERIES):
            f = featurizer.batch([q], [docs[i]])  # padded to this query's longest document only
            scores = model.term_scores(f)[0]  # (3, 20)
            assert torch.equal(scores[:, len(q):], torch.zeros(3, 20 - len(q)))
            torch.testing.assert_close(index[3 * i : 3 * i + 3, offset : offset + len(q)], scores[:, : len(q)],
                                       rtol=0, atol=1e-5)
            offset += len(q)
            # the same batch padded to max_doc_terms: same scores
            padded = model.term_scores(_pad_documents(f, 200))[0]
            torch.testing.assert_close(padded, scores, rtol=0, atol=1e-6)
        # the index scores with chunk 64 (all terms at once) agree with chunk 4
        torch.testing.assert_close(model.index_scores(fi), index, rtol=0, atol=1e-6)


# --- the batch's work without its padding --------------------------------------------------------------------------


def _documents_of_lengths(lengths: list[int], vocab: int = 30) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(len(lengths))
    ids = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    mask = torch.zeros(len(lengths), max(lengths))
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(0, vocab, (n,), generator=g)  # 0 = UNK among the terms too
        mask[i, :n] = 1.0
    return ids, mask


@pytest.mark.parametrize("doc_padding", ["official", "zeroed"])
def test_documents_encoded_by_length_equal_one_padded_batch(doc_padding):
    """Batches of similar length (and, in evaluation, each distinct document once) give every document's vectors
    as the whole batch padded to its longest document does, and the same gradients."""
    torch.manual_seed(0)
    model = NDRM1(30, **ndrm1_options(num_layers=2, dropout=0.0, doc_padding=doc_padding, **SMALL)).double()
    lengths = [3, 180, 7, 60, 61, 2, 150, 7]
    ids, mask = _documents_of_lengths(lengths)
    ids[7], mask[7] = ids[2], mask[2]  # a document twice, as when it is a candidate of two queries
    batches = length_batches(lengths, model.encoder.padded_length, call=ENCODER_CALL)
    assert 1 < len(batches) < len(lengths)
    upstream = torch.randn(len(lengths), max(lengths), 16, dtype=torch.float64) * mask[..., None]
    for training in (True, False):
        model.train(training)
        got = model.encode_documents(ids, mask)
        want = model._encode(ids, mask)  # every document padded to the batch's longest
        torch.testing.assert_close(got * mask[..., None], want * mask[..., None], rtol=1e-10, atol=1e-10)
        assert_same_gradients(got, want, list(model.parameters()), upstream, rtol=1e-9, atol=1e-9)


def test_only_the_used_query_slots_are_pooled():
    """The term scores of the query slots up to the last real term, zeros after, equal pooling all 20 slots and
    multiplying by the mask (the official computation), with the same gradients."""
    res = _resources()
    f = featurizer_of(res, max_doc_terms=200).batch(QUERIES, _documents())
    torch.manual_seed(0)
    model = NDRM1(len(res), **ndrm1_options(dropout=0.0, **SMALL)).double()
    Q, D, Td = f.doc_ids.shape
    got = model.term_scores(f)
    docs = model.encode_documents(f.doc_ids.view(Q * D, Td), f.doc_mask.view(Q * D, Td)).view(Q, D, Td, -1)
    similarity = model.encode_terms(f.query_ids)[:, None] @ docs.transpose(-2, -1)  # every slot, padded ones too
    want = model.pooling(similarity, f.doc_mask) * f.query_mask[:, None]
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert_same_gradients(got, want, list(model.parameters()), rtol=1e-10, atol=1e-10)


def test_term_scores_sum_to_the_score():
    model, featurizer, docs = _trained("ndrm3")
    f = featurizer.batch(QUERIES, docs)
    with torch.no_grad():
        torch.testing.assert_close(model(f), model.term_scores(f).sum(-1))


def test_build_ranker():
    assert isinstance(build_ranker("ndrm2", 10, **model_settings()), NDRM2)
    m1 = build_ranker("ndrm1", 10, **model_settings(**SMALL))
    assert isinstance(m1, NDRM1) and all(layer.conv.kernel_size == (31,) for layer in m1.encoder.layers)
    assert m1.encoder.layers[0].conv.groups == 4
    tk = build_ranker("ndrm1", 10, **model_settings(encoder="transformer", **SMALL))
    assert all(layer.conv is None and isinstance(layer.attn, DotProductSelfAttention) for layer in tk.encoder.layers)
    m3 = build_ranker("ndrm3", 10, **model_settings(conv_window=5, **SMALL))
    assert isinstance(m3, NDRM3) and m3.ndrm1.encoder.layers[1].conv.padding == (2,)
    with pytest.raises(ValueError, match="unknown model"):
        build_ranker("ndrm4", 10, **model_settings())
    with pytest.raises(ValueError, match="encoder"):
        build_ranker("ndrm1", 10, **model_settings(encoder="lstm"))


def test_identity_init_matches_a_term_with_itself_at_cosine_one():
    torch.manual_seed(0)
    model = NDRM1(30, **ndrm1_options(hidden_size=16, num_heads=4, num_layers=1, dropout=0.0, max_doc_terms=50,
                                      pool_window=10, pool_stride=5, identity_init=True)).eval()
    ids = torch.tensor([[5, 7, 9, 5]])
    with torch.no_grad():
        docs = model.encode_documents(ids, torch.ones(1, 4))  # (1, 4, H)
        terms = model.encode_terms(torch.tensor([5, 8]))  # (2, H)
        cosine = terms @ docs[0].T  # (2, 4)
    assert cosine[0, 0].item() == pytest.approx(1.0, abs=1e-6) and cosine[0, 3].item() == pytest.approx(1.0, abs=1e-6)
    assert abs(cosine[1, 0].item()) < 0.9  # another term's embedding: not the same direction
    default = NDRM1(30, **ndrm1_options(hidden_size=16, num_heads=4, num_layers=1, max_doc_terms=50, pool_window=10,
                                        pool_stride=5))
    assert not torch.equal(default.query_proj.weight, torch.eye(16))
