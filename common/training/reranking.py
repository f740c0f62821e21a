"""What every re-ranking LightningModule of EARL and MVA shares: dev and test evaluation, exact resumption and the
learning-rate schedule.

`RerankingEvaluation` is a mixin for a ``LightningModule`` whose ``forward(batch)`` scores a batch of (query,
document) pairs (B,): it measures dev and test re-ranking with the class's `measures` through
`common.metrics.RankingMetrics` (on the full runs, unscored candidates below, as run.trec and metrics.json are),
logs them as ``dev/<measure>`` and ``test/<measure>``, keeps the test scores as (index, score) rows of every rank
(``test_scores``, for the run file), and saves the random generators' states in checkpoints, so that a resumed
run repeats an uninterrupted one (dropout included).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from common.metrics import RankingMetrics
from common.data.rerank import gather_scores
from common.training.rng import rng_states, set_rng_states


def decay_groups(module: nn.Module, weight_decay: float) -> list[dict]:
    """Parameter groups with `weight_decay` on matrices only (not biases and LayerNorm weights)."""
    decay = [p for p in module.parameters() if p.ndim > 1]
    no_decay = [p for p in module.parameters() if p.ndim <= 1]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class RerankingEvaluation:
    """Mixin for a ``LightningModule`` (module docstring): the class sets `measures`, and its ``__init__``
    ``self.metrics = nn.ModuleDict()``, filled per evaluation split in `setup` (the metrics need the qrels)."""

    measures: tuple[str, ...]
    metrics: nn.ModuleDict

    def setup(self, stage: str) -> None:
        data = self.trainer.datamodule
        for split in ("dev", "test"):
            if split not in self.metrics and data.has_split(split):
                self.metrics[split] = RankingMetrics(data.qrels(split), self.measures,
                                                     relevance_level=data.relevance_level,
                                                     candidates=data.candidates(split))  # fmt: skip

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.metrics["dev"].update(batch["qids"], batch["doc_ids"], self(batch))

    def on_validation_epoch_end(self) -> None:
        self._log_metrics("dev")

    def on_test_epoch_start(self) -> None:
        self._scores: list[Tensor] = []

    def test_step(self, batch: dict, batch_idx: int) -> None:
        scores = self(batch)
        self.metrics["test"].update(batch["qids"], batch["doc_ids"], scores)
        self._scores.append(torch.stack([batch["index"].double(), scores.detach().double()], 1))  # (B, 2)

    def on_test_epoch_end(self) -> None:
        self._log_metrics("test")
        self.test_scores = gather_scores(self, self._scores)  # (index, score) rows of every rank

    def _log_metrics(self, split: str) -> None:
        values = self.metrics[split].compute()
        self.log_dict({f"{split}/{name}": value.float() for name, value in values.items()}, prog_bar=split == "dev")
        self.metrics[split].reset()

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["rng_states"] = rng_states()  # dropout's generators: a resumed run repeats an uninterrupted one

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if "rng_states" in checkpoint:
            set_rng_states(checkpoint["rng_states"])
