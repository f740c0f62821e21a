"""`conformer_kernel.ranker`: RankNet (the Conformer-Kernel's training objective) on hand-computed pairs."""

import math

import pytest
import torch

from conformer_kernel.ranker import ranknet_loss


def _nls(x: float) -> float:
    """-log σ(x)."""
    return -math.log(1 / (1 + math.exp(-x)))


def test_three_documents_three_pairs():
    scores = torch.tensor([[2.0, 0.0, 1.0]])
    labels = torch.tensor([[2.0, 1.0, 0.0]])
    # pairs (higher label first): (d0, d1): 2 - 0; (d0, d2): 2 - 1; (d1, d2): 0 - 1
    want = (_nls(2.0) + _nls(1.0) + _nls(-1.0)) / 3
    assert want == pytest.approx((0.126928 + 0.313262 + 1.313262) / 3, abs=1e-6)
    assert ranknet_loss(scores, labels).item() == pytest.approx(want, rel=1e-6)


def test_query_without_pairs_contributes_zero():
    scores = torch.tensor([[2.0, 0.0, 1.0], [5.0, -3.0, 0.5]])
    labels = torch.tensor([[2.0, 1.0, 0.0], [1.0, 1.0, 1.0]])  # the second query has tied labels only
    want = ((_nls(2.0) + _nls(1.0) + _nls(-1.0)) / 3 + 0.0) / 2
    assert ranknet_loss(scores, labels).item() == pytest.approx(want, rel=1e-6)
    # only tied queries: 0
    assert ranknet_loss(torch.tensor([[1.0, 2.0]]), torch.tensor([[0, 0]])).item() == 0.0


def test_per_query_mean_then_mean_over_queries():
    """Each query's pairs are averaged first, then the queries (not one mean over all pairs)."""
    scores = torch.tensor([[0.5, 0.0, 9.0], [1.0, 3.0, -2.0]])
    labels = torch.tensor([[1.0, 0.0, 1.0],  # pairs (d0, d1), (d2, d1)
                           [1.0, 0.0, 0.0]])  # pairs (d0, d1), (d0, d2)
    q1 = (_nls(0.5 - 0.0) + _nls(9.0 - 0.0)) / 2
    q2 = (_nls(1.0 - 3.0) + _nls(1.0 + 2.0)) / 2
    assert ranknet_loss(scores, labels).item() == pytest.approx((q1 + q2) / 2, rel=1e-6)


def test_gradient_pushes_the_better_document_up():
    scores = torch.tensor([[0.3, 1.1]], requires_grad=True)
    labels = torch.tensor([[1.0, 0.0]])
    ranknet_loss(scores, labels).backward()
    # d/ds0 -log σ(s0 - s1) = -σ(s1 - s0); d/ds1 = +σ(s1 - s0)
    s = 1 / (1 + math.exp(-(1.1 - 0.3)))
    assert scores.grad[0, 0].item() == pytest.approx(-s, rel=1e-6) and scores.grad[0, 0] < 0
    assert scores.grad[0, 1].item() == pytest.approx(s, rel=1e-6) and scores.grad[0, 1] > 0


def test_stable_for_large_margins():
    """logsigmoid: no inf / nan where σ underflows (the official code's +1e-6 would cap it at 13.8)."""
    loss = ranknet_loss(torch.tensor([[-100.0, 100.0]]), torch.tensor([[1.0, 0.0]]))
    assert loss.item() == pytest.approx(200.0, rel=1e-6)


def test_a_checkpoint_with_the_old_names_loads_as_it_was_written(tmp_path):
    """Checkpoints written before the rename name the sizes ``hidden``, ``heads`` and ``layers`` and hold the NDRM
    as ``ranker``: they load at their own sizes (not the defaults), with every weight in place."""
    import lightning

    from conformer_kernel.ranker import ConformerKernelRanker
    from conformer_kernel.vocab import Resources

    resources = Resources(["UNK", "<S>", "</S>", "tiger", "zebra"], {"tiger": 1.5, "zebra": 0.5})
    sizes = dict(hidden_size=8, num_heads=2, num_layers=1)
    torch.manual_seed(0)
    model = ConformerKernelRanker(model="ndrm3", vocab_size=len(resources), max_doc_terms=50, pool_window=10,
                                  pool_stride=5, **sizes)
    model.use_resources(resources)
    old_names = {"hidden_size": "hidden", "num_heads": "heads", "num_layers": "layers"}
    hparams = {old_names.get(name, name): value for name, value in model.hparams.items()}
    state = {"ranker." + key.removeprefix("model."): value for key, value in model.state_dict().items()}
    assert {"hidden", "heads", "layers"} <= hparams.keys() and all(k.startswith("ranker.") for k in state)
    torch.save({"state_dict": state, "hyper_parameters": hparams, "resources": resources.state(),
                "pytorch-lightning_version": lightning.__version__}, tmp_path / "old.ckpt")

    loaded = ConformerKernelRanker.load_from_checkpoint(str(tmp_path / "old.ckpt"), map_location="cpu")
    assert {name: loaded.hparams[name] for name in sizes} == sizes
    assert not {"hidden", "heads", "layers"} & loaded.hparams.keys()
    assert loaded.model.ndrm1.encoder.layers[0].attn.num_heads == 2 and len(loaded.model.ndrm1.encoder.layers) == 1
    assert loaded.state_dict().keys() == model.state_dict().keys()
    for name, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name
