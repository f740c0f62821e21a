"""EARL (ClsPool and AvePool, tied and untied), the BERT ranker and BERT-Siamese, each with the hinge loss and the
cross-entropy, on the meta device standing in for a GPU (`tests.devices.on_meta`): a training step's forward, loss
and backward; `earl.query_scorer.QueryScorer` on the device, from S1 and S2 stores and end to end; the benchmark's
stores of encoded random documents built by a model there; every op meeting tensors on one device."""

import pytest
import torch

from common.data.builtin import builtin_source
from common.stores.representations import StoreWriter
from earl.ranker import EARLRanker
from earl.query_scorer import QueryScorer, store_width
from earl.store import data_encoder, random_stores
from tests.devices import META, assert_every_gradient_on_meta, assert_on_meta, on_meta, to_meta
from tests.token_rows import tokens

pytestmark = pytest.mark.usefixtures("one_thread")

#: A tiny from-scratch model over the built-in vocabulary: L = 2, h = 8, K = 1 judge block, l = 1.
TINY = {"num_layers": 2, "hidden_size": 8, "num_heads": 2, "intermediate_size": 16, "num_blocks": 1,
        "query_layers": 1, "tokenizer": "builtin"}
#: Every architecture and variant: (architecture, pool, tied).
VARIANTS = [("earl", "cls", False), ("earl", "cls", True), ("earl", "mean", False), ("earl", "mean", True),
            ("bert_ranker", "cls", False), ("bert_siamese", "cls", False)]


def training_batch() -> dict:
    """Two groups of a positive and a negative (2 queries spread by ``query_index``), read apart and concatenated."""
    query_tokens, query_mask = tokens([5, 3], width=5, seed=1)
    doc_tokens, doc_mask = tokens([7, 4, 6, 7], width=7, seed=2)
    pair_tokens, pair_mask = tokens([9, 6, 8, 9], width=9, seed=3)
    return {"query_tokens": query_tokens, "query_mask": query_mask, "doc_tokens": doc_tokens, "doc_mask": doc_mask,
            "query_index": torch.tensor([0, 0, 1, 1]), "pair_tokens": pair_tokens, "pair_mask": pair_mask,
            "pair_types": (torch.arange(9) >= 4).long().expand(4, 9), "labels": torch.tensor([1.0, 0.0, 1.0, 0.0]),
            "group_size": 2}


@pytest.mark.parametrize("loss", ["hinge", "cross_entropy"])
@pytest.mark.parametrize("architecture, pool, tied", VARIANTS)
def test_a_training_step_stays_on_the_device(architecture, pool, tied, loss):
    """`EARLRanker.training_step`'s loss of the model's scores, and its backward, on the meta device."""
    torch.manual_seed(0)
    ranker = EARLRanker(architecture=architecture, pool=pool, tied=tied, loss=loss, **TINY).to(META).train()
    batch = to_meta(training_batch())
    with on_meta():
        scores = ranker(batch)
        value = ranker.training_loss(scores, batch)
        value.backward()
    assert_on_meta(scores, value)
    assert scores.shape == (4,) and value.shape == ()
    assert_every_gradient_on_meta(ranker)


@pytest.fixture(scope="module")
def collection():
    """The built-in test split: its documents and one query with four candidates."""
    source = builtin_source("test")
    qid, candidates = next(iter(source.candidates().items()))
    return source.documents(), source.topics()[qid], sorted(candidates)[:4]


def tiny_store(folder, model, strategy: str, doc_ids: list[str]):
    """A store of `strategy`'s width for `doc_ids`, 3 rows each: the rows' values do not matter here."""
    width = store_width(model, strategy)
    writer = StoreWriter(folder, doc_ids=doc_ids, width=width, dtype="float32", shard_size=len(doc_ids),
                         identity={"checkpoint": "tiny", "strategy": strategy})
    writer.write_shard(0, [torch.randn(3, width) for _ in doc_ids])
    return writer.finish()


@pytest.mark.parametrize("strategy", ["s1", "s2", None])
def test_scoring_from_a_store_or_end_to_end_stays_on_the_device(tmp_path, collection, strategy):
    """`QueryScorer` on the meta device: the query and the candidates' rows moved there, S1's keys and values into
    its reused buffer, the judge's query index; the scores come back to the host, one per candidate."""
    documents, query, doc_ids = collection
    torch.manual_seed(0)
    model = EARLRanker(**TINY).model.eval()
    store = None if strategy is None else tiny_store(tmp_path / strategy, model, strategy, doc_ids)
    scorer = QueryScorer(model.to(META), data_encoder({"query_length": 8, "passage_length": 12}), batch_size=3,
                         device=META, store=store, documents=documents)
    with on_meta():
        scores = scorer(query, doc_ids)
    assert scores.shape == (4,) and scores.dtype == torch.float64 and scores.device.type == "cpu"


def test_the_benchmarks_stores_of_random_documents_are_encoded_on_the_models_device(tmp_path):
    """`random_stores` of encoded documents with the model on the meta device: the words drawn on the host are encoded
    there (S1's D and S2's D'), then written (as ones: a meta tensor's rows read so, `tests.devices`)."""
    torch.manual_seed(0)
    model = EARLRanker(**TINY).model.eval().to(META)
    with on_meta():
        stores = random_stores(tmp_path, model, name="tiny", checkpoint="random weights", strategies=["s1", "s2"], n=6,
                               count=3, dtype="fp32", documents="encoded", seed=0, shard_size=2, batch_size=2)
    assert {s: (len(store), store.width, store.manifest["rows"]) for s, store in stores.items()} == {
        "s1": (3, 8, 18), "s2": (3, 16, 18)}  # 3 documents of 6 tokens, h = 8 and 2 K h = 16 wide
