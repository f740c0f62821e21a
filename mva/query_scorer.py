"""How ``mva.evaluate`` scores MVA's and DE's candidates (Sec. 2.1) from an ``mva.index`` store or end to end; apart
from `mva.store` so that scoring from a store imports no Lightning."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from common.encoders.bert_inputs import BertInputs
from common.encoders.bert_rankers import BertSiamese
from common.stores.representations import RepresentationStore
from common.stores.scoring import StoreScorer
from mva.costs import dual_encoder_macs, mva_macs
from mva.model import MVA


def architecture(model: nn.Module) -> str:
    """``mva``, ``de`` (`BertSiamese`) or ``ca`` (the cross-encoder) of a ranker's model."""
    if isinstance(model, MVA):
        return "mva"
    return "de" if isinstance(model, BertSiamese) else "ca"


def store_width(model: nn.Module) -> int:
    """Columns of a row: 2·H·p for MVA ([D_K | D_V]), h for DE (CA stores nothing: its commands refuse it first)."""
    if architecture(model) == "mva":
        return 2 * model.head.heads * model.head.projection
    return model.bert.config.hidden_size


def document_rows(model: nn.Module, tokens: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """(B, d) token ids and mask -> the (B, t, width) rows a store holds and their (B, t) keep mask."""
    if architecture(model) == "mva":
        return model.document_keys_values(tokens, mask)
    vectors = model.embed(tokens, mask)  # (B, h): DE's [CLS] (or mean) vector, as its score reads it
    return vectors.unsqueeze(1), mask.new_ones(len(tokens), 1, dtype=torch.bool)


class QueryScorer(StoreScorer):
    """A query's candidates with MVA or DE: the query once, then the candidates' rows (`store`'s or computed) in
    batches, each scored as a few large products (MVA: `MultiVectorAttention.score_candidates`; DE: one
    matrix-vector product); ``macs`` sums the joint compute as `mva.costs` counts it."""

    def __init__(self, model: nn.Module, encoder: BertInputs, *, batch_size: int, device: torch.device | str = "cpu",
                 store: RepresentationStore | None = None, documents=None):
        super().__init__(encoder, width=None if store is None else store_width(model), batch_size=batch_size,
                         device=device, store=store, documents=documents)
        self.model, self.mva = model, architecture(model) == "mva"
        self.macs, self.candidates, self.doc_steps = 0, 0, 0

    def encode_query(self, tokens: Tensor, mask: Tensor):
        """MVA: Q_K, Q_V and the real timesteps (its steps counted for the joint compute); DE: the (h,) vector."""
        if self.mva:
            queries = self.model.encode_queries(tokens, mask)
            self.query_steps = int(queries[2].sum())
            return queries
        return self.model.embed(tokens, mask)[0]

    def document_rows(self, tokens: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        return document_rows(self.model, tokens, mask)

    def score(self, query, rows: Tensor, keep: Tensor) -> Tensor:
        self.candidates, self.doc_steps = self.candidates + len(rows), self.doc_steps + int(keep.sum())
        if self.mva:
            heads, projection = self.model.head.heads, self.model.head.projection
            self.macs += sum(mva_macs(self.query_steps, d, projection, heads) for d in keep.sum(1).tolist())
            keys, values, query_keep = (part[0] for part in query)  # the one query's (t, Hp), (t, Hp), (t,)
            return self.model.head.score_candidates(keys, values, query_keep, rows, keep)
        self.macs += len(rows) * dual_encoder_macs(len(query))
        return rows[:, 0] @ query

    @property
    def bytes_per_document(self) -> float:
        """The store's bytes per document, or, end to end, what an fp32 store of the scored candidates would take."""
        if self.store is not None:
            return self.store.bytes_per_document
        return 4 * store_width(self.model) * self.doc_steps / max(self.candidates, 1)
