"""What EARL's and MVA's portable rankers share (the contract is `common.portable`), without Lightning: the
``BertModel``'s config as a dict (`encoder_config`, sized as `common.encoders.bert_reranking.bert_encoder` sizes it)
rebuilt offline (`bert_of_config`), the model as the ranker holds it (`portable_model`), inputs read with the
checkpoint's tokenizer files (`bert_inputs`), and scoring from a checked ``<package>.index`` store
(`open_representations`, `pairs_from_store`; the checkpoint's sha256 is not checked: a folder does not know it).
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
    """The Hugging Face config (a dict) of the ``BertModel`` a ranker of `hparams` builds."""
    dropout = hparams["dropout"]
    if hparams.get("encoder") is not None:
        from transformers import BertConfig

        config = BertConfig.from_pretrained(resolve(hparams["encoder"]), hidden_dropout_prob=dropout,
                                            attention_probs_dropout_prob=dropout)
    else:
        vocab_size, pad_token_id = vocabulary(hparams.get("tokenizer", BUILTIN), hparams.get("tokenizer_task"))
        config = bert_config(vocab_size=vocab_size, pad_token_id=pad_token_id, num_layers=hparams["num_layers"],
                             hidden_size=hparams["hidden_size"], num_heads=hparams["num_heads"],
                             intermediate_size=hparams["intermediate_size"], dropout=dropout)
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
    """The checkpoint's data settings (none outside a trainer) and its ranker's hyper-parameters."""
    return checkpoint.get("datamodule_hyper_parameters") or {}, checkpoint["hyper_parameters"]


def tokenizer_of(checkpoint: dict) -> tuple[str, object]:
    """The tokenizer the checkpoint's pairs are read with and the task a ``train`` one learnt on (module docstring)."""
    data, hparams = input_settings(checkpoint)
    source = data if "tokenizer" in data else hparams
    return source.get("tokenizer", BUILTIN), source.get("tokenizer_task")


def inputs_config(checkpoint: dict, *, pairs: bool, query_length: int, passage_length: int) -> dict:
    data, _ = input_settings(checkpoint)
    return {"pairs": pairs, "query_length": data.get("query_length", query_length),
            "passage_length": data.get("passage_length", passage_length), "tokenizer": tokenizer_of(checkpoint)[0]}


def bert_checkpoint_entry(package: str, checkpoint: dict, model_config: dict, inputs: dict) -> dict:
    name, task = tokenizer_of(checkpoint)
    config = {**model_config, "encoder": encoder_config(checkpoint["hyper_parameters"]), "inputs": inputs}
    files = tokenizer_files(load_tokenizer(name, task=task))
    return portable_entry(package, config, files, checkpoint.get("datamodule_hyper_parameters"))


def bert_inputs(inputs: dict, folder: Path) -> BertInputs:
    return BertInputs(inputs["pairs"], str(folder), inputs["query_length"], inputs["passage_length"])


def open_representations(folder: Path, *, widths: dict[str, int], passage_length: int):
    """The finished store in `folder`, checked against the strategies' `widths` and `passage_length`."""
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
    """``scores(queries, doc_ids) -> (B,)`` of the pairs (``queries[i]``, ``doc_ids[i]``)."""

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
