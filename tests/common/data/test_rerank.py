"""`common.data.rerank`: the pairs to score (depth, trec_eval order), the re-ranked run, the gathered scores, and
`RerankPairs`, the evaluation dataset (pairs by document length, a package's encoder in `collate`)."""

import pickle
from functools import partial

import lightning as L
import torch

from common.data.formats import Document, ranked
from common.data.rerank import RerankPairs, gather_scores, rerank_pairs, reranked_run

CANDIDATES = {
    # trec_eval's order: score descending, ties by docid descending; 1.0 and 1.0 + 1e-9 tie in float32.
    "q2": {"d1": 3.0, "d2": 5.0, "d3": 5.0, "d4": 1.0 + 1e-9, "d5": 1.0},
    "q1": {"a": 2.0, "b": 1.0},
    "q3": {"x": 1.0},
}


def test_rerank_pairs_takes_each_querys_top_depth_in_trec_eval_order():
    assert rerank_pairs(CANDIDATES, depth=3) == [
        ("q1", "a"), ("q1", "b"),  # queries sorted; q1 has only two candidates
        ("q2", "d3"), ("q2", "d2"), ("q2", "d1"),  # the tie at 5.0 broken by docid descending
        ("q3", "x"),
    ]


def test_rerank_pairs_cuts_at_the_depth_inside_a_float32_tie():
    # d4 scores higher in float64, but trec_eval sees 1.0 twice and puts d5 first.
    assert rerank_pairs(CANDIDATES, depth=4, queries=["q2"]) == [("q2", "d3"), ("q2", "d2"), ("q2", "d1"), ("q2", "d5")]
    assert rerank_pairs(CANDIDATES, depth=1, queries=["q3", "q1"]) == [("q3", "x"), ("q1", "a")]
    assert rerank_pairs(CANDIDATES, depth=0) == []


def test_reranked_run_keeps_the_unscored_candidates_below_in_first_stage_order():
    pairs = rerank_pairs(CANDIDATES, depth=3, queries=["q1", "q2"])  # a, b, d3, d2, d1
    rows = torch.tensor([[4, 0.75], [2, -0.5], [3, 0.25], [0, 1.5], [1, 0.5]], dtype=torch.float64)
    run = reranked_run(pairs, rows, CANDIDATES)
    assert set(run) == {"q1", "q2"}  # q3 was not re-ranked
    assert run["q1"] == {"a": 1.5, "b": 0.5}
    # Under the lowest new score (-0.5), d5 then d4 (their trec_eval order), one apart.
    assert run["q2"] == {"d1": 0.75, "d2": 0.25, "d3": -0.5, "d5": -1.5, "d4": -2.5}
    assert [doc for doc, _ in ranked(run["q2"])] == ["d1", "d2", "d3", "d5", "d4"]


def test_reranked_run_counts_a_padded_samplers_duplicates_once():
    pairs = rerank_pairs(CANDIDATES, depth=2, queries=["q2"])  # d3, d2
    once = torch.tensor([[1, 2.0], [0, 1.0]], dtype=torch.float64)
    padded = torch.cat([once, torch.tensor([[1, 2.0], [1, 2.0]], dtype=torch.float64)])
    expected = {"d2": 2.0, "d3": 1.0, "d1": 0.0, "d5": -1.0, "d4": -2.0}
    assert reranked_run(pairs, once, CANDIDATES) == {"q2": expected}
    assert reranked_run(pairs, padded, CANDIDATES) == {"q2": expected}


def test_a_repeated_pair_keeps_the_score_the_ranking_metric_counts():
    """On a GPU a padded duplicate may score differently from its first row (another batch, other numerics): the run
    and `RankingMetrics` keep the same row, the first gathered (rank 0's here), so run.trec's metrics are those
    logged."""
    from common.metrics import RankingMetrics

    pairs = rerank_pairs(CANDIDATES, depth=2, queries=["q2"])  # d3, d2
    rank0 = torch.tensor([[0, 1.0], [1, 0.5]], dtype=torch.float64)
    rank1 = torch.tensor([[1, 3.0]], dtype=torch.float64)  # d2 again, scored otherwise
    run = reranked_run(pairs, torch.cat([rank0, rank1]), CANDIDATES)
    assert run["q2"]["d3"] == 1.0 and run["q2"]["d2"] == 0.5
    metric = RankingMetrics({"q2": {"d2": 1}}, ["recip_rank"])
    for rows in (rank0, rank1):  # torchmetrics concatenates the ranks' states in rank order
        metric.update(["q2"] * len(rows), [pairs[int(i)][1] for i in rows[:, 0]], rows[:, 1])
    assert metric.compute()["recip_rank"].item() == 0.5  # d2 second, as in the run
    assert [doc for doc, _ in ranked(run["q2"])][:2] == ["d3", "d2"]


def test_reranked_run_lists_the_queries_in_pair_order_however_the_rows_were_gathered():
    pairs = rerank_pairs(CANDIDATES, depth=1, queries=["q3", "q1", "q2"])  # x, a, d3
    one_process = torch.tensor([[0, 1.0], [1, 2.0], [2, 3.0]], dtype=torch.float64)
    two_processes = one_process[[0, 2, 1, 1]]  # rank 0 scored rows 0 and 2, rank 1 row 1 and a padding duplicate
    run = reranked_run(pairs, two_processes, CANDIDATES)
    assert run == reranked_run(pairs, one_process, CANDIDATES)
    assert list(run) == ["q3", "q1", "q2"]  # the order run.trec is written in

class _Scorer(L.LightningModule):
    """Scores pair i as i / 2 and gathers the (index, score) rows at the end of the test epoch."""

    def __init__(self, record: bool = True):
        super().__init__()
        self.record = record

    def on_test_epoch_start(self) -> None:
        self.rows = []

    def test_step(self, batch, batch_idx):
        if self.record:
            self.rows.append(torch.stack([batch.float(), batch.float() / 2], 1))  # float32 rows

    def on_test_epoch_end(self) -> None:
        self.gathered = gather_scores(self, self.rows)


def _gathered(record: bool) -> torch.Tensor:
    model = _Scorer(record)
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False)
    trainer.test(model, dataloaders=torch.utils.data.DataLoader(torch.arange(5), batch_size=2), verbose=False)
    return model.gathered


def test_gather_scores_returns_float64_cpu_rows():
    gathered = _gathered(record=True)
    assert gathered.dtype == torch.float64 and gathered.device.type == "cpu"
    assert gathered.tolist() == [[0.0, 0.0], [1.0, 0.5], [2.0, 1.0], [3.0, 1.5], [4.0, 2.0]]


def test_gather_scores_of_no_rows_is_an_empty_table():
    gathered = _gathered(record=False)
    assert gathered.shape == (0, 2) and gathered.dtype == torch.float64


# --------------------------------------------------------------------------- RerankPairs

TOPICS = {"q1": "first query", "q2": "second query"}
DOCS = {
    "long": Document("long", "x" * 20, title="t"),  # 21 characters of title and text
    "short": Document("short", "abc"),  # 3
    "mid": Document("mid", "0123456789", title="head"),  # 14
    "tie": Document("tie", "abcd", title="efghijklmn"),  # 14, as mid
}


class _Lookup:
    """A `DocumentLookup` that records every ``get_many`` call."""

    def __init__(self, documents: dict[str, Document]):
        self.documents, self.calls = documents, []

    def get_many(self, doc_ids: list[str]) -> list[Document]:
        self.calls.append(list(doc_ids))
        return [self.documents[d] for d in doc_ids]


def _encode(queries: list[str], documents: list[Document], tag: str = "fake") -> dict:
    """A package encoder (module level, so that it pickles): the inputs it was given, and one tensor."""
    return {"queries": queries, "documents": [d.doc_id for d in documents], tag: torch.ones(len(queries))}


PAIRS = [("q1", "long"), ("q1", "short"), ("q2", "mid"), ("q1", "tie"), ("q2", "short"), ("q1", "mid")]


def test_rerank_pairs_dataset_orders_the_pairs_by_document_length_then_by_pair():
    dataset = RerankPairs(PAIRS, TOPICS, _Lookup(DOCS), _encode)
    assert dataset.pairs == [
        ("q1", "short"), ("q2", "short"),  # 3 characters
        ("q1", "mid"), ("q1", "tie"), ("q2", "mid"),  # 14: ties by (qid, docid)
        ("q1", "long"),  # 21
    ]
    assert len(dataset) == 6 and [dataset[i] for i in range(6)] == list(range(6))  # item = position in `pairs`


def test_rerank_pairs_dataset_reads_document_lengths_in_chunks_of_a_thousand():
    documents = {f"d{i:04d}": Document(f"d{i:04d}", "w" * (i % 7)) for i in range(2500)}
    lookup = _Lookup(documents)
    dataset = RerankPairs([("q1", d) for d in documents], TOPICS, lookup, _encode)
    assert [len(call) for call in lookup.calls] == [1000, 1000, 500]
    assert [len(documents[d].text) for _, d in dataset.pairs] == sorted(i % 7 for i in range(2500))


def test_rerank_pairs_collate_encodes_the_batch_and_adds_qids_doc_ids_and_index():
    dataset = RerankPairs(PAIRS, TOPICS, _Lookup(DOCS), _encode)
    batch = dataset.collate([4, 0, 2])  # any order, as a distributed sampler gives them
    assert set(batch) == {"queries", "documents", "fake", "qids", "doc_ids", "index"}
    assert batch["queries"] == ["second query", "first query", "first query"]  # query texts, in batch order
    assert batch["documents"] == ["mid", "short", "mid"]  # pairs 4, 0, 2 of the sorted list
    assert batch["qids"] == ["q2", "q1", "q1"] and batch["doc_ids"] == ["mid", "short", "mid"]
    assert batch["index"].tolist() == [4, 0, 2] and batch["index"].dtype == torch.int64
    assert batch["fake"].tolist() == [1.0, 1.0, 1.0]


def test_rerank_pairs_with_a_partial_encoder_pickles_for_loader_workers():
    dataset = RerankPairs(PAIRS, TOPICS, _Lookup(DOCS), partial(_encode, tag="features"))
    copy = pickle.loads(pickle.dumps(dataset))
    assert copy.pairs == dataset.pairs
    batch = copy.collate([0])
    assert set(batch) == {"queries", "documents", "features", "qids", "doc_ids", "index"}


def test_rerank_pairs_in_a_loader_visit_every_pair_once_in_order():
    dataset = RerankPairs(PAIRS, TOPICS, _Lookup(DOCS), _encode)
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, collate_fn=dataset.collate)
    batches = list(loader)
    assert [b["index"].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5]]
    assert [p for b in batches for p in zip(b["qids"], b["doc_ids"])] == dataset.pairs
