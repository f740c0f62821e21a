"""The two BERT rankers every efficient architecture is measured against: the cross-encoder and the dual encoder.

- `BertRanker` (Nogueira and Cho 2019; EARL's "BERT ranker", Eq. 5; MVA's "cross-attention", CA): ``[CLS] query
  [SEP] document [SEP]`` (token types 0 then 1) -> BERT -> [CLS] -> dropout -> linear. With two logits (MORES's
  2-class head) the score is their difference, the log-odds of relevance.
- `BertSiamese` (Reimers and Gurevych 2019; EARL's "BERT-Siamese"; MVA's "dual encoder", DE): one BERT encodes
  the query and the document apart, the score is the dot product of their [CLS] vectors, so document vectors
  can be computed ahead of time. Options for a backbone trained as a bi-encoder (all-MiniLM-L6-v2: the mean of
  every real position's output, compared by cosine): ``pooling="mean"``, and ``cosine_scale`` s, the score
  s·cos(q, d) (Sentence-BERT's MultipleNegativesRankingLoss scales cosines by 20 before the softmax; unscaled,
  cosines in [-1, 1] make a flat softmax). Each side is then its unit vector times √s, so that the dot product of
  two embeddings, what a store of document vectors is scored with, is the score.

Batches: ``pair_tokens``/``pair_mask``/``pair_types`` (B, n) for the cross-encoder; ``query_tokens``/
``query_mask`` (Bq, q) of each distinct query, ``query_index`` (B,) its row per pair, and ``doc_tokens``/
``doc_mask`` (B, d) for the dual encoder.
"""

from __future__ import annotations

import math
from typing import Literal

from torch import Tensor, nn

from common.encoders.precision import full_precision


class BertRanker(nn.Module):
    """BERT over the concatenated pair, a linear map of its [CLS] vector (`logits` 1, or 2: their difference)."""

    def __init__(self, bert, logits: int = 1):
        super().__init__()
        if logits not in (1, 2):
            raise ValueError(f"logits must be 1 (a score) or 2 (a 2-class head), got {logits}")
        self.bert = bert
        self.dropout = nn.Dropout(bert.config.hidden_dropout_prob)
        self.score = nn.Linear(bert.config.hidden_size, logits)
        self.score.apply(bert._init_weights)

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        hidden = self.bert(input_ids=batch["pair_tokens"], attention_mask=batch["pair_mask"],
                           token_type_ids=batch["pair_types"]).last_hidden_state  # (B, n, h)
        # in the parameters' precision, under autocast too (`common.encoders.precision`)
        out = full_precision(self.score, self.dropout(hidden[:, 0]), dtype=self.score.weight.dtype)  # (B, logits)
        return out[:, 1] - out[:, 0] if out.shape[-1] == 2 else out.squeeze(-1)


#: How `BertSiamese` pools a side's encoder output: its [CLS] vector, or the mean over its real positions.
SiamesePooling = Literal["cls", "mean"]


class BertSiamese(nn.Module):
    """One BERT encoding queries and documents apart; the score is <BERT(q)[CLS], BERT(d)[CLS]>, or with
    `pooling` ``mean`` and `cosine_scale` s, s·cos(mean BERT(q), mean BERT(d)) (module docstring)."""

    def __init__(self, bert, pooling: SiamesePooling = "cls", cosine_scale: float | None = None):
        super().__init__()
        if pooling not in ("cls", "mean"):
            raise ValueError(f"pooling must be cls or mean, got {pooling!r}")
        if cosine_scale is not None and cosine_scale <= 0:
            raise ValueError(f"cosine_scale must be positive (None: dot product), got {cosine_scale}")
        self.bert, self.pooling, self.cosine_scale = bert, pooling, cosine_scale

    def embed(self, tokens: Tensor, mask: Tensor) -> Tensor:  # (B, n) -> (B, h)
        hidden = self.bert(input_ids=tokens, attention_mask=mask).last_hidden_state  # (B, n, h)
        if self.pooling == "cls":
            vectors = hidden[:, 0]
        else:
            weights = mask.to(hidden.dtype).unsqueeze(-1)  # (B, n, 1)
            vectors = (hidden * weights).sum(1) / weights.sum(1)
        if self.cosine_scale is None:
            return vectors
        return nn.functional.normalize(vectors, dim=-1) * math.sqrt(self.cosine_scale)

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        queries = self.embed(batch["query_tokens"], batch["query_mask"])  # (Bq, h)
        queries = queries.index_select(0, batch["query_index"])  # (B, h); not queries[index]: see bert_inputs
        documents = self.embed(batch["doc_tokens"], batch["doc_mask"])  # (B, h)
        # in the parameters' precision, under autocast too (`common.encoders.precision`)
        dtype = next(self.bert.parameters(), queries).dtype  # the encoder's parameters' (an encoder may have none)
        return full_precision(lambda q, d: (q * d).sum(-1), queries, documents, dtype=dtype)
