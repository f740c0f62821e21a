"""MVA's rankers (MVA, DE, CA) rebuilt without Lightning (`common.api.load`, `common.portable`): the config holds
`MODEL_KEYS`, the [CLS] id, the encoder's config and the inputs' settings; `model_of` builds what `MVARanker` holds;
MVA and DE score from an ``mva.index`` store (`mva.query_scorer`).
"""

from __future__ import annotations

from pathlib import Path

from common.encoders.bert_portable import (bert_checkpoint_entry, bert_inputs, bert_of_config, inputs_config,
                                           model_device, open_representations, pairs_from_store, portable_model)
from common.encoders.bert_rankers import BertRanker, BertSiamese
from common.encoders.tokenizers import load_tokenizer
from common.portable import PortableError, Scoring
from mva import ARCHITECTURES, PASSAGE_LENGTH, QUERY_LENGTH, RANKER_KEYS, STORED
from mva.model import MVA
from mva.query_scorer import QueryScorer, store_width

PACKAGE = "mva"
PAPER = "Multi-Vector Attention Models for Deep Re-ranking (Zhou and Devlin, EMNLP 2021)"
#: `mva.model.MVA`'s settings among the hyper-parameters.
MVA_KEYS = ("projection", "heads", "query_pooling", "query_timesteps", "query_factor", "doc_pooling", "doc_timesteps",
            "doc_factor", "tied_init", "cls_init", "first_k_truncates")
#: What a checkpoint whose hyper-parameters lack one of `MVA_KEYS` was trained with (the key's default).
MVA_IMPLIED = {"first_k_truncates": "outputs"}
#: The DE's settings among them (`common.encoders.bert_rankers.BertSiamese`'s).
DE_KEYS = ("de_pooling", "de_cosine_scale")
#: The hyper-parameters that shape the model (the others train it).
MODEL_KEYS = ("architecture", *MVA_KEYS, *DE_KEYS)


def recognises(checkpoint: dict) -> bool:
    """Whether `checkpoint` is an `mva.train` checkpoint: one of `ARCHITECTURES` with MVA's `RANKER_KEYS`."""
    hparams = checkpoint.get("hyper_parameters") or {}
    return hparams.get("architecture") in ARCHITECTURES and all(key in hparams for key in RANKER_KEYS)


def cls_token_id(hparams: dict) -> int:
    """The [CLS] id of the ranker's vocabulary: its pretrained ``encoder``'s tokenizer, else its ``tokenizer``."""
    if hparams.get("encoder") is not None:
        return load_tokenizer(hparams["encoder"]).cls_token_id
    return load_tokenizer(hparams["tokenizer"], task=hparams.get("tokenizer_task")).cls_token_id


def model_of(bert, config: dict, *, cls_token_id: int | None):
    """The model of `config` (`MODEL_KEYS`) over the ``BertModel`` `bert`: MVA, CA (`BertRanker`) or DE."""
    if config["architecture"] == "mva":
        return MVA(bert, cls_token_id=cls_token_id, **(MVA_IMPLIED | {k: config[k] for k in MVA_KEYS if k in config}))
    if config["architecture"] == "ca":
        return BertRanker(bert)
    return BertSiamese(bert, pooling=config["de_pooling"], cosine_scale=config["de_cosine_scale"])


def checkpoint_entry(checkpoint: dict) -> dict:
    """The `common.portable` entry of an `mva.train` checkpoint (module docstring)."""
    hparams = checkpoint["hyper_parameters"]
    inputs = inputs_config(checkpoint, pairs=hparams["architecture"] == "ca", query_length=QUERY_LENGTH,
                           passage_length=PASSAGE_LENGTH)
    model = {k: hparams[k] for k in MODEL_KEYS if k in hparams}
    if hparams["architecture"] == "mva":
        model["cls_token_id"] = cls_token_id(hparams)
    return bert_checkpoint_entry(PACKAGE, checkpoint, model, inputs)


def build(config: dict, folder: Path) -> Scoring:
    """The model of `config` with random weights, its inputs and, for MVA and DE, scoring from a store."""
    bert = bert_of_config(config["encoder"])
    model = portable_model(model_of(bert, config, cls_token_id=config.get("cls_token_id")))
    inputs, architecture = config["inputs"], config["architecture"]
    encoder = bert_inputs(inputs, folder)

    def open_store(model, store: Path):
        if architecture not in STORED:
            raise PortableError(f"{store}: {architecture} stores nothing; it reads the query and the document together")
        opened = open_representations(store, widths={architecture: store_width(model)},
                                      passage_length=inputs["passage_length"])
        return pairs_from_store(lambda batch_size: QueryScorer(model, encoder, batch_size=batch_size,
                                                               device=model_device(model), store=opened))

    return Scoring(model, encoder, open_store=open_store)
