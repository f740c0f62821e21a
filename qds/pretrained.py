"""A pretrained BERT (offline: all-MiniLM-L6-v2) as QDS-Transformer's Longformer encoder.

`longformer_from_bert` applies allenai's ``convert_model_to_long.ipynb`` to a BERT: every weight copied, Q/K/V also
into the ``*_global`` projections; positions shifted by ``pad_token_id + 1`` and BERT's table repeated past its 512
rows (Longformer Sec. 5); config from BERT's (``layer_norm_eps`` included), ``attention_window`` per layer. Where the
window covers the input it computes what BERT computes. Choices at length: docs/qds.md.
"""

from __future__ import annotations

import torch


def longformer_from_bert(name_or_path: str, *, attention_window: int, max_length: int, dropout: float):
    """``BertModel.from_pretrained(name_or_path)`` as a ``transformers.LongformerModel`` with the same weights."""
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
            state[name] = target
        else:
            state[name] = bert_state[name.replace("_global.", ".")]
    model.load_state_dict(state, strict=True)
    return model.eval()


def longformer_config(source, *, attention_window: int, max_length: int, dropout: float):
    """The ``LongformerConfig`` a BERT of config `source` converts to (choices: docs/qds.md)."""
    from transformers import LongformerConfig

    if getattr(source, "position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"only absolute position embeddings convert to Longformer's, got "
                         f"{source.position_embedding_type!r}")
    pad = source.pad_token_id if source.pad_token_id is not None else 0
    copied = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "hidden_act", "layer_norm_eps", "type_vocab_size", "initializer_range")
    return LongformerConfig(**{name: getattr(source, name) for name in copied}, pad_token_id=pad,
                            max_position_embeddings=max_length + pad + 1,
                            attention_window=[attention_window] * source.num_hidden_layers,
                            hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)


def longformer_positions(bert_positions: torch.Tensor, *, max_length: int, pad_token_id: int) -> torch.Tensor:
    """Longformer's (max_length + pad + 1, h) position table from BERT's (P, h): row pad + 1 + p = BERT's p mod P."""
    size, hidden = bert_positions.shape
    table = bert_positions.new_zeros(max_length + pad_token_id + 1, hidden)
    positions = torch.arange(max_length) % size
    table[pad_token_id + 1 :] = bert_positions[positions]
    return table
