"""What every re-ranking LightningModule of the four packages shares: dev and test evaluation, exact resumption
and AdamW's parameter groups. `RerankingEvaluation` logs ``dev/<measure>`` and ``test/<measure>`` of the class's
`measures` (`common.metrics.RankingMetrics`, on the full runs; a test task without judgments is scored, not measured),
keeps the test scores as (index, score) rows of every rank (``test_scores``), and saves every process's random
generators in checkpoints, so that a resumed run repeats an uninterrupted one.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from common.data.rerank import gather_scores
from common.metrics import RankingMetrics
from common.training.processes import world_size
from common.training.rng import rng_states, set_rng_states

def decay_groups(module: nn.Module, weight_decay: float) -> list[dict]:
    """Parameter groups with `weight_decay` on matrices only (not biases and LayerNorm weights)."""
    decay = [p for p in module.parameters() if p.ndim > 1]
    no_decay = [p for p in module.parameters() if p.ndim <= 1]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class RerankingEvaluation:
    """Mixin for a ``LightningModule`` that sets `measures` and ``self.metrics = nn.ModuleDict()``."""

    measures: tuple[str, ...]
    metrics: nn.ModuleDict

    def evaluation_scores(self, batch: dict) -> Tensor:
        """The (B,) scores of an evaluation batch's (query, document) pairs."""
        return self(batch)

    def setup(self, stage: str) -> None:
        data = self.trainer.datamodule
        for split in ("dev", "test"):  # a test task without judgments is scored, not measured: no metrics
            if split not in self.metrics and data.has_split(split) and data.source(split).qrels():
                self.metrics[split] = RankingMetrics(data.source(split).qrels(), self.measures,
                                                     relevance_level=data.tasks.relevance_level,
                                                     candidates=data.source(split).candidates())

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.metrics["dev"].update(batch["qids"], batch["doc_ids"], self.evaluation_scores(batch))

    def on_validation_epoch_end(self) -> None:
        self._log_metrics("dev")

    def on_test_epoch_start(self) -> None:
        self._scores: list[Tensor] = []

    def test_step(self, batch: dict, batch_idx: int) -> None:
        scores = self.evaluation_scores(batch)  # (B,)
        if "test" in self.metrics:
            self.metrics["test"].update(batch["qids"], batch["doc_ids"], scores)
        self._scores.append(torch.stack([batch["index"].double(), scores.detach().double()], 1))  # (B, 2)

    def on_test_epoch_end(self) -> None:
        if "test" in self.metrics:
            self._log_metrics("test")
        self.test_scores = gather_scores(self, self._scores)  # (index, score) rows of every rank

    def _log_metrics(self, split: str) -> None:
        values = self.metrics[split].compute()
        self.log_dict({f"{split}/{name}": value.float() for name, value in values.items()}, prog_bar=split == "dev")
        self.metrics[split].reset()

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Save every process's random generators and the global batch's processes and accumulation."""
        checkpoint["rng_states"] = rng_states()
        trainer = self._trainer  # None where the module is saved outside a trainer
        accumulate = {"accumulate": trainer.accumulate_grad_batches} if trainer is not None else {}
        checkpoint["global_batch"] = {"processes": world_size(), **accumulate}
        if world_size() > 1:
            checkpoint["rng_states_by_rank"] = [None] * world_size()
            torch.distributed.all_gather_object(checkpoint["rng_states_by_rank"], checkpoint["rng_states"])

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """Restore this process's generators (the first process's on another number of processes)."""
        by_rank = checkpoint.get("rng_states_by_rank")
        if by_rank is not None and len(by_rank) == world_size():
            set_rng_states(by_rank[torch.distributed.get_rank()])
        elif "rng_states" in checkpoint:
            set_rng_states(checkpoint["rng_states"])

