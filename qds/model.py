"""The nn.Modules of QDS-Transformer (Jiang et al., Findings of EMNLP 2020) and its Table 2 baselines.

- Encoder (Sec. 4, Fig. 2): Hugging Face ``LongformerModel`` (so the official checkpoint loads) whose self-attention
  (Eqs. 1-5, A = A_QDS of Eq. 10) runs on `common.kernels`; a BERT is converted to one (`qds.pretrained`);
- baselines (Sec. 5): ``RobertaModel`` with dense attention, FirstP and MaxP (max over passages);
- head (official ``modellib.QDSTModel``): pooler -> dropout -> Linear(h, h) + tanh -> dropout -> Linear(h, 1).
Differences: rows are encoded in length batches cut to their longest row (`Ranker.pooled`; same scores); dropout
masks from `common.encoders.dropout`.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn

from common.encoders.dropout import use_fast_dropout
from common.encoders.length_batches import by_length
from common.encoders.precision import full_precision
from common.kernels import IMPLEMENTATIONS
from common.kernels.longformer import use_qds_attention
from common.refusals import SettingError
from qds.inputs import ALL_PATTERNS, BASELINES

#: The attention patterns of Table 4 and the dense baselines of Table 2: what ``--model.pattern`` accepts.
Pattern = Literal[ALL_PATTERNS]
#: `common.kernels` implementations of the sparse attention, or ``auto``: what ``--model.impl`` accepts.
Impl = Literal[("auto", *IMPLEMENTATIONS)]
#: What one more encoder call costs, in the positions a large batch encodes in that time (the built-in default's
#: encoder, a training step's forward and backward on 2 CPU threads; measured in results/qds/README.md).
ENCODER_CALL = 400


class RankingHead(nn.Module):
    """Official QDS head on the pooled first token: dropout, Linear(h, h), tanh, dropout, Linear(h, 1)."""

    def __init__(self, hidden_size: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.hidden = nn.Linear(hidden_size, hidden_size)
        self.out = nn.Linear(hidden_size, 1)

    def forward(self, pooled: Tensor) -> Tensor:  # (B, h) -> (B,)
        hidden = torch.tanh(self.hidden(self.dropout(pooled)))  # (B, h)
        return full_precision(self.out, self.dropout(hidden), dtype=self.out.weight.dtype).squeeze(-1)


def encoder_config(pattern: str, encoder: str, *, window: int, max_length: int, dropout: float) -> dict:
    """The JSON-able Hugging Face config of the encoder `build_encoder` makes of `encoder`; reads no weights."""
    from transformers import AutoConfig, LongformerConfig, RobertaConfig

    from common.encoders.pretrained import resolve
    from qds.pretrained import longformer_config

    common = dict(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    if pattern in BASELINES:
        config = RobertaConfig.from_pretrained(resolve(encoder), **common)
    else:
        config = AutoConfig.from_pretrained(resolve(encoder))
        if config.model_type == "bert":
            config = longformer_config(config, attention_window=window, max_length=max_length, dropout=dropout)
        else:
            config = LongformerConfig.from_pretrained(resolve(encoder), attention_window=window, **common)
    return {key: value for key, value in config.to_dict().items() if key != "_name_or_path"}


def build_encoder(pattern: str, encoder: str | dict | None, *, vocab_size: int, pad_token_id: int, max_length: int,
                  window: int, num_layers: int, hidden_size: int, num_heads: int, intermediate_size: int,
                  dropout: float, impl: str) -> nn.Module:
    """The pretrained (name or path), from-scratch (None) or `encoder_config`-dict encoder of `pattern`."""
    from transformers import AutoConfig, LongformerConfig, LongformerModel, RobertaConfig, RobertaModel

    from common.encoders.pretrained import resolve
    from qds.pretrained import longformer_from_bert

    if window % 2:
        raise SettingError("model.window", f"must be even (Longformer's window spans w / 2 each side), got {window}")
    if encoder is None and hidden_size % num_heads:
        raise SettingError("model.num_heads", f"must divide --model.hidden_size ({hidden_size}), got {num_heads}")
    common = dict(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    baseline = pattern in BASELINES
    if isinstance(encoder, dict):
        config = (RobertaConfig.from_dict(dict(encoder), attn_implementation="sdpa") if baseline
                  else LongformerConfig.from_dict(dict(encoder)))
    elif encoder is None:
        sizes = dict(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_layers,
                     num_attention_heads=num_heads, intermediate_size=intermediate_size, pad_token_id=pad_token_id,
                     type_vocab_size=1, **common)
        config = (RobertaConfig(max_position_embeddings=512 + pad_token_id + 1, **sizes) if baseline else
                  LongformerConfig(max_position_embeddings=max_length + pad_token_id + 1, attention_window=window,
                                   **sizes))
    elif baseline:
        return RobertaModel.from_pretrained(encoder, attn_implementation="sdpa", **common)
    else:
        encoder = resolve(encoder)
        if AutoConfig.from_pretrained(encoder).model_type == "bert":
            model = longformer_from_bert(encoder, attention_window=window, max_length=max_length, dropout=dropout)
        else:
            model = LongformerModel.from_pretrained(encoder, attention_window=window, **common)
        return use_qds_attention(model, impl=impl)
    model = (RobertaModel if baseline else LongformerModel)(config, add_pooling_layer=True)
    return model if baseline else use_qds_attention(model, impl=impl)  # Eq. 2, A = A_local (Eq. 7) ∪ the globals


class Ranker(nn.Module):
    """Encoder + head: a score per query-document input (f(q, d) of Sec. 3)."""

    def __init__(self, encoder: nn.Module, head: RankingHead, pattern: str):
        super().__init__()
        self.encoder, self.head, self.pattern = encoder, head, pattern

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        """`batch` from `qds.batches.Encoder`; returns (B,) scores, one per document."""
        scores = self.head(self.pooled(batch))  # (B,), or (P,) one per passage for the baselines
        if self.pattern == "maxp":
            doc = batch["passage_doc"]  # (P,) document index of each passage
            out = scores.new_full((int(batch["num_docs"]),), -math.inf)
            return out.scatter_reduce(0, doc, scores, reduce="amax")
        return scores

    def pooled(self, batch: dict[str, Tensor]) -> Tensor:
        """(B, h) pooler outputs, rows encoded in length batches each cut to its longest row (`by_length`)."""
        inputs = {name: batch[name] for name in ("input_ids", "attention_mask", "global_attention_mask")
                  if name in batch}

        def encode(rows: Tensor | slice, n: int) -> Tensor:  # (b, h)
            return self.encoder(**{name: x[rows, :n] for name, x in inputs.items()}).pooler_output

        return by_length(inputs["attention_mask"], encode, call=ENCODER_CALL)


def build_ranker(pattern: str, encoder: str | dict | None, *, dropout: float, **encoder_options) -> Ranker:
    """The QDS-Transformer or baseline of `pattern`: encoder, official head, fast dropout masks."""
    encoder_module = build_encoder(pattern, encoder, dropout=dropout, **encoder_options)
    head = RankingHead(encoder_module.config.hidden_size, dropout)
    return use_fast_dropout(Ranker(encoder_module, head, pattern))
