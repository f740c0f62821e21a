"""nDCG@k and ERR@k exactly as gdeval.pl 1.3 computes them (TREC Web track 2010-2014).

gdeval.pl 1.3 (Mon Apr 29 2013; trec-web/trec-web-2014 src/eval/gdeval.pl,
the same scoring code as castorini/anserini-tools eval/gdeval.pl):

- Topic ids lose everything up to their last ``-`` (``2024-127266`` becomes
  ``127266``) and must then be digits; topics are ordered numerically.
- Labels above ``MAX_JUDGMENT`` = 4 are rejected; labels <= 0 are dropped, so
  a topic counts only if it has a label > 0 (``%seen``). Run topics without
  such a label are neither printed nor averaged.
- A topic's run is ordered by score descending, then docno descending
  (``runOrder``, in double precision).
- Averages are over the topics in both the run and ``%seen``; with ``-c`` over
  all of ``%seen``, absent topics adding 0.

The measure functions take the gains of the ranking in rank order (labels of
retrieved documents, unjudged = 0) and the positive labels of all judged
documents, and mirror gdeval's arithmetic operation by operation so that
results agree to the last bit, not only at the 5 printed decimals.
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
    """nDCG@k with exponential gain 2^rel - 1 and log2(rank + 1) discount.

    Burges et al., "Learning to rank using gradient descent", ICML 2005 (the
    exponential-gain DCG of Jarvelin & Kekalainen 2002); as gdeval.pl 1.3's
    ``dcg`` / ``topicDone``: DCG@k of the ranking over DCG@k of the judged
    labels sorted descending.
    """
    return _dcg(gains, k) / _dcg(sorted(judged, reverse=True), k)


def gdeval_err(gains: Sequence[int], judged: Sequence[int], k: int) -> float:
    """Expected reciprocal rank at k.

    Chapelle, Metzler, Zhang & Grinspan, "Expected reciprocal rank for graded
    relevance", CIKM 2009: sum over ranks r of R_r / r * prod_{i<r} (1 - R_i)
    with R = (2^g - 1) / 2^MAX_JUDGMENT (gdeval.pl 1.3's ``err``, which fixes
    the normaliser at 2^4 whatever the largest label in the qrels).
    """
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


def gdeval_topic_order(topic: str) -> int:
    """gdeval.pl orders and groups topics numerically."""
    return int(topic)


def check_gdeval_labels(qrels: Mapping[str, Mapping[str, int]]) -> None:
    """gdeval.pl refuses a qrels file with a label above MAX_JUDGMENT."""
    for qid, judged in qrels.items():
        for doc, label in judged.items():
            if label > MAX_JUDGMENT:
                raise ValueError(
                    f"gdeval measures accept labels up to {MAX_JUDGMENT} (gdeval.pl's MAX_JUDGMENT); "
                    f"query {qid!r} document {doc!r} has {label}"
                )
