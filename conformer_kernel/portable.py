"""The Conformer-Kernel as a portable ranker (`common.portable`, `common.api`): NDRM1, NDRM2 or NDRM3 rebuilt from a
checkpoint's entry or an exported folder, its inputs made as `conformer_kernel.evaluate` re-ranks, without Lightning.

- Config: ``model``, the ranker's settings that shape the model (`conformer_kernel.model.SETTINGS`, by their current
  names: a checkpoint's old ``hidden``/``heads``/``layers`` renamed, and ``doc_padding`` ``zeroed`` where it has
  none, as `conformer_kernel.ranker.ConformerKernelRanker.on_load_checkpoint` loads it); ``inputs``, the
  featuriser's settings from the data module's hyper-parameters (``max_query_terms``, ``max_doc_terms``,
  ``max_orcas_terms``; 20, 4,000 and 2,000 where a checkpoint has none, as evaluate's
  `conformer_kernel.impact_index.load_for_inference`) and ``orcas``, whether the model reads the ORCAS field.
- Files: the vocabulary ``terms.txt`` and the IDFs ``idf.tsv`` (`conformer_kernel.vocab.Resources.text_files`, from
  the checkpoint's ``resources``). A `conformer_kernel.train` checkpoint holds no `common.portable.KEY` entry:
  `common.api.load` makes it from the checkpoint's hyper-parameters and ``resources`` (`checkpoint_entry`, found by
  `recognises`), so that the vocabulary, millions of terms on MS MARCO, is stored once per checkpoint. The word2vec embeddings are the model's weights (its ``embed``); the text
  processing (SMART stop words, Krovetz stems) is `conformer_kernel.text`'s code, which has no settings.
- Inputs and score: `conformer_kernel.features.encode_pairs` (one pair per row, `conformer_kernel.features.Featurizer`)
  and the score of `conformer_kernel.ranker.ConformerKernelRanker.evaluation_scores`, column 0 of the model's (Q, D)
  scores. `common.api.load` puts the model in eval mode, as evaluate's ``trainer.test`` does: BatchScale (NDRM2) and
  BatchNorm (NDRM3) divide and normalise by their running statistics, not the batch's.
- ORCAS (``-orcas`` configs): the ORCAS data (ids of millions of documents -> their clicked queries) is not carried;
  a caller gives a document's field itself, as an `OrcasDocument` (``OrcasDocument(doc_id, text, title, url,
  orcas="clicked queries ...")``) to ``score`` or ``score_pairs``. Any other document (a text, a mapping, a row of a
  ``rerank`` frame) is scored as one nobody clicked, as evaluate scores a document ORCAS does not name; a model
  trained without the field ignores an `OrcasDocument`'s. Chosen so because the field is a property of the document,
  as its title and url are, and a caller scoring documents by text has it by document rather than by id.
- Full retrieval from the impact index (``--modes fullrank``) is not here: a portable ranker re-ranks.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import get_args

from common.portable import Scoring, portable_entry
from conformer_kernel.features import Featurizer, OrcasDocument, encode_pairs
from conformer_kernel.model import SETTINGS, ModelName, pair_scores, ranker_from_settings
from conformer_kernel.vocab import Resources

PACKAGE = "conformer_kernel"
PAPER = ('"Improving Transformer-Kernel Ranking Model Using Conformer and Query Term Independence", Mitra, '
         "Hofstätter, Zamani and Craswell, TREC 2020 Deep Learning track (arXiv:2104.09393, 2021)")  # fmt: skip
#: The featuriser's settings a checkpoint's data module holds, and evaluate's defaults where it holds none.
INPUTS = {"max_query_terms": 20, "max_doc_terms": 4000, "max_orcas_terms": 2000}


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
    featurizer = Featurizer(Resources.load(folder), inputs["max_query_terms"], inputs["max_doc_terms"],
                            inputs["max_orcas_terms"], {} if inputs["orcas"] else None)  # fmt: skip

    def score(model, batch: dict):  # (B,): `ConformerKernelRanker.evaluation_scores`
        return pair_scores(model, batch["features"])

    return Scoring(ranker_from_settings(config["model"]), partial(encode_pairs, featurizer), score=score)


__all__ = ["PACKAGE", "PAPER", "OrcasDocument", "recognises", "checkpoint_entry", "build"]
