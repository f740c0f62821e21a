"""MVA (each pooling on each side, one head and several), the dual encoder (DE) and cross-attention (CA) on the meta
device standing in for a GPU (`tests.devices.on_meta`): a training step's forward, softmax loss and backward; a
store's rows per document; and `mva.query_scorer.QueryScorer` (MVA, DE: from a store and end to end) and
`mva.store.CrossScorer` (CA) on the device; every op meeting tensors on one device."""

import pytest
import torch

from common.data.builtin import builtin_source
from common.stores.representations import StoreWriter
from mva.ranker import MVARanker
from mva.query_scorer import QueryScorer, document_rows, store_width
from mva.store import CrossScorer, data_encoder, document_row_counts
from tests.devices import META, assert_every_gradient_on_meta, assert_on_meta, on_meta, to_meta
from tests.token_rows import tokens

pytestmark = pytest.mark.usefixtures("one_thread")

#: A tiny from-scratch model over the built-in vocabulary.
TINY = {"num_layers": 1, "hidden_size": 8, "num_heads": 2, "intermediate_size": 16, "projection": 4,
        "tokenizer": "builtin"}
#: Each pooling on both sides (K = 2 timesteps, rho = 3), the second with a different one on the query's.
MVA = [dict(query_pooling="all", doc_pooling="all", heads=2),
       dict(query_pooling="first_k", query_timesteps=2, doc_pooling="first_k", doc_timesteps=3),
       dict(query_pooling="cls", query_timesteps=2, doc_pooling="cls", doc_timesteps=2, heads=2),
       dict(query_pooling="temporal", query_factor=2, doc_pooling="temporal", doc_factor=3),
       dict(query_pooling="all", doc_pooling="temporal", doc_factor=2)]
ARCHITECTURES = [dict(architecture="mva", **options) for options in MVA] + [
    dict(architecture="de"), dict(architecture="de", de_pooling="mean", de_cosine_scale=20.0), dict(architecture="ca")]


def training_batch() -> dict:
    """Two groups of a positive and two negatives (2 queries spread by ``query_index``), read apart and
    concatenated."""
    query_tokens, query_mask = tokens([5, 3], width=5, seed=1)
    doc_tokens, doc_mask = tokens([7, 4, 6, 7, 3, 5], width=7, seed=2)
    pair_tokens, pair_mask = tokens([9, 6, 8, 9, 5, 7], width=9, seed=3)
    return {"query_tokens": query_tokens, "query_mask": query_mask, "doc_tokens": doc_tokens, "doc_mask": doc_mask,
            "query_index": torch.tensor([0, 0, 0, 1, 1, 1]), "pair_tokens": pair_tokens, "pair_mask": pair_mask,
            "pair_types": (torch.arange(9) >= 4).long().expand(6, 9),
            "labels": torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0]), "group_size": 3}


def ranker(**options) -> MVARanker:
    torch.manual_seed(0)
    return MVARanker(**TINY, **options)


@pytest.mark.parametrize("options", ARCHITECTURES, ids=lambda o: "-".join(map(str, o.values())))
def test_a_training_step_stays_on_the_device(options):
    """`MVARanker.training_step`'s softmax loss of the model's scores, and its backward, on the meta device."""
    model = ranker(**options).to(META).train()
    batch = to_meta(training_batch())
    with on_meta():
        scores = model(batch)
        value = model.training_loss(scores, batch)
        value.backward()
    assert_on_meta(scores, value)
    assert scores.shape == (6,) and value.shape == ()
    assert_every_gradient_on_meta(model)


@pytest.mark.parametrize("options", ARCHITECTURES[:6], ids=lambda o: "-".join(map(str, o.values())))
def test_a_stores_rows_stay_on_the_device(options):
    """What ``mva.index`` stores of a batch of documents, and the rows it counts from the mask alone (MVA's
    timesteps: the real positions but [SEP], indexed on the device)."""
    model = ranker(**options).model.to(META).eval()
    doc_tokens, doc_mask = (x.to(META) for x in tokens([7, 4, 6], width=7, seed=2))
    with on_meta(), torch.no_grad():
        rows, keep = document_rows(model, doc_tokens, doc_mask)
        counts = document_row_counts(model, doc_mask)
    assert_on_meta(rows, keep, counts)
    assert rows.shape[-1] == store_width(model) and keep.shape == rows.shape[:2] and counts.shape == (3,)


@pytest.fixture(scope="module")
def collection():
    """The built-in test split: its documents and one query with four candidates."""
    source = builtin_source("test")
    qid, candidates = next(iter(source.candidates().items()))
    return source.documents(), source.topics()[qid], sorted(candidates)[:4]


SETTINGS = {"query_length": 8, "passage_length": 12}


@pytest.mark.parametrize("stored", [True, False], ids=["store", "end_to_end"])
@pytest.mark.parametrize("options", [ARCHITECTURES[3], ARCHITECTURES[5]], ids=["mva", "de"])
def test_scoring_from_a_store_or_end_to_end_stays_on_the_device(tmp_path, collection, options, stored):
    """`QueryScorer` on the meta device: the query and the candidates' rows moved there, the head's query index;
    the scores come back to the host, one per candidate."""
    documents, query, doc_ids = collection
    model = ranker(**options).model.eval()
    store = None
    if stored:
        width = store_width(model)
        writer = StoreWriter(tmp_path / "store", doc_ids=doc_ids, width=width, dtype="float32", shard_size=4,
                             identity={"checkpoint": "tiny", "strategy": options["architecture"]})
        writer.write_shard(0, [torch.randn(3, width) for _ in doc_ids])  # the rows' values do not matter here
        store = writer.finish()
    scorer = QueryScorer(model.to(META), data_encoder(SETTINGS), batch_size=3, device=META, store=store,
                         documents=documents)
    with on_meta():
        scores = scorer(query, doc_ids)
    assert scores.shape == (4,) and scores.dtype == torch.float64 and scores.device.type == "cpu"


def test_cross_attention_rescoring_stays_on_the_device(collection):
    """`CrossScorer` (CA over the concatenated pairs) on the meta device: the scores come back to the host."""
    documents, query, doc_ids = collection
    scorer = CrossScorer(ranker(architecture="ca").eval().to(META), data_encoder(SETTINGS, pairs=True), documents,
                         batch_size=3, device=META)
    with on_meta():
        scores = scorer(query, doc_ids)
    assert scores.shape == (4,) and scores.dtype == torch.float64 and scores.device.type == "cpu"
