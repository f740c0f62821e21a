"""`EARLRanker`: the LightningModule of EARL (Gao, Dai, Callan 2020) or a Table 2 baseline (BERT ranker, BERT-Siamese),
from a pretrained BERT (EARL initialised as Sec. 3.4, l = L - K) or from scratch. Training (Sec. 3.4, 4.2): the
pairwise hinge loss (margin 1: the paper gives none) or the 2-class cross-entropy (Nogueira and Cho's; MORES's); AdamW
at 3e-5, 1,000 warm-up steps then linear decay. Where the paper is silent: gradients clipped to a global norm of 1.0
before each step (the configs' ``trainer.gradient_clip_val``), as MORES trains, through Hugging Face's Trainer
(``TrainingArguments.max_grad_norm``, 1.0 by default), and as BERT's fine-tuning does (google-research/bert's
optimization.py); dev MRR@10 selects the checkpoint. BERT-Siamese ("we follow [17]", Sec. 4.2: Sentence-BERT) encodes
each text into the mean of its real tokens' outputs, Sentence-BERT's pooling ("The default configuration is MEAN",
Reimers and Gurevych 2019, Sec. 3), scored by their dot product (Sec. 4.2); ``siamese_pooling="cls"`` takes [CLS].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from jsonargparse.typing import ClosedUnitInterval, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from torch import Tensor

from common.encoders.bert_rankers import SiamesePooling
from common.encoders.bert_reranking import BertRerankingModule, bert_encoder
from common.refusals import SettingError
from earl import COPY_CROSS, LOSS, MARGIN, POOL, TIED, portable
from earl.data import Architecture
from earl.model import Loss, Pool

#: Table 2's measures: NDCG@10, MAP (at 1,000), MRR (TREC DL) and MRR@10 (MS MARCO dev).
MEASURES = ("ndcg_cut_10", "map", "recip_rank", "mrr@10")


def hinge_loss(positive: Tensor, negative: Tensor, margin: float) -> Tensor:
    """Pairwise hinge loss (Sec. 3.4): mean of max(0, margin - s(q, d+) + s(q, d-))."""
    return torch.clamp(margin - positive + negative, min=0).mean()


def run_name(architecture: str, pool: str, tied: bool) -> str:
    """The name of a run and its metrics: ``earl_cls``, ``earl_mean_tied``, ``bert_ranker``, ``bert_siamese``."""
    if architecture != "earl":
        return architecture
    return f"earl_{pool}" + ("_tied" if tied else "")


class EARLRanker(BertRerankingModule):
    """EARL or a baseline (module docstring).

    Args:
        architecture: ``earl``, ``bert_ranker`` or ``bert_siamese`` (Table 2).
        encoder: a pretrained BERT's name or path (paper: ``bert-base-uncased``); None: from scratch, sizes below.
        tokenizer: name or path, ``builtin`` or ``train`` (linked from the data module).
        tokenizer_task: the task a ``train`` tokenizer was learnt on (linked from the data module).
        num_layers: L, the layers of T_doc (and of the baselines' BERT) from scratch (BERT-base: 12).
        hidden_size: h of a from-scratch model, a multiple of `num_heads` (BERT-base: 768).
        num_heads: attention heads of a from-scratch model (BERT-base: 12).
        intermediate_size: FFN width of a from-scratch model (BERT-base: 3072).
        num_blocks: K, EARL's judge blocks (paper: 2; Table 4: 1-4).
        query_layers: l, T_qry's layers (None: L - K, the paper's split of BERT: 10 of 12).
        pool: EARL's Pool of Eq. 22: ``cls`` (ClsPool) or ``mean`` (AvePool).
        tied: T_qry's layers are T_doc's first l (the Tied variants).
        copy_cross: copy BERT's self-attention into the judge blocks' cross-attention too (Sec. 3.4; false: "w/o copy").
        siamese_pooling: BERT-Siamese's vector of each text: ``mean`` over its real tokens, as Sentence-BERT [17], which
            the paper follows for it (Reimers and Gurevych 2019, Sec. 3: "The default configuration is MEAN"), or
            ``cls``, its [CLS] output.
        loss: ``hinge`` (paper: EARL, BERT-Siamese) or ``cross_entropy`` (a 2-class head: the paper's BERT ranker).
        margin: the hinge loss's margin (the paper gives none).
        dropout: hidden and attention dropout (BERT: 0.1).
        lr: AdamW's learning rate (paper: 3e-5).
        warmup_steps: linear warm-up steps (paper: 1,000), then linear decay to zero at the last training step.
        weight_decay: AdamW's weight decay (not LayerNorm weights or biases).
        init_checkpoint: an ``earl.train`` checkpoint of the same architecture whose weights alone the model starts
            from (Sec. 4.3's ClueWeb09-B transfer); ``--ckpt_path`` instead resumes that run.
    """

    measures = MEASURES
    checkpoint_entry = staticmethod(portable.checkpoint_entry)

    def __init__(
        self,
        architecture: Architecture = "earl",
        encoder: str | None = None,
        tokenizer: str = "builtin",
        tokenizer_task: str | dict | None = None,
        num_layers: PositiveInt = 12,
        hidden_size: PositiveInt = 768,
        num_heads: PositiveInt = 12,
        intermediate_size: PositiveInt = 3072,
        num_blocks: PositiveInt = 2,
        query_layers: NonNegativeInt | None = None,
        pool: Pool = POOL,
        tied: bool = TIED,
        copy_cross: bool = COPY_CROSS,
        siamese_pooling: SiamesePooling = "mean",
        loss: Loss = LOSS,
        margin: PositiveFloat = MARGIN,
        dropout: ClosedUnitInterval = 0.1,
        lr: NonNegativeFloat = 3e-5,
        warmup_steps: NonNegativeInt = 1000,
        weight_decay: NonNegativeFloat = 0.0,
        init_checkpoint: str | None = None,
    ):
        if encoder is None and query_layers is not None and query_layers > num_layers:
            raise SettingError("model.query_layers", f"T_qry takes at most T_doc's {num_layers} layers "
                                                     f"(--model.num_layers), got {query_layers}")
        if encoder is None and architecture == "earl" and query_layers is None and num_blocks > num_layers:
            raise SettingError("model.num_blocks", f"l = L - K needs K at most --model.num_layers ({num_layers}), "
                                                   f"got {num_blocks}")
        super().__init__()
        self.save_hyperparameters()
        bert = bert_encoder(encoder, tokenizer, tokenizer_task, num_layers=num_layers, hidden_size=hidden_size,
                            num_heads=num_heads, intermediate_size=intermediate_size, dropout=dropout)
        model = portable.model_of(bert, self.hparams, copy_from_bert=encoder is not None)
        self.set_model(model, run_name(architecture, pool, tied), init_checkpoint)

    def training_loss(self, scores: Tensor, batch: dict) -> Tensor:
        if self.hparams.loss == "cross_entropy":  # = CE over the 2 logits, whose difference the score is
            return F.binary_cross_entropy_with_logits(scores, batch["labels"])
        groups = scores.view(-1, batch["group_size"])  # (G, 1 + negatives), the positive first
        return hinge_loss(groups[:, :1], groups[:, 1:], self.hparams.margin)
