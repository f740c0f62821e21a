"""`earl.ranker`: the training loss EARL and BERT-Siamese train with (Sec. 3.4), worked by hand; a training step's
loss over a real batch of groups (several negatives each) against per-pair scores and the loss written out, for the
hinge loss and for the cross-entropy option; the optimizer's parameter groups and the warm-up/decay schedule the
ranker configures, against hand-computed values (the paper's schedule among them)."""

import pytest
import torch
from torch import Tensor

from earl.ranker import hinge_loss
from tests import papers

pytestmark = pytest.mark.usefixtures("one_thread")


def test_hinge_loss_by_hand():
    """Sec. 3.4: mean of max(0, margin - s+ + s-)."""
    positive, negative = torch.tensor([2.0, 0.5, 1.0]), torch.tensor([0.5, 1.0, 1.0])
    assert hinge_loss(positive, negative, margin=1).item() == pytest.approx((0 + 1.5 + 1.0) / 3, abs=1e-7)
    assert hinge_loss(positive, negative, margin=0.5).item() == pytest.approx((0 + 1.0 + 0.5) / 3, abs=1e-7)


# --- a training step over a real batch, the optimizer and the schedule ------------------------------------------

#: A tiny from-scratch model over the built-in vocabulary (no download): L = 2, h = 16, K = 2 judge blocks, l = 1.
TINY = {"num_layers": 2, "hidden_size": 16, "num_heads": 2, "intermediate_size": 32, "num_blocks": 2,
        "query_layers": 1, "tokenizer": "builtin"}


def training_groups(data) -> tuple[list, dict]:
    """Four training groups of three queries from `data`'s training set (one query in two groups, spread by
    ``query_index``), collated as the loader does; each group's positive, first, relevant in the qrels and its
    negatives not."""
    from common.data.specs import source_from_spec

    dataset = data.dataset("train")
    groups = papers.training_groups(dataset)
    qrels = source_from_spec("builtin:train").qrels()
    for group in groups:
        assert qrels[group.qid][group.doc_ids[0]] >= 1
        assert all(qrels[group.qid].get(doc_id, 0) < 1 for doc_id in group.doc_ids[1:])
    return groups, dataset.collate(groups)


def spread_ranker(architecture: str, loss: str, seed: int = 0):
    """A tiny float64 ranker in evaluation mode with its matrices redrawn N(0, 0.3^2): scores that spread."""
    from earl.ranker import EARLRanker

    torch.manual_seed(seed)
    ranker = EARLRanker(architecture=architecture, loss=loss, dropout=0.0, **TINY).double().eval()
    with torch.no_grad():
        for parameter in ranker.parameters():
            if parameter.ndim > 1:
                parameter.normal_(0, 0.3)
    return ranker


def pair_by_pair(ranker, data, groups) -> list[list[tuple[float, Tensor]]]:
    """Each group's (score, head output) per document, each (query, document) pair encoded and scored alone; the head
    output is what the ranker's final layer (``model.score``) gives for it: w^T Pool (1 value) or the 2 logits."""
    from common.data.specs import source_from_spec

    source = source_from_spec("builtin:train")
    topics, documents = source.topics(), source.documents()
    heads = [None]
    head = getattr(ranker.model, "score", None)  # BERT-Siamese has none: its score is a dot product
    hook = head and head.register_forward_hook(lambda module, args, out: heads.append(out[0].detach()))
    try:
        with torch.no_grad():
            out = [[(ranker(data.encoder([topics[g.qid]], documents.get_many([doc_id]))).item(), heads[-1])
                    for doc_id in g.doc_ids] for g in groups]
    finally:
        if hook:
            hook.remove()
    return out


def step_loss(ranker, batch) -> float:
    import warnings

    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*self.log.*")  # no Trainer to log to
        return ranker.training_step(batch, 0).item()


@pytest.mark.parametrize("architecture", ["earl", "bert_siamese"])
def test_a_hinge_training_step_is_the_mean_over_every_positive_negative_pair(architecture):
    """Sec. 3.4's pairwise hinge loss on a real batch of the built-in collection (`EARLDataModule`, 2 negatives:
    groups of 3): the step's loss is the mean, over the 4 groups and each group's 2 negatives (8 pairs), of
    max(0, margin - s(q, d+) + s(q, d-)), each score computed pair by pair (the pair encoded and scored alone) and
    the positive the group's first, relevant in the qrels. With several negatives `hinge_loss` takes each
    (positive, negative) pair as a hinge pair, all weighted alike. The margin is set between the pairs' score
    differences, so that some pairs are inside it and some not (the clamp at zero matters)."""
    from earl.data import EARLDataModule

    data = EARLDataModule(train="builtin:train", dev=None, test=None, architecture=architecture, negatives=2,
                          batch_size=4, query_length=12, passage_length=24)
    groups, batch = training_groups(data)
    assert batch["group_size"] == 3 and batch["labels"].tolist() == [1.0, 0.0, 0.0] * 4
    ranker = spread_ranker(architecture, "hinge")
    scores = [[s for s, _ in row] for row in pair_by_pair(ranker, data, groups)]
    differences = sorted(row[0] - negative for row in scores for negative in row[1:])
    assert len(differences) == 8 and differences[-1] - differences[0] > 0.1
    margin = (differences[3] + differences[4]) / 2  # 4 pairs inside the margin, 4 beyond it
    ranker.hparams.margin = margin
    expected = sum(max(0.0, margin - row[0] + negative) for row in scores for negative in row[1:]) / 8
    assert step_loss(ranker, batch) == pytest.approx(expected, abs=1e-10)
    # not the mean over groups of the summed pairs, nor of the hardest negative only
    assert abs(expected - sum(sum(max(0.0, margin - r[0] + n) for n in r[1:]) for r in scores) / 4) > 1e-3
    assert abs(expected - sum(max(0.0, margin - r[0] + max(r[1:])) for r in scores) / 4) > 1e-3


@pytest.mark.parametrize("architecture", ["earl", "bert_ranker"])
def test_a_cross_entropy_training_step_is_the_2_class_softmax_cross_entropy_over_every_pair(architecture):
    """The cross-entropy option (MORES's; Nogueira and Cho's for the BERT ranker, Sec. 4.2) on the same kind of
    batch: the step's loss is ``F.cross_entropy`` over each pair's two logits (the 2-class head's output, each pair
    scored alone) with label 1 for the groups' positives and 0 for their negatives (from the qrels, checked by
    `training_groups`), averaged over the 12 pairs; the score is the log-odds logit_1 - logit_0."""
    import torch.nn.functional as F

    from earl.data import EARLDataModule

    data = EARLDataModule(train="builtin:train", dev=None, test=None, architecture=architecture, negatives=2,
                          batch_size=4, query_length=12, passage_length=24)
    groups, batch = training_groups(data)
    batch["labels"] = batch["labels"].double()  # float64 throughout (float32 labels would round the loss)
    ranker = spread_ranker(architecture, "cross_entropy")
    rows = pair_by_pair(ranker, data, groups)
    logits = torch.stack([head for row in rows for _, head in row])  # (12, 2)
    assert logits.shape == (12, 2)
    labels = torch.tensor([1, 0, 0] * 4)
    expected = F.cross_entropy(logits, labels).item()
    torch.testing.assert_close(torch.tensor([s for row in rows for s, _ in row], dtype=torch.float64),
                               logits[:, 1] - logits[:, 0], atol=1e-12, rtol=0)
    assert step_loss(ranker, batch) == pytest.approx(expected, abs=1e-10)
    assert abs(expected - F.cross_entropy(logits, 1 - labels).item()) > 1e-2  # the labels' direction matters


def configured(steps: int, **settings):
    """A tiny ranker's `configure_optimizers` as a Trainer of `steps` optimizer steps calls it (Lightning reads
    ``estimated_stepping_batches``: ``max_steps`` in the MS MARCO configs)."""
    from types import SimpleNamespace

    from earl.ranker import EARLRanker

    ranker = EARLRanker(**{**TINY, **settings})
    ranker.trainer = SimpleNamespace(estimated_stepping_batches=steps, gradient_clip_val=None, precision_plugin=None)
    return ranker, ranker.configure_optimizers()


@pytest.mark.parametrize("settings", [{"tied": True, "loss": "hinge"}, {"tied": False, "loss": "cross_entropy"},
                                      {"architecture": "bert_ranker", "loss": "cross_entropy"}])
def test_weight_decay_spares_biases_and_layer_norms_and_covers_every_parameter_once(settings):
    """AdamW's groups with weight_decay 0.01: the parameters of every ``nn.LayerNorm`` (BERT's ``LayerNorm`` s and the
    judge blocks' ``norm`` s) and every bias without decay, every other parameter (matrices, embeddings, the score's
    w) with it; each trainable parameter in exactly one group (the tied model's shared layers once), and nothing
    else in any. The spared set is found from the modules' types and parameter names, not from the tensors' shapes
    as `common.training.reranking.decay_groups` finds it."""
    from torch import nn

    ranker, configuration = configured(10, weight_decay=0.01, lr=3e-5, **settings)
    optimizer = configuration["optimizer"]
    assert isinstance(optimizer, torch.optim.AdamW)
    decay_of = {}
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            assert id(parameter) not in decay_of, "a parameter in two groups"
            decay_of[id(parameter)] = group["weight_decay"]
    named = dict(ranker.named_parameters())  # each tensor once, under its first name
    assert set(decay_of) == {id(p) for p in named.values() if p.requires_grad}
    norms = {id(p) for module in ranker.modules() if isinstance(module, nn.LayerNorm) for p in module.parameters()}
    spared = {name for name, p in named.items() if name.endswith(".bias") or id(p) in norms}
    assert {name for name, p in named.items() if decay_of[id(p)] == 0.0} == spared
    assert {name for name, p in named.items() if decay_of[id(p)] == 0.01} == set(named) - spared
    assert any(".LayerNorm.weight" in name for name in spared) and any(name.endswith(".bias") for name in spared)
    if settings.get("architecture", "earl") == "earl":
        assert {"model.blocks.0.cross.norm.weight", "model.blocks.1.ffn.norm.weight"} <= spared
        assert {"model.score.weight", "model.blocks.0.cross.key.weight"} <= set(named) - spared
    if settings.get("tied"):  # T_qry's layers are T_doc's: named once, under T_doc
        assert not any(name.startswith("model.query_encoder.encoder.layer.") for name in named)


def rates(optimizer, scheduler, steps: int) -> list[float]:
    """The learning rate each of `steps` optimizer steps uses, the scheduler stepped after each."""
    used = []
    for _ in range(steps):
        used.append(optimizer.param_groups[0]["lr"])
        optimizer.step()  # no gradients: nothing moves
        scheduler.step()
    return used


def test_the_learning_rate_warms_up_linearly_then_decays_linearly_to_zero_at_the_last_step():
    """lr 3e-5, 4 warm-up steps of 12: the rate the (s+1)-th optimizer step uses is lr (s+1)/4 while warming up
    (the first step at a quarter, the fourth at the full rate), then lr (12 - s)/8, zero after the last step (s = 12).
    By hand at s = 0, 2, 3 (the warm-up's end), 4, 8 (the middle of the decay), 11 (the last step) and 12; every
    group alike; the scheduler steps once per optimizer step (Lightning's ``interval: step``) and is handed the
    trainer's total steps."""
    lr, warmup, total = 3e-5, 4, 12
    _, configuration = configured(total, lr=lr, warmup_steps=warmup)
    optimizer, scheduling = configuration["optimizer"], configuration["lr_scheduler"]
    assert scheduling["interval"] == "step"
    scheduler = scheduling["scheduler"]
    by_hand = {0: 0.25, 2: 0.75, 3: 1.0, 4: 1.0, 8: 0.5, 11: 0.125, 12: 0.0}
    assert {s: scheduler.lr_lambdas[0](s) for s in by_hand} == pytest.approx(by_hand, abs=1e-15)
    used = rates(optimizer, scheduler, total + 1)
    assert {s: used[s] for s in by_hand} == pytest.approx({s: lr * f for s, f in by_hand.items()}, abs=1e-20)
    assert all(group["lr"] == optimizer.param_groups[0]["lr"] for group in optimizer.param_groups)


def test_the_papers_schedule_at_chosen_steps():
    """Sec. 4.3's MS MARCO schedule (`tests.earl.paper.msmarco_training`: 2M examples in batches of 128, so 15,625
    steps; lr 3e-5; 1,000 warm-up steps; linear), by hand: the first step at lr/1000, step 500 (s = 499) at half,
    the 1,000th (s = 999) and the 1,001st at the full rate, then (15,625 - s)/14,625 of it: 7,313/14,625 at
    s = 8,312, 1/14,625 at the last step (s = 15,624), zero after it."""
    from tests.earl.paper import msmarco_training

    paper = msmarco_training()
    total = paper["examples"] // paper["batch_size"]
    assert total * paper["batch_size"] == paper["examples"] == 2_000_000 and total == 15_625
    _, configuration = configured(total, lr=paper["lr"], warmup_steps=paper["warmup_steps"])
    factor = configuration["lr_scheduler"]["scheduler"].lr_lambdas[0]
    by_hand = {0: 1 / 1000, 499: 0.5, 999: 1.0, 1000: 1.0, 8312: 7313 / 14625, 15624: 1 / 14625, 15625: 0.0}
    assert {s: factor(s) for s in by_hand} == pytest.approx(by_hand, abs=1e-15)
    assert configuration["optimizer"].param_groups[0]["lr"] == pytest.approx(paper["lr"] / 1000, abs=1e-20)


# --- BERT-Siamese's pooling ---------------------------------------------------------------------------------------


class HandEncoder(torch.nn.Module):
    """Stands in for BERT: each text's token outputs are written by hand, chosen by its first token id."""

    OUTPUTS = {1: [[1.0, 2.0], [3.0, 0.0], [50.0, 50.0]],  # the query: its third position is padding
               2: [[0.0, 4.0], [9.0, 9.0], [9.0, 9.0]],  # document 1: one real token
               3: [[2.0, 2.0], [4.0, 0.0], [6.0, 1.0]]}  # document 2: three

    def forward(self, input_ids, attention_mask):
        from types import SimpleNamespace

        return SimpleNamespace(last_hidden_state=torch.tensor([self.OUTPUTS[int(row[0])] for row in input_ids]))


#: One query (2 real tokens) against two documents (1 and 3 real tokens).
SIAMESE_BATCH = {"query_tokens": torch.tensor([[1, 5, 0]]), "query_mask": torch.tensor([[1, 1, 0]]),
                 "query_index": torch.tensor([0, 0]), "doc_tokens": torch.tensor([[2, 0, 0], [3, 7, 8]]),
                 "doc_mask": torch.tensor([[1, 0, 0], [1, 1, 1]])}


@pytest.mark.parametrize("settings, expected", [
    # Sentence-BERT's mean over real tokens, the default: query (1+3, 2+0)/2 = (2, 1); documents (0, 4) and
    # (2+4+6, 2+0+1)/3 = (4, 1); dot products 2*0 + 1*4 = 4 and 2*4 + 1*1 = 9
    ({}, [4.0, 9.0]),
    # [CLS] (the option): (1, 2) against (0, 4) and (2, 2): 8 and 6, the other order
    ({"siamese_pooling": "cls"}, [8.0, 6.0]),
])
def test_bert_siamese_scores_the_dot_product_of_masked_means_unless_told_cls(settings, expected):
    """BERT-Siamese follows Sentence-BERT [17] (Sec. 4.2), whose default pooling is the mean of the token outputs: an
    `EARLRanker` of that architecture, given no pooling, scores a pair by the dot product of the two texts' means over
    their real tokens (padding left out), worked by hand on the outputs of `HandEncoder`."""
    from earl.ranker import EARLRanker

    ranker = EARLRanker(architecture="bert_siamese", **TINY, **settings).eval()
    ranker.model.bert = HandEncoder()
    with torch.no_grad():
        torch.testing.assert_close(ranker(SIAMESE_BATCH), torch.tensor(expected), rtol=0, atol=1e-6)


def test_a_bert_siamese_checkpoint_without_the_pooling_setting_pooled_cls():
    """A checkpoint whose hyper-parameters name no ``siamese_pooling`` (BERT-Siamese's were [CLS] then) is rebuilt
    for `common.api.load` with [CLS]; one that names it keeps it."""
    from earl import portable
    from earl.ranker import EARLRanker

    hparams = dict(EARLRanker(architecture="bert_siamese", **TINY).hparams)
    del hparams["siamese_pooling"]
    checkpoint = {"hyper_parameters": hparams, "datamodule_hyper_parameters": {"query_length": 12,
                                                                               "passage_length": 48}}
    assert portable.checkpoint_entry(checkpoint)["config"]["siamese_pooling"] == "cls"
    named = {**checkpoint, "hyper_parameters": {**hparams, "siamese_pooling": "mean"}}
    assert portable.checkpoint_entry(named)["config"]["siamese_pooling"] == "mean"
    model = portable.model_of(HandEncoder(), {k: v for k, v in hparams.items() if k in portable.MODEL_KEYS},
                              copy_from_bert=False)
    with torch.no_grad():
        torch.testing.assert_close(model(SIAMESE_BATCH), torch.tensor([8.0, 6.0]), rtol=0, atol=1e-6)
