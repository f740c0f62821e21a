"""``python -m mva.costs``: joint compute and storage of Tables 5 and 6 (Zhou and Devlin 2021), from first principles.

Joint compute: multiply-accumulates of scoring per query over 1,000 stored candidates, in millions (the paper's
"mega-FLOPS"), the query's own encoding left out; storage: floats per document. Lengths are MS MARCO's averages,
q = 7 ([CLS] and 6 tokens), d = 70. MVA: ``H (2 q d p + q p)``, storing ``2 d H p``; MVA² and MVA³ at q = 8, the
one query length that gives their printed figures (q = 7 gives 22.0 and 7.4; the paper does not say what the 8
timesteps are: the configs read every query token, an alternative 8 query [CLS]); DE: h; ColBERT: ``q d dim`` with
q = 32; CA: BERT-base over a 128-token pair. Table 6: the first pass plus CA on the top K (K = 1: none). The derivation: docs/mva.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass

from common.refusals import ArgumentParser, positive_int

#: MS MARCO's average lengths (Sec. 3), with [CLS] as a query timestep (Sec. 4).
QUERY_TIMESTEPS = 7
DOC_TIMESTEPS = 70
#: BERT-base (Sec. 3, "Training setup").
HIDDEN, LAYERS, INTERMEDIATE = 768, 12, 3072
#: The cross-attention pair's length that fits CA's 11,000,000: BERT's 128-token re-ranking input.
PAIR_TOKENS = 128
#: ColBERT's query length (queries padded with [MASK] to 32) and vector width (Khattab and Zaharia 2020).
COLBERT_QUERY, COLBERT_DIM = 32, 128
#: Candidates per query (re-ranking BM25's top 1,000).
CANDIDATES = 1000
#: Table 5's MVA operating points: query timesteps q, document timesteps d, projection p, heads H; MVA² and MVA³'s
#: q = 8 is the query length their printed joint compute fits, not a reading of the text.
MVA_POINTS = {"MVA1": (QUERY_TIMESTEPS, DOC_TIMESTEPS, 128, 1), "MVA2": (8, 24, 64, 1), "MVA3": (8, 16, 32, 1)}
#: The query length each MVA row's q is: MS MARCO's average with [CLS], or the one that fits the printed figure.
Q_SOURCE = {QUERY_TIMESTEPS: "[CLS] and ~6 tokens", 8: "fits the printed figure"}


def mva_macs(query_timesteps: int, doc_timesteps: int, projection: int, heads: int) -> int:
    """MVA's score (Sec. 2.1): the attention products Q_K D_K^T and softmax(.) D_V (``2 q d H p``) and the q dot
    products with Q_V (``q H p``)."""
    return (2 * query_timesteps * doc_timesteps + query_timesteps) * heads * projection


def mva_storage(doc_timesteps: int, projection: int, heads: int) -> int:
    """D_K and D_V of a document: ``2 d H p`` floats."""
    return 2 * doc_timesteps * heads * projection


def dual_encoder_macs(hidden: int = HIDDEN) -> int:
    """DE: the dot product of two [CLS] vectors, h MACs; stores h floats."""
    return hidden


def maxsim_macs(query_vectors: int = COLBERT_QUERY, doc_vectors: int = DOC_TIMESTEPS, dim: int = COLBERT_DIM) -> int:
    """ColBERT's MaxSim: every query vector against every document vector, ``q d dim`` (the max is free)."""
    return query_vectors * doc_vectors * dim


def bert_macs(tokens: int = PAIR_TOKENS, layers: int = LAYERS, hidden: int = HIDDEN,
              intermediate: int = INTERMEDIATE) -> int:
    """A BERT encoder over `tokens`: per layer ``n (4 h^2 + 2 h i) + 2 n^2 h`` (no embeddings, softmax, LayerNorm)."""
    return layers * (tokens * (4 * hidden**2 + 2 * hidden * intermediate) + 2 * tokens**2 * hidden)


@dataclass(frozen=True)
class Cost:
    """One row: `method` as the paper names it, MACs per candidate and floats stored per document."""

    method: str
    macs_per_candidate: float
    storage_floats: int
    setting: str = ""

    def joint_mflops(self, candidates: int = CANDIDATES) -> float:
        """The paper's unit: millions of MACs per query over `candidates`."""
        return self.macs_per_candidate * candidates / 1e6


def table5() -> list[Cost]:
    """Table 5's rows (`method` names as ``--json`` prints them)."""
    ca = bert_macs()
    return [
        Cost("BERT_base", ca, 0, f"BERT-base over {PAIR_TOKENS} pair tokens"),
        Cost("ColBERT", maxsim_macs(), DOC_TIMESTEPS * COLBERT_DIM,
             f"MaxSim, q = {COLBERT_QUERY}, d = {DOC_TIMESTEPS}, dim {COLBERT_DIM}"),
        Cost("CA", ca, 0, f"BERT-base over {PAIR_TOKENS} pair tokens"),
        Cost("DE", dual_encoder_macs(), HIDDEN, f"dot product of h = {HIDDEN}"),
    ] + [Cost(name, mva_macs(q, d, p, heads), mva_storage(d, p, heads), f"q = {q} ({Q_SOURCE[q]}), d = {d}, p = {p}")
         for name, (q, d, p, heads) in MVA_POINTS.items()]


@dataclass(frozen=True)
class MultiPass:
    """A Table 6 row: `first_pass` over all candidates (none: CA alone), CA re-scoring its top `reranked`."""

    first_pass: str | None
    reranked: int

    def joint_mflops(self, costs: dict[str, Cost], candidates: int = CANDIDATES) -> float:
        ca = costs["CA"].macs_per_candidate
        if self.first_pass is None:
            return ca * min(self.reranked, candidates) / 1e6
        first = costs[self.first_pass].joint_mflops(candidates)
        return first + (ca * min(self.reranked, candidates) / 1e6 if self.reranked > 1 else 0.0)


#: Table 6's rows: CA over the top 1,000, and DE or MVA² (D = 24, P = 64) re-ranked by CA at K = 1, 10, 50.
TABLE6 = [MultiPass(None, 1000)] + [MultiPass(first, k) for first in ("DE", "MVA2") for k in (1, 10, 50)]
#: The paper's names of Table 6's first passes (``results/reported/mva.csv``).
TABLE6_NAMES = {None: "N/A", "DE": "DE", "MVA2": "MVA (D=24, P=64)"}
#: The paper's names of Table 5's methods.
TABLE5_NAMES = {"BERT_base": "BERT_Base", "ColBERT": "ColBERT", "CA": "CA (Ours)", "DE": "DE (Ours)", "MVA1": "MVA¹",
                "MVA2": "MVA²", "MVA3": "MVA³"}


def rows(candidates: int = CANDIDATES) -> list[dict]:
    """Every row of Tables 5 and 6, with the paper's printed numbers beside (None where it prints none)."""
    from common.report import load_reported

    reported = load_reported(paper="mva", table=[5, 6])
    printed = {(str(r.table), r.method, r.setting.rsplit("=", 1)[-1] if str(r.table) == "6" else "", r.metric):
               float(r.value) for r in reported.itertuples()}
    costs = {c.method: c for c in table5()}
    out = []
    for cost in costs.values():
        name = TABLE5_NAMES[cost.method]
        out.append({"table": 5, **asdict(cost), "joint_mflops": cost.joint_mflops(candidates),
                    "paper_joint_mflops": printed.get(("5", name, "", "joint_compute_mflops")),
                    "paper_storage_floats": printed.get(("5", name, "", "storage_floats_per_doc"))})
    for row in TABLE6:
        name = TABLE6_NAMES[row.first_pass]
        out.append({"table": 6, "method": name, "first_pass": row.first_pass, "reranked": row.reranked,
                    "joint_mflops": row.joint_mflops(costs, candidates),
                    "paper_joint_mflops": printed.get(("6", name, str(row.reranked), "joint_compute_mflops"))})
    return out


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"


def markdown(table: list[dict]) -> str:
    lines = ["Table 5: joint compute (millions of MACs per query over the candidates) and storage (floats per document)",
             "", "| method | setting | joint compute | paper | storage | paper |", "|---|---|---:|---:|---:|---:|"]
    for r in (r for r in table if r["table"] == 5):
        lines.append(f"| {r['method']} | {r['setting']} | {_number(r['joint_mflops'])} | "
                     f"{_number(r['paper_joint_mflops'])} | {r['storage_floats']:,} | "
                     f"{_number(r['paper_storage_floats'])} |")
    lines += ["", "Table 6: multi-pass re-ranking, CA re-scoring the first pass's top K", "",
              "| first pass | K | joint compute | paper |", "|---|---:|---:|---:|"]
    for r in (r for r in table if r["table"] == 6):
        lines.append(f"| {r['method']} | {r['reranked']} | {_number(r['joint_mflops'])} | "
                     f"{_number(r['paper_joint_mflops'])} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m mva.costs", description=__doc__.split("\n\n")[0],
                            epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--json", action="store_true", help="one JSON object per row (table 5, then table 6)")
    parser.add_argument("--candidates", type=positive_int, default=CANDIDATES,
                        help=f"candidates per query (default {CANDIDATES}, the paper's)")
    return parser


def main(argv=None) -> list[dict]:
    args = build_parser().parse_args(argv)
    table = rows(args.candidates)
    if args.json:
        for row in table:
            sys.stdout.write(json.dumps(row) + "\n")
    else:
        print(markdown(table))
    return table


if __name__ == "__main__":
    main()
