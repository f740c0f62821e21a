"""QDSLongformerSelfAttention against transformers' LongformerSelfAttention, same weights, fp32, eval mode.

Real window (attention_window = 128, one-sided 64) on a small model; batch 2 with
padding in one example and different global tokens per example (a QDS layout).
Implementations: reference always, portable and flex where they import and run
(flex: forward only on CPU). TVM is left to its own tests: it compiles per shape.
"""

import copy

import pytest
import torch
from transformers import LongformerConfig, LongformerForSequenceClassification, LongformerModel
from transformers.models.longformer.modeling_longformer import LongformerSelfAttention

from common.kernels import KernelUnavailableError, get_implementation
from common.kernels.longformer import QDSLongformerSelfAttention, use_qds_attention
from common.kernels.patterns import global_tokens, synthetic_layout

IMPLS = ["reference", "portable", "flex"]
ATOL = 1e-5
# Gradients of this sum loss reach ~2e3 in the embeddings, where fp32 summation order alone moves them by
# ~6e-4; so atol 1e-5 plus rtol 3e-4. Measured need on an AVX-512 EPYC: rtol 5e-5; on an AVX2 EPYC (other
# GEMM blockings) one word-embedding entry of 0.048 differed by 1.5e-5 ("portable"), just past 1e-5 + 1e-4 x 0.048.
# The attention weights' own gradients agree to 8e-6.
GRAD_RTOL = 3e-4


def _require(impl: str) -> str:
    try:
        get_implementation(impl)
    except (ImportError, KernelUnavailableError) as error:
        pytest.skip(f"impl={impl!r} unavailable here: {error}")
    return impl


def _config(**overrides) -> LongformerConfig:
    settings = dict(
        attention_window=128,
        hidden_size=64,
        num_attention_heads=4,
        num_hidden_layers=2,
        intermediate_size=128,
        vocab_size=100,
        max_position_embeddings=520,  # 512 tokens + RoBERTa's offset of pad_token_id + 1
        pad_token_id=1,
    )
    return LongformerConfig(**(settings | overrides))


def _batch(n: int, with_global: bool = True):
    """input_ids, attention_mask, global_attention_mask (B = 2, N): example 1 padded, QDS globals differ."""
    generator = torch.Generator().manual_seed(n)
    input_ids = torch.randint(3, 100, (2, n), generator=generator)
    attention_mask = torch.ones(2, n, dtype=torch.long)
    attention_mask[1, n - n // 4 :] = 0
    input_ids[1, n - n // 4 :] = 1
    global_attention_mask = torch.stack(
        [
            global_tokens("qds", synthetic_layout(n)),  # [CLS], 20 query tokens, [SOS] every 25
            global_tokens("qds", synthetic_layout(n, query_len=6, sentence_every=40)) & attention_mask[1].bool(),
        ]
    ).long()
    return input_ids, attention_mask, global_attention_mask if with_global else None


def _models(impl: str, model_class=LongformerModel, **overrides):
    torch.manual_seed(0)
    hf = model_class(_config(**overrides)).eval()
    return hf, use_qds_attention(copy.deepcopy(hf), impl=impl)


@pytest.mark.parametrize("n", [384, 512])
@pytest.mark.parametrize("impl", IMPLS)
def test_self_attention_module_matches_transformers(impl, n):
    """One layer's module, on the extended mask that LongformerModel builds: min = padding, 0 local, max = global."""
    _require(impl)
    config = _config(attention_window=[128, 128])  # per layer, as LongformerModel makes it
    torch.manual_seed(0)
    hf = LongformerSelfAttention(config, layer_id=1).eval()
    qds = QDSLongformerSelfAttention(config, layer_id=1, impl=impl).eval()
    qds.load_state_dict(hf.state_dict())
    assert qds.window == 2 * hf.one_sided_attn_window_size == 128

    _, attention_mask, global_attention_mask = _batch(n)
    extended = torch.zeros(2, n)  # as LongformerModel.forward, then LongformerEncoder.forward
    extended[attention_mask == 0] = torch.finfo(torch.float32).min
    extended[global_attention_mask == 1] = torch.finfo(torch.float32).max
    masks = dict(
        attention_mask=extended,
        is_index_masked=extended < 0,
        is_index_global_attn=extended > 0,
        is_global_attn=bool((extended > 0).any()),
    )
    hidden = torch.randn(2, n, config.hidden_size, generator=torch.Generator().manual_seed(1))  # (B, N, E)
    with torch.no_grad():
        expected = hf(hidden, **masks)
        out = qds(hidden, **masks)
        derived = qds(hidden, attention_mask=extended)  # the index masks derived from attention_mask
    assert len(out) == len(expected) == 1
    torch.testing.assert_close(out[0], expected[0], atol=ATOL, rtol=0)
    torch.testing.assert_close(derived[0], out[0], atol=0, rtol=0)


@pytest.mark.parametrize("with_global", [True, False], ids=["global", "no_global"])
@pytest.mark.parametrize("n", [300, 512])
@pytest.mark.parametrize("impl", IMPLS)
def test_model_matches_transformers(impl, n, with_global):
    """The whole LongformerModel (pads 300 to 384); without global tokens transformers takes its
    is_global_attn=False path."""
    _require(impl)
    hf, qds = _models(impl)
    assert sum(isinstance(m, QDSLongformerSelfAttention) for m in qds.modules()) == 2
    assert not any(isinstance(m, LongformerSelfAttention) for m in qds.modules())
    input_ids, attention_mask, global_attention_mask = _batch(n, with_global)
    with torch.no_grad():
        expected = hf(input_ids, attention_mask=attention_mask, global_attention_mask=global_attention_mask)
        out = qds(input_ids, attention_mask=attention_mask, global_attention_mask=global_attention_mask)
    torch.testing.assert_close(out.last_hidden_state, expected.last_hidden_state, atol=ATOL, rtol=0)


@pytest.mark.parametrize("impl", IMPLS)
def test_gradients_match_transformers(impl):
    """Backward through the whole model: every parameter's gradient, atol 1e-5 + rtol 3e-4."""
    _require(impl)
    hf, qds = _models(impl, attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0)
    input_ids, attention_mask, global_attention_mask = _batch(300)
    weight = torch.randn(2, 300, 64, generator=torch.Generator().manual_seed(2))  # (B, N, E): every position counts
    for model in (hf, qds):
        try:
            out = model(input_ids, attention_mask=attention_mask, global_attention_mask=global_attention_mask)
        except KernelUnavailableError as error:
            pytest.skip(f"impl={impl!r} cannot train here: {error}")
        (out.last_hidden_state * weight).sum().backward()
    expected = dict(hf.named_parameters())
    for name, parameter in qds.named_parameters():
        want = expected[name].grad
        if want is None:  # the pooler: unused by this loss, in both models
            assert parameter.grad is None, name
            continue
        message = lambda m, name=name: f"{name}: {m}"  # noqa: E731
        torch.testing.assert_close(parameter.grad, want, atol=ATOL, rtol=GRAD_RTOL, msg=message)


def test_replaces_inside_a_task_model_and_keeps_checkpoint_names():
    """A model containing a LongformerModel; parameter names stay Longformer's, so its checkpoints load."""
    hf, qds = _models("reference", LongformerForSequenceClassification, num_labels=3)
    assert list(qds.state_dict()) == list(hf.state_dict())
    qds.load_state_dict(hf.state_dict())
    input_ids, attention_mask, global_attention_mask = _batch(300)
    with torch.no_grad():
        expected = hf(input_ids, attention_mask=attention_mask, global_attention_mask=global_attention_mask).logits
        out = qds(input_ids, attention_mask=attention_mask, global_attention_mask=global_attention_mask).logits
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    with pytest.raises(ValueError, match="no transformers LongformerSelfAttention"):
        use_qds_attention(torch.nn.Linear(2, 2))


def test_output_attentions_is_refused():
    _, qds = _models("reference")
    input_ids, attention_mask, global_attention_mask = _batch(128)
    with pytest.raises(NotImplementedError, match="never form the attention probabilities"):
        qds(input_ids, attention_mask, global_attention_mask=global_attention_mask, output_attentions=True)


def test_dropout_only_in_training():
    """Eval mode is deterministic and equal to transformers; training mode drops out attention outputs."""
    hf, qds = _models("reference", attention_probs_dropout_prob=0.5, hidden_dropout_prob=0.0)
    input_ids, attention_mask, global_attention_mask = _batch(128)
    kwargs = dict(attention_mask=attention_mask, global_attention_mask=global_attention_mask)
    with torch.no_grad():
        expected = hf(input_ids, **kwargs).last_hidden_state
        torch.testing.assert_close(qds(input_ids, **kwargs).last_hidden_state, expected, atol=ATOL, rtol=0)
        qds.train()
        first, second = (qds(input_ids, **kwargs).last_hidden_state for _ in range(2))
    assert not torch.allclose(first, second)


def test_no_work_on_window_padding_or_on_global_queries_of_ordinary_rows():
    """Work wasted without it: transformers pads 300 tokens to 384 (a multiple of the window) and its module
    is given all 384; here every layer sees the 300 tokens. The global query projection runs on the global
    rows only (T of them), the global keys and values on every position; the output is still transformers'."""
    hf, qds = _models("reference")
    input_ids, attention_mask, global_attention_mask = _batch(300)
    seen = {"attention": [], "query_global": [], "key_global": []}
    for name, module in qds.named_modules():
        for kind in seen:
            if name.endswith(f"attention.self.{kind}") or (kind == "attention" and name.endswith("attention.self")):
                module.register_forward_pre_hook(lambda m, args, kind=kind: seen[kind].append(tuple(args[0].shape)))
    with torch.no_grad():
        expected = hf(input_ids, attention_mask=attention_mask, global_attention_mask=global_attention_mask)
        out = qds(input_ids, attention_mask=attention_mask, global_attention_mask=global_attention_mask)
    assert out.last_hidden_state.shape == expected.last_hidden_state.shape == (2, 300, 64)
    torch.testing.assert_close(out.last_hidden_state, expected.last_hidden_state, atol=ATOL, rtol=0)
    torch.testing.assert_close(out.pooler_output, expected.pooler_output, atol=ATOL, rtol=0)
    global_rows = int((global_attention_mask.bool() & attention_mask.bool()).sum())
    assert seen["attention"] == [(2, 300, 64)] * 2
    assert seen["query_global"] == [(global_rows, 64)] * 2
    assert seen["key_global"] == [(2, 300, 64)] * 2


def test_padding_mask_row_is_the_row_transformers_keeps():
    """Work wasted without it: ``LongformerModel.forward`` materialises create_bidirectional_mask's (B, 1, N, N)
    eager mask and keeps its first row; `_padding_mask_row` builds that row alone, value for value (0 for tokens,
    the dtype's minimum for padding), and `use_qds_attention` rebinds the name in transformers' Longformer module."""
    from transformers.masking_utils import create_bidirectional_mask
    from transformers.models.longformer import modeling_longformer

    from common.kernels.longformer import _padding_mask_row

    _, qds = _models("reference")  # use_qds_attention has run
    assert qds.config._attn_implementation == "eager"
    assert modeling_longformer.create_bidirectional_mask is _padding_mask_row
    embeddings = torch.randn(3, 50, qds.config.hidden_size)
    mask = torch.ones(3, 50, dtype=torch.long)
    mask[1, 40:], mask[2, 10:] = 0, 0
    full = create_bidirectional_mask(config=qds.config, inputs_embeds=embeddings, attention_mask=mask,
                                     allow_is_bidirectional_skip=False)  # (B, 1, N, N)
    row = _padding_mask_row(qds.config, embeddings, mask)
    assert full.shape == (3, 1, 50, 50) and row.shape == (3, 1, 1, 50)
    assert torch.equal(row[:, 0, 0], full[:, 0, 0])
    assert row[2, 0, 0, 10].item() == torch.finfo(torch.float32).min and row[0].abs().sum().item() == 0
