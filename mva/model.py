"""Multi-Vector Attention (Zhou and Devlin: "Multi-Vector Attention Models for Deep Re-ranking", EMNLP 2021) as
plain ``nn.Module`` s; its baselines, the dual encoder (DE) and cross-attention (CA), are `common.encoders.bert_rankers`.

Read top to bottom: pooling (Sec. 2.2), the MVA scoring head (Sec. 2.1, single- and multi-head), then the model
that joins them to a BERT-family encoder. Its softmax loss (Sec. 2.3) is `mva.ranker.softmax_loss`.

A query X (q x h) and a document Y (d x h), each a pooled encoder output, are projected by W_QK, W_QV, W_DK,
W_DV (Sec. 2.1) to Q_K, Q_V (q x p) and D_K, D_V (d x p); each query position attends to the document,
``Attention(Q_K,i, D_K, D_V)``, and the score is the mean of ``Q_V,i . Attention(...)`` over the real query
positions. D_K and D_V depend on the document alone: `MVA.document_keys_values` computes them, and they are what
the representation store holds (d x 2p floats a document, Table 5's storage).

No public code of this paper exists; what it leaves open, chosen here:

- Encoder: one BERT for queries and documents (shared weights). The paper's DE "is pre-trained directly on the
  MLM and NSP tasks rather than initialized as two identical BERT models", i.e. one model reading both sides,
  and MVA is initialised from that checkpoint. Both sides read token type 0, as the backbone saw single texts.
- Real positions: "one [CLS] token plus each actual (non-padding) token" (Sec. 4, Table 3), so the [SEP] that
  closes each input is encoded but is not a timestep of the representation; padding never is.
- Attention scale: the paper writes ``softmax(QK^T / sqrt(h))`` for inputs of width h; the keys here have the
  projected width p per head, so the scale is ``1 / sqrt(p)`` (Vaswani et al.'s d_k, which projections of size
  p = h leave as written).
- Projections: linear maps without bias (the paper's "projection matrices"), initialised as BERT's weights,
  N(0, 0.02), each on its own. ``tied_init`` starts W_DK and W_DV as copies of W_QK and W_QV (they then train
  apart): random projections shared by both sides roughly keep the encoder's dot products, so an untrained head
  over a pretrained bi-encoder already ranks by token similarity (at N(0, 0.02) the attention is near uniform, so
  the tied head starts close to a dot product of the sides' mean vectors). What it changes over a pretrained
  MiniLM (mva/configs/trec-dl-passages-minilm.yaml): results/mva/README.md.
- First-K (Table 1, "we truncate sequences to the first K tokens"): the encoder reads the whole input and the
  first K output positions are kept, so the pooling methods of Table 1 differ only in the representation, not in
  what the encoder reads.
- Multiple [CLS] (Sec. 2.2): K learned input embeddings, separate for queries (Q_CLS) and documents (D_CLS),
  take the place of the input's [CLS] and are kept after the encoder (K timesteps, all real). The input is then
  K + n - 1 positions long. The paper calls them "learned pooling tokens" and says nothing of how they start; here
  they start distinct (`cls_starts`): the first is the encoder's [CLS] word embedding (so K = 1 is BERT's [CLS],
  and a model initialised from a DE keeps the DE's [CLS] input), the other K - 1 are drawn from N(0, s^2), s the
  standard deviation of the encoder's word embeddings (random codes, as the poly-encoder's start, Humeau et al.
  2020). Why not K copies of [CLS], told apart by their positions alone: a pretrained encoder maps them to one
  vector. From all-MiniLM-L6-v2, the 24 outputs of 24 [CLS] copies before a TREC DL passage have pairwise cosine
  1.0000 (also with N(0, 0.02) or N(0, s^2) noise added to the copies: [CLS]'s embedding dominates), so the K
  timesteps are one and training must first pull them apart; with this start their pairwise cosine is 0.16 on
  average (BERT's reserved ``[unused i]`` rows, ColBERT's markers, give 0.74, and from-scratch vocabularies such as
  the built-in one have none). `tests/mva/test_model.py` measures it on a real passage.
- Temporal pooling with factor rho (Sec. 2.2): the encoder output's real positions are kept as they are
  (padding and [SEP] set to zero), the sequence is padded with zero vectors to a multiple of rho, and every rho
  consecutive vectors are concatenated (n / rho x rho h); a pooled timestep is real if any of its rho positions
  is. A remainder thus becomes one last timestep with zeros in its missing slots. The projections then map rho h
  to p, which "completes the pooling operation".
- Multi-head (Table 4): H heads of size p (so Table 4's "num heads x projection size" is H x p), each attending
  on its own; the score sums the heads' dot products before the mean over query positions, so H = 1 is Sec. 2.1.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn

from common.encoders.precision import full_precision

#: Pooling of one side (Sec. 2.2): every real token, the first K, K learned [CLS] embeddings, temporal pooling.
Pooling = Literal["all", "first_k", "cls", "temporal"]
POOLINGS = ("all", "first_k", "cls", "temporal")
#: How K learned [CLS] embeddings start: distinct (`cls_starts`) or as K copies of [CLS] (the ablation).
ClsInit = Literal["distinct", "copies"]
CLS_INITS = ("distinct", "copies")


# --- pooling (Sec. 2.2) --------------------------------------------------------------------------------------------


def timestep_mask(mask: Tensor) -> Tensor:
    """The (B, n) positions that are timesteps: the input's real positions but its last, the [SEP] (module
    docstring, "Real positions"). Inputs are right-padded ``[CLS] ... [SEP]``."""
    keep = mask.bool().clone()
    keep[torch.arange(len(mask), device=mask.device), mask.sum(1) - 1] = False
    return keep


def first_k(hidden: Tensor, keep: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """First-K (Sec. 2.2): the first `k` output positions of `hidden` (B, n, h) and which are real."""
    return hidden[:, :k], keep[:, :k]


def temporal_pool(hidden: Tensor, keep: Tensor, factor: int) -> tuple[Tensor, Tensor]:
    """Temporal pooling (Sec. 2.2): (B, n, h) -> (B, ceil(n / rho), rho h), every `factor` consecutive positions
    concatenated after non-timesteps are zeroed; a pooled timestep is real where any of its positions is."""
    batch, n, h = hidden.shape
    hidden = hidden * keep.unsqueeze(-1)
    pad = -n % factor  # the remainder's missing slots, zero vectors
    hidden = nn.functional.pad(hidden, (0, 0, 0, pad))  # (B, n + pad, h)
    keep = nn.functional.pad(keep, (0, pad))
    steps = (n + pad) // factor
    return hidden.reshape(batch, steps, factor * h), keep.view(batch, steps, factor).any(-1)


def cls_starts(word_embeddings: Tensor, cls_token_id: int, k: int) -> Tensor:
    """(K, h) starts of K learned [CLS] embeddings (module docstring, "Multiple [CLS]"): the encoder's [CLS] word
    embedding, then K - 1 draws from N(0, s^2), s the standard deviation of the (V, h) `word_embeddings` (torch's
    global generator: the run's seed fixes them)."""
    words = word_embeddings.detach()
    scale = words.float().std().item()
    codes = torch.randn(k - 1, words.shape[1], dtype=words.dtype, device=words.device) * scale
    return torch.cat([words[cls_token_id].unsqueeze(0), codes])


class SidePooling(nn.Module):
    """How one side (queries or documents) becomes timesteps: the encoder's input and output (module docstring).

    Args:
        kind: ``all``, ``first_k``, ``cls`` or ``temporal``.
        timesteps: K of ``first_k`` and ``cls``.
        factor: rho of ``temporal``.
        cls_embedding: (K, h) the starts of ``cls``'s K learned embeddings (`cls_starts`), or (h,) one start for all
            K (copies: the tests' reference).
    """

    def __init__(self, kind: Pooling = "all", timesteps: int | None = None, factor: int | None = None,
                 cls_embedding: Tensor | None = None):  # fmt: skip
        super().__init__()
        if kind not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {kind!r}")
        if kind in ("first_k", "cls") and (timesteps is None or timesteps < 1):
            raise ValueError(f"{kind} pooling keeps K timesteps: give timesteps >= 1, got {timesteps}")
        if kind == "temporal" and (factor is None or factor < 1):
            raise ValueError(f"temporal pooling needs a factor rho >= 1, got {factor}")
        self.kind, self.timesteps, self.factor = kind, timesteps, factor
        if kind == "cls":
            if cls_embedding is None:
                raise ValueError("cls pooling starts its embeddings from the encoder's [CLS]: give cls_embedding "
                             "(cls_starts)")
            self.cls = nn.Parameter(cls_embedding.detach().expand(timesteps, -1).clone())  # (K, h)

    def width(self, hidden_size: int) -> int:
        """The width of a timestep: rho h for temporal pooling, else h."""
        return self.factor * hidden_size if self.kind == "temporal" else hidden_size

    def forward(self, bert, tokens: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """`bert` over the (B, n) `tokens`, pooled: the (B, t, width) timesteps and their (B, t) real mask."""
        if self.kind == "cls":
            words = bert.embeddings.word_embeddings(tokens[:, 1:])  # (B, n - 1, h): the input's [CLS] replaced
            cls = self.cls.unsqueeze(0).expand(len(tokens), -1, -1)  # (B, K, h)
            attention = torch.cat([mask.new_ones(len(tokens), self.timesteps), mask[:, 1:]], 1)  # (B, K + n - 1)
            hidden = bert(inputs_embeds=torch.cat([cls, words], 1), attention_mask=attention).last_hidden_state
            return hidden[:, : self.timesteps], attention.new_ones(len(tokens), self.timesteps, dtype=torch.bool)
        hidden = bert(input_ids=tokens, attention_mask=mask).last_hidden_state  # (B, n, h)
        keep = timestep_mask(mask)
        if self.kind == "first_k":
            return first_k(hidden, keep, self.timesteps)
        if self.kind == "temporal":
            return temporal_pool(hidden, keep, self.factor)
        return hidden, keep


# --- the scoring head (Sec. 2.1) -----------------------------------------------------------------------------------


class MultiVectorAttention(nn.Module):
    """W_QK, W_QV (query width x Hp) and W_DK, W_DV (document width x Hp), and the score of Sec. 2.1."""

    def __init__(self, query_width: int, doc_width: int, projection: int, heads: int = 1, tied_init: bool = False):
        super().__init__()
        if tied_init and query_width != doc_width:
            raise ValueError(f"tied_init copies the query's projections to the document's: their widths must agree, "
                             f"got {query_width} and {doc_width}")
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
              doc_keep: Tensor) -> Tensor:  # fmt: skip
        """(1/q) sum_i Q_V,i . Attention(Q_K,i, D_K, D_V) of each pair: (B, q, Hp) queries, (B, q) their real
        positions, (B, d, 2Hp) documents, (B, d) theirs -> (B,)."""
        b, q, d, p, heads = len(query_keys), query_keys.shape[1], doc_keys_values.shape[1], self.projection, self.heads
        doc_keys, doc_values = doc_keys_values.split(heads * p, -1)
        qk = query_keys.view(b, q, heads, p).transpose(1, 2)  # (B, H, q, p)
        dk = doc_keys.view(b, d, heads, p).transpose(1, 2)  # (B, H, d, p)
        dv = doc_values.view(b, d, heads, p).transpose(1, 2)  # (B, H, d, p)
        logits = qk @ dk.transpose(-1, -2) / math.sqrt(p)  # (B, H, q, d)
        logits = logits.masked_fill(~doc_keep[:, None, None, :], torch.finfo(logits.dtype).min)
        attended = logits.softmax(-1) @ dv  # (B, H, q, p): Attention(Q_K,i, D_K, D_V) per head
        # The score in the parameters' precision, under autocast too (`common.encoders.precision`).
        return full_precision(self._mean_dot, query_values.view(b, q, heads, p).transpose(1, 2), attended,
                              query_keep, dtype=self.query_value.weight.dtype)

    @staticmethod
    def _mean_dot(query_values: Tensor, attended: Tensor, query_keep: Tensor) -> Tensor:
        """(B, H, q, p) Q_V and attention outputs, (B, q) real positions -> (B,) mean over them of the dot
        products, the heads summed."""
        dots = (query_values * attended).sum((1, 3))  # (B, q)
        keep = query_keep.to(dots.dtype)
        return (dots * keep).sum(1) / keep.sum(1)  # mean over the real query positions


# --- the model ----------------------------------------------------------------------------------------------------


class MVA(nn.Module):
    """An encoder (a ``BertModel``, one for both sides), each side's pooling and the scoring head; `cls_token_id`
    is the tokenizer's [CLS], whose embedding ``cls`` pooling's first embedding starts from (`cls_starts`; with
    ``cls_init="copies"`` every one of the K starts from it, the ablation of the module docstring).

    Batches carry each distinct query once: ``query_tokens``/``query_mask`` (Bq, q), ``query_index`` (B,) its
    row per pair, ``doc_tokens``/``doc_mask`` (B, d); the query side then runs once per query.
    """

    def __init__(self, bert, *, cls_token_id: int, projection: int, heads: int = 1, query_pooling: Pooling = "all",
                 query_timesteps: int | None = None, query_factor: int | None = None, doc_pooling: Pooling = "all",
                 doc_timesteps: int | None = None, doc_factor: int | None = None, tied_init: bool = False,
                 cls_init: ClsInit = "distinct"):  # fmt: skip
        super().__init__()
        if cls_init not in CLS_INITS:
            raise ValueError(f"cls_init must be one of {', '.join(CLS_INITS)}, got {cls_init!r}")
        self.bert = bert
        hidden = bert.config.hidden_size
        words = bert.embeddings.word_embeddings.weight  # (V, h)

        def starts(kind: Pooling, k: int | None) -> Tensor | None:  # (K, h); a bad K is SidePooling's to refuse
            if kind != "cls" or k is None or k < 1:
                return None
            return cls_starts(words, cls_token_id, k) if cls_init == "distinct" else words[cls_token_id]

        self.query_pooling = SidePooling(query_pooling, query_timesteps, query_factor,
                                         starts(query_pooling, query_timesteps))
        self.doc_pooling = SidePooling(doc_pooling, doc_timesteps, doc_factor, starts(doc_pooling, doc_timesteps))
        self.head = MultiVectorAttention(self.query_pooling.width(hidden), self.doc_pooling.width(hidden), projection,
                                         heads, tied_init)  # fmt: skip

    def encode_queries(self, tokens: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Q_K, Q_V (Bq, t, Hp) and the real timesteps (Bq, t) of the queries."""
        hidden, keep = self.query_pooling(self.bert, tokens, mask)
        return (*self.head.query_keys_values(hidden), keep)

    def document_keys_values(self, tokens: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """[D_K | D_V] (B, t, 2Hp) and the real timesteps (B, t) of the documents: what a store holds."""
        hidden, keep = self.doc_pooling(self.bert, tokens, mask)
        return self.head.document_keys_values(hidden), keep

    def score(self, queries: tuple[Tensor, Tensor, Tensor], query_index: Tensor, documents: Tensor,
              doc_keep: Tensor) -> Tensor:  # fmt: skip
        """Scores (B,) of encoded queries (each row once; `query_index` spreads them) and stored documents."""
        # index_select, not x[query_index]: its backward adds the gradients in a fixed order
        keys, values, keep = (part.index_select(0, query_index) for part in queries)
        return self.head.score(keys, values, keep, documents, doc_keep)

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        queries = self.encode_queries(batch["query_tokens"], batch["query_mask"])
        documents, doc_keep = self.document_keys_values(batch["doc_tokens"], batch["doc_mask"])
        return self.score(queries, batch["query_index"], documents, doc_keep)

