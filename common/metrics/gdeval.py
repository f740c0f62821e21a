"""nDCG@k and ERR@k exactly as gdeval.pl 1.3 computes them (TREC Web track 2010-2014; trec-web-2014 src/eval/gdeval.pl).

As gdeval.pl: topic ids lose everything up to their last ``-`` and must be digits, ordered numerically; labels above
``MAX_JUDGMENT`` = 4 are refused and labels <= 0 dropped (a topic counts only with a label > 0); a run is ordered by
score descending, then docno descending, in double precision; averages are over the topics of both (with ``-c``, all
judged topics). The arithmetic mirrors gdeval's operation by operation, to the last bit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

#: gdeval.pl's ``$MAX_JUDGMENT``: the largest label it accepts, and the ERR normaliser 2^4.
MAX_JUDGMENT = 4

_LOG2 = math.log(2.0)  # gdeval's LOGBASEDIV


def _dcg(gains: Sequence[int], k: int) -> float:
    """gdeval's ``dcg``: sum of (2^g - 1) / log2(i + 2) over the first k gains."""
    score = 0.0
    for i, gain in enumerate(gains[:k]):
        score += (2**gain - 1) / (math.log(i + 2) / _LOG2)
    return score


def gdeval_ndcg(gains: Sequence[int], judged: Sequence[int], k: int) -> float:
    """nDCG@k with gain 2^rel - 1 and a log2(rank + 1) discount (Burges et al. 2005; gdeval.pl's ``topicDone``)."""
    return _dcg(gains, k) / _dcg(sorted(judged, reverse=True), k)


def gdeval_err(gains: Sequence[int], judged: Sequence[int], k: int) -> float:
    """ERR@k (Chapelle et al., CIKM 2009): sum of R_r / r prod_{i<r} (1 - R_i), R = (2^g - 1) / 2^MAX_JUDGMENT."""
    score, decay = 0.0, 1.0
    for i, gain in enumerate(gains[:k]):
        r = (2**gain - 1) / (2**MAX_JUDGMENT)
        score += r * decay / (i + 1)
        decay *= 1 - r
    return score


def gdeval_topic(qid: str) -> str:
    """The topic id gdeval.pl reports for `qid` (``s/^.*\\-//``); ValueError unless it is digits."""
    topic = qid.rsplit("-", 1)[-1]
    if not topic.isascii() or not topic.isdigit():
        raise ValueError(f"gdeval measures need numeric topic ids (gdeval.pl strips up to the last '-'); got {qid!r}")
    return topic


def check_gdeval_labels(qrels: Mapping[str, Mapping[str, int]]) -> None:
    """gdeval.pl refuses a qrels file with a label above MAX_JUDGMENT."""
    for qid, judged in qrels.items():
        for doc, label in judged.items():
            if label > MAX_JUDGMENT:
                raise ValueError(f"gdeval measures accept labels up to {MAX_JUDGMENT} (gdeval.pl's MAX_JUDGMENT); "
                                 f"query {qid!r} document {doc!r} has {label}")
