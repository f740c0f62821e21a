"""EARL's analytic cost (Gao, Dai, Callan 2020, Table 1): the online cost of ranking N candidates of d tokens for a
query of q tokens at hidden width n (`Size.cost`):

- BERT ranker: ``(a n (d+q)^2 + t n^2 (d+q)) N`` per layer, L layers;
- EARL's query understanding: ``a n q^2 + t n^2 q`` per layer, l layers, once per query;
- EARL's judge, S1: ``(a n (qd + q^2) + (j_q q + j_d d) n^2) N`` per block, K blocks; S2 stores the document's keys
  and values (Eq. 25), so without the ``j_d d n^2`` term.

Table 1 writes every constant as 1 (`TABLE1`); counted in multiply-adds (`counted_constants`): a = 2 (Q K^T and the
weighted sum of V), t = 4 + 2 i / h (four projections and the FFN), j_q = 6 + 2 i / h, j_d = 2 (the cross-attention's
keys and values, S1 only). Embeddings, LayerNorm, softmax and the score head are left out, as in Table 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.benchmarks.bert_inputs import BertSize


@dataclass(frozen=True)
class Constants:
    """Multiply-adds per term of Table 1: a, t, j_q and j_d."""

    attention: float
    layer_token: float
    judge_query_token: float
    judge_document_token: float


def counted_constants(hidden: int, intermediate: int) -> Constants:
    """Table 1's constants in multiply-adds for an FFN of width `intermediate` (2 i h per token)."""
    ffn = 2 * intermediate / hidden
    return Constants(attention=2, layer_token=4 + ffn, judge_query_token=6 + ffn, judge_document_token=2)


TABLE1 = Constants(attention=1, layer_token=1, judge_query_token=1, judge_document_token=1)


@dataclass(frozen=True)
class Size(BertSize):
    """A BERT's size (the BERT ranker's; EARL's T_doc and T_qry) and EARL's: K judge blocks, l query layers."""

    blocks: int
    query_layers: int

    def describe(self) -> str:
        return f"{super().describe()}; EARL l={self.query_layers}, K={self.blocks}"

    def cost(self, impl: str, q: int, d: int, documents: int, constants: Constants | None = None) -> float:
        """Table 1's cost of ranking `documents` candidates of `d` tokens for a query of `q` with `impl` at this size:
        multiply-adds (`counted_constants`) unless `constants` are given."""
        c, n = constants or counted_constants(self.hidden, self.intermediate), self.hidden
        if impl == "bert_ranker":
            t = q + d
            return self.layers * (c.attention * n * t * t + c.layer_token * n * n * t) * documents
        if impl not in ("earl_s1", "earl_s2"):
            raise ValueError(f"unknown implementation {impl!r}")
        query = self.query_layers * (c.attention * n * q * q + c.layer_token * n * n * q)
        judge = c.attention * n * (q * d + q * q) + c.judge_query_token * n * n * q
        if impl == "earl_s1":
            judge += c.judge_document_token * n * n * d
        return query + self.blocks * judge * documents
