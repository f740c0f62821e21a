"""The Conformer-Kernel as a portable ranker (`common.portable`, `common.api`): NDRM1, NDRM2 or NDRM3 rebuilt from a
checkpoint's entry or an exported folder, its pairs featurised as `conformer_kernel.evaluate` re-ranks, without
Lightning; it re-ranks (no ``fullrank``).

- Config: ``model`` (`conformer_kernel.model.SETTINGS`), ``inputs`` (the featuriser's limits, `INPUTS` where the
  checkpoint holds none) and ``orcas``; files: ``terms.txt`` and ``idf.tsv``. A `conformer_kernel.train` checkpoint
  holds no entry: `checkpoint_entry` makes it when `common.api.load` reads it, so the vocabulary is stored once.
- ORCAS: not carried; a caller passes an `OrcasDocument` with its clicked queries, any other document is scored as
  one nobody clicked (the field is a property of the document, as its title is).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import get_args

from common.portable import Scoring, portable_entry
from conformer_kernel import MAX_DOC_TERMS, MAX_ORCAS_TERMS, MAX_QUERY_TERMS
from conformer_kernel.features import Featurizer, OrcasDocument, encode_pairs
from conformer_kernel.model import SETTINGS, ModelName, ranker_from_settings
from conformer_kernel.vocab import Resources

PACKAGE = "conformer_kernel"
PAPER = ('"Improving Transformer-Kernel Ranking Model Using Conformer and Query Term Independence", Mitra, '
         "Hofstätter, Zamani and Craswell, TREC 2020 Deep Learning track (arXiv:2104.09393, 2021)")
#: The featuriser's settings a checkpoint's data module holds, and evaluate's defaults where it holds none.
INPUTS = {"max_query_terms": MAX_QUERY_TERMS, "max_doc_terms": MAX_DOC_TERMS, "max_orcas_terms": MAX_ORCAS_TERMS}


def recognises(checkpoint: dict) -> bool:
    """Whether `checkpoint` is a `conformer_kernel.train` checkpoint: an NDRM's hyper-parameters and a vocabulary."""
    settings = checkpoint.get("hyper_parameters") or {}
    return "resources" in checkpoint and settings.get("model") in get_args(ModelName)


def checkpoint_entry(checkpoint: dict) -> dict:
    """The `common.portable.KEY` entry of a `conformer_kernel.train` checkpoint's contents (module docstring)."""
    saved = checkpoint["hyper_parameters"]
    settings = {name: saved[name] for name in SETTINGS if name in saved}
    data = checkpoint.get("datamodule_hyper_parameters") or {}
    inputs = {name: data.get(name, default) for name, default in INPUTS.items()}
    inputs["orcas"] = data.get("orcas") is not None
    files = Resources.from_state(checkpoint["resources"]).text_files()
    return portable_entry(PACKAGE, {"model": settings, "inputs": inputs}, files, data)


def build(config: dict, folder: Path) -> Scoring:
    """The model of `config` (fresh weights) and its inputs, featurised with the vocabulary and IDFs of `folder`."""
    inputs = config["inputs"]
    featurizer = Featurizer(Resources.load(folder), *(inputs[name] for name in INPUTS), {} if inputs["orcas"] else None)

    def score(model, batch: dict):  # (B,): `ConformerKernelRanker.evaluation_scores`
        return model(batch["features"])[:, 0]

    return Scoring(ranker_from_settings(config["model"]), partial(encode_pairs, featurizer), score=score)


__all__ = ["PACKAGE", "PAPER", "OrcasDocument", "recognises", "checkpoint_entry", "build"]
