"""One attention layout per encoder call (`common.kernels.layouts`): what a scope shares, the scope that
`use_qds_attention` opens around each Longformer encoder forward, and the host synchronisations left in a call."""

import copy
from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import LongformerConfig, LongformerModel

import common.kernels.flex as flex
import common.kernels.layouts as layouts
import common.kernels.portable as portable
from common.kernels.layouts import close_scope, global_tokens_of, open_scope, shared
from common.kernels.longformer import use_qds_attention
from common.kernels.patterns import global_tokens, synthetic_layout
from tests.common.kernels.cases import block_sparse_dense_flex

LAYERS = 3


def test_a_scope_builds_once_for_the_same_tensors():
    built = []

    def build(tensor, number):
        built.append(number)
        return object()

    a, b = torch.zeros(3), torch.zeros(3)
    assert shared(build, a, 1) is not shared(build, a, 1)  # outside a scope: every call builds
    open_scope()
    try:
        first = shared(build, a, 1)
        assert shared(build, a, 1) is first
        assert shared(build, b, 1) is not first  # equal values, another tensor
        assert shared(build, a, 2) is not first  # another argument
        open_scope()  # a nested scope shares nothing with the outer one
        inner = shared(build, a, 1)
        close_scope()
        assert inner is not first and shared(build, a, 1) is first
    finally:
        close_scope()
    assert built == [1, 1, 1, 1, 2, 1]


def test_global_tokens_by_hand():
    is_global = torch.tensor([[True, False, True, True], [False, True, False, False], [False] * 4])
    padding = torch.tensor([[False, False, False, True], [False] * 4, [False, False, True, True]])
    tokens = global_tokens_of(is_global, padding)  # the global token on padding is none
    assert tokens.counts.tolist() == [2, 1, 0]
    assert (tokens.total, tokens.widest, tokens.fewest, tokens.padded) == (3, 2, 0, True)
    assert tokens.batch.tolist() == [0, 0, 1] and tokens.position.tolist() == [0, 2, 1]
    empty = global_tokens_of(torch.zeros(0, 5, dtype=torch.bool), None)
    assert (empty.total, empty.widest, empty.padded, empty.batch.numel()) == (0, 0, False, 0)


def _model(impl: str) -> LongformerModel:
    torch.manual_seed(0)
    config = LongformerConfig(attention_window=64, hidden_size=32, num_attention_heads=2, num_hidden_layers=LAYERS,
                              intermediate_size=64, vocab_size=100, max_position_embeddings=520, pad_token_id=1)
    return use_qds_attention(LongformerModel(config).eval(), impl=impl)


def _batch(n: int = 300, with_global: bool = True) -> dict:
    """Two QDS inputs, the second padded and with other global tokens."""
    ids = torch.randint(3, 100, (2, n), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, n, dtype=torch.long)
    mask[1, n - 80:] = 0
    glob = torch.stack([global_tokens("qds", synthetic_layout(n)),
                        global_tokens("qds", synthetic_layout(n, query_len=5, sentence_every=40))]).long() * mask
    return dict(input_ids=ids, attention_mask=mask, global_attention_mask=glob if with_global else None)


def _counting(function, counts: Counter, name: str):
    def counted(*args):
        counts[name] += 1
        return function(*args)

    return counted


@pytest.mark.parametrize("with_global", [True, False], ids=["global", "no_global"])
@pytest.mark.parametrize("impl", ["reference", "portable", "flex"])
def test_an_encoder_call_builds_each_layout_once(impl, with_global, monkeypatch):
    """Three layers, one build of the global tokens and of the kernel's layout per encoder call (each layer
    built its own before), and the outputs of a model whose layers build their own."""
    builds = Counter()
    model = _model(impl)
    with torch.no_grad():
        unshared = copy.deepcopy(model)  # its layers build their own layouts: no scope
        for hooks in (unshared.encoder._forward_pre_hooks, unshared.encoder._forward_hooks):
            hooks.clear()
        expected = unshared(**_batch(with_global=with_global)).last_hidden_state
        monkeypatch.setattr(layouts, "_global_tokens", _counting(layouts._global_tokens, builds, "global tokens"))
        for module in (portable, flex):
            layout = module._Layout
            monkeypatch.setattr(layout, "build", staticmethod(_counting(layout.build, builds, module.__name__)))
        for _ in range(2):
            out = model(**_batch(with_global=with_global)).last_hidden_state
    assert torch.equal(out, expected)
    kernel_layouts = {"portable": {"common.kernels.portable": 2}, "flex": {"common.kernels.flex": 2}}
    # Without global tokens, the Longformer module needs none, and the reference kernel no layout.
    global_builds = {"global tokens": 2} if with_global or impl != "reference" else {}
    assert builds == Counter({**global_builds, **kernel_layouts.get(impl, {})})
    assert layouts._SCOPES.stack == []


class _HostSyncs(TorchDispatchMode):
    """Counts the aten operations that read a device's data back to the host: a scalar read (``item``, ``int``,
    ``bool``), ``nonzero`` and masked selection, and indexing with a boolean mask (its positions found by
    ``nonzero`` inside the operation)."""

    def __init__(self):
        super().__init__()
        self.found = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in ("_local_scalar_dense", "nonzero", "masked_select"):
            self.found[name] += 1
        elif name in ("index", "index_put", "index_put_") and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1] if i is not None):
            self.found[f"{name} by a boolean mask"] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("impl", ["reference", "portable", "flex"])
def test_no_layer_reads_back_from_the_device(impl, monkeypatch):
    """A model call of three layers reads back twice, in transformers' code outside the layers, once each:
    LongformerModel sets its global tokens in the extended mask by a boolean mask, and LongformerEncoder reads
    ``is_global_attn`` back. The layout's read-back, its global tokens' counts, is one ``tolist``, which on CPU
    reads memory without an aten operation (`test_an_encoder_call_builds_each_layout_once` counts its builds).
    Each layer read back twice before: its global rows selected by a boolean mask, and portable's ``int`` of the
    largest global count. FlexAttention's own operator, torch's, runs compiled inside even in eager mode, which
    no dispatch mode may watch: it is emulated densely here (`cases.block_sparse_dense_flex`)."""
    if impl == "flex":
        monkeypatch.setattr(flex, "KERNEL", block_sparse_dense_flex)
    model = _model(impl)
    with torch.no_grad(), _HostSyncs() as syncs:
        model(**_batch())
    assert syncs.found == Counter({"_local_scalar_dense": 1, "index_put_ by a boolean mask": 1})


def test_the_scope_closes_when_the_forward_raises():
    model = _model("reference")
    with pytest.raises(NotImplementedError, match="never form the attention probabilities"):
        model(**_batch(), output_attentions=True)
    assert layouts._SCOPES.stack == []
