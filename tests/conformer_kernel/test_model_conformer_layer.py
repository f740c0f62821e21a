"""The Conformer layer (grouped convolution + separable attention, Sec. 3), the document encoder and NDRM1's
document path, against the official code (bmitra-msft/TREC-Deep-Learning-Quick-Start).

The expected values come from `official_layer` and `official_ndrm1`, plain torch operations transcribed
line by line from the official ``conformer.py`` and ``model.py`` (line numbers in the comments), fed with a
copy of the module's weights; none of this repository's forward passes is used to compute them. Everything
runs in float64, so that "equal" means equal up to rounding.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conformer_kernel.model import (
    NDRM1,
    ConformerLayer,
    DocumentEncoder,
    DotProductSelfAttention,
    Features,
    SameConv1d,
    SeparableSelfAttention,
)
from tests.conformer_kernel import ndrm1_options


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


# --- the official computation, transcribed --------------------------------------------------------------


def official_weights(layer: ConformerLayer) -> dict:
    """The layer's parameters under the official ``ConformerEncoderLayer``'s names (conformer.py:364-381)."""
    w = {"in_proj_weight": layer.attn.in_proj.weight, "in_proj_bias": layer.attn.in_proj.bias,
         "out_proj.weight": layer.attn.out_proj.weight, "out_proj.bias": layer.attn.out_proj.bias,
         "linear1.weight": layer.ff[0].weight, "linear1.bias": layer.ff[0].bias,
         "linear2.weight": layer.ff[3].weight, "linear2.bias": layer.ff[3].bias,
         "norm1.weight": layer.norm1.weight, "norm1.bias": layer.norm1.bias,
         "norm2.weight": layer.norm2.weight, "norm2.bias": layer.norm2.bias}
    if layer.conv is not None:
        w |= {"conv_layer.weight": layer.conv.weight, "conv_layer.bias": layer.conv.bias}
    return {k: v.detach().clone() for k, v in w.items()}


def official_layer(src, key_padding_mask, w, nhead, conv, zero_padding=False):
    """``ConformerEncoderLayer.forward`` (conformer.py:390-405) in eval mode (dropout is the identity), its
    self-attention ``multi_head_sep_attention_forward`` (conformer.py:9-256) with ``shared_qk = sep = conv``
    (model.py:18-19). src: (T, B, H); key_padding_mask: (B, T), True at padding. `zero_padding` is not
    official: it zeroes the padded positions the convolution reads (this repository's ``zeroed`` choice)."""
    if conv:  # conformer.py:391-394: the convolution reads every position, padded ones included
        src2 = src.masked_fill(key_padding_mask.T[..., None], 0.0) if zero_padding else src
        src2 = src2.permute(1, 2, 0)  # (B, H, T)
        window = w["conv_layer.weight"].shape[-1]
        src2 = F.conv1d(src2, w["conv_layer.weight"], w["conv_layer.bias"], padding=(window - 1) // 2, groups=nhead)
        src2 = src2.permute(2, 0, 1)  # (T, B, H)
    else:
        src2 = src
    tgt_len, bsz, embed_dim = src2.size()
    head_dim = embed_dim // nhead
    scaling = float(head_dim) ** -0.5  # conformer.py:54
    if conv:  # shared_qk, conformer.py:59-61
        k, v = F.linear(src2, w["in_proj_weight"], w["in_proj_bias"]).chunk(2, dim=-1)
        q = k
    else:  # conformer.py:63
        q, k, v = F.linear(src2, w["in_proj_weight"], w["in_proj_bias"]).chunk(3, dim=-1)
    q = q * scaling  # conformer.py:139
    q = q.contiguous().view(tgt_len, bsz * nhead, head_dim).transpose(0, 1)  # (B*h, T, dh), conformer.py:168-172
    k = k.contiguous().view(-1, bsz * nhead, head_dim).transpose(0, 1)
    v = v.contiguous().view(-1, bsz * nhead, head_dim).transpose(0, 1)
    src_len = k.size(1)
    mask = key_padding_mask.unsqueeze(1).unsqueeze(2)  # (B, 1, 1, T)
    if conv:  # sep, conformer.py:199-224
        weights = k.transpose(1, 2)  # (B*h, dh, T)
        weights = weights.view(bsz, nhead, head_dim, src_len).masked_fill(mask, float("-inf"))
        weights = F.softmax(weights.view(bsz * nhead, head_dim, src_len), dim=-1)  # over positions
        attn = torch.bmm(weights, v)  # (B*h, dh, dh)
        attn = torch.bmm(F.softmax(q, dim=-1), attn)  # softmax over features: (B*h, T, dh)
    else:  # conformer.py:228-247
        weights = torch.bmm(q, k.transpose(1, 2))  # (B*h, T, T)
        weights = weights.view(bsz, nhead, tgt_len, src_len).masked_fill(mask, float("-inf"))
        attn = torch.bmm(F.softmax(weights.view(bsz * nhead, tgt_len, src_len), dim=-1), v)  # (B*h, T, dh)
    attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
    src2 = F.linear(attn, w["out_proj.weight"], w["out_proj.bias"])  # conformer.py:225
    src = F.layer_norm(src + src2, (embed_dim,), w["norm1.weight"], w["norm1.bias"])  # conformer.py:400-401
    src2 = F.linear(F.relu(F.linear(src, w["linear1.weight"], w["linear1.bias"])),
                    w["linear2.weight"], w["linear2.bias"])  # conformer.py:402
    return F.layer_norm(src + src2, (embed_dim,), w["norm2.weight"], w["norm2.bias"])  # conformer.py:403-404


def official_positions(max_len: int, d_model: int) -> torch.Tensor:
    """``PositionalEncoding.pe`` (conformer.py:447-452), float32 as there: (max_len, 1, d_model)."""
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe.unsqueeze(0).transpose(0, 1)


def official_ndrm1(model: NDRM1, q, d, mask_q, mask_d, nhead, pool_size, pool_stride, zero_padding=False):
    """``NDRM1.forward`` (model.py:25-51) with ``RBFKernel.forward`` (model.py:137-156), in eval mode.
    q: (Q, Tq) ids; d: (Q, D, Td) ids padded with 0 to max_terms_doc (model_utils.py:186-192, as the official
    featuriser does); mask_q: (Q, Tq); mask_d: (Q, D, Td). Returns (Q, D) scores."""
    embed = model.embed.weight.detach()
    q = F.linear(embed[q], model.query_proj.weight, model.query_proj.bias)  # model.py:26-27
    q = q.unsqueeze(dim=1).unsqueeze(dim=-2)  # (Q, 1, Tq, 1, H)
    d = embed[d]  # (Q, D, Td, H): padded positions get row 0 (UNK)
    shape_mask = mask_d.shape
    mask_d = mask_d.view(-1, shape_mask[-1])
    shape_d = d.shape
    d_ctx = d.view(-1, shape_d[2], shape_d[3]).permute(1, 0, 2)  # (Td, QD, H), model.py:34-35
    d_ctx = d_ctx + official_positions(shape_d[2], shape_d[3])[: d_ctx.size(0)].double()  # conformer.py:456
    for layer in model.encoder.layers:  # conformer.py:433-434
        d_ctx = official_layer(d_ctx, ~mask_d.bool(), official_weights(layer), nhead, conv=True,
                               zero_padding=zero_padding)
    d_ctx = d_ctx.permute(1, 0, 2).view(shape_d)  # model.py:38-39
    mask_d = mask_d.view(shape_mask)
    d = F.linear(torch.stack([d, d_ctx], dim=-1), model.mix.weight, model.mix.bias).squeeze(dim=-1)  # model.py:41-43
    y = F.cosine_similarity(q, d.unsqueeze(dim=2), dim=-1)  # (Q, D, Tq, Td), model.py:44-45
    # RBFKernel (model.py:126-128: mu_i = 1 - 2i/K, sigma 0.1, float32 as there)
    mus = torch.tensor([1 - 2 * i / 10 for i in range(10)], dtype=torch.float32).double()
    denom = 2 * torch.pow(torch.tensor(0.1, dtype=torch.float32), 2).double()
    y = torch.exp(-((y.unsqueeze(dim=-1) - mus) ** 2) / denom)  # model.py:138-142
    y = y * mask_d.unsqueeze(dim=2).unsqueeze(dim=-1)  # model.py:143-145
    shape_y = y.shape
    y = y.view(-1, shape_y[-2], shape_y[-1]).permute(0, 2, 1)  # (QDTq, K, Td)
    y = F.avg_pool1d(y, pool_size, stride=pool_stride) * pool_size  # model.py:149-150: every window, empty ones too
    y = torch.log(y + 1e-6).permute(0, 2, 1)  # model.py:151-152
    mlp = model.pooling.mlp
    y = F.linear(F.relu(F.linear(y, mlp[0].weight, mlp[0].bias)), mlp[3].weight, mlp[3].bias)  # model.py:153
    y, _ = y.max(dim=1)  # model.py:154
    y = y.view(shape_y[:3]) * mask_q.unsqueeze(1)  # model.py:155, 47-48
    return y.sum(dim=-1)


def _randomised(module: nn.Module, seed: int, scale: float = 0.5) -> nn.Module:
    """Every parameter random (biases and LayerNorms included), float64, eval mode."""
    g = torch.Generator().manual_seed(seed)
    module = module.double()
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)
    return module.eval()


def _layer(hidden_size=16, num_heads=4, conv_window=31, separable=True, seed=0) -> ConformerLayer:
    torch.manual_seed(seed)
    return ConformerLayer(hidden_size, num_heads, dropout=0.2, conv_window=conv_window, separable=separable).eval()


# --- the layer ----------------------------------------------------------------------------------------------


def test_grouped_convolution_shape_and_length():
    layer = _layer(hidden_size=16, num_heads=4)
    conv = layer.conv
    assert isinstance(conv, nn.Conv1d)
    assert conv.groups == 4 and conv.kernel_size == (31,) and conv.padding == (15,)
    assert conv.in_channels == conv.out_channels == 16
    assert conv.weight.shape == (16, 4, 31)  # each output channel reads the 16 / 4 channels of its group
    assert isinstance(layer.attn, SeparableSelfAttention)
    x = torch.randn(2, 40, 16)
    assert conv(x.transpose(1, 2)).shape == (2, 16, 40)  # "same" length
    assert layer(x, torch.zeros(2, 40, dtype=torch.bool)).shape == (2, 40, 16)


def test_convolution_is_local_and_grouped():
    hidden, heads, n = 16, 4, 100
    conv = _layer(hidden, heads).conv
    group = hidden // heads
    x = torch.randn(1, hidden, n, generator=torch.Generator().manual_seed(1))
    base = conv(x)
    for p, c in [(50, 5), (3, 0), (97, 15)]:
        x2 = x.clone()
        x2[0, c, p] += 2.0
        diff = (conv(x2) - base)[0].detach()  # (hidden, n)
        g = c // group
        inside = torch.zeros(hidden, n, dtype=torch.bool)
        inside[g * group : (g + 1) * group, max(p - 15, 0) : p + 16] = True
        assert torch.equal(diff[~inside], torch.zeros(int((~inside).sum())))  # exactly no change outside
        # inside: out[o, t] changes by w[o, c - g*group, p - t + 15] * 2
        for o in range(g * group, (g + 1) * group):
            for t in range(max(p - 15, 0), min(p + 16, n)):
                want = 2.0 * conv.weight[o, c - g * group, p - t + 15].item()
                assert abs(diff[o, t].item() - want) < 1e-5


@pytest.mark.parametrize("length", [1, 14, 40, 43, 56, 211])  # lengths either side of oneDNN's two kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_same_convolution_equals_the_padded_convolution(length, dtype):
    """`SameConv1d` (explicit padding, the input's gradient as a convolution) is ``F.conv1d(padding=15)``:
    output and the gradients of input, weight and bias."""
    conv = nn.Conv1d(16, 16, 31, padding=15, groups=4).to(dtype)
    g = torch.Generator().manual_seed(length)
    x = torch.randn(3, 16, length, generator=g, dtype=dtype, requires_grad=True)
    upstream = torch.randn(3, 16, length, generator=g, dtype=dtype)
    tolerance = {"rtol": 1e-12, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-5}
    inputs = (x, conv.weight, conv.bias)
    got = SameConv1d.apply(x, conv.weight, conv.bias, conv.groups)
    want = conv(x)
    torch.testing.assert_close(got, want, **tolerance)
    for a, b in zip(torch.autograd.grad(got, inputs, upstream), torch.autograd.grad(want, inputs, upstream)):
        torch.testing.assert_close(a, b, **tolerance)


def test_same_convolution_without_bias_and_gradcheck():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 9, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 2, 5, generator=g, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(SameConv1d.apply(x, w, None, 2), F.conv1d(x, w, None, padding=2, groups=2))
    assert torch.autograd.gradcheck(lambda x, w: SameConv1d.apply(x, w, None, 2), (x, w))


def test_conformer_layer_equals_the_official_layer():
    """H = 8, 2 heads, window 5; the second document has 7 terms and 5 padded positions, which the official
    convolution reads as they are (their own values) and the official attention masks as keys only."""
    layer = _randomised(ConformerLayer(8, 2, dropout=0.2, conv_window=5, separable=True), seed=1)
    x = torch.randn(2, 12, 8, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    padding = torch.zeros(2, 12, dtype=torch.bool)
    padding[1, 7:] = True
    want = official_layer(x.transpose(0, 1), padding, official_weights(layer), nhead=2, conv=True).transpose(0, 1)
    with torch.no_grad():
        torch.testing.assert_close(layer(x, padding), want, rtol=0, atol=1e-10)  # every position, padded too
        # "zeroed": the convolution reads zeros at the padded positions instead
        zeroed = official_layer(x.transpose(0, 1), padding, official_weights(layer), 2, conv=True, zero_padding=True)
        torch.testing.assert_close(layer(x, padding, zero_padding=True), zeroed.transpose(0, 1), rtol=0, atol=1e-10)
        # which changes the last window // 2 = 2 terms of the padded document, and through A the others a little
        change = (zeroed.transpose(0, 1) - want)[1, :7].abs().amax(-1)
        assert change[5:].min() > 1e-2 and change[:5].max() > 0
        assert torch.equal(layer(x, padding, zero_padding=True)[0], layer(x, padding)[0])  # no padding: the same


def test_transformer_kernel_layer_equals_the_official_layer():
    """TK (``--no_conformer``, model.py:17-19): no convolution, standard attention with separate Q, K, V."""
    layer = _randomised(ConformerLayer(8, 2, dropout=0.2, conv_window=None, separable=False), seed=5)
    assert layer.conv is None and isinstance(layer.attn, DotProductSelfAttention)
    assert layer.attn.in_proj.weight.shape == (24, 8)  # separate Q, K, V
    x = torch.randn(2, 9, 8, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    padding = torch.zeros(2, 9, dtype=torch.bool)
    padding[0, 6:] = True
    want = official_layer(x.transpose(0, 1), padding, official_weights(layer), nhead=2, conv=False).transpose(0, 1)
    with torch.no_grad():
        torch.testing.assert_close(layer(x, padding), want, rtol=0, atol=1e-10)
    encoder = DocumentEncoder(16, 4, 2, 0.2, 100, conv_window=None, separable=False, doc_padding="official")
    assert all(lyr.conv is None and isinstance(lyr.attn, DotProductSelfAttention) for lyr in encoder.layers)
    assert encoder.padded_length(10) == 10  # without a convolution the padding reaches no term


# --- NDRM1's documents with the official padding --------------------------------------------------------


MAX_DOC_TERMS, POOL, STRIDE = 40, 10, 5  # 7 pooling windows


def _ndrm1(doc_padding: str) -> NDRM1:
    torch.manual_seed(0)
    model = NDRM1(30, **ndrm1_options(hidden_size=8, num_heads=2, num_layers=2, dropout=0.2, conv_window=5,
                                      max_doc_terms=MAX_DOC_TERMS, pool_window=POOL, pool_stride=STRIDE,
                                      doc_padding=doc_padding))
    return _randomised(model, seed=3, scale=0.3)  # the UNK / padding row 0 too, as after training


def _batch(lengths, seed):
    """One query of 3 terms and documents of `lengths` terms, as (query ids, query mask, document ids, document
    mask), the documents padded to `MAX_DOC_TERMS` as the official featuriser pads them."""
    g = torch.Generator().manual_seed(seed)
    q = torch.tensor([[4, 9, 4]])
    d = torch.zeros(1, len(lengths), MAX_DOC_TERMS, dtype=torch.long)
    mask_d = torch.zeros(1, len(lengths), MAX_DOC_TERMS, dtype=torch.float64)
    for j, n in enumerate(lengths):
        d[0, j, :n] = torch.randint(1, 30, (n,), generator=g)
        d[0, j, (n // 2, n - 2)] = torch.tensor([4, 9])  # the query's terms, one of them two from the end
        mask_d[0, j, :n] = 1.0
    return q, torch.ones(1, 3, dtype=torch.float64), d, mask_d


def _features(q, mask_q, d, mask_d, length):
    zeros = torch.zeros(1, d.shape[1], 3)
    return Features(q, mask_q, mask_q, d[..., :length], mask_d[..., :length], zeros, zeros[..., 0])


@pytest.mark.parametrize("lengths", [(9, 15), (9, 37, 40)], ids=["short", "near-the-limit"])
def test_ndrm1_scores_equal_the_official_scores(lengths):
    """Documents shorter than max_doc_terms: the model pads them only to the batch's longest + window // 2 per
    layer (here 15 + 4 = 19 of 40; 37 + 4 is cut at 40), the official code to 40; the scores are equal."""
    model = _ndrm1("official")
    q, mask_q, d, mask_d = _batch(lengths, seed=4)
    want = official_ndrm1(model, q, d, mask_q, mask_d, nhead=2, pool_size=POOL, pool_stride=STRIDE)
    assert model.encoder.padded_length(max(lengths)) == min(max(lengths) + 4, MAX_DOC_TERMS)
    with torch.no_grad():
        got = model(_features(q, mask_q, d, mask_d, max(lengths)))  # padded to the batch's longest
        # 1e-6, not 1e-10: the official sigma is a float32 constant (model.py:127), 1e-8 relative from 0.1
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
        # each document alone: the same scores (no dependence on the batch)
        for j, n in enumerate(lengths):
            alone = model(_features(q, mask_q, d[:, j : j + 1], mask_d[:, j : j + 1], n))
            torch.testing.assert_close(alone[0, 0], got[0, j], rtol=0, atol=1e-10)


def test_zeroed_padding_is_not_the_official_computation():
    """Same weights: "zeroed" equals the official computation with zeros read by the convolution, and differs
    from the official scores for documents shorter than max_doc_terms, not for one that fills it."""
    official, zeroed = _ndrm1("official"), _ndrm1("zeroed")
    assert all(torch.equal(a, b) for a, b in zip(official.parameters(), zeroed.parameters()))
    q, mask_q, d, mask_d = _batch((9, 15, 40), seed=4)
    want = official_ndrm1(zeroed, q, d, mask_q, mask_d, 2, POOL, STRIDE, zero_padding=True)
    with torch.no_grad():
        got = zeroed(_features(q, mask_q, d, mask_d, 40))
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
        gap = (got - official(_features(q, mask_q, d, mask_d, 40)))[0].abs()
    assert gap[0] > 1e-4 and gap[1] > 1e-4 and gap[2] < 1e-10  # vs the 1e-6 of the parity above


def test_zeroed_padding_does_not_depend_on_what_the_padding_holds():
    torch.manual_seed(3)
    encoder = DocumentEncoder(hidden_size=16, num_heads=4, num_layers=2, dropout=0.2, max_len=200, conv_window=31,
                              separable=True, doc_padding="zeroed").eval()
    g = torch.Generator().manual_seed(4)
    length = 23
    doc = torch.randn(1, length, 16, generator=g)
    short = encoder(doc, torch.ones(1, length))
    long_x = torch.cat([doc, torch.randn(1, 2 * length, 16, generator=g) * 3], dim=1)  # garbage padding
    long_mask = torch.cat([torch.ones(1, length), torch.zeros(1, 2 * length)], dim=1)
    torch.testing.assert_close(encoder(long_x, long_mask)[:, :length], short, rtol=0, atol=1e-6)
    # the official choice reads it
    encoder.doc_padding = "official"
    assert (encoder(long_x, long_mask)[:, :length] - short).abs().max() > 1e-2
    with pytest.raises(ValueError, match="doc_padding"):
        DocumentEncoder(16, 4, 2, 0.2, 200, conv_window=31, separable=True, doc_padding="masked")


# --- initialisation (official conformer.py:313-329, 408-409, 426) -----------------------------------------


def test_layers_start_as_copies_of_one_layer():
    """``ConformerEncoder`` deep-copies one ``ConformerEncoderLayer`` (``_get_clones``, conformer.py:408-409,
    426): the two layers start with equal weights, in separate tensors."""
    encoder = DocumentEncoder(hidden_size=16, num_heads=4, num_layers=2, dropout=0.2, max_len=50, conv_window=31,
                              separable=True, doc_padding="official")
    first, second = (dict(layer.named_parameters()) for layer in encoder.layers)
    assert first.keys() == second.keys() and len(first) == 14  # conv, in/out projections, FF, 2 LayerNorms
    for name in first:
        assert torch.equal(first[name], second[name]), name
        assert first[name].data_ptr() != second[name].data_ptr(), name  # copies, not shared weights


def _uniform_in(w: torch.Tensor, bound: float) -> bool:
    """Inside [-bound, bound] and filling it (the largest |w| within 10% of the bound)."""
    return w.abs().max().item() <= bound and w.abs().max().item() > 0.9 * bound


def test_attention_starts_xavier_uniform_with_zero_biases():
    """``_reset_parameters`` (conformer.py:315-329): ``xavier_uniform_(in_proj_weight)`` (bound √(6 / (fan_in +
    fan_out))), ``in_proj_bias`` and ``out_proj.bias`` 0; ``out_proj.weight`` keeps ``nn.Linear``'s default
    (bound 1 / √fan_in), and so do the convolution and the feed-forward (biases not zero)."""
    torch.manual_seed(0)
    layer = ConformerLayer(64, 8, dropout=0.2, conv_window=31, separable=True)
    attn = layer.attn
    assert attn.in_proj.weight.shape == (128, 64)
    assert _uniform_in(attn.in_proj.weight, math.sqrt(6 / (64 + 128)))  # 0.1768
    assert torch.equal(attn.in_proj.bias, torch.zeros(128)) and torch.equal(attn.out_proj.bias, torch.zeros(64))
    assert _uniform_in(attn.out_proj.weight, 1 / math.sqrt(64))  # 0.125: not Xavier's 0.1531
    assert _uniform_in(layer.conv.weight, 1 / math.sqrt(8 * 31))  # fan_in = 64 / 8 groups x window 31
    assert layer.conv.bias.abs().min() > 0 and layer.ff[0].bias.abs().min() > 0
    # TK: the same initialisation of its 3H x H projection (the official TK is the same module with sep=False)
    tk = DotProductSelfAttention(64, 8, dropout=0.2)
    assert _uniform_in(tk.in_proj.weight, math.sqrt(6 / (64 + 192)))  # 0.1531
    assert torch.equal(tk.in_proj.bias, torch.zeros(192)) and torch.equal(tk.out_proj.bias, torch.zeros(64))
