"""QDS-Transformer outside Lightning: what a `qds.train` checkpoint carries to score (`common.portable`).

`checkpoint_entry`: the scoring config (architecture, with a pretrained encoder's Hugging Face config whole, and the
inputs' settings) and the tokenizer's files; `build`: the `qds.model.Ranker` with random weights and the
`qds.batches.Encoder`. A checkpoint saved outside a trainer takes the model's tokenizer and the data defaults.
"""

from __future__ import annotations

from pathlib import Path

from common.encoders.tokenizers import load_tokenizer, resolved_tokenizer_task, vocabulary
from common.portable import Scoring, portable_entry, tokenizer_files
from qds import LAYOUT
from qds.batches import MAX_PASSAGES, MAX_SENTENCES, Encoder
from qds.inputs import ALL_PATTERNS
from qds.model import build_ranker, encoder_config

PACKAGE = "qds"
PAPER = ('Jiang, Xiong, Lee, Wang: "Long Document Ranking with Query-Directed Sparse Transformer", '
         "Findings of EMNLP 2020")
#: The encoder's sizes (a from-scratch one's `qds.ranker.QDSRanker` hyper-parameters) and their Hugging Face names.
SIZES = {"num_layers": "num_hidden_layers", "hidden_size": "hidden_size", "num_heads": "num_attention_heads",
         "intermediate_size": "intermediate_size"}


def recognises(checkpoint: dict) -> bool:
    """Whether `checkpoint` is a `qds.train` checkpoint: one of QDS's patterns and the official head."""
    hyper_parameters = checkpoint.get("hyper_parameters")
    state = checkpoint.get("state_dict")
    return (isinstance(hyper_parameters, dict) and hyper_parameters.get("pattern") in ALL_PATTERNS
            and isinstance(state, dict) and "model.head.out.weight" in state)


def checkpoint_entry(checkpoint: dict) -> dict:
    """The `common.portable` entry of `checkpoint`, its tokenizer's files read as the ranker read them."""
    model = checkpoint["hyper_parameters"]
    data = checkpoint.get("datamodule_hyper_parameters") or {}
    config = {name: model[name] for name in ("pattern", "encoder", "window", "max_length", "dropout")}
    config["impl"] = model.get("impl", "auto")
    if model["encoder"] is None:
        vocab_size, pad_token_id = vocabulary(model["tokenizer"], model.get("tokenizer_task"))
        config.update({name: model[name] for name in SIZES}, encoder_config=None, vocab_size=vocab_size,
                      pad_token_id=pad_token_id)
    else:
        hf = encoder_config(model["pattern"], model["encoder"], window=model["window"], max_length=model["max_length"],
                            dropout=model["dropout"])
        config.update({name: hf[key] for name, key in SIZES.items()}, encoder_config=hf, vocab_size=hf["vocab_size"],
                      pad_token_id=hf["pad_token_id"])
    tokenizer = data.get("tokenizer", model["tokenizer"])
    task = resolved_tokenizer_task(tokenizer, data.get("tokenizer_task", model.get("tokenizer_task")), None)
    inputs = {"max_length": model["max_length"], "max_sentences": MAX_SENTENCES, "max_passages": MAX_PASSAGES,
              "layout": LAYOUT}
    config["inputs"] = {name: data.get(name, default) for name, default in inputs.items()}
    files = tokenizer_files(load_tokenizer(tokenizer, task=task))
    return portable_entry(PACKAGE, config, files, data)


def build(config: dict, folder: Path) -> Scoring:
    """The `qds.model.Ranker` of `config` (random weights) and its pairs' inputs, the tokenizer read from `folder`."""
    options = ("dropout", "vocab_size", "pad_token_id", "max_length", "window", "impl", *SIZES)
    model = build_ranker(config["pattern"], config["encoder_config"], **{name: config[name] for name in options})
    return Scoring(model, Encoder(config["pattern"], str(folder), **config["inputs"]))
