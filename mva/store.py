"""MVA's stored document representations (Zhou and Devlin 2021, Sec. 2.1, Table 5) for ``mva.index`` and
``mva.evaluate``: MVA's [D_K | D_V] of each kept timestep (2·H·p floats) or DE's [CLS] vector (h), identified by the
checkpoint's sha256 and the architecture; CA stores nothing and re-scores a first pass's top K (`CrossScorer`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence

import torch
from torch import Tensor

from common.encoders.bert_inputs import BertInputs
from common.stores.representations import RepresentationStore
from common.stores.scoring import load_module
from common.stores.writer import Representation
from mva import PASSAGE_LENGTH, QUERY_LENGTH
from mva.costs import bert_macs
from mva.model import temporal_pool, timestep_mask
from mva.query_scorer import architecture, document_rows, store_width
from mva.ranker import MVARanker


def load_ranker(state: dict) -> MVARanker:
    """The `MVARanker` of checkpoint contents `state`, in eval mode on the CPU."""
    return load_module(MVARanker, state)


def data_encoder(data_settings: dict, pairs: bool = False) -> BertInputs:
    """The `BertInputs` of a checkpoint's data settings: inputs cut as in training (concatenated for CA: `pairs`)."""
    get = data_settings.get
    return BertInputs(pairs, get("tokenizer", "builtin"), get("query_length", QUERY_LENGTH),
                      get("passage_length", PASSAGE_LENGTH), get("tokenizer_task"))


def document_row_counts(model, mask: Tensor) -> Tensor:
    """(B, d) token mask -> (B,) rows `mva.query_scorer.document_rows` keeps per document, without the encoder."""
    if architecture(model) != "mva":
        return mask.new_ones(len(mask), dtype=torch.long)
    pooling = model.doc_pooling
    if pooling.kind == "cls":
        return mask.new_full((len(mask),), pooling.timesteps, dtype=torch.long)
    keep = timestep_mask(mask)
    if pooling.kind == "first_k":
        keep = keep[:, : pooling.timesteps]
    elif pooling.kind == "temporal":
        keep = temporal_pool(keep.unsqueeze(-1).float(), keep, pooling.factor)[1]
    return keep.sum(1)


def representation(ranker: MVARanker, encoder: BertInputs) -> Representation:
    """What the store of `ranker` (MVA or DE) holds, with the model's shape and the passages' encoding."""
    settings = ranker.hparams
    extra = {"model": ranker.name, "hidden_size": ranker.model.bert.config.hidden_size,
             "passage_length": encoder.passage_length, "tokenizer": encoder.tokenizer_name}
    if architecture(ranker.model) == "mva":
        extra |= {"projection": settings.projection, "heads": settings.heads, "doc_pooling": settings.doc_pooling,
                  "doc_timesteps": settings.doc_timesteps, "doc_factor": settings.doc_factor}
    return Representation(ranker.model, functools.partial(document_rows, ranker.model), store_width(ranker.model),
                          architecture(ranker.model), extra, rows=functools.partial(document_row_counts, ranker.model))


def storage_report(store: RepresentationStore) -> str:
    """Bytes and timesteps per document of `store`."""
    timesteps = store.manifest["rows"] / max(len(store), 1)
    return (f"{store.identity['strategy'].upper()}: {store.bytes_per_document:,.0f} bytes/document ({store.dtype}; "
            f"{timesteps:,.1f} timesteps of {store.width} per document; {len(store):,} documents, "
            f"{store.manifest['bytes'] / 2**20:,.1f} MiB)")


class CrossScorer:
    """Scores pairs with CA end to end in batches; ``macs`` sums `mva.costs.bert_macs` of each pair's tokens."""

    label = "end to end"

    def __init__(self, ranker: MVARanker, encoder: BertInputs, documents, *, batch_size: int,
                 device: torch.device | str = "cpu"):
        self.ranker, self.encoder, self.documents = ranker, encoder, documents
        self.batch_size, self.device = batch_size, torch.device(device)
        self.seconds, self.macs = 0.0, 0
        config = ranker.model.bert.config
        self.shape = {"layers": config.num_hidden_layers, "hidden": config.hidden_size,
                      "intermediate": config.intermediate_size}

    @torch.inference_mode()
    def __call__(self, query: str, doc_ids: Sequence[str]) -> Tensor:
        start = time.perf_counter()
        scores = []
        for first in range(0, len(doc_ids), self.batch_size):
            chunk = list(doc_ids[first : first + self.batch_size])
            batch = self.encoder([query] * len(chunk), self.documents.get_many(chunk))
            self.macs += sum(bert_macs(n, **self.shape) for n in batch["pair_mask"].sum(1).tolist())
            scores.append(self.ranker.model({k: v.to(self.device) for k, v in batch.items()}).double().cpu())
        self.seconds += time.perf_counter() - start
        return torch.cat(scores) if scores else torch.zeros(0, dtype=torch.float64)
