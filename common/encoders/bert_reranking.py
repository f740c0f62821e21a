"""The LightningModule that EARL's and MVA's rankers share (`earl.ranker.EARLRanker`, `mva.ranker.MVARanker`): a
paper's model over a BERT encoder, trained on groups of a positive and negatives, evaluated by re-ranking.

- The encoder (`bert_encoder`): a pretrained BERT by Hugging Face name or path (`common.encoders.pretrained`), or
  one from scratch at the given sizes over the tokenizer's vocabulary.
- The model: ``self.model``, the paper's ``nn.Module`` (or a baseline of `common.encoders.bert_rankers`) that
  scores a batch, (B,). `BertRerankingModule.set_model` holds it with the dropout masks of
  `common.encoders.dropout` (the same distribution as BERT's, a quarter of the random draws: `bernoulli_` was a
  fifth of a small model's training step, results/mva/README.md), starts it from an ``init_checkpoint``'s weights
  where one is given (weights only: a fresh optimizer, schedule and step count) and puts it in training mode
  (``from_pretrained`` returns BERT in eval mode, and Lightning keeps modules' modes: dropout on).
- Training: the subclass's ``training_loss`` of a batch's scores; AdamW with weight decay on
  matrices only (`common.training.reranking.decay_groups`), linear warm-up then linear decay to zero at the last
  step (`common.training.schedules.warmup_linear_decay`, BERT's fine-tuning schedule); new negatives each epoch.
- Evaluation: dev and test re-ranking, `common.training.reranking.RerankingEvaluation`, which also reads the
  weights of checkpoints written while the model's attribute was ``ranker`` (`checkpoint_weights` too).
- Checkpoints: each one a trainer saves carries the subclass's ``checkpoint_entry`` under `common.portable.KEY`
  (`earl.portable`, `mva.portable`: the model's config, the inputs' settings, the tokenizer's files), what
  `common.api.load` rebuilds the ranker from without Lightning.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from lightning import pytorch as L
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn

from common.encoders.dropout import use_fast_bert_dropout
from common.encoders.pretrained import bert_config, load_bert
from common.encoders.tokenizers import vocabulary
from common.portable import KEY
from common.refusals import SettingError
from common.training.reranking import RerankingEvaluation, decay_groups, renamed_state
from common.training.schedules import warmup_linear_decay


def bert_encoder(encoder: str | None, tokenizer: str, tokenizer_task, *, num_layers: int, hidden_size: int,
                 num_heads: int, intermediate_size: int, dropout: float):  # fmt: skip
    """A ``BertModel`` without pooler: pretrained `encoder` (name or path) with `dropout`, or, where None, one from
    scratch of the given sizes with `tokenizer`'s vocabulary and padding id (`tokenizer_task`: what a ``train``
    tokenizer was learnt on). `common.encoders.bert_portable` stores its config and builds the same model from it,
    without Lightning or the pretrained model's folder (`encoder_config`, `bert_of_config`)."""
    if encoder is not None:
        return load_bert(encoder, dropout)
    from transformers import BertModel

    if hidden_size % num_heads:
        raise SettingError("model.num_heads", f"must divide --model.hidden_size ({hidden_size}), got {num_heads}")
    vocab_size, pad_token_id = vocabulary(tokenizer, tokenizer_task)
    return BertModel(bert_config(vocab_size=vocab_size, pad_token_id=pad_token_id, num_layers=num_layers,
                                 hidden_size=hidden_size, num_heads=num_heads, intermediate_size=intermediate_size,
                                 dropout=dropout), add_pooling_layer=False)  # fmt: skip


def checkpoint_weights(path: str) -> dict:
    """The weights of a checkpoint file of a `BertRerankingModule`, the model's under ``model.`` (an older
    checkpoint's under ``ranker.`` too: `common.training.reranking.renamed_state`)."""
    return renamed_state(torch.load(path, map_location="cpu", weights_only=True)["state_dict"])


def count_parameters(module: nn.Module) -> int:
    """Distinct parameters (a tied module counts once)."""
    return sum(p.numel() for p in module.parameters())


class BertRerankingModule(RerankingEvaluation, L.LightningModule):
    """A re-ranking LightningModule around ``self.model`` (module docstring). A subclass's ``__init__`` saves its
    hyper-parameters (``lr``, ``warmup_steps``, ``weight_decay`` among them), builds the model and calls
    `set_model`; the subclass sets `measures` and `checkpoint_entry` and defines ``training_loss(scores, batch)``,
    the loss of a training batch's (B,) scores."""

    model: nn.Module
    name: str
    #: The package's ``portable.checkpoint_entry``: checkpoint contents -> their `common.portable` entry.
    checkpoint_entry: Callable[[dict], dict]

    def set_model(self, model: nn.Module, name: str, init_checkpoint: str | None = None) -> None:
        """Hold `model` (the run's `name`), started from `init_checkpoint`'s weights where given; made before the
        evaluation metrics, which `setup` fills per split (they need the qrels)."""
        self.model = use_fast_bert_dropout(model)
        if init_checkpoint is not None:
            self.load_state_dict(checkpoint_weights(init_checkpoint))  # strict: the same architecture and sizes
        self.model.train()  # from_pretrained returns BERT in eval mode, and Lightning keeps modules' modes: dropout on
        self.name = name
        rank_zero_info(f"{name}: {count_parameters(model) / 1e6:.2f}M parameters")
        self.metrics = nn.ModuleDict()

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        return self.model(batch)  # (B,)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """`RerankingEvaluation`'s, then the ranker's `common.portable` entry, where a trainer saves it (Lightning
        has put the data module's hyper-parameters in `checkpoint`; a ranker saved outside one has none, and
        `common.api.load` makes its entry from its hyper-parameters)."""
        super().on_save_checkpoint(checkpoint)
        if "datamodule_hyper_parameters" in checkpoint:
            checkpoint[KEY] = self.checkpoint_entry(checkpoint)

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        loss = self.training_loss(self(batch), batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["labels"]))
        return loss

    def configure_optimizers(self):
        # fused: one kernel over every parameter, where the default steps them one by one
        optimizer = torch.optim.AdamW(decay_groups(self, self.hparams.weight_decay), lr=self.hparams.lr, fused=True)
        scheduler = warmup_linear_decay(optimizer, self.hparams.warmup_steps,
                                        int(self.trainer.estimated_stepping_batches))  # fmt: skip
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
