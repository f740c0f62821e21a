"""What every re-ranking LightningModule of the four packages shares: dev and test evaluation, exact resumption,
the loading of checkpoints written under older names, and AdamW's parameter groups.

`RerankingEvaluation` is a mixin for a ``LightningModule`` whose `evaluation_scores` (``forward`` unless the class
says otherwise) scores an evaluation batch's (query, document) pairs, (B,): it measures dev and test re-ranking
with the class's `measures` through `common.metrics.RankingMetrics` (on the full runs, unscored candidates below, as
run.trec and metrics.json are), logs them as ``dev/<measure>`` and ``test/<measure>``, keeps the test scores as
(index, score) rows of every rank (``test_scores``, for the run file), and saves the random generators' states in
checkpoints (every process's, on several), so that a resumed run repeats an uninterrupted one (dropout included).
A test task without judgments (empty qrels, `common.data.source`) is scored and its scores kept, with no metrics.

Checkpoints written under older names load: the attribute that holds the paper's ``nn.Module`` was ``ranker``
before it was ``model`` (state-dict keys ``ranker.*`` are read as ``model.*`` wherever weights are loaded:
`RerankingEvaluation.load_state_dict`, which Lightning calls too), and a class that renamed hyper-parameters lists
them in `renamed_hparams` (old name -> new), read by `load_from_checkpoint`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from common.data.rerank import gather_scores
from common.metrics import RankingMetrics
from common.training.processes import world_size
from common.training.rng import rng_states, set_rng_states

#: State-dict key prefixes of older checkpoints -> today's.
RENAMED_PREFIXES = {"ranker.": "model."}


def decay_groups(module: nn.Module, weight_decay: float) -> list[dict]:
    """Parameter groups with `weight_decay` on matrices only (not biases and LayerNorm weights)."""
    decay = [p for p in module.parameters() if p.ndim > 1]
    no_decay = [p for p in module.parameters() if p.ndim <= 1]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def renamed_state(state_dict: dict[str, Tensor]) -> dict[str, Tensor]:
    """`state_dict` with the keys of older checkpoints renamed (`RENAMED_PREFIXES`); today's keys unchanged."""
    renamed = {}
    for key, value in state_dict.items():
        old = next((prefix for prefix in RENAMED_PREFIXES if key.startswith(prefix)), None)
        renamed[key if old is None else RENAMED_PREFIXES[old] + key[len(old) :]] = value
    return renamed


class RerankingEvaluation:
    """Mixin for a ``LightningModule`` (module docstring): the class sets `measures` (and `renamed_hparams` where it
    renamed some), and its ``__init__`` ``self.metrics = nn.ModuleDict()``, filled per evaluation split in `setup`
    (the metrics need the qrels)."""

    measures: tuple[str, ...]
    metrics: nn.ModuleDict
    #: Hyper-parameters renamed since checkpoints were first written, old name -> new.
    renamed_hparams: dict[str, str] = {}

    # --- evaluation: dev (validation) and test re-ranking ---------------------------------

    def evaluation_scores(self, batch: dict) -> Tensor:
        """The (B,) scores of an evaluation batch's (query, document) pairs: ``self(batch)``. The hook for a class
        whose ``forward`` scores something else (the Conformer-Kernel's: (Q, D) groups)."""
        return self(batch)

    def setup(self, stage: str) -> None:
        data = self.trainer.datamodule
        for split in ("dev", "test"):  # a test task without judgments is scored, not measured: no metrics
            if split not in self.metrics and data.has_split(split) and data.source(split).qrels():
                self.metrics[split] = RankingMetrics(data.source(split).qrels(), self.measures,
                                                     relevance_level=data.tasks.relevance_level,
                                                     candidates=data.source(split).candidates())  # fmt: skip

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

    # --- checkpoints ------------------------------------------------------------------------

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path, map_location=None, **kwargs):
        """Lightning's ``load_from_checkpoint``, also for a checkpoint that names hyper-parameters by their old names
        (`renamed_hparams`): Lightning would drop those and build the model at the defaults."""
        if cls.renamed_hparams:
            saved = torch.load(checkpoint_path, map_location="cpu", weights_only=True, mmap=True)
            saved = saved.get("hyper_parameters", {})
            kwargs = {new: saved[old] for old, new in cls.renamed_hparams.items() if old in saved} | kwargs
        return super().load_from_checkpoint(checkpoint_path, map_location=map_location, **kwargs)

    def load_state_dict(self, state_dict: dict, strict: bool = True, assign: bool = False):
        return super().load_state_dict(renamed_state(state_dict), strict=strict, assign=assign)  # old keys too

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Save the random generators' states (dropout's: a resumed run repeats an uninterrupted one): this
        process's, and on several processes every process's, whose generators part as their batches' shapes do;
        and the numbers of processes and accumulated batches that share the global batch, which a resumed run must
        have (`common.training.global_batch.resumable_here`). Lightning calls it in every process (it writes the
        checkpoint in global rank zero)."""
        checkpoint["rng_states"] = rng_states()
        trainer = self._trainer  # None where the module is saved outside a trainer
        accumulate = {"accumulate": trainer.accumulate_grad_batches} if trainer is not None else {}
        checkpoint["global_batch"] = {"processes": world_size(), **accumulate}
        if world_size() > 1:
            checkpoint["rng_states_by_rank"] = [None] * world_size()
            torch.distributed.all_gather_object(checkpoint["rng_states_by_rank"], checkpoint["rng_states"])

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """Restore this process's generators where the checkpoint was written by as many processes, else the
        first process's (a training command refuses to resume on another number; weights loaded into another run,
        e.g. ``init_checkpoint``, take them)."""
        by_rank = checkpoint.get("rng_states_by_rank")
        if by_rank is not None and len(by_rank) == world_size():
            set_rng_states(by_rank[torch.distributed.get_rank()])
        elif "rng_states" in checkpoint:
            set_rng_states(checkpoint["rng_states"])

