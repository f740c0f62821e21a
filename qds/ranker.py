"""`QDSRanker`: the LightningModule that trains and evaluates QDS-Transformer or a Table 2 baseline.

Training (Sec. 5; official ``src/experiment.py``): pointwise BCE with ``pos_weight`` = negatives (lines 46-49), Adam
(lr 1e-5, no weight decay; lines 50-51), dropout 0.1; evaluation: `common.training.reranking.RerankingEvaluation`,
dev MRR@10 selecting the checkpoint. Difference: a step averages a whole group's 1 + `negatives` documents (the
official code steps once per document).
"""

from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from jsonargparse.typing import ClosedUnitInterval, NonNegativeFloat, NonNegativeInt, PositiveInt
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn

from common.encoders.bert_reranking import count_parameters
from common.encoders.tokenizers import vocabulary
from common.portable import KEY
from common.refusals import SettingError
from common.training.reranking import RerankingEvaluation
from qds import MAX_LENGTH, NEGATIVES, PATTERN, TOKENIZER, WINDOW
from qds.inputs import ALL_PATTERNS
from qds.model import Impl, Pattern, build_ranker
from qds.portable import checkpoint_entry

#: Measures of Table 2 (TREC DL: nDCG@10 and MAP on test, MRR@10 on dev).
MEASURES = ("ndcg_cut_10", "map", "mrr@10")


def bce_loss(scores: Tensor, labels: Tensor, pos_weight: float) -> Tensor:
    """Official experiment.py 46-49, ``BCEWithLogitsLoss(pos_weight=[num_neg_samples])``, mean over (B,)."""
    return F.binary_cross_entropy_with_logits(scores, labels, pos_weight=torch.tensor(pos_weight, device=scores.device))


class QDSRanker(RerankingEvaluation, L.LightningModule):
    """QDS-Transformer and the Table 2/4 variants as one LightningModule (see the module docstring).

    Args:
        pattern: a Table 4 pattern (``qds``, ``qds_q``, ``qds_s``, ``longformer_qa``, ``sparse``), ``firstp``, ``maxp``.
        encoder: Hugging Face name or path of the pretrained encoder; None builds one from scratch of the sizes below.
        tokenizer: name or path, ``builtin`` or ``train`` (linked from the data module; gives vocabulary and pad id).
        tokenizer_task: the task a ``train`` tokenizer was learnt on (linked from the data module).
        window: local attention window w (Eq. 7: |i - j| <= w / 2); even, as Longformer requires (paper: 128).
        num_layers: layers of a from-scratch encoder (the pretrained Longformer's: 12).
        hidden_size: hidden size of a from-scratch encoder, a multiple of `num_heads` (the Longformer's: 768).
        num_heads: attention heads of a from-scratch encoder (the Longformer's: 12).
        intermediate_size: feed-forward size of a from-scratch encoder (the Longformer's: 3072).
        max_length: longest input (linked from the data module; sets the position table of a from-scratch encoder).
        dropout: hidden, attention and head dropout probability (paper: 0.1).
        lr: Adam's learning rate (paper: 1e-5).
        betas: Adam's two betas, each in [0, 1) (paper: 0.9, 0.999).
        weight_decay: Adam's weight decay (paper: none).
        negatives: negatives per positive in a training group (linked from the data module): BCE's ``pos_weight``.
        balanced_loss: weight the positive's BCE term by `negatives`, as the official loss does; False: unweighted.
        impl: `common.kernels` implementation (``auto``: TVM on CPU, FlexAttention on a GPU, else portable).
    """

    measures = MEASURES

    def __init__(self, pattern: Pattern = PATTERN, encoder: str | None = None, tokenizer: str = TOKENIZER,
                 tokenizer_task: str | dict | None = None, window: PositiveInt = WINDOW,
                 num_layers: NonNegativeInt = 12, hidden_size: PositiveInt = 768, num_heads: PositiveInt = 12,
                 intermediate_size: PositiveInt = 3072, max_length: PositiveInt = MAX_LENGTH,
                 dropout: ClosedUnitInterval = 0.1, lr: NonNegativeFloat = 1e-5,
                 betas: tuple[float, float] = (0.9, 0.999), weight_decay: NonNegativeFloat = 0.0,
                 negatives: PositiveInt = NEGATIVES, balanced_loss: bool = True, impl: Impl = "auto"):
        if encoder is None and hidden_size % num_heads:  # a pretrained encoder has its own sizes
            raise SettingError("model.num_heads", f"must divide --model.hidden_size ({hidden_size}), got {num_heads}")
        if not all(0 <= b < 1 for b in betas):
            raise SettingError("model.betas", f"each must be at least 0 and below 1 (Adam's), got {list(betas)}")
        super().__init__()
        if pattern not in ALL_PATTERNS:
            raise ValueError(f"unknown pattern {pattern!r}; expected one of {', '.join(ALL_PATTERNS)}")
        self.save_hyperparameters()
        vocab_size, pad_token_id = vocabulary(tokenizer, tokenizer_task) if encoder is None else (0, 0)
        self.model = build_ranker(pattern, encoder, vocab_size=vocab_size, pad_token_id=pad_token_id,
                                  max_length=max_length, window=window, num_layers=num_layers, hidden_size=hidden_size,
                                  num_heads=num_heads, intermediate_size=intermediate_size, dropout=dropout, impl=impl)
        # A pretrained encoder comes in eval mode (`from_pretrained`, `qds.pretrained`) and Lightning keeps modules'
        # modes: without this its dropout would be off in training (the official loop calls model.train()).
        self.model.train()
        rank_zero_info(f"{pattern}: {count_parameters(self.model) / 1e6:.1f}M parameters")
        self.pos_weight = float(negatives if balanced_loss else 1)
        self.metrics = nn.ModuleDict()

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        return self.model(batch)  # (B,)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss = bce_loss(self(batch), batch["labels"], self.pos_weight)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["labels"]))
        return loss

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Also what scoring needs (`qds.portable.checkpoint_entry`) where the data module's settings are saved."""
        super().on_save_checkpoint(checkpoint)
        if "datamodule_hyper_parameters" in checkpoint:
            checkpoint[KEY] = checkpoint_entry(checkpoint)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr, betas=tuple(self.hparams.betas),
                                weight_decay=self.hparams.weight_decay)
