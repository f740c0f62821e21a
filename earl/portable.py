"""EARL's rankers without Lightning (`common.api.load`, `common.portable`): EARL, the BERT ranker and BERT-Siamese
rebuilt by `model_of` (`earl.ranker`'s builder, ``copy_from_bert`` off), their pairs read as ``earl.evaluate`` reads
them, and EARL scored from an ``earl.index`` store.
"""

from __future__ import annotations

from pathlib import Path

from common.encoders.bert_portable import (bert_checkpoint_entry, bert_inputs, bert_of_config, inputs_config,
                                           model_device, open_representations, pairs_from_store, portable_model)
from common.encoders.bert_rankers import BertRanker, BertSiamese
from common.portable import PortableError, Scoring
from earl import ARCHITECTURES, RANKER_KEYS, STRATEGIES
from earl.model import build_earl
from earl.query_scorer import QueryScorer, store_width

PACKAGE = "earl"
PAPER = "EARL: Speedup Transformer-based Rankers with Pre-computed Representation (Gao, Dai, Callan, arXiv 2020)"
#: The hyper-parameters that shape the model (the others train it).
MODEL_KEYS = ("architecture", "num_blocks", "query_layers", "tied", "copy_cross", "pool", "siamese_pooling", "loss")
#: What a checkpoint (or exported folder) whose settings lack one of `MODEL_KEYS` was trained with: a BERT-Siamese
#: without ``siamese_pooling`` pooled [CLS].
IMPLIED = {"siamese_pooling": "cls"}
#: The inputs' lengths ``earl.evaluate`` takes where the data settings give none (`earl.data`'s defaults).
QUERY_LENGTH, PASSAGE_LENGTH = 16, 128


def recognises(checkpoint: dict) -> bool:
    """Whether `checkpoint` is an `earl.train` checkpoint: one of `ARCHITECTURES` with EARL's `RANKER_KEYS`."""
    hparams = checkpoint.get("hyper_parameters") or {}
    return hparams.get("architecture") in ARCHITECTURES and all(key in hparams for key in RANKER_KEYS)


def model_of(bert, config: dict, *, copy_from_bert: bool):
    """The model of `config` (`MODEL_KEYS`) over the ``BertModel`` `bert`: EARL, the BERT ranker or BERT-Siamese."""
    if config["architecture"] == "earl":
        return build_earl(bert, num_blocks=config["num_blocks"], query_layers=config["query_layers"],
                          tied=config["tied"], copy_from_bert=copy_from_bert, copy_cross=config["copy_cross"],
                          pool=config["pool"], loss=config["loss"])
    if config["architecture"] == "bert_ranker":
        return BertRanker(bert, logits=2 if config["loss"] == "cross_entropy" else 1)
    return BertSiamese(bert, pooling=(IMPLIED | config)["siamese_pooling"])


def checkpoint_entry(checkpoint: dict) -> dict:
    """The `common.portable` entry of an `earl.train` checkpoint (module docstring)."""
    hparams = checkpoint["hyper_parameters"]
    inputs = inputs_config(checkpoint, pairs=hparams["architecture"] == "bert_ranker", query_length=QUERY_LENGTH,
                           passage_length=PASSAGE_LENGTH)
    model = {k: hparams[k] if k in hparams else IMPLIED[k] for k in MODEL_KEYS}
    return bert_checkpoint_entry(PACKAGE, checkpoint, model, inputs)


def build(config: dict, folder: Path) -> Scoring:
    """The model of `config` with random weights, its inputs and, for EARL, scoring from a store."""
    model = portable_model(model_of(bert_of_config(config["encoder"]), config, copy_from_bert=False))
    inputs = config["inputs"]
    encoder = bert_inputs(inputs, folder)

    def open_store(model, store: Path):
        if config["architecture"] != "earl":
            raise PortableError(f"{store}: the {config['architecture']} stores nothing; only EARL's document side is "
                                "computed without the query")
        opened = open_representations(store, widths={s: store_width(model, s) for s in STRATEGIES},
                                      passage_length=inputs["passage_length"])
        return pairs_from_store(lambda batch_size: QueryScorer(model, encoder, batch_size=batch_size,
                                                               device=model_device(model), store=opened))

    return Scoring(model, encoder, open_store=open_store)
