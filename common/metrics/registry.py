"""Measure names: what ``-m`` accepts, and the measures each name stands for.

trec_eval's names (``map``, ``ndcg_cut_10``, ``P_10``, ``iprec_at_recall_0.10``), its ``-m family.p1,p2`` syntax, bare
families (trec_eval's default parameters) and its groups ``all_trec``, ``official`` and ``set``; not supported: the
parameters of ``utility``, ``11pt_avg`` and ``ndcg``, and ``runid``, ``relstring``. Added: ``mrr@K`` (``trec_eval -M K
-m recip_rank``), ``gdeval_ndcg@K`` and ``gdeval_err@K`` (gdeval.pl 1.3), ``ncg@K`` (Conformer-Kernel).

ir_measures 0.4.3's spellings (``nDCG@10``, ``AP(rel=2)``, ``RR(rel=2)@10``, ``R@1000``...; `IR_MEASURES`) stand for
the measure ir_measures computes: its relevance level is its ``rel`` (not ``-l``), and it averages over every qrels
query (whatever ``-c`` says). ``RR@K`` is MS MARCO's MRR code (ties by docid ascending, `MsMarcoRRRequest`), not
``mrr@K``. A trec_eval name stays trec_eval's (``P``, ``Rprec``). docs/metrics.md has the details.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from common.metrics.gdeval import gdeval_err, gdeval_ndcg
from common.metrics.trec_eval_measures import NICKNAMES, TREC_EVAL_MEASURES, ParamKind, TrecEvalMeasure

#: The TREC Deep Learning track's measures; what ``python -m common.evaluate`` prints without ``-m``.
DEFAULT_MEASURES: tuple[str, ...] = ("ndcg_cut_10", "map", "recip_rank", "mrr@10", "recall_100", "recall_1000")

#: trec_eval prints 4 decimals.
TREC_EVAL_DIGITS = 4


def ncg(gains: Sequence[int], judged: Sequence[int], k: int) -> float:
    """NCG@k (Rosset et al., SIGIR 2018; Mitra et al.'s NCG@100, TREC DL 2020 in the Conformer-Kernel paper): the sum
    of max(label, 0) over the top k over the same sum for the k highest labels of the qrels, no rank discount."""
    return sum(gains[:k]) / sum(sorted(judged, reverse=True)[:k])


@dataclass(frozen=True)
class GainMeasure:
    """A measure computed here, per query, from the labels of a ranking's first k documents."""

    prefix: str
    compute: Callable[[Sequence[int], Sequence[int], int], float]
    digits: int
    gdeval_topics: bool  # evaluate on gdeval.pl's topic ids, label range and topic order


GAIN_MEASURES: dict[str, GainMeasure] = {m.prefix: m for m in (
    GainMeasure("gdeval_ndcg", gdeval_ndcg, digits=5, gdeval_topics=True),  # gdeval.pl prints "%.5f"
    GainMeasure("gdeval_err", gdeval_err, digits=5, gdeval_topics=True),
    GainMeasure("ncg", ncg, digits=4, gdeval_topics=False),  # 4 decimals in KEY_METRICS.tsv, as trec_eval's measures
)}


@dataclass(frozen=True)
class TrecEvalRequest:
    """One trec_eval measure family with its parameters (empty: trec_eval's defaults)."""

    measure: TrecEvalMeasure
    params: tuple[str, ...] = ()
    depth: int | None = None  # a depth of its own, as with mrr@K
    alias: str | None = None  # the name printed instead of trec_eval's
    relevance_level: int | None = None  # a -l of its own (an ir_measures name's rel); None: the evaluation's
    complete: bool = False  # average over every qrels query (ir_measures' mean), whatever -c says

    @property
    def spec(self) -> str:
        """The measure as trec_eval's (and pytrec_eval's) ``-m`` takes it."""
        return f"{self.measure.name}.{','.join(self.params)}" if self.params else self.measure.name


@dataclass(frozen=True)
class GainRequest:
    """A gain measure at cutoff k (``gdeval_err@20``)."""

    measure: GainMeasure
    k: int

    @property
    def name(self) -> str:
        return f"{self.measure.prefix}@{self.k}"


@dataclass(frozen=True)
class MsMarcoRRRequest:
    """ir_measures' ``RR@K``: MS MARCO's MRR@K (ties by docid ascending), averaged over every qrels query."""

    name: str
    k: int
    relevance_level: int


MeasureRequest = TrecEvalRequest | GainRequest | MsMarcoRRRequest


@dataclass(frozen=True)
class IrMeasuresName:
    """What an ir_measures measure name stands for: its trec_eval family, and whether it takes ``@K`` and ``rel``."""

    family: str  # trec_eval's measure without a cutoff
    cut_family: str | None  # trec_eval's measure with cutoff K; None: no @K
    cutoff_required: bool = False
    takes_rel: bool = True


#: ir_measures 0.4.3's names (and aliases) taken here; see the module docstring.
IR_MEASURES: dict[str, IrMeasuresName] = {
    **dict.fromkeys(("nDCG", "NDCG"), IrMeasuresName("ndcg", "ndcg_cut", takes_rel=False)),
    **dict.fromkeys(("AP", "MAP"), IrMeasuresName("map", "map_cut")),
    **dict.fromkeys(("RR", "MRR"), IrMeasuresName("recip_rank", "recip_rank")),  # RR@K: MsMarcoRRRequest
    **dict.fromkeys(("P", "Precision"), IrMeasuresName("P", "P", cutoff_required=True)),
    **dict.fromkeys(("R", "Recall"), IrMeasuresName("recall", "recall", cutoff_required=True)),
    "Success": IrMeasuresName("success", "success", cutoff_required=True),
    **dict.fromkeys(("Bpref", "BPref"), IrMeasuresName("bpref", None)),
}

_IR_MEASURES_NAME = re.compile(r"^(?P<name>[A-Za-z]+)(\((?P<params>[^()]*)\))?(@(?P<k>[0-9]+))?$")
_REL = re.compile(r"^\s*rel\s*=\s*(?P<rel>-?[0-9]+)\s*$")

_AT_K = re.compile(r"^(?P<prefix>[A-Za-z_]+)@(?P<k>[0-9]+)$")
_NUMBER = re.compile(r"^[0-9]+(\.[0-9]+)?$")


def parse_measures(names: Iterable[str]) -> list[MeasureRequest]:
    """Parse measure names (see the module docstring); ValueError names an unknown one."""
    requests = [request for name in names for request in _parse_one(name.strip())]
    if not requests:
        raise ValueError("no measure given")
    return requests


def _parse_one(name: str) -> list[MeasureRequest]:
    if name in NICKNAMES:
        return [TrecEvalRequest(TREC_EVAL_MEASURES[family]) for family in NICKNAMES[name]]
    ir_measures = _IR_MEASURES_NAME.match(name)
    if ir_measures and ir_measures["name"] in IR_MEASURES and name not in TREC_EVAL_MEASURES:
        return [_ir_measures_request(name, ir_measures)]
    at_k = _AT_K.match(name)
    if at_k:
        prefix, k = at_k["prefix"], int(at_k["k"])
        if k < 1:
            raise ValueError(f"measure {name!r}: the cutoff must be at least 1")
        if prefix == "mrr":
            return [TrecEvalRequest(TREC_EVAL_MEASURES["recip_rank"], depth=k, alias=f"mrr@{k}")]
        if prefix in GAIN_MEASURES:
            return [GainRequest(GAIN_MEASURES[prefix], k)]
        raise ValueError(f"unknown measure {name!r}; '@K' measures are: mrr, {', '.join(GAIN_MEASURES)}")
    family, params = _split_trec_eval_name(name)
    measure = TREC_EVAL_MEASURES[family]
    if params and measure.params is ParamKind.NONE:
        raise ValueError(f"measure {name!r}: {family} takes no parameters")
    return [TrecEvalRequest(measure, tuple(_check_param(name, measure.params, param) for param in params))]


def _check_param(name: str, kind: ParamKind, param: str) -> str:
    """The parameter in the form pytrec_eval takes; trec_eval also accepts ``.25`` for ``0.25``."""
    if kind is ParamKind.FRACTION and param.startswith("."):
        param = "0" + param
    if not _NUMBER.match(param) or (kind is ParamKind.CUTOFF and ("." in param or int(param) < 1)):
        expected = "a positive integer" if kind is ParamKind.CUTOFF else "a non-negative number"
        raise ValueError(f"measure {name!r}: parameter {param!r} must be {expected}")
    return param


def _split_trec_eval_name(name: str) -> tuple[str, tuple[str, ...]]:
    """``ndcg_cut.10,20`` / ``ndcg_cut_10`` / ``ndcg_cut`` -> (family, parameters)."""
    family, dot, rest = name.partition(".")
    if dot and family in TREC_EVAL_MEASURES:
        # trec_eval splits "-m iprec_at_recall.0.10" at the first dot only.
        return family, tuple(rest.split(","))
    if name in TREC_EVAL_MEASURES:
        return name, ()
    # "ndcg_cut_10": the longest family that is followed by "_<number>".
    for family in sorted(TREC_EVAL_MEASURES, key=len, reverse=True):
        if name.startswith(family + "_") and _NUMBER.match(name[len(family) + 1 :]):
            return family, (name[len(family) + 1 :],)
    raise ValueError(f"unknown measure {name!r}; known: {_known()}")


def _known() -> str:
    ir_measures = [f"{n}@K" if m.cutoff_required else f"{n}[@K]" if m.cut_family else n for n, m in IR_MEASURES.items()]
    return (", ".join([*TREC_EVAL_MEASURES, *NICKNAMES, "mrr@K", *(f"{p}@K" for p in GAIN_MEASURES)])
            + "; ir_measures' " + ", ".join(ir_measures) + ", each also as Name(rel=N)")


def _ir_measures_request(name: str, match: re.Match) -> MeasureRequest:
    """The request an ir_measures name stands for (module docstring)."""
    measure = IR_MEASURES[match["name"]]
    k = None if match["k"] is None else int(match["k"])
    if k is not None and (measure.cut_family is None or k < 1):
        raise ValueError(f"measure {name!r}: " + ("the cutoff must be at least 1" if measure.cut_family
                                                  else f"{match['name']} takes no @K"))
    if k is None and measure.cutoff_required:
        raise ValueError(f"measure {name!r}: {match['name']} needs a cutoff, e.g. {match['name']}@10")
    level = 1
    if match["params"] is not None:
        rel = _REL.match(match["params"])
        if not (rel and measure.takes_rel):
            accepted = "rel=N" if measure.takes_rel else "none"
            raise ValueError(f"measure {name!r}: parameters accepted here: {accepted}")
        level = int(rel["rel"])
    if k is not None and measure.family == "recip_rank":
        return MsMarcoRRRequest(name, k, level)
    family, params = (measure.family, ()) if k is None else (measure.cut_family, (str(k),))
    return TrecEvalRequest(TREC_EVAL_MEASURES[family], params, alias=name,
                           relevance_level=level if measure.takes_rel else None, complete=True)
