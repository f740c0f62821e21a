"""The trec_eval 9.0.8 measures, computed by pytrec_eval 0.5.11 (which links trec_eval's C code), and how each is
summarised (``meas_avg.c``): ``MEAN`` over queries (``-c``: over the qrels' queries, absent ones adding 0), ``SUM`` for
the ``num_*`` counts, ``GEOMETRIC`` for ``gm_map``/``gm_bpref`` (per query ``ln(max(value, 1e-5))``, the summary
``exp(mean)``). One `TrecEvalMeasure` per family, in trec_eval's printing order (``te_trec_measures`` in measures.c).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass


class Aggregation(enum.Enum):
    MEAN = "mean"
    SUM = "sum"
    GEOMETRIC = "geometric"


#: trec_eval's floor for values entering a geometric mean (trec_eval.h).
MIN_GEO_MEAN = 0.00001


class ParamKind(enum.Enum):
    """What the ``.p1,p2`` suffix of ``-m family.p1,p2`` may hold."""

    NONE = "none"
    CUTOFF = "cutoff"  # positive integers: a rank depth
    FRACTION = "fraction"  # non-negative decimals: a recall level or a multiple of R


@dataclass(frozen=True)
class TrecEvalMeasure:
    name: str
    definition: str
    aggregation: Aggregation = Aggregation.MEAN
    params: ParamKind = ParamKind.NONE

    def missing_value(self, judged: Mapping[str, int], relevance_level: int) -> float:
        """The value trec_eval 9.0.8 averages in (``-c``) for a qrels query absent from the run."""
        if self.name == "num_q":
            return 1.0
        if self.name == "num_rel":
            return float(sum(1 for rel in judged.values() if rel >= relevance_level))
        if self.aggregation is Aggregation.GEOMETRIC:
            return math.log(MIN_GEO_MEAN)
        return 0.0


_CUT = "Cutoffs default to 5,10,15,20,30,100,200,500,1000."
TREC_EVAL_MEASURES: dict[str, TrecEvalMeasure] = {
    m.name: m
    for m in (
        TrecEvalMeasure("num_q", "Number of queries evaluated (m_num_q.c).", Aggregation.SUM),
        TrecEvalMeasure("num_ret", "Number of documents retrieved (m_num_ret.c).", Aggregation.SUM),
        TrecEvalMeasure("num_rel", "Number of relevant documents in the qrels (m_num_rel.c).", Aggregation.SUM),
        TrecEvalMeasure("num_rel_ret", "Number of relevant documents retrieved (m_num_rel_ret.c).", Aggregation.SUM),
        TrecEvalMeasure(
            "map",
            "Mean average precision: the sum of precision at each relevant retrieved document, "
            "divided by the number of relevant documents (m_map.c).",
        ),
        TrecEvalMeasure("gm_map", "Geometric mean of per-query average precision (m_gm_map.c).", Aggregation.GEOMETRIC),
        TrecEvalMeasure("Rprec", "Precision after R documents, R = number relevant (m_Rprec.c)."),
        TrecEvalMeasure(
            "bpref",
            "Buckley & Voorhees 2004 binary preference: how many judged non-relevant documents are "
            "ranked above each relevant one (m_bpref.c).",
        ),
        TrecEvalMeasure(
            "recip_rank", "Reciprocal rank of the first relevant document, 0 if none is retrieved (m_recip_rank.c)."
        ),
        TrecEvalMeasure(
            "iprec_at_recall",
            "Interpolated precision at recall levels 0.00,0.10,...,1.00 (m_iprec_at_recall.c).",
            params=ParamKind.FRACTION,
        ),
        TrecEvalMeasure("P", f"Precision at rank cutoffs (m_P.c). {_CUT}", params=ParamKind.CUTOFF),
        TrecEvalMeasure(
            "recall",
            f"Recall at rank cutoffs: relevant retrieved in the top k / number relevant (m_recall.c). {_CUT}",
            params=ParamKind.CUTOFF,
        ),
        TrecEvalMeasure(
            "infAP", "Inferred AP (Yilmaz & Aslam 2006); judgments of -1 mark unjudged pool documents (m_infap.c)."
        ),
        TrecEvalMeasure("gm_bpref", "Geometric mean of bpref (m_gm_bpref.c).", Aggregation.GEOMETRIC),
        TrecEvalMeasure(
            "Rprec_mult",
            "Precision at multiples of R: 0.2,0.4,...,2.0 (m_Rprec_mult.c).",
            params=ParamKind.FRACTION,
        ),
        TrecEvalMeasure(
            "utility",
            "Set utility with default coefficients 1,-1,0,0: relevant minus non-relevant retrieved (m_utility.c).",
        ),
        TrecEvalMeasure("11pt_avg", "Mean interpolated precision at the 11 recall levels 0.0-1.0 (m_11pt_avg.c)."),
        TrecEvalMeasure("binG", "Binary gain measure G with 0/1 gains (m_binG.c)."),
        TrecEvalMeasure("G", "Gain measure G: normalised cumulative gain with gain = relevance (m_G.c)."),
        TrecEvalMeasure(
            "ndcg",
            "Jarvelin & Kekalainen 2002 nDCG over the whole ranking, gain = relevance label, "
            "discount log2(rank+1) (m_ndcg.c).",
        ),
        TrecEvalMeasure("ndcg_rel", "nDCG averaged over the ranks of relevant documents (m_ndcg_rel.c)."),
        TrecEvalMeasure("Rndcg", "nDCG at rank R = number relevant (m_Rndcg.c)."),
        TrecEvalMeasure(
            "ndcg_cut",
            f"nDCG at rank cutoffs, gain = relevance label, discount log2(rank+1) (m_ndcg_cut.c). {_CUT}",
            params=ParamKind.CUTOFF,
        ),
        TrecEvalMeasure(
            "map_cut",
            f"Average precision with the ranking cut at k, still divided by all relevant (m_map_cut.c). {_CUT}",
            params=ParamKind.CUTOFF,
        ),
        TrecEvalMeasure(
            "relative_P",
            f"Precision at k relative to the best possible, min(k, R) (m_rel_P.c). {_CUT}",
            params=ParamKind.CUTOFF,
        ),
        TrecEvalMeasure(
            "success",
            "1 if a relevant document is in the top k, else 0; k = 1,5,10 (m_success.c).",
            params=ParamKind.CUTOFF,
        ),
        TrecEvalMeasure("set_P", "Precision of the whole retrieved set (m_set_P.c)."),
        TrecEvalMeasure("set_relative_P", "Set precision relative to min(retrieved, R) (m_set_rel_P.c)."),
        TrecEvalMeasure("set_recall", "Recall of the whole retrieved set (m_set_recall.c)."),
        TrecEvalMeasure("set_map", "Set precision times set recall (m_set_map.c)."),
        TrecEvalMeasure("set_F", "F1 of set precision and set recall (m_set_F.c)."),
        TrecEvalMeasure(
            "num_nonrel_judged_ret",
            "Number of retrieved documents judged non-relevant (m_num_nonrel_judged_ret.c).",
            Aggregation.SUM,
        ),
    )
}

#: trec_eval's measure groups (``-m all_trec`` ...), without its two non-numeric
#: measures ``runid`` and ``relstring``.
NICKNAMES: dict[str, tuple[str, ...]] = {
    "all_trec": tuple(TREC_EVAL_MEASURES),
    "official": (
        "num_q", "num_ret", "num_rel", "num_rel_ret", "map", "gm_map", "Rprec", "bpref", "recip_rank",
        "iprec_at_recall", "P",
    ),
    "set": ("num_q", "num_ret", "num_rel", "num_rel_ret", "utility", "set_P", "set_relative_P", "set_recall",
            "set_map", "set_F"),
}  # fmt: skip
