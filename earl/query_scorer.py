"""How ``earl.evaluate`` scores EARL's candidates (Sec. 3.3) from an ``earl.index`` store of S1 (D) or S2 (D', Eq. 25)
rows or end to end; imports no Lightning (`earl.portable`)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from common.encoders.bert_inputs import BertInputs
from common.stores.representations import RepresentationStore
from common.stores.scoring import StoreScorer
from earl import STRATEGIES
from earl.model import EARL


def store_width(model: EARL, strategy: str) -> int:
    """Columns of a row: h for S1 (D), 2·K·h for S2 (D', Eq. 25)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    return model.hidden_size * (1 if strategy == "s1" else 2 * model.num_blocks)


class QueryScorer(StoreScorer):
    """One query's candidates: T_qry once, then the judge over keys and values from `store` or T_doc."""

    def __init__(self, model: EARL, encoder: BertInputs, *, batch_size: int, device: torch.device | str = "cpu",
                 store: RepresentationStore | None = None, documents=None):
        self.model = model
        self.strategy = store.identity["strategy"] if store is not None else None
        width, width_name = (None, "width") if store is None else (store_width(model, self.strategy),
                                                                   f"{self.strategy.upper()} width")
        super().__init__(encoder, width=width, width_name=width_name, batch_size=batch_size, device=device,
                         store=store, documents=documents)
        self._keys_values = torch.empty(0, device=self.device)  # S1's output buffer, reused (`stored_rows`)

    def encode_query(self, tokens: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Q = T_qry(qry), (1, q, h), and its mask: once per query."""
        return self.model.encode_queries(tokens, mask), mask.bool()

    def document_rows(self, tokens: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """End to end: the (B, d, 2·K·h) keys and values of T_doc's D (Eq. 25) and their (B, d) mask."""
        return self.model.document_keys_values(self.model.encode_documents(tokens, mask)), mask.bool()

    def stored_rows(self, rows: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """S2's rows are the keys and values; S1's D gives them, computed into one reused buffer."""
        if self.strategy != "s1":
            return rows, mask
        batch, length, _ = rows.shape
        shape = (batch, length, 2 * self.model.num_blocks * self.model.hidden_size)
        if self._keys_values.numel() < math.prod(shape) or self._keys_values.dtype != rows.dtype:
            self._keys_values = torch.empty(math.prod(shape), dtype=rows.dtype, device=rows.device)
        return self.model.document_keys_values(rows, out=self._keys_values[: math.prod(shape)].view(shape)), mask

    def score(self, query: tuple[Tensor, Tensor], keys_values: Tensor, doc_mask: Tensor) -> Tensor:
        """The judge's scores (Eqs. 17-22) of the query against each of the (B, d, 2·K·h) candidates."""
        queries, query_mask = query
        index = torch.zeros(len(keys_values), dtype=torch.long, device=self.device)
        return self.model.judge(queries, query_mask, keys_values, doc_mask, index)
