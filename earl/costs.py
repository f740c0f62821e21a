"""EARL's analytic cost (Gao, Dai, Callan 2020, Table 1): the online cost of ranking N candidates of d tokens for a
query of q tokens at hidden width n, per Transformer layer, for the BERT ranker and for EARL with S1 or S2.

- BERT ranker: ``(a n (d+q)^2 + t n^2 (d+q)) N`` per layer, L layers;
- EARL's query understanding: ``a n q^2 + t n^2 q`` per layer, l layers, once per query;
- EARL's judge, S1: ``(a n (qd + q^2) + (j_q q + j_d d) n^2) N`` per block, K blocks; S2 stores the document's keys
  and values (Eq. 25), so without the ``j_d d n^2`` term.

Table 1 writes every constant as 1 (`TABLE1`). Counted in multiply-adds of a BERT layer (`counted_constants`,
`COUNTED` at BERT-base's sizes): a = 2 per attention pair and hidden unit (Q K^T and the weighted sum of V), t =
4 + 2 i / h n^2 per token (the Q, K, V and output projections, and the FFN h -> i -> h: 12 at i = 4 h); a judge
block spends j_q = 6 + 2 i / h n^2 per query token (the cross-attention's query and output projections, the
self-attention's four, the FFN) and j_d = 2 n^2 per document token (the cross-attention's keys and values, S1 only).
Embeddings, LayerNorm, softmax and the score head are left out, as in Table 1. `Size` holds a model's size (the
BERT's L, h, heads and FFN width; EARL's K and l) and gives its costs and the BERT ranker's ratio to EARL's, which
`earl.benchmark` sets beside measured times and FLOP counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.benchmarks.bert_inputs import BertSize


@dataclass(frozen=True)
class Constants:
    """Multiply-adds per term of Table 1: ``attention`` per attention pair and hidden unit, ``layer_token`` n^2
    per token of a Transformer layer, ``judge_query_token`` and ``judge_document_token`` n^2 per query and per
    document token of a judge block."""

    attention: float
    layer_token: float
    judge_query_token: float
    judge_document_token: float


def counted_constants(hidden: int, intermediate: int) -> Constants:
    """Table 1's constants in multiply-adds for an FFN of width `intermediate`: 2 i h per token (8 h^2 at BERT's
    i = 4 h), so t = 4 + 2 i / h and j_q = 6 + 2 i / h."""
    ffn = 2 * intermediate / hidden
    return Constants(attention=2, layer_token=4 + ffn, judge_query_token=6 + ffn, judge_document_token=2)


TABLE1 = Constants(attention=1, layer_token=1, judge_query_token=1, judge_document_token=1)
COUNTED = counted_constants(768, 3072)  # a = 2, t = 12, j_q = 14, j_d = 2


def analytic_cost(impl: str, *, n: int, q: int, d: int, documents: int, layers: int = 1, query_layers: int = 1,
                  blocks: int = 1, constants: Constants = TABLE1) -> float:
    """Table 1's online cost of ranking `documents` candidates for one query with `impl` (``bert_ranker``,
    ``earl_s1`` or ``earl_s2``): hidden width `n`, query length `q`, document length `d`. With the default per-layer
    counts of 1 and `TABLE1`, exactly the table's cells (BERT ranker: ``(n(d+q)^2 + n^2(d+q)) N``; EARL: ``nq^2 +
    n^2 q`` plus ``(n(qd+q^2) + n^2(q+d)) N`` with S1 or ``(n(qd+q^2) + n^2 q) N`` with S2); with `COUNTED`,
    multiply-adds."""
    c = constants
    if impl == "bert_ranker":
        t = q + d
        return layers * (c.attention * n * t * t + c.layer_token * n * n * t) * documents
    if impl not in ("earl_s1", "earl_s2"):
        raise ValueError(f"unknown implementation {impl!r}")
    query = query_layers * (c.attention * n * q * q + c.layer_token * n * n * q)
    judge = c.attention * n * (q * d + q * q) + c.judge_query_token * n * n * q
    if impl == "earl_s1":
        judge += c.judge_document_token * n * n * d
    return query + blocks * judge * documents


@dataclass(frozen=True)
class Size(BertSize):
    """A BERT's size (the BERT ranker's; EARL's T_doc and T_qry) and EARL's: K judge blocks, l query layers."""

    blocks: int
    query_layers: int

    def describe(self) -> str:
        return f"{super().describe()}; EARL l={self.query_layers}, K={self.blocks}"

    def cost(self, impl: str, q: int, d: int, documents: int, constants: Constants | None = None) -> float:
        """`analytic_cost` of `impl` at this size, in multiply-adds (`counted_constants` of its FFN) unless
        `constants` are given."""
        return analytic_cost(impl, n=self.hidden, q=q, d=d, documents=documents, layers=self.layers,
                             query_layers=self.query_layers, blocks=self.blocks,
                             constants=constants or counted_constants(self.hidden, self.intermediate))

    def ratio(self, impl: str, q: int, d: int, documents: int, constants: Constants | None = None) -> float:
        """The BERT ranker's `cost` over `impl`'s: how many times less `impl` computes."""
        return self.cost("bert_ranker", q, d, documents, constants) / self.cost(impl, q, d, documents, constants)
