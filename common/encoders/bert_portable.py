"""What EARL's and MVA's portable rankers share (`earl.portable`, `mva.portable`; the contract is `common.portable`):
a BERT encoder rebuilt from a stored config, the pairs' inputs read with stored tokenizer files, and scoring from a
representation store. Nothing here imports Lightning: an exported ranker loads where only torch, transformers and
safetensors are installed.

- The encoder (`encoder_config`, `bert_of_config`): the Hugging Face config of the ranker's ``BertModel`` as a
  dict, made where the ranker trained from its hyper-parameters, exactly as
  `common.encoders.bert_reranking.bert_encoder` sizes it: a pretrained encoder's ``config.json`` with the ranker's
  dropout, or the from-scratch sizes over its tokenizer's vocabulary. Rebuilt from that dict, a ``BertModel`` of the
  same modules and names, with random weights (the caller loads the checkpoint's), needs neither the network nor the
  hub's cache. The config's ``_name_or_path`` (a folder of the machine that trained it) is left out. The model is
  built in the config's ``dtype`` where it names one, as transformers' ``from_pretrained`` loads a pretrained
  encoder (its default ``dtype="auto"`` reads the config's).
- The model (`portable_model`): the paper's model with `common.encoders.dropout.use_fast_bert_dropout`, as the
  ranker holds it (`BertRerankingModule.set_model`): the same module tree, whose ``sdpa_fast_dropout`` attention is
  ``sdpa`` itself in eval mode, so the scores are evaluate's.
- The inputs (`inputs_config`, `bert_inputs`): `common.encoders.bert_inputs.BertInputs` with the lengths of the
  checkpoint's data settings and its tokenizer read from the checkpoint's files (`tokenizer_entry_files`: the
  tokenizer's ``save_pretrained`` files, for a learnt ``builtin``/``train`` BPE and a pretrained one alike). The
  tokenizer is the data settings' (what ``evaluate`` reads), else the ranker's own hyper-parameter (a ranker saved
  outside a trainer has no data settings; evaluate would take ``builtin``, which only a ranker of that vocabulary
  reads), else ``builtin``.
- A store (`open_representations`, `pairs_from_store`): a ``<package>.index`` store opened and checked against the
  model (its strategy, its rows' width, its passages' length), then the pairs scored one query at a time by the
  package's store scorer, as ``<package>.evaluate --store`` scores them. A store records the sha256 of the
  checkpoint file that built it, which a ranker loaded from an exported folder does not know: a store of another
  checkpoint of the same shapes cannot be told apart here (``evaluate --store`` refuses it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from common.encoders.bert_inputs import BertInputs
from common.encoders.pretrained import bert_config, resolve
from common.encoders.tokenizers import BUILTIN, load_tokenizer, vocabulary
from common.portable import PortableError, portable_entry, tokenizer_files

#: Config keys of a machine, not of the model: left out of a stored encoder config.
MACHINE_KEYS = ("_name_or_path",)


def encoder_config(hparams: dict) -> dict:
    """The Hugging Face config (a JSON-able dict) of the ``BertModel`` a `BertRerankingModule` of hyper-parameters
    `hparams` builds (`common.encoders.bert_reranking.bert_encoder`): a pretrained ``encoder``'s with the ranker's
    ``dropout``, or one from scratch of its sizes over its tokenizer's vocabulary and padding id."""
    dropout = hparams["dropout"]
    if hparams.get("encoder") is not None:
        from transformers import BertConfig

        config = BertConfig.from_pretrained(resolve(hparams["encoder"]), hidden_dropout_prob=dropout,
                                            attention_probs_dropout_prob=dropout)  # fmt: skip
    else:
        vocab_size, pad_token_id = vocabulary(hparams.get("tokenizer", BUILTIN), hparams.get("tokenizer_task"))
        config = bert_config(vocab_size=vocab_size, pad_token_id=pad_token_id, num_layers=hparams["num_layers"],
                             hidden_size=hparams["hidden_size"], num_heads=hparams["num_heads"],
                             intermediate_size=hparams["intermediate_size"], dropout=dropout)  # fmt: skip
    return {k: v for k, v in config.to_dict().items() if k not in MACHINE_KEYS}


def bert_of_config(config: dict):
    """A ``BertModel`` without pooler of `encoder_config`'s dict, its weights random (the caller loads them)."""
    from transformers import BertConfig, BertModel

    bert = BertModel(BertConfig.from_dict(config), add_pooling_layer=False)
    return bert.to(getattr(torch, config["dtype"])) if config.get("dtype") else bert


def portable_model(model: nn.Module) -> nn.Module:
    """`model` as a ranker holds it (module docstring): fast dropout, ``sdpa_fast_dropout`` attention."""
    from common.encoders.dropout import use_fast_bert_dropout

    return use_fast_bert_dropout(model)


def input_settings(checkpoint: dict) -> tuple[dict, dict]:
    """The checkpoint's data settings (``datamodule_hyper_parameters``, none where saved outside a trainer) and its
    ranker's hyper-parameters."""
    return checkpoint.get("datamodule_hyper_parameters") or {}, checkpoint["hyper_parameters"]


def tokenizer_of(checkpoint: dict) -> tuple[str, object]:
    """The tokenizer the checkpoint's pairs are read with and the task a ``train`` one learnt on (module
    docstring)."""
    data, hparams = input_settings(checkpoint)
    source = data if "tokenizer" in data else hparams
    return source.get("tokenizer", BUILTIN), source.get("tokenizer_task")


def inputs_config(checkpoint: dict, *, pairs: bool, query_length: int, passage_length: int) -> dict:
    """`BertInputs`' settings of a checkpoint: `pairs` (a cross-encoder's), its data settings' lengths (default
    `query_length`, `passage_length`: the package's, as its evaluate command takes them) and the tokenizer's name
    (for the model card; its files are the entry's)."""
    data, _ = input_settings(checkpoint)
    return {"pairs": pairs, "query_length": data.get("query_length", query_length),
            "passage_length": data.get("passage_length", passage_length), "tokenizer": tokenizer_of(checkpoint)[0]}


def bert_checkpoint_entry(package: str, checkpoint: dict, model_config: dict, inputs: dict) -> dict:
    """`common.portable.portable_entry` of a BERT-family ranker's checkpoint: `model_config` with the encoder's
    (``encoder``) and the `inputs` (``inputs``), its tokenizer's files, the data settings for the model card."""
    name, task = tokenizer_of(checkpoint)
    config = {**model_config, "encoder": encoder_config(checkpoint["hyper_parameters"]), "inputs": inputs}
    files = tokenizer_files(load_tokenizer(name, task=task))
    return portable_entry(package, config, files, checkpoint.get("datamodule_hyper_parameters"))


def bert_inputs(inputs: dict, folder: Path) -> BertInputs:
    """The `BertInputs` of `inputs_config`'s dict, its tokenizer read from `folder` (the entry's files)."""
    return BertInputs(inputs["pairs"], str(folder), inputs["query_length"], inputs["passage_length"])


def open_representations(folder: Path, *, widths: dict[str, int], passage_length: int):
    """The finished store in `folder` (`common.stores.representations.RepresentationStore`) of one of the strategies
    of `widths`, rows of that strategy's width and passages of `passage_length` tokens; else `PortableError`, one
    line naming it."""
    from common.stores.representations import RepresentationStore

    try:
        store = RepresentationStore.open(folder)
    except (OSError, ValueError) as error:
        raise PortableError(f"{folder}: {error}") from None
    strategy = store.identity.get("strategy")
    if strategy not in widths:
        raise PortableError(f"{folder} holds representations of strategy {strategy}, not {' or '.join(widths)}")
    if store.width != widths[strategy]:
        raise PortableError(f"{folder}: rows of width {store.width}, not the {widths[strategy]} of this model")
    stored_length = store.manifest.get("extra", {}).get("passage_length")
    if stored_length is not None and stored_length != passage_length:
        raise PortableError(f"{folder} holds passages of {stored_length} tokens, this model reads {passage_length}")
    return store


def pairs_from_store(scorer: Callable[[int], Callable[[str, Sequence[str]], Tensor]]):
    """``scores(queries, doc_ids) -> (B,)`` of the pairs (``queries[i]``, ``doc_ids[i]``): each distinct query's
    documents scored together by ``scorer(B)`` (a `common.stores.scoring.StoreScorer` of batches of B made for the
    call, on the model's device of the moment), its query encoded once, as ``<package>.evaluate --store`` scores
    them."""

    def scores(queries: list[str], doc_ids: list[str]) -> Tensor:
        score = scorer(len(queries))
        out = torch.empty(len(queries), dtype=torch.float64)
        rows: dict[str, list[int]] = {}
        for i, query in enumerate(queries):
            rows.setdefault(query, []).append(i)
        for query, positions in rows.items():
            out[positions] = score(query, [doc_ids[i] for i in positions])
        return out

    return scores


def model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device
