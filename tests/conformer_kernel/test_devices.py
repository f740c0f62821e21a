"""NDRM1, NDRM2 and NDRM3 (CK and TK) on the meta device standing in for a GPU (`tests.devices.on_meta`): a training
step's forward, RankNet loss and backward, on one process and on two (the multi-process branches of BatchScale and
BatchNorm, with the process count patched to 2 and the all-reduce a no-op), evaluation and the index's term scores,
every op meeting tensors on one device; and BatchScale's multi-process update worked by hand on the CPU."""

import pytest
import torch

import conformer_kernel.model
from conformer_kernel.model import BatchScale, Features
from conformer_kernel.ranker import ConformerKernelRanker, ranknet_loss
from tests.devices import META, assert_every_gradient_on_meta, assert_on_meta, on_meta, to_meta

pytestmark = pytest.mark.usefixtures("one_thread")

#: Tiny sizes: two layers, several pooling windows over 24 terms and the empty window of the 30-term layout.
TINY = dict(vocab_size=20, hidden_size=8, num_heads=2, num_layers=2, conv_window=3, kernels=3, pool_window=10,
            pool_stride=5, max_doc_terms=30, dropout=0.1)
#: Each architecture once per encoder (NDRM2 has none).
MODELS = [("ndrm1", "conformer"), ("ndrm1", "transformer"), ("ndrm2", "conformer"), ("ndrm3", "conformer"),
          ("ndrm3", "transformer")]


def features(queries: int = 2, documents: int = 3) -> Features:
    """`queries` queries of 4 slots (3 real terms) with `documents` documents of up to 24 terms each."""
    g = torch.Generator().manual_seed(0)
    Tq, Td = 4, 24
    query_mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]]).expand(queries, Tq)
    doc_mask = (torch.arange(Td) < torch.randint(5, Td + 1, (queries, documents, 1), generator=g)).float()
    doc_ids = torch.randint(1, 20, (queries, documents, Td), generator=g) * doc_mask.long()  # 0 = padding
    return Features(query_ids=torch.randint(1, 20, (queries, Tq), generator=g), query_mask=query_mask,
                    query_idf=torch.rand(queries, Tq, generator=g), doc_ids=doc_ids, doc_mask=doc_mask,
                    tf=torch.rand(queries, documents, Tq, generator=g), doc_length=doc_mask.sum(-1) + 10)


@pytest.fixture
def two_processes(monkeypatch):
    """The model sees 2 processes and each all-reduce leaves its tensor as it is (the other process adds nothing)."""
    monkeypatch.setattr(conformer_kernel.model, "world_size", lambda: 2)
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda tensor, *args, **kwargs: None)


def meta_ranker(model: str, encoder: str) -> ConformerKernelRanker:
    torch.manual_seed(0)
    return ConformerKernelRanker(model=model, encoder=encoder, **TINY).to(META)


def training_step(ranker: ConformerKernelRanker) -> None:
    """`ConformerKernelRanker.training_step`'s loss and its backward, on the meta device under `on_meta`."""
    ranker.train()
    batch = to_meta({"features": features(), "labels": torch.tensor([[1.0, 0.0, 0.0], [0.0, 2.0, 1.0]])})
    with on_meta():
        scores = ranker(batch["features"])  # (Q, D)
        loss = ranknet_loss(scores, batch["labels"])
        loss.backward()
    assert_on_meta(scores, loss)
    assert scores.shape == (2, 3) and loss.shape == ()
    assert_every_gradient_on_meta(ranker)


@pytest.mark.parametrize("model, encoder", MODELS)
def test_a_training_step_on_one_process_stays_on_the_device(model, encoder):
    training_step(meta_ranker(model, encoder))


@pytest.mark.parametrize("model, encoder", MODELS)
@pytest.mark.filterwarnings("ignore:torch.distributed.nn.functional.all_reduce is deprecated")
def test_a_training_step_on_two_processes_stays_on_the_device(two_processes, model, encoder):
    """BatchScale's sums and sizes and BatchNorm's statistics are all-reduced on the data's device (NDRM2 and NDRM3
    stacked a CPU size with the device's sum: the first multi-GPU step failed)."""
    ranker = meta_ranker(model, encoder)
    training_step(ranker)
    scales = [m for m in ranker.modules() if isinstance(m, BatchScale)]
    assert all(s.running_mean.device == META and s.count.device == META for s in scales)
    assert len(scales) == (0 if model == "ndrm1" else 2)


@pytest.mark.parametrize("model, encoder", MODELS)
def test_evaluation_and_the_index_scores_stay_on_the_device(model, encoder):
    """Evaluation scores (each distinct document encoded once) and the index's term scores of a pseudo-query."""
    ranker = meta_ranker(model, encoder).eval()
    with on_meta(), torch.no_grad():
        scores = ranker(to_meta(features()))
        terms = ranker.model.index_scores(to_meta(features(queries=1, documents=5)), chunk=2)
    assert_on_meta(scores, terms)
    assert scores.shape == (2, 3) and terms.shape == (5, 4)


def test_batch_scale_on_two_processes_by_hand(monkeypatch):
    """BatchScale's update on 2 processes (on the CPU): this process's slice [1, 2, 3] and the other's sum 10 over 2
    values, added by the all-reduce: E[x] = 16 / 5 = 3.2 after one step, count 5; then [4] and the other's 6 over 3
    values: E[x] = 26 / 9, count 9. Its output divides the slice by E[x] + 1e-6."""
    others = iter([torch.tensor([10.0, 2.0], dtype=torch.float64), torch.tensor([6.0, 3.0], dtype=torch.float64)])

    def all_reduce(tensor, *args, **kwargs):  # the other process's slice: its sum and size
        tensor += next(others)

    monkeypatch.setattr(conformer_kernel.model, "world_size", lambda: 2)
    monkeypatch.setattr(torch.distributed, "all_reduce", all_reduce)
    scale = BatchScale().train()
    out = scale(torch.tensor([1.0, 2.0, 3.0]))
    assert scale.count.item() == 5 and scale.running_mean.item() == pytest.approx(3.2, abs=1e-6)
    torch.testing.assert_close(out, torch.tensor([1.0, 2.0, 3.0]) / (3.2 + 1e-6))
    scale(torch.tensor([4.0]))
    assert scale.count.item() == 9 and scale.running_mean.item() == pytest.approx(26 / 9, abs=1e-6)
