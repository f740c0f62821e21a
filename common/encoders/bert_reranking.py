"""The LightningModule of EARL's and MVA's rankers: a paper's model over a BERT encoder (pretrained or from scratch)
with `common.encoders.dropout`'s masks, trained on groups of a positive and negatives (AdamW, decay on matrices only,
linear warm-up and decay), evaluated by `common.training.reranking.RerankingEvaluation`; each checkpoint carries the
subclass's ``checkpoint_entry`` under `common.portable.KEY`. AdamW is fused (one kernel for every parameter), except
where the trainer clips gradients under mixed precision: Lightning clips there only an optimizer whose step leaves
the unscaling to it, which a fused one does not (its step unscales ``16-mixed``'s gradients itself).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from lightning import pytorch as L
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn

from common.encoders.dropout import use_fast_bert_dropout
from common.encoders.pretrained import bert_config, load_bert
from common.encoders.tokenizers import vocabulary
from common.portable import KEY
from common.refusals import SettingError
from common.training.reranking import RerankingEvaluation, decay_groups
from common.training.schedules import warmup_linear_decay


def bert_encoder(encoder: str | None, tokenizer: str, tokenizer_task, *, num_layers: int, hidden_size: int,
                 num_heads: int, intermediate_size: int, dropout: float):
    if encoder is not None:
        return load_bert(encoder, dropout)
    from transformers import BertModel

    if hidden_size % num_heads:
        raise SettingError("model.num_heads", f"must divide --model.hidden_size ({hidden_size}), got {num_heads}")
    vocab_size, pad_token_id = vocabulary(tokenizer, tokenizer_task)
    return BertModel(bert_config(vocab_size=vocab_size, pad_token_id=pad_token_id, num_layers=num_layers,
                                 hidden_size=hidden_size, num_heads=num_heads, intermediate_size=intermediate_size,
                                 dropout=dropout), add_pooling_layer=False)


def checkpoint_weights(path: str) -> dict:
    """The model's weights (under ``model.``) of a `BertRerankingModule` checkpoint file."""
    return torch.load(path, map_location="cpu", weights_only=True)["state_dict"]


def count_parameters(module: nn.Module) -> int:
    """Distinct parameters (a tied module counts once)."""
    return sum(p.numel() for p in module.parameters())


class BertRerankingModule(RerankingEvaluation, L.LightningModule):
    """A re-ranking LightningModule around ``self.model`` (module docstring)."""

    model: nn.Module
    name: str
    #: The package's ``portable.checkpoint_entry``: checkpoint contents -> their `common.portable` entry.
    checkpoint_entry: Callable[[dict], dict]

    def set_model(self, model: nn.Module, name: str, init_checkpoint: str | None = None) -> None:
        """Hold `model` (the run's `name`), started from `init_checkpoint`'s weights where given."""
        self.model = use_fast_bert_dropout(model)
        if init_checkpoint is not None:
            self.load_state_dict(checkpoint_weights(init_checkpoint))
        self.model.train()
        self.name = name
        rank_zero_info(f"{name}: {count_parameters(model) / 1e6:.2f}M parameters")
        self.metrics = nn.ModuleDict()

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        return self.model(batch)  # (B,)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """`RerankingEvaluation`'s, then the ranker's `common.portable` entry where a trainer saves it."""
        super().on_save_checkpoint(checkpoint)
        if "datamodule_hyper_parameters" in checkpoint:
            checkpoint[KEY] = self.checkpoint_entry(checkpoint)

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        loss = self.training_loss(self(batch), batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["labels"]))
        return loss

    def configure_optimizers(self):
        trainer = self.trainer
        clipped_mixed = bool(trainer.gradient_clip_val) and isinstance(trainer.precision_plugin, MixedPrecision)
        optimizer = torch.optim.AdamW(decay_groups(self, self.hparams.weight_decay), lr=self.hparams.lr,
                                      fused=not clipped_mixed)  # module docstring
        scheduler = warmup_linear_decay(optimizer, self.hparams.warmup_steps, int(trainer.estimated_stepping_batches))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
