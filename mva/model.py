"""Multi-Vector Attention (Zhou and Devlin 2021): pooling (Sec. 2.2), the scoring head (Sec. 2.1, single- and
multi-head) and the model joining them to a BERT encoder. No public code exists; what the paper leaves open (reasons
and measurements: docs/mva.md):
- one BERT for both sides, token type 0; timesteps are [CLS] and the real tokens, not [SEP] nor padding;
- attention scaled by 1 / sqrt(p), the projected width; projections without bias, N(0, 0.02), ``tied_init``
  starts W_DK, W_DV as copies of W_QK, W_QV;
- First-K keeps K timesteps, [CLS] and K - 1 words, as `all` counts them; every config keeps the first K outputs of
  the whole input (Table 1's poolings then differ in the representation alone), ``first_k_truncates: input`` cuts the
  input to them and its [SEP] instead (Sec. 3's "truncate" is of inputs);
- every config's K [CLS] embeddings start distinct, [CLS] and K - 1 draws from N(0, s^2), s the word embeddings' std
  (`cls_starts`: a pretrained encoder maps K copies to one vector); ``cls_init: shared`` learns one vector a side,
  Sec. 2.2's Q_CLS, D_CLS in R^h, started as [CLS] and repeated K times, as ColBERT repeats [MASK];
- temporal pooling zero-pads to a multiple of rho and concatenates rho consecutive outputs;
- H heads of size p, their dot products summed before the mean over query positions;
- the query side of every config is every query token (Sec. 4: "no pooling for query sequences"), Table 5's MVA²
  and MVA³ included; 8 query [CLS], the query length their printed joint compute fits, is their alternative
  (``configs/msmarco/*-qcls8.yaml``; Table 3's query [CLS] rows read K of them).
`MultiVectorAttention.score` is the reference, a batch of (query, document) pairs as training reads them;
`MultiVectorAttention.score_candidates` scores one query's candidates (what a ranker reading a store does) as a few
large products, equal to it within float rounding.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn

from common.encoders.precision import full_precision
from common.refusals import SettingError

#: Pooling of one side (Sec. 2.2): every real token, the first K, K learned [CLS] embeddings, temporal pooling.
Pooling = Literal["all", "first_k", "cls", "temporal"]
#: K learned [CLS] embeddings: K started distinct (`cls_starts`) or as K copies of [CLS] (the ablation), or one
#: vector a side repeated K times, told apart by position alone (``shared``, started as [CLS]).
ClsInit = Literal["distinct", "copies", "shared"]
#: What First-K truncates: the encoder's outputs over the whole input, or the input the encoder reads.
FirstKTruncates = Literal["outputs", "input"]


def timestep_mask(mask: Tensor) -> Tensor:
    """The (B, n) timesteps of right-padded ``[CLS] ... [SEP]`` inputs: the real positions but the [SEP]."""
    keep = mask.bool().clone()
    keep[torch.arange(len(mask), device=mask.device), mask.sum(1) - 1] = False
    return keep


def temporal_pool(hidden: Tensor, keep: Tensor, factor: int) -> tuple[Tensor, Tensor]:
    """Temporal pooling (Sec. 2.2): (B, n, h) -> (B, ceil(n / rho), rho h), real where any of its rho is."""
    batch, n, h = hidden.shape
    hidden = hidden * keep.unsqueeze(-1)
    pad = -n % factor  # the remainder's missing slots, zero vectors
    hidden = nn.functional.pad(hidden, (0, 0, 0, pad))  # (B, n + pad, h)
    keep = nn.functional.pad(keep, (0, pad))
    steps = (n + pad) // factor
    return hidden.reshape(batch, steps, factor * h), keep.view(batch, steps, factor).any(-1)


def truncated_input(tokens: Tensor, mask: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Right-padded ``[CLS] ... [SEP]`` (B, n) rows cut to K timesteps, (B, min(n, K + 1)) each of `tokens` and
    `mask`: [CLS], the first K - 1 words and the row's own last real entry ([SEP]); rows of K timesteps or fewer
    as they are."""
    lengths = mask.sum(1)
    cut = tokens[:, : k + 1].clone()
    long = lengths > k + 1
    last = tokens[torch.arange(len(tokens), device=tokens.device), lengths - 1]  # (B,): each row's [SEP]
    cut[long, k] = last[long]
    return cut, mask[:, : k + 1]


def cls_starts(word_embeddings: Tensor, cls_token_id: int, k: int) -> Tensor:
    """(K, h) starts of K learned [CLS] embeddings: [CLS]'s word embedding, then K - 1 draws (torch's global generator)
    from N(0, s^2), s the std of the (V, h) `word_embeddings`."""
    words = word_embeddings.detach()
    scale = words.float().std().item()
    codes = torch.randn(k - 1, words.shape[1], dtype=words.dtype, device=words.device) * scale
    return torch.cat([words[cls_token_id].unsqueeze(0), codes])


class SidePooling(nn.Module):
    """How one side becomes timesteps: `kind` with K `timesteps` (``first_k``, ``cls``) or factor rho
    (``temporal``); ``cls`` starts its K embeddings from `cls_embedding`, (K, h) or (h,) for K copies, and with
    `shared_cls` learns one (h,) vector repeated K times; ``first_k`` keeps the encoder's first K outputs, or with
    `truncate_input` encodes the first K timesteps alone (``first_k_truncates: input``)."""

    def __init__(self, kind: Pooling = "all", timesteps: int | None = None, factor: int | None = None,
                 cls_embedding: Tensor | None = None, shared_cls: bool = False, truncate_input: bool = False):
        super().__init__()
        self.kind, self.timesteps, self.factor = kind, timesteps, factor
        self.truncates_input = kind == "first_k" and truncate_input
        if kind == "cls":
            start = cls_embedding.detach()
            self.cls = nn.Parameter((start if shared_cls else start.expand(timesteps, -1)).clone())  # (h,) or (K, h)

    def width(self, hidden_size: int) -> int:
        """The width of a timestep: rho h for temporal pooling, else h."""
        return self.factor * hidden_size if self.kind == "temporal" else hidden_size

    def forward(self, bert, tokens: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """`bert` over the (B, n) `tokens`, pooled: the (B, t, width) timesteps and their (B, t) real mask."""
        if self.kind == "cls":
            words = bert.embeddings.word_embeddings(tokens[:, 1:])  # (B, n - 1, h): the input's [CLS] replaced
            cls = self.cls.expand(len(tokens), self.timesteps, -1)  # (B, K, h), a shared (h,) repeated
            attention = torch.cat([mask.new_ones(len(tokens), self.timesteps), mask[:, 1:]], 1)  # (B, K + n - 1)
            hidden = bert(inputs_embeds=torch.cat([cls, words], 1), attention_mask=attention).last_hidden_state
            return hidden[:, : self.timesteps], attention.new_ones(len(tokens), self.timesteps, dtype=torch.bool)
        if self.truncates_input:
            tokens, mask = truncated_input(tokens, mask, self.timesteps)  # (B, K + 1) at most
        hidden = bert(input_ids=tokens, attention_mask=mask).last_hidden_state  # (B, n, h)
        keep = timestep_mask(mask)
        if self.kind == "first_k":
            return hidden[:, : self.timesteps], keep[:, : self.timesteps]  # First-K (Sec. 2.2)
        if self.kind == "temporal":
            return temporal_pool(hidden, keep, self.factor)
        return hidden, keep


class MultiVectorAttention(nn.Module):
    """W_QK, W_QV (query width x Hp) and W_DK, W_DV (document width x Hp), and the score of Sec. 2.1."""

    def __init__(self, query_width: int, doc_width: int, projection: int, heads: int, tied_init: bool):
        super().__init__()
        if tied_init and query_width != doc_width:
            raise SettingError("model.tied_init", "copies the query's projections to the document's: their widths "
                               f"must agree (temporal pooling's rho), got {query_width} and {doc_width}")
        self.projection, self.heads = projection, heads
        self.query_key = nn.Linear(query_width, heads * projection, bias=False)  # W_QK
        self.query_value = nn.Linear(query_width, heads * projection, bias=False)  # W_QV
        self.doc_key = nn.Linear(doc_width, heads * projection, bias=False)  # W_DK
        self.doc_value = nn.Linear(doc_width, heads * projection, bias=False)  # W_DV
        for linear in (self.query_key, self.query_value, self.doc_key, self.doc_value):
            nn.init.normal_(linear.weight, std=0.02)
        if tied_init:
            with torch.no_grad():
                self.doc_key.weight.copy_(self.query_key.weight)
                self.doc_value.weight.copy_(self.query_value.weight)

    def query_keys_values(self, queries: Tensor) -> tuple[Tensor, Tensor]:
        """Q_K = X W_QK and Q_V = X W_QV, (B, q, Hp) each."""
        return self.query_key(queries), self.query_value(queries)

    def document_keys_values(self, documents: Tensor) -> Tensor:
        """[D_K | D_V] = [Y W_DK | Y W_DV], (B, d, 2Hp): what a store holds per document."""
        return torch.cat([self.doc_key(documents), self.doc_value(documents)], -1)

    def score(self, query_keys: Tensor, query_values: Tensor, query_keep: Tensor, doc_keys_values: Tensor,
              doc_keep: Tensor) -> Tensor:
        """Sec. 2.1: (1/q) sum_i Q_V,i . Attention(Q_K,i, D_K, D_V), (B,) from (B, q, Hp) and (B, d, 2Hp)."""
        b, q, d, p, heads = len(query_keys), query_keys.shape[1], doc_keys_values.shape[1], self.projection, self.heads
        doc_keys, doc_values = doc_keys_values.split(heads * p, -1)
        qk = query_keys.view(b, q, heads, p).transpose(1, 2)  # (B, H, q, p)
        dk = doc_keys.view(b, d, heads, p).transpose(1, 2)  # (B, H, d, p)
        dv = doc_values.view(b, d, heads, p).transpose(1, 2)  # (B, H, d, p)
        logits = qk @ dk.transpose(-1, -2) / math.sqrt(p)  # (B, H, q, d)
        logits = logits.masked_fill(~doc_keep[:, None, None, :], torch.finfo(logits.dtype).min)
        attended = logits.softmax(-1) @ dv  # (B, H, q, p): Attention(Q_K,i, D_K, D_V) per head
        return full_precision(self._mean_dot, query_values.view(b, q, heads, p).transpose(1, 2), attended,
                              query_keep, dtype=self.query_value.weight.dtype)

    @staticmethod
    def _mean_dot(query_values: Tensor, attended: Tensor, query_keep: Tensor) -> Tensor:
        """(B,) mean over the real query positions of Q_V . attention output, the heads summed."""
        dots = (query_values * attended).sum((1, 3))  # (B, q)
        keep = query_keep.to(dots.dtype)
        return (dots * keep).sum(1) / keep.sum(1)  # mean over the real query positions

    def score_candidates(self, query_keys: Tensor, query_values: Tensor, query_keep: Tensor, doc_keys_values: Tensor,
                         doc_keep: Tensor) -> Tensor:
        """`score` of ONE query against C candidates, (C,) from Q_K, Q_V (q, Hp), its (q,) real timesteps and the
        (C, d, 2Hp) rows with their (C, d) real timesteps, as two products shared by every candidate (a fast path
        beside `score`, the reference). Sec. 2.1's score of candidate c, with head h's attention weights
        a_h,icj = softmax_j(Q_K,ih . D_K,cjh / sqrt(p)) over the real timesteps j, regrouped:
            (1/q) sum_i sum_h Q_V,ih . sum_j a_h,icj D_V,cjh = (1/q) sum_i sum_h sum_j a_h,icj G_h,icj,
        G_h,icj = Q_V,ih . D_V,cjh: the logits and G are each one (q, p) x (p, C d) product per head, leaving a softmax
        and an elementwise reduce. Inference only (it updates its intermediates in place); in the parameters'
        precision, autocast off."""
        return full_precision(self._candidate_scores, query_keys, query_values, query_keep, doc_keys_values, doc_keep,
                              dtype=self.query_value.weight.dtype)

    def _candidate_scores(self, query_keys: Tensor, query_values: Tensor, query_keep: Tensor, doc_keys_values: Tensor,
                          doc_keep: Tensor) -> Tensor:
        q, (c, d, _), p, heads = len(query_keys), doc_keys_values.shape, self.projection, self.heads
        doc_keys, doc_values = doc_keys_values.reshape(c * d, 2, heads, p).permute(1, 2, 3, 0)  # (H, p, C d) each
        qk = query_keys.view(q, heads, p).transpose(0, 1) / math.sqrt(p)  # (H, q, p): Q_K / sqrt(p)
        qv = query_values.view(q, heads, p).transpose(0, 1)  # (H, q, p): Q_V
        logits = (qk @ doc_keys).view(heads, q, c, d)  # (H, q, C, d): Q_K D_K^T / sqrt(p), one GEMM per head
        products = (qv @ doc_values).view(heads, q, c, d)  # (H, q, C, d): G = Q_V D_V^T, one GEMM per head
        # padded document timesteps out of the softmax: the dtype's min added there is `score`'s masked_fill (the sum
        # rounds to the min for any logit below half its spacing, 1e31 in fp32) at a fifth of its time here; none to
        # mask where every timestep is real ([CLS] and First-K pooling keep K of every document)
        if not doc_keep.all():
            logits.add_(logits.new_zeros(c, d).masked_fill_(~doc_keep, torch.finfo(logits.dtype).min))  # (C, d)
        dots = logits.softmax(-1).mul_(products).sum(-1).sum(0)  # (q, C): sum_h sum_j a G = Q_V,i . Attention(...)
        keep = query_keep.to(dots.dtype)[:, None]  # (q, 1)
        return (dots * keep).sum(0) / keep.sum()  # (C,): the mean over the real query positions


class MVA(nn.Module):
    """A ``BertModel`` for both sides, each side's pooling and the head; ``cls`` pooling starts from
    `cls_token_id`'s embedding. Batches: ``query_tokens``/``query_mask`` (Bq, q) each distinct query once,
    ``query_index`` (B,) its row per pair, ``doc_tokens``/``doc_mask`` (B, d)."""

    def __init__(self, bert, *, cls_token_id: int, projection: int, heads: int, query_pooling: Pooling,
                 query_timesteps: int | None, query_factor: int | None, doc_pooling: Pooling, doc_timesteps: int | None,
                 doc_factor: int | None, tied_init: bool, cls_init: ClsInit, first_k_truncates: FirstKTruncates):
        super().__init__()
        for side, kind, k, rho in (("query", query_pooling, query_timesteps, query_factor),
                                   ("doc", doc_pooling, doc_timesteps, doc_factor)):
            if kind in ("first_k", "cls") and k is None:
                raise SettingError(f"model.{side}_timesteps", f"{kind} pooling keeps K timesteps: give K")
            if kind == "temporal" and rho is None:
                raise SettingError(f"model.{side}_factor", "temporal pooling needs its factor rho")
        self.bert = bert
        hidden = bert.config.hidden_size
        words = bert.embeddings.word_embeddings.weight  # (V, h)

        def starts(kind: Pooling, k: int | None) -> Tensor | None:  # (K, h)
            if kind != "cls":
                return None
            return cls_starts(words, cls_token_id, k) if cls_init == "distinct" else words[cls_token_id]

        shared = {"shared_cls": cls_init == "shared", "truncate_input": first_k_truncates == "input"}
        self.query_pooling = SidePooling(query_pooling, query_timesteps, query_factor,
                                         starts(query_pooling, query_timesteps), **shared)
        self.doc_pooling = SidePooling(doc_pooling, doc_timesteps, doc_factor, starts(doc_pooling, doc_timesteps),
                                       **shared)
        self.head = MultiVectorAttention(self.query_pooling.width(hidden), self.doc_pooling.width(hidden), projection,
                                         heads, tied_init)

    def encode_queries(self, tokens: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Q_K, Q_V (Bq, t, Hp) and the real timesteps (Bq, t) of the queries."""
        hidden, keep = self.query_pooling(self.bert, tokens, mask)
        return (*self.head.query_keys_values(hidden), keep)

    def document_keys_values(self, tokens: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """[D_K | D_V] (B, t, 2Hp) and the real timesteps (B, t) of the documents: what a store holds."""
        hidden, keep = self.doc_pooling(self.bert, tokens, mask)
        return self.head.document_keys_values(hidden), keep

    def score(self, queries: tuple[Tensor, Tensor, Tensor], query_index: Tensor, documents: Tensor,
              doc_keep: Tensor) -> Tensor:
        """Scores (B,) of encoded queries (each row once; `query_index` spreads them) and stored documents."""
        # index_select: its backward adds the gradients in a fixed order
        keys, values, keep = (part.index_select(0, query_index) for part in queries)
        return self.head.score(keys, values, keep, documents, doc_keep)

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        queries = self.encode_queries(batch["query_tokens"], batch["query_mask"])
        documents, doc_keep = self.document_keys_values(batch["doc_tokens"], batch["doc_mask"])
        return self.score(queries, batch["query_index"], documents, doc_keep)

