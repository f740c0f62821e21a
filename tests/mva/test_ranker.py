"""`mva.ranker`: the softmax cross-entropy over a triple's two scores (Sec. 2.3), worked by hand; a training step's
loss over a real batch of groups against per-pair scores and the loss written out; the optimizer's parameter
groups and the warm-up/decay schedule the ranker configures, against hand-computed values."""

import math
import warnings
from types import SimpleNamespace

import pytest
import torch

from common.data.specs import source_from_spec
from common.refusals import SettingError
from mva.data import MVADataModule
from mva.ranker import MVARanker, softmax_loss
from tests.papers import training_groups

pytestmark = pytest.mark.usefixtures("one_thread")

#: A tiny from-scratch MVA over the built-in vocabulary (no download).
TINY = {"num_layers": 1, "hidden_size": 16, "num_heads": 2, "intermediate_size": 32, "projection": 8, "heads": 2,
        "tokenizer": "builtin"}


def test_softmax_loss_by_hand():
    """Sec. 2.3: -log(e^s+ / (e^s+ + e^s-)) averaged over triples."""
    scores = torch.tensor([[2.0, 0.0], [0.0, 1.0]]).double()
    expected = (math.log(1 + math.exp(-2)) + math.log(1 + math.exp(1))) / 2
    assert softmax_loss(scores).item() == pytest.approx(expected, abs=1e-12)


def test_a_training_step_is_the_softmax_loss_over_each_group_positive_first():
    """A real training batch of the built-in collection (`MVADataModule`, 2 negatives: groups of 3), four groups of
    three queries (one query in two groups, spread by ``query_index``), collated as the loader does. The step's loss
    is the mean over the four groups of -log softmax(s)[positive], each group's scores computed pair by pair (each
    (query, document) encoded and scored alone) and arranged by the sampler's groups; the positive, first, is
    relevant in the qrels and the negatives are not."""
    data = MVADataModule(train="builtin:train", dev=None, test=None, negatives=2, batch_size=4, query_length=12,
                         passage_length=24)
    dataset = data.dataset("train")
    groups = training_groups(dataset)
    batch = dataset.collate(groups)
    source = source_from_spec("builtin:train")
    qrels, topics, documents = source.qrels(), source.topics(), source.documents()
    for group in groups:
        assert len(group.doc_ids) == 3 and qrels[group.qid][group.doc_ids[0]] >= 1
        assert all(qrels[group.qid].get(doc_id, 0) < 1 for doc_id in group.doc_ids[1:])
    assert batch["labels"].tolist() == [1.0, 0.0, 0.0] * 4 and len(batch["query_tokens"]) == 3
    torch.manual_seed(0)
    ranker = MVARanker(**TINY, dropout=0.0).double().eval()
    with torch.no_grad():
        for parameter in ranker.parameters():  # spread scores: a loss far from log 3 whatever the grouping
            if parameter.ndim > 1:
                parameter.normal_(0, 0.3)

        def alone(qid: str, doc_id: str) -> float:
            return ranker(data.encoder([topics[qid]], documents.get_many([doc_id]))).item()

        scores = [[alone(g.qid, doc_id) for doc_id in g.doc_ids] for g in groups]  # (G, 1 + negatives)
        expected = sum(math.log(sum(math.exp(s) for s in row)) - row[0] for row in scores) / len(scores)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*self.log.*")  # no Trainer to log to
            loss = ranker.training_step(batch, 0)
    assert loss.item() == pytest.approx(expected, abs=1e-10)
    flat = [s for row in scores for s in row]
    assert max(flat) - min(flat) > 0.1 and abs(expected - math.log(3)) > 0.01


def configured(steps: int, **settings):
    """A tiny ranker's `configure_optimizers` as a Trainer of `steps` optimizer steps calls it (Lightning reads
    ``estimated_stepping_batches``, `max_steps` in the paper's configs)."""
    ranker = MVARanker(**TINY, doc_pooling="cls", doc_timesteps=2, **settings)
    ranker.trainer = SimpleNamespace(estimated_stepping_batches=steps, gradient_clip_val=None, precision_plugin=None)
    return ranker, ranker.configure_optimizers()


def test_weight_decay_spares_biases_and_layer_norms_and_covers_every_parameter_once():
    """AdamW's groups with weight_decay 0.01: every bias and every LayerNorm weight without decay, every other
    parameter (the encoder's matrices and embeddings, the four projections, the learned [CLS] embeddings) with it,
    each trainable parameter in exactly one group, and no other tensor in any. By name, as BERT's fine-tuning code
    excludes them (``bias``, ``LayerNorm``)."""
    ranker, configuration = configured(10, weight_decay=0.01, lr=3e-5)
    optimizer = configuration["optimizer"]
    assert isinstance(optimizer, torch.optim.AdamW) and optimizer.defaults["fused"]  # one kernel for every parameter
    decay_of = {}
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            assert id(parameter) not in decay_of, "a parameter in two groups"
            decay_of[id(parameter)] = group["weight_decay"]
    named = dict(ranker.named_parameters())
    assert set(decay_of) == {id(p) for p in named.values() if p.requires_grad}
    spared = {name for name in named if name.endswith(".bias") or ".LayerNorm." in name}
    assert {name for name, p in named.items() if decay_of[id(p)] == 0.0} == spared
    assert {name for name, p in named.items() if decay_of[id(p)] == 0.01} == set(named) - spared
    assert {"model.doc_pooling.cls", "model.head.doc_key.weight",
            "model.bert.embeddings.word_embeddings.weight"} <= set(named) - spared
    assert any(".LayerNorm.weight" in name for name in spared) and any(name.endswith(".bias") for name in spared)


def test_the_learning_rate_warms_up_linearly_then_decays_linearly_to_zero_at_the_last_step():
    """lr 3e-5, 4 warm-up steps of 12: the rate the (s+1)-th optimizer step uses is lr (s+1)/4 while warming up
    (the first step at a quarter, the fourth at the full rate), then lr (12 - s)/8, zero after the last step (s = 12).
    By hand at s = 0, 2 (half the warm-up), 3, 4 (its end), 8 (the middle of the decay), 11 (the last step) and 12;
    the scheduler steps once per optimizer step (Lightning's ``interval: step``), and the ranker hands it the
    trainer's total steps."""
    lr, warmup, total = 3e-5, 4, 12
    _, configuration = configured(total, lr=lr, warmup_steps=warmup)
    optimizer, scheduling = configuration["optimizer"], configuration["lr_scheduler"]
    assert scheduling["interval"] == "step"
    scheduler = scheduling["scheduler"]
    by_hand = {0: 0.25, 2: 0.75, 3: 1.0, 4: 1.0, 8: 0.5, 11: 0.125, 12: 0.0}
    assert {s: scheduler.lr_lambdas[0](s) for s in by_hand} == pytest.approx(by_hand, abs=1e-15)
    rates = []
    for _ in range(total + 1):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()  # no gradients: nothing moves
        scheduler.step()
    assert {s: rates[s] for s in by_hand} == pytest.approx({s: lr * f for s, f in by_hand.items()}, abs=1e-20)
    assert all(group["lr"] == optimizer.param_groups[0]["lr"] for group in optimizer.param_groups)


def test_heads_that_do_not_divide_the_hidden_size_are_refused_naming_the_option():
    with pytest.raises(SettingError) as refused:
        MVARanker(**(TINY | {"hidden_size": 32, "num_heads": 3}))
    assert (refused.value.option, refused.value.message) == ("model.num_heads", "must divide --model.hidden_size (32), "
                                                                                "got 3")
