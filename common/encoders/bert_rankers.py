"""The two BERT rankers every efficient architecture is measured against: `BertRanker` (Nogueira and Cho 2019; EARL's
Eq. 5; MVA's CA), [CLS] of ``[CLS] q [SEP] d [SEP]`` -> dropout -> linear (two logits: their difference, MORES's
head); `BertSiamese` (Reimers and Gurevych 2019; MVA's DE), the dot product of [CLS] or mean-pooled vectors, scaled
cosines (``cosine_scale``) for a bi-encoder backbone (all-MiniLM-L6-v2).
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
        out = full_precision(self.score, self.dropout(hidden[:, 0]), dtype=self.score.weight.dtype)  # (B, logits)
        return out[:, 1] - out[:, 0] if out.shape[-1] == 2 else out.squeeze(-1)


#: How `BertSiamese` pools a side's encoder output: its [CLS] vector, or the mean over its real positions.
SiamesePooling = Literal["cls", "mean"]


class BertSiamese(nn.Module):

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
        dtype = next(self.bert.parameters(), queries).dtype
        return full_precision(lambda q, d: (q * d).sum(-1), queries, documents, dtype=dtype)
