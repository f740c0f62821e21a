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


_PARAMS = {**dict.fromkeys(("iprec_at_recall", "Rprec_mult"), ParamKind.FRACTION),
           **dict.fromkeys(("P", "recall", "ndcg_cut", "map_cut", "relative_P", "success"), ParamKind.CUTOFF)}
#: In trec_eval's printing order (docs/metrics.md says what each measures): ``num_*`` summed, ``gm_*`` geometric.
TREC_EVAL_MEASURES: dict[str, TrecEvalMeasure] = {
    name: TrecEvalMeasure(name, Aggregation.SUM if name.startswith("num_") else
                          Aggregation.GEOMETRIC if name.startswith("gm_") else Aggregation.MEAN,
                          _PARAMS.get(name, ParamKind.NONE))
    for name in ("num_q", "num_ret", "num_rel", "num_rel_ret", "map", "gm_map", "Rprec", "bpref", "recip_rank",
                 "iprec_at_recall", "P", "recall", "infAP", "gm_bpref", "Rprec_mult", "utility", "11pt_avg", "binG",
                 "G", "ndcg", "ndcg_rel", "Rndcg", "ndcg_cut", "map_cut", "relative_P", "success", "set_P",
                 "set_relative_P", "set_recall", "set_map", "set_F", "num_nonrel_judged_ret")
}

#: trec_eval's measure groups (``-m all_trec`` ...), without its non-numeric ``runid`` and ``relstring``.
NICKNAMES: dict[str, tuple[str, ...]] = {
    "all_trec": tuple(TREC_EVAL_MEASURES),
    "official": tuple(TREC_EVAL_MEASURES)[:11],  # num_q to P
    "set": ("num_q", "num_ret", "num_rel", "num_rel_ret", "utility", "set_P", "set_relative_P", "set_recall",
            "set_map", "set_F"),
}
