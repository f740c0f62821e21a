"""`RankingMetrics`: a torchmetrics Metric that evaluates a ranking accumulated over batches and DDP ranks.

Ids are strings, which torchmetrics cannot gather: each `update` appends the UTF-8 bytes of the batch's ids as one
uint8 tensor with an int64 tensor of their lengths, so every state is a "cat" tensor state torchmetrics synchronises.
`compute` decodes them and evaluates with `common.metrics.evaluate_run`, as one process would. A (qid, docid) pair
seen twice counts once, with its first score (DistributedSampler pads by repeating). With `candidates`, a query's
unscored candidates are ranked below its scored ones, as in the run a re-ranker writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities.data import dim_zero_cat

from common.metrics.ordering import with_unscored_below
from common.metrics.evaluation import Qrels, evaluate_run
from common.metrics.registry import DEFAULT_MEASURES, parse_measures

_STATES = ("qid_bytes", "qid_lengths", "docid_bytes", "docid_lengths", "scores")


class RankingMetrics(Metric):
    """Ranking measures over all ``update(qids, docids, scores)``; ``compute()``: ``{measure: 0-d float64 tensor}``."""

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, qrels: Qrels, measures: str | Iterable[str] = DEFAULT_MEASURES, *, relevance_level: int = 1,
                 complete: bool = False, depth: int | None = None,
                 candidates: dict[str, dict[str, float]] | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.qrels = {str(qid): dict(labels) for qid, labels in qrels.items()}
        self.measures = (measures,) if isinstance(measures, str) else tuple(measures)
        parse_measures(self.measures)  # an unknown measure fails here, not at the end of an epoch
        self.relevance_level, self.complete, self.depth, self.candidates = relevance_level, complete, depth, candidates
        for name in _STATES:
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def update(self, qids: Sequence[str], docids: Sequence[str], scores: Tensor | Sequence[float]) -> None:
        scores = torch.as_tensor(scores).detach().reshape(-1).to(dtype=torch.float64, device=self.device)
        if not len(qids) == len(docids) == len(scores):
            raise ValueError(f"got {len(qids)} qids, {len(docids)} docids and {len(scores)} scores")
        for prefix, ids in (("qid", qids), ("docid", docids)):
            data, lengths = _encode(ids, self.device)
            getattr(self, f"{prefix}_bytes").append(data)
            getattr(self, f"{prefix}_lengths").append(lengths)
        self.scores.append(scores)

    def compute(self) -> dict[str, Tensor]:
        scores = _cat(self.scores)  # a list of batches here; one tensor once synchronised
        if not scores.numel():
            raise ValueError("RankingMetrics.compute() called before any update()")
        qids = _decode(_cat(self.qid_bytes), _cat(self.qid_lengths))
        docids = _decode(_cat(self.docid_bytes), _cat(self.docid_lengths))
        run: dict[str, dict[str, float]] = {}
        for qid, docid, score in zip(qids, docids, scores.tolist(), strict=True):
            run.setdefault(qid, {}).setdefault(docid, score)
        if self.candidates is not None:
            run = with_unscored_below(run, self.candidates)
        values = evaluate_run(self.qrels, run, self.measures, relevance_level=self.relevance_level,
                              complete=self.complete, depth=self.depth)
        return {name: torch.tensor(value, dtype=torch.float64) for name, value in values.items()}


def _encode(ids: Sequence[str], device: torch.device) -> tuple[Tensor, Tensor]:
    encoded = [str(i).encode("utf-8") for i in ids]
    data = torch.tensor(list(b"".join(encoded)), dtype=torch.uint8, device=device)
    lengths = torch.tensor([len(e) for e in encoded], dtype=torch.int64, device=device)
    return data, lengths


def _cat(state: Tensor | list[Tensor]) -> Tensor:
    return dim_zero_cat(state) if isinstance(state, Tensor) or state else torch.empty(0)


def _decode(data: Tensor, lengths: Tensor) -> list[str]:
    # a rank without data gives an empty float32 tensor, to which cat promotes the others
    raw = data.to(device="cpu", dtype=torch.uint8).numpy().tobytes()
    ends = lengths.to(device="cpu", dtype=torch.int64).cumsum(0).tolist()
    return [raw[start:end].decode("utf-8") for start, end in zip([0, *ends], ends)]
