"""EARL's rankers loaded without Lightning (`common.api.load`, `common.portable`'s contract): EARL and its Table 2
baselines, the BERT ranker and BERT-Siamese, rebuilt from a checkpoint's entry or an exported folder, their pairs
read as ``earl.evaluate`` and ``earl.train``'s test read them, and EARL scored from an ``earl.index`` store.

- The config: the model's settings (`MODEL_KEYS`: the architecture, K judge blocks, l query layers, tied, pool,
  loss), the encoder's Hugging Face config and the inputs' settings (`common.encoders.bert_portable`: queries of the
  data settings' ``query_length``, passages of its ``passage_length``, default 16 and 128 as ``earl.evaluate``;
  the BERT ranker reads them concatenated). The files: the tokenizer's.
- The model (`model_of`): what `earl.ranker.EARLRanker` holds as ``self.model``, built by this very function there;
  rebuilt here with ``copy_from_bert`` off (the weights are the checkpoint's, loaded by the caller: nothing to
  copy), so the same modules (T_qry's layers T_doc's own where ``tied``).
- A store (``open_store``): EARL's S1 or S2 store, scored by `earl.query_scorer.QueryScorer` as ``earl.evaluate
  --store`` scores it (T_qry once per query, the judge over the candidates' stored rows); the baselines have none.
  Neither this module nor the store's scoring path imports Lightning.
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
PAPER = ("EARL: Speedup Transformer-based Rankers with Pre-computed Representation (Gao, Dai, Callan, "
         "arXiv 2020)")  # fmt: skip
#: The hyper-parameters that shape the model (the others train it).
MODEL_KEYS = ("architecture", "num_blocks", "query_layers", "tied", "copy_cross", "pool", "loss")
#: The inputs' lengths ``earl.evaluate`` takes where the data settings give none (`earl.data`'s defaults).
QUERY_LENGTH, PASSAGE_LENGTH = 16, 128


def recognises(checkpoint: dict) -> bool:
    """Whether `checkpoint` is an `earl.train` checkpoint: its hyper-parameters name one of `ARCHITECTURES` and
    hold EARL's settings (`RANKER_KEYS`: judge blocks, pool), which no other package's ranker has."""
    hparams = checkpoint.get("hyper_parameters") or {}
    return hparams.get("architecture") in ARCHITECTURES and all(key in hparams for key in RANKER_KEYS)


def model_of(bert, config: dict, *, copy_from_bert: bool):
    """The model of `config` (`MODEL_KEYS`) over the ``BertModel`` `bert`: EARL (`earl.model.build_earl`, T_qry
    and the judge blocks copied from `bert` where `copy_from_bert`), the BERT ranker (a 2-class head for the
    cross-entropy) or BERT-Siamese."""
    if config["architecture"] == "earl":
        return build_earl(bert, num_blocks=config["num_blocks"], query_layers=config["query_layers"],
                          tied=config["tied"], copy_from_bert=copy_from_bert, copy_cross=config["copy_cross"],
                          pool=config["pool"], loss=config["loss"])  # fmt: skip
    if config["architecture"] == "bert_ranker":
        return BertRanker(bert, logits=2 if config["loss"] == "cross_entropy" else 1)
    return BertSiamese(bert)


def checkpoint_entry(checkpoint: dict) -> dict:
    """The `common.portable` entry of an `earl.train` checkpoint (module docstring)."""
    hparams = checkpoint["hyper_parameters"]
    inputs = inputs_config(checkpoint, pairs=hparams["architecture"] == "bert_ranker", query_length=QUERY_LENGTH,
                           passage_length=PASSAGE_LENGTH)  # fmt: skip
    return bert_checkpoint_entry(PACKAGE, checkpoint, {k: hparams[k] for k in MODEL_KEYS}, inputs)


def build(config: dict, folder: Path) -> Scoring:
    """The model of `config` with random weights, its inputs (the tokenizer read from `folder`) and, for EARL,
    scoring from a store."""
    model = portable_model(model_of(bert_of_config(config["encoder"]), config, copy_from_bert=False))
    inputs = config["inputs"]
    encoder = bert_inputs(inputs, folder)

    def open_store(model, store: Path):
        if config["architecture"] != "earl":
            raise PortableError(f"{store}: the {config['architecture']} stores nothing; only EARL's document side is "
                                "computed without the query")  # fmt: skip
        opened = open_representations(store, widths={s: store_width(model, s) for s in STRATEGIES},
                                      passage_length=inputs["passage_length"])  # fmt: skip
        return pairs_from_store(lambda batch_size: QueryScorer(model, encoder, batch_size=batch_size,
                                                               device=model_device(model), store=opened))

    return Scoring(model, encoder, open_store=open_store)
