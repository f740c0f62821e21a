"""The nn.Modules of the Conformer-Kernel with query term independence (Mitra et al.: "Improving Transformer-Kernel
Ranking Model Using Conformer and Query Term Independence", TREC 2020 DL): separable attention (Eq. 2), the Conformer
layer, windowed kernel pooling, BatchScale, and NDRM1, NDRM2 (Eq. 4) and NDRM3 (Eq. 3), each summing per-term scores
s_td (QTI, Sec. 2; `conformer_kernel.impact_index` precomputes them). Where the paper is silent this follows the
official code (bmitra-msft/TREC-Deep-Learning-Quick-Start, ``conformer.py``, ``model.py``, ``model_utils.py``;
file:line in docs/conformer_kernel.md). Deliberate differences, the official computation up to float rounding but the
last two:

- a batch is padded with id 0 only as far as the padding reaches the terms (`DocumentEncoder.padded_length`), not to
  4,000; only query slots up to the last real term are pooled (`used_slots`); each distinct document is encoded once
  in evaluation; kernels by `exp2`, padded terms at `far_similarity`, windows summed from shared blocks; `SameConv1d`;
- ``doc_padding="zeroed"``: convolutions read zeros at padded positions (not the official computation);
- dropout masks from `common.encoders.dropout` (p rounded to a multiple of 2^-15): another random stream.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from common.encoders.dropout import Dropout
from common.encoders.length_batches import by_length
from common.encoders.precision import full_precision
from common.training.processes import world_size


@dataclass
class Features:
    """One batch: Q queries with D documents each (`conformer_kernel.features` builds them)."""

    query_ids: Tensor  # (Q, Tq) vocabulary ids, 0 = UNK/padding
    query_mask: Tensor  # (Q, Tq) 1.0 for a real term
    query_idf: Tensor  # (Q, Tq)
    doc_ids: Tensor  # (Q, D, Td)
    doc_mask: Tensor  # (Q, D, Td)
    tf: Tensor  # (Q, D, Tq) frequency of each query term in the untruncated document
    doc_length: Tensor  # (Q, D) untruncated length |d|

    def to(self, device) -> Features:
        return Features(*(getattr(self, f).to(device) for f in self.__dataclass_fields__))


class SelfAttention(nn.Module):
    """Both attentions' ``in_proj`` (`projections` x H), ``out_proj`` and attention dropout."""

    def __init__(self, hidden_size: int, num_heads: int, dropout: float, projections: int):
        super().__init__()
        if hidden_size % num_heads:
            raise ValueError(f"hidden size {hidden_size} is not divisible by {num_heads} heads")
        self.num_heads = num_heads
        self.in_proj = nn.Linear(hidden_size, projections * hidden_size)
        self.out_proj = nn.Linear(hidden_size, hidden_size)
        nn.init.xavier_uniform_(self.in_proj.weight)  # _reset_parameters (conformer.py:315-329)
        nn.init.zeros_(self.in_proj.bias)
        nn.init.zeros_(self.out_proj.bias)
        self.dropout = Dropout(dropout)


class SeparableSelfAttention(SelfAttention):
    """Eq. 2: Φ(Q) · (Φ(Kᵀ) · V), never forming the n x n matrix QKᵀ; memory O(n · d_key)."""

    def __init__(self, hidden_size: int, num_heads: int, dropout: float):
        super().__init__(hidden_size, num_heads, dropout, projections=2)  # K and V; Q shares K's projection

    def forward(self, x: Tensor, padding: Tensor) -> Tensor:
        B, N, H = x.shape  # padding: (B, N), True at padded positions
        kt, vt = self.in_proj(x).view(B, N, 2, self.num_heads, H // self.num_heads).permute(2, 0, 3, 4, 1).contiguous()
        qt = self.dropout(torch.softmax(kt * kt.shape[-2] ** -0.5, dim=-2))  # Φ(Q)ᵀ, Q = K: softmax over d_key
        kt = kt.masked_fill(padding[:, None, None, :], float("-inf"))
        kt = self.dropout(torch.softmax(kt, dim=-1))  # Φ(Kᵀ): softmax over the n positions
        a = kt @ vt.transpose(-2, -1)  # A = Φ(Kᵀ) · V: (B, h, dh, dh)
        y = qt.transpose(-2, -1) @ a  # Eq. 2, Φ(Q) · A: (B, h, N, dh)
        return self.out_proj(y.transpose(1, 2).reshape(B, N, H))


class DotProductSelfAttention(SelfAttention):
    """Eq. 1: Φ(QKᵀ / √d_key) · V, the Transformer-Kernel's attention (forms the n x n matrix)."""

    def __init__(self, hidden_size: int, num_heads: int, dropout: float):
        super().__init__(hidden_size, num_heads, dropout, projections=3)  # Q, K and V: the official sep=False

    def forward(self, x: Tensor, padding: Tensor) -> Tensor:
        B, N, H = x.shape
        heads = self.num_heads
        q, k, v = self.in_proj(x).view(B, N, 3, heads, H // heads).permute(2, 0, 3, 1, 4)  # each (B, h, N, dh)
        scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5  # QKᵀ / √d_key: (B, h, N, N)
        scores = scores.masked_fill(padding[:, None, None, :], float("-inf"))
        y = self.dropout(torch.softmax(scores, dim=-1)) @ v  # Eq. 1, Φ(QKᵀ / √d_key) · V: (B, h, N, dh)
        return self.out_proj(y.transpose(1, 2).reshape(B, N, H))


class SameConv1d(torch.autograd.Function):
    """``F.conv1d(x, weight, bias, padding=w // 2, groups=groups)`` for an odd w, padded by `F.pad`: faster on CPU."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None, groups: int) -> Tensor:
        pad = weight.shape[-1] // 2
        x = F.pad(x, (pad, pad))
        out = F.conv1d(x, weight, bias, groups=groups)
        # The backward computes in the forward convolution's dtype (autocast's); autograd casts the gradients back.
        ctx.save_for_backward(x.to(out.dtype), weight.to(out.dtype))
        ctx.groups, ctx.bias = groups, bias is not None
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, weight = ctx.saved_tensors
        out_channels, group_in, window = weight.shape
        g, pad = ctx.groups, window // 2
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            flipped = weight.view(g, out_channels // g, group_in, window).transpose(1, 2).flip(-1)
            grad_x = F.conv1d(F.pad(grad, (pad, pad)), flipped.reshape(g * group_in, out_channels // g, window),
                              groups=g)
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            _, grad_weight, grad_bias = torch.ops.aten.convolution_backward(
                grad, x, weight, [out_channels] if ctx.bias else None, [1], [0], [1], False, [0], g,
                [False, ctx.needs_input_grad[1], ctx.needs_input_grad[2]])
        return grad_x, grad_weight, grad_bias, None


class ConformerLayer(nn.Module):
    """Grouped convolution, then (separable) self-attention and a feed-forward block, post-norm (Sec. 3)."""

    def __init__(self, hidden_size: int, num_heads: int, dropout: float, conv_window: int | None, separable: bool):
        super().__init__()
        if conv_window is not None and conv_window % 2 == 0:
            raise ValueError(f"conv_window must be odd (same-length output with padding w // 2), got {conv_window}")
        H = hidden_size  # TK: conv_window=None, separable=False
        self.conv = None if conv_window is None else \
            nn.Conv1d(H, H, conv_window, padding=conv_window // 2, groups=num_heads)
        self.attn = (SeparableSelfAttention if separable else DotProductSelfAttention)(H, num_heads, dropout)
        self.ff = nn.Sequential(nn.Linear(H, H), nn.ReLU(), Dropout(dropout), nn.Linear(H, H))
        self.norm1, self.norm2 = nn.LayerNorm(H), nn.LayerNorm(H)
        self.dropout1, self.dropout2 = Dropout(dropout), Dropout(dropout)

    def forward(self, x: Tensor, padding: Tensor, zero_padding: bool = False) -> Tensor:
        """x: (B, N, H); padding: (B, N), True at padded positions; `zero_padding`: ``"zeroed"``."""
        h = x
        if self.conv is not None:
            if zero_padding:
                h = h.masked_fill(padding[..., None], 0.0)
            h = SameConv1d.apply(h.mT, self.conv.weight, self.conv.bias, self.conv.groups).mT  # (B, H, N) -> (B, N, H)
        x = self.norm1(x + self.dropout1(self.attn(h, padding)))  # x = LN(x + Dropout(Attn(Conv(x))))
        return self.norm2(x + self.dropout2(self.ff(x)))  # x = LN(x + Dropout(FF(x)))


class PositionalEncoding(nn.Module):
    """Sinusoidal positions added to the document embeddings (Vaswani et al. 2017), then dropout."""

    def __init__(self, hidden_size: int, max_len: int, dropout: float):
        super().__init__()
        position = torch.arange(max_len, dtype=torch.float32)[:, None]  # (max_len, 1)
        frequency = torch.exp(torch.arange(0, hidden_size, 2, dtype=torch.float32)
                              * (-math.log(10000.0) / hidden_size))  # 10000^(-2i / H): (H / 2,)
        pe = torch.zeros(max_len, hidden_size)  # sin at even features, cos at odd ones
        pe[:, 0::2] = torch.sin(position * frequency)
        pe[:, 1::2] = torch.cos(position * frequency)
        self.register_buffer("pe", pe, persistent=False)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:  # (B, N, H)
        return self.dropout(x + self.pe[: x.shape[1]])


#: How the document encoder reads the positions after a document's last term (``--model.doc_padding``).
DocPadding = Literal["official", "zeroed"]


class DocumentEncoder(nn.Module):
    """Positions, then `num_layers` Conformer (CK) or Transformer (TK) layers, all starting as copies of one."""

    def __init__(self, hidden_size: int, num_heads: int, num_layers: int, dropout: float, max_len: int,
                 conv_window: int | None, separable: bool, doc_padding: DocPadding):
        super().__init__()
        if doc_padding not in get_args(DocPadding):
            raise ValueError(f"doc_padding must be 'official' or 'zeroed', got {doc_padding!r}")
        self.max_len, self.doc_padding = max_len, doc_padding
        self.reach = 0 if conv_window is None else conv_window // 2 * num_layers
        self.positions = PositionalEncoding(hidden_size, max_len, dropout)
        layer = ConformerLayer(hidden_size, num_heads, dropout, conv_window, separable)
        self.layers = nn.ModuleList(copy.deepcopy(layer) for _ in range(num_layers))  # _get_clones, conformer.py:408

    def padded_length(self, length: int) -> int:
        """What `length`-term documents are padded to: the official `max_len`, as far as it reaches the terms."""
        return length if self.doc_padding == "zeroed" else max(length, min(length + self.reach, self.max_len))

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:  # x: (B, N, H), mask: (B, N) 1.0 = term
        padding = mask == 0
        x = self.positions(x)
        for layer in self.layers:
            x = layer(x, padding, zero_padding=self.doc_padding == "zeroed")
        return x


def window_count(length: int, window: int, stride: int) -> int:
    """Windows of the official layout: a 4,000-term document has (4000 - 300) // 100 + 1 = 38."""
    return max(length - window, 0) // stride + 1


class WindowedKernelPooling(nn.Module):
    """Per query term: RBF kernels over the cosine similarities, summed per window, log, MLP, max (TKL)."""

    def __init__(self, kernels: int, sigma: float, window: int, stride: int, max_doc_terms: int, hidden_size: int,
                 dropout: float):
        super().__init__()
        self.register_buffer("mus", torch.tensor([1 - 2 * i / kernels for i in range(kernels)]), persistent=False)
        self.sigma, self.window, self.stride = sigma, min(window, max_doc_terms), stride
        self.windows = window_count(max_doc_terms, self.window, stride)
        self.mlp = nn.Sequential(nn.Linear(kernels, hidden_size), nn.ReLU(), Dropout(dropout),
                                 nn.Linear(hidden_size, 1))

    def forward(self, similarity: Tensor, doc_mask: Tensor) -> Tensor:
        """(..., Tq, Td) cosine similarities and a (..., Td) mask -> (..., Tq) term scores."""
        sums = self.window_sums(similarity, doc_mask)  # (..., Tq, W, K)
        hidden = self.mlp[:-1](torch.log(sums + 1e-6))  # (..., Tq, W, hidden)
        last = self.mlp[-1]  # in the parameters' precision under autocast too
        return full_precision(last, hidden, dtype=last.weight.dtype).squeeze(-1).amax(dim=-1)  # max over W

    def kernels(self, similarity: Tensor) -> Tensor:
        """exp(-(s - mu_k)^2 / (2 sigma^2)) of (..., Td) similarities as (..., K, Td), computed with `exp2`."""
        d = similarity[..., None, :] - self.mus[:, None]
        return torch.exp2(d.square().mul_(-math.log2(math.e) / (2 * self.sigma**2)))

    def far_similarity(self, dtype: torch.dtype) -> float:
        """A similarity at which every kernel is exactly 0 (e^-z underflows past the subnormals)."""
        z = -2 * math.log(torch.finfo(dtype).tiny)
        return 1.0 + self.sigma * math.sqrt(2 * z)

    def window_sums(self, similarity: Tensor, doc_mask: Tensor) -> Tensor:
        """Each window's kernel sums, (..., Tq, W, K), plus one empty window where the official layout has more."""
        length = similarity.shape[-1]
        starts = min(self.windows, -(-length // self.stride))  # windows starting before `length`
        end = self.stride * (starts - 1) + self.window
        block = math.gcd(self.window, self.stride)
        far = self.far_similarity(similarity.dtype)
        s = similarity.masked_fill(doc_mask[..., None, :] == 0, far)
        s = F.pad(s, (0, max(end - length, 0)), value=far)[..., :end]
        blocks = self.kernels(s).unflatten(-1, (end // block, block)).sum(-1)  # (..., Tq, K, end / block)
        sums = blocks.unfold(-1, self.window // block, self.stride // block).sum(-1).mT  # (..., Tq, starts, K)
        return F.pad(sums, (0, 0, 0, 1)) if starts < self.windows else sums


class BatchScale(nn.Module):
    """BS(x) = x / (E[x] + ε), E[x] the cumulative mean of every training value seen (Eq. 4), over every process."""

    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.register_buffer("running_mean", torch.zeros(()))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    def forward(self, x: Tensor) -> Tensor:
        if self.training:
            n, total = x.numel(), x.detach().sum()
            if world_size() > 1:
                sums = torch.stack([total.double(), total.new_full((), n, dtype=torch.float64)])  # (2,)
                torch.distributed.all_reduce(sums)
                total, n = sums[0].to(total.dtype), sums[1]
            self.count += n
            self.running_mean += ((total - n * self.running_mean) / self.count).to(self.running_mean)
        return x / (self.running_mean + self.eps)  # BS(x) = x / (E[x] + ε)


class BatchNorm(nn.BatchNorm1d):
    """``nn.BatchNorm1d`` over the whole batch on several processes (NDRM3's BN, Eq. 3), differentiably all-reduced."""

    def forward(self, x: Tensor) -> Tensor:  # (N, C)
        if not self.training or world_size() == 1:
            return super().forward(x)
        from torch.distributed.nn.functional import all_reduce

        features = x.shape[1]
        size = torch.full((1,), float(x.shape[0]), dtype=x.dtype, device=x.device)
        stats = all_reduce(torch.cat([x.sum(0), (x * x).sum(0), size]))  # (2C + 1,) over every process
        count = stats[-1]
        mean = stats[:features] / count  # (C,)
        var = stats[features : 2 * features] / count - mean * mean  # (C,) biased, as BN normalises with
        with torch.no_grad():
            self.num_batches_tracked += 1
            self.running_mean.lerp_(mean.detach(), self.momentum)
            self.running_var.lerp_(var.detach() * count / (count - 1), self.momentum)  # unbiased, as torch keeps
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class QTIRanker(nn.Module):
    """A ranker whose score sums its per-term scores (QTI): s_qd = Σ_t s_td."""

    def forward(self, f: Features) -> Tensor:
        return self.term_scores(f).sum(-1)


class NDRM1(QTIRanker):
    """Conformer-Kernel with QTI (Fig. 1b): latent matching of non-contextual query terms."""

    def __init__(self, vocab_size: int, hidden_size: int, num_heads: int, num_layers: int, dropout: float,
                 conv_window: int | None, separable: bool, kernels: int, sigma: float, pool_window: int,
                 pool_stride: int, max_doc_terms: int, identity_init: bool, doc_padding: DocPadding):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, hidden_size)
        self.query_proj = nn.Linear(hidden_size, hidden_size)
        self.encoder = DocumentEncoder(hidden_size, num_heads, num_layers, dropout, max_doc_terms, conv_window,
                                       separable, doc_padding)
        self.mix = nn.Linear(2, 1)  # w0·embedding + w1·context + b
        self.pooling = WindowedKernelPooling(kernels, sigma, pool_window, pool_stride, max_doc_terms, hidden_size,
                                             dropout)
        if identity_init:
            # Not the paper's: query projection = identity, document = embedding (w0 = 1, w1 = 0, b = 0)
            with torch.no_grad():
                self.query_proj.weight.copy_(torch.eye(hidden_size))
                self.query_proj.bias.zero_()
                self.mix.weight.copy_(torch.tensor([[1.0, 0.0]]))
                self.mix.bias.zero_()

    def encode_documents(self, doc_ids: Tensor, doc_mask: Tensor) -> Tensor:
        """(B, Td) ids -> (B, Td, H) unit vectors; each distinct document once when not training, by length."""
        if not self.training:
            rows, inverse = torch.unique(torch.cat([doc_ids, doc_mask.to(doc_ids.dtype)], -1), dim=0,
                                         return_inverse=True)
            Td = doc_ids.shape[-1]
            return self._encode_by_length(rows[:, :Td], rows[:, Td:].to(doc_mask.dtype))[inverse]
        return self._encode_by_length(doc_ids, doc_mask)

    def _encode_by_length(self, doc_ids: Tensor, doc_mask: Tensor) -> Tensor:
        Td = doc_ids.shape[-1]

        def encode(rows: Tensor | slice, n: int) -> Tensor:  # (b, Td, H), zeros after the n terms encoded
            return F.pad(self._encode(doc_ids[rows, :n], doc_mask[rows, :n]), (0, 0, 0, Td - n))

        return by_length(doc_mask, encode, self.encoder.padded_length, call=ENCODER_CALL)

    def _encode(self, doc_ids: Tensor, doc_mask: Tensor) -> Tensor:
        """(B, Td) ids -> (B, Td, H), padded with id 0 as far as the official padding reaches the terms."""
        Td = doc_ids.shape[-1]
        extra = self.encoder.padded_length(Td) - Td  # official padding: id 0 (UNK) read as a term by the encoder
        e = self.embed(F.pad(doc_ids, (0, extra)))  # (B, Td + extra, H)
        context = self.encoder(e, F.pad(doc_mask, (0, extra)))[:, :Td]  # (B, Td, H)
        d = self.mix(torch.stack([e[:, :Td], context], dim=-1)).squeeze(-1)
        return F.normalize(d, dim=-1, eps=1e-8)

    def encode_terms(self, term_ids: Tensor) -> Tensor:
        """(..., Tq) ids -> (..., Tq, H) unit vectors of Linear(embedding)."""
        return F.normalize(self.query_proj(self.embed(term_ids)), dim=-1, eps=1e-8)

    def term_scores(self, f: Features) -> Tensor:
        Q, D, Td = f.doc_ids.shape
        docs = self.encode_documents(f.doc_ids.view(Q * D, Td), f.doc_mask.view(Q * D, Td)).view(Q, D, Td, -1)
        used = used_slots(f.query_mask)
        similarity = self.encode_terms(f.query_ids[:, :used])[:, None] @ docs.transpose(-2, -1)  # (Q, D, Tq, Td)
        scores = self.pooling(similarity, f.doc_mask) * f.query_mask[:, None, :used]  # cosines -> (Q, D, Tq)
        return F.pad(scores, (0, f.query_ids.shape[-1] - used))

    def index_scores(self, f: Features, chunk: int = 64) -> Tensor:
        """s_td of one pseudo-query's T terms (Q = 1) for its N documents: (N, T), `chunk` terms at a time."""
        docs = self.encode_documents(f.doc_ids[0], f.doc_mask[0])  # (N, Td, H), once for all terms
        used = used_slots(f.query_mask)
        terms = self.encode_terms(f.query_ids[0, :used])  # (T, H)
        scores = [self.pooling(terms[i : i + chunk] @ docs.transpose(-2, -1), f.doc_mask[0])  # (N, chunk)
                  for i in range(0, used, chunk)]
        scores = torch.cat(scores, dim=-1) if scores else docs.new_zeros(len(docs), 0)
        return F.pad(scores * f.query_mask[:, :used], (0, f.query_ids.shape[-1] - used))


def used_slots(query_mask: Tensor) -> int:
    """The query slots up to the last real term of any query, (Q, Tq) -> int."""
    used = query_mask.any(0).nonzero()
    return int(used[-1]) + 1 if len(used) else 0


#: One more encoder call's cost in document positions encoded (results/conformer_kernel/README.md).
ENCODER_CALL = 250


class NDRM2(QTIRanker):
    """Eq. 4: IDF_t · BS(tf) / (BS(tf) + ReLU(w_dlen · BS(|d|) + b_dlen) + ε), explicit term matching."""

    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.scale_tf, self.scale_length = BatchScale(), BatchScale()
        self.length = nn.Linear(1, 1)
        nn.init.ones_(self.length.weight)
        nn.init.zeros_(self.length.bias)

    def term_scores(self, f: Features) -> Tensor:
        length = F.relu(self.length(self.scale_length(f.doc_length)[..., None]))  # (Q, D, 1)
        tf = self.scale_tf(f.tf)  # (Q, D, Tq)
        return f.query_idf[:, None] * tf / (tf + length + self.eps) * f.query_mask[:, None]  # Eq. 4: (Q, D, Tq)

    def index_scores(self, f: Features, chunk: int = 64) -> Tensor:
        return self.term_scores(f)[0]  # (N, T)


class NDRM3(QTIRanker):
    """Eq. 3: s_td = w1·BN(s_td^latent) + w2·BN(s_td^explicit) + b, NDRM1 and NDRM2 per query term."""

    def __init__(self, vocab_size: int, **ndrm1_options):
        super().__init__()
        self.ndrm1 = NDRM1(vocab_size, **ndrm1_options)
        self.ndrm2 = NDRM2()
        self.norm = BatchNorm(2)
        self.combine = nn.Linear(2, 1)

    def combine_terms(self, latent: Tensor, explicit: Tensor, query_mask: Tensor) -> Tensor:
        """(Q, D, Tq) NDRM1 and NDRM2 term scores -> (Q, D, Tq) NDRM3 term scores."""
        pair = torch.stack([latent, explicit], dim=-1)  # (Q, D, Tq, 2)
        # Eq. 3: w1·BN(.) + w2·BN(.) + b, in the parameters' precision under autocast too
        y = full_precision(self.combine, self.norm(pair.view(-1, 2)), dtype=self.combine.weight.dtype)
        return y.view(pair.shape[:-1]) * query_mask[:, None]

    def term_scores(self, f: Features) -> Tensor:
        return self.combine_terms(self.ndrm1.term_scores(f), self.ndrm2.term_scores(f), f.query_mask)

    def index_scores(self, f: Features, chunk: int = 64) -> Tensor:
        return self.combine_terms(self.ndrm1.index_scores(f, chunk)[None], self.ndrm2.term_scores(f), f.query_mask)[0]


#: The three rankers (``--model.model``).
ModelName = Literal["ndrm1", "ndrm2", "ndrm3"]
#: The document encoders (``--model.encoder``): the paper's Conformer (CK) or a standard Transformer (TK).
EncoderName = Literal["conformer", "transformer"]


def build_ranker(kind: ModelName, vocab_size: int, encoder: EncoderName, conv_window: int, **options) -> nn.Module:
    """NDRM1, NDRM2 or NDRM3; ``encoder="transformer"`` gives the TK variant (no convolution, Eq. 1)."""
    if encoder not in get_args(EncoderName):
        raise ValueError(f"encoder must be 'conformer' or 'transformer', got {encoder!r}")
    if kind == "ndrm2":
        return NDRM2()
    if kind not in ("ndrm1", "ndrm3"):
        raise ValueError(f"unknown model {kind!r}: expected ndrm1, ndrm2 or ndrm3")
    conformer = encoder == "conformer"
    return (NDRM1 if kind == "ndrm1" else NDRM3)(vocab_size, **options, conv_window=conv_window if conformer else None,
                                                 separable=conformer)


#: The settings that shape the model: `conformer_kernel.ranker.ConformerKernelRanker`'s hyper-parameters but ``lr``.
SETTINGS = ("model", "vocab_size", "encoder", "conv_window", "hidden_size", "num_heads", "num_layers", "dropout",
            "kernels", "sigma", "pool_window", "pool_stride", "max_doc_terms", "identity_init", "doc_padding")


def ranker_from_settings(settings: Mapping) -> nn.Module:
    """The model of `settings` (`SETTINGS`), with fresh weights."""
    return build_ranker(settings["model"], settings["vocab_size"],
                        **{name: settings[name] for name in SETTINGS[2:] if name in settings})
