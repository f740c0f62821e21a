"""EARL's precomputed document representations (Gao, Dai, Callan 2020, Sec. 3.3): what ``python -m earl.index``
stores and how ``python -m earl.evaluate`` scores from it, in one place so that the two agree.

- A store (`common.stores.representations`) holds, per document, one row per REAL token of the passage as training
  encoded it (`common.encoders.bert_inputs.BertInputs` with the checkpoint's tokenizer and passage length): [CLS], the words and
  [SEP], never padding. Strategy S1 stores D = T_doc(doc) (width h); S2 stores D' of Eq. 25, every judge block's
  keys and values of D side by side (`EARL.document_keys_values`, width 2·K·h), so S2 costs 2·K times S1's bytes.
- What made the numbers is the store's identity: ``checkpoint`` (the sha256 of the checkpoint file,
  `common.stores.representations.checkpoint_hash`) and ``strategy``; its ``extra`` records the model's shape and the
  encoding (judge blocks, hidden size, heads, passage length, tokenizer). A store is opened with the checkpoint's
  hash expected, so another checkpoint's store, right shapes and wrong numbers, is refused.
- Indexing (`build_representations`): Lightning ``predict``, a step per shard (`common.stores.writer`:
  shards split among devices and nodes, each written as soon as it is computed, a killed build resumed); each
  document's rows are cut back to its real tokens.
- Scoring (`QueryScorer`): per query, T_qry once (Eqs. 14-16), then the candidates in batches through the judge
  blocks (Eqs. 17-22) with their keys and values read from an S2 store, computed from an S1 store's D (the n^2 d
  term of Table 1 that S2 saves), or, end to end, from T_doc at query time. The three paths differ only in where
  the keys and values come from: fp32 stores score as end-to-end does, to float rounding (the tests hold them
  within 1e-5); an fp16 store rounds the stored rows to half precision (about 3 decimal digits), and
  `common.stores.scoring.compare_scores` measures what that costs.

Matrix products run in full fp32 (torch's default ``highest`` matmul precision, not TF32), so that a GPU run's
stored and end-to-end scores agree as closely as a CPU run's.

This module imports torch and Lightning; the command lines (`earl.index`, `earl.evaluate`) answer ``--help`` and
bad options without them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import torch
from torch import Tensor

from common.encoders.bert_inputs import BertInputs
from common.stores.writer import DocumentIndexer, build_store
from common.stores.representations import RepresentationStore, StoreWriter
from common.stores.scoring import load_module
from earl.index import STRATEGIES
from earl.model import EARL
from earl.ranker import EARLRanker

# --- the checkpoint --------------------------------------------------------------------------------------------


def load_ranker(state: dict) -> EARLRanker:
    """The `EARLRanker` of checkpoint contents `state` (read by `earl.index.read_trained`), in eval mode on the CPU."""
    return load_module(EARLRanker, state)


def data_encoder(data_settings: dict) -> BertInputs:
    """The `BertInputs` of a checkpoint's data settings (``datamodule_hyper_parameters``): queries and passages
    tokenised and cut exactly as in training."""
    return BertInputs(False, data_settings.get("tokenizer", "builtin"), data_settings.get("query_length", 16),
                   data_settings.get("passage_length", 128), data_settings.get("tokenizer_task"))  # fmt: skip


def store_width(model: EARL, strategy: str) -> int:
    """Columns of a row: h for S1 (D), 2·K·h for S2 (D', Eq. 25)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    return model.hidden_size * (1 if strategy == "s1" else 2 * model.num_blocks)


def store_identity(checkpoint_sha256: str, strategy: str) -> dict:
    """What a store's numbers are made from (`common.stores.representations` checks it when a store is opened)."""
    return {"checkpoint": checkpoint_sha256, "strategy": strategy}


def store_extra(ranker: EARLRanker, encoder: BertInputs) -> dict:
    """The model's shape and the passages' encoding, recorded beside the identity."""
    model = ranker.ranker
    return {"model": ranker.name, "num_blocks": model.num_blocks, "hidden_size": model.hidden_size,
            "heads": model.doc_encoder.config.num_attention_heads, "passage_length": encoder.passage_length,
            "tokenizer": encoder.tokenizer_name}  # fmt: skip


# --- indexing --------------------------------------------------------------------------------------------------


def representer(model: EARL, strategy: str):
    """``represent(tokens, mask)`` of `common.stores.writer.DocumentIndexer`: D = T_doc(doc) (S1) or D' of
    Eq. 25 (S2) over every real token: [CLS], the words, [SEP]."""
    store_width(model, strategy)  # checks the strategy

    def represent(tokens: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        documents = model.encode_documents(tokens, mask)
        return (documents if strategy == "s1" else model.document_keys_values(documents)), mask.bool()

    return represent


def build_representations(ranker: EARLRanker, encoder: BertInputs, documents, doc_ids: Sequence[str],
                          folder: str | os.PathLike, *, checkpoint_sha256: str, strategy: str, dtype: str = "float32",
                          shard_size: int = 1000, batch_size: int = 128, resume: bool = False,
                          trainer_options: dict | None = None) -> RepresentationStore | None:  # fmt: skip
    """Build (or, with `resume`, finish) the `strategy` store of `documents` (`doc_ids`, in that order) into
    `folder`; returns it on global rank zero, None on the other ranks.

    `common.stores.representations.StoreMismatchError` where `resume` finds an unfinished store of another plan (another
    checkpoint, strategy, dtype, collection or shard size), before anything is computed."""
    model = ranker.ranker
    writer = StoreWriter(folder, doc_ids=doc_ids, width=store_width(model, strategy), dtype=dtype,
                         shard_size=shard_size, identity=store_identity(checkpoint_sha256, strategy),
                         extra=store_extra(ranker, encoder), resume=resume)  # fmt: skip
    indexer = DocumentIndexer(model, representer(model, strategy), encoder, documents, writer, batch_size)
    return build_store(indexer, writer, trainer_options)


def storage_report(store: RepresentationStore) -> str:
    """Bytes per document of `store` and what the other strategy would cost (S2 = 2·K x S1, Eq. 25)."""
    strategy, blocks = store.identity["strategy"], store.manifest["extra"]["num_blocks"]
    factor, per_document = 2 * blocks, store.bytes_per_document
    built = (f"{strategy.upper()}: {per_document:,.0f} bytes/document ({store.dtype}; {len(store):,} documents, "
             f"{store.manifest['rows']:,} token rows, {store.manifest['bytes'] / 2**20:,.1f} MiB)")
    if strategy == "s1":
        other = f"S2 would be {factor} x that ({per_document * factor:,.0f} bytes/document: 2·K, K = {blocks})"
    else:
        other = f"S1 would be 1/{factor} of that ({per_document / factor:,.0f} bytes/document: 2·K, K = {blocks})"
    return f"{built}; {other}"


# --- scoring ---------------------------------------------------------------------------------------------------


class QueryScorer:
    """Scores one query's candidates: T_qry once, then batches of `batch_size` candidates through the judge.

    The candidates' keys and values come from `store` (S2: its rows; S1: `EARL.document_keys_values` of its D)
    or, without a store, from T_doc over `documents` at query time (end to end). ``seconds`` accumulates the time
    spent (reading and computing, the query's encoding included).
    """

    def __init__(self, model: EARL, encoder: BertInputs, *, batch_size: int, device: torch.device | str = "cpu",
                 store: RepresentationStore | None = None, documents=None):  # fmt: skip
        if store is None and documents is None:
            raise ValueError("give a store, or the documents to encode end to end")
        self.strategy = store.identity["strategy"] if store is not None else None
        if store is not None and store.width != store_width(model, self.strategy):
            raise ValueError(f"{store.folder}: rows of width {store.width}, not the {self.strategy.upper()} width "
                             f"{store_width(model, self.strategy)} of this model")
        self.model, self.encoder, self.store, self.documents = model, encoder, store, documents
        self.batch_size, self.device = batch_size, torch.device(device)
        self.seconds = 0.0

    @property
    def label(self) -> str:
        """How the candidates are scored: ``end to end``, ``S1 store (float16)``..."""
        return "end to end" if self.store is None else f"{self.strategy.upper()} store ({self.store.dtype})"

    @torch.inference_mode()
    def __call__(self, query: str, doc_ids: Sequence[str]) -> Tensor:
        """Scores (len(doc_ids),), float64 on the CPU, of the candidates `doc_ids` for query text `query`."""
        start = time.perf_counter()
        encoded = self.encoder.queries([query])
        tokens, mask = encoded["query_tokens"].to(self.device), encoded["query_mask"].to(self.device)
        queries, query_mask = self.model.encode_queries(tokens, mask), mask.bool()  # (1, q, h): once per query
        scores = []
        for first in range(0, len(doc_ids), self.batch_size):
            chunk = list(doc_ids[first : first + self.batch_size])
            keys_values, doc_mask = self.keys_values(chunk)
            index = torch.zeros(len(chunk), dtype=torch.long, device=self.device)
            scores.append(self.model.judge(queries, query_mask, keys_values, doc_mask, index).double().cpu())
        self.seconds += time.perf_counter() - start
        return torch.cat(scores) if scores else torch.zeros(0, dtype=torch.float64)

    def keys_values(self, doc_ids: list[str]) -> tuple[Tensor, Tensor]:
        """The candidates' (B, d, 2·K·h) keys and values of D (Eq. 25) and their (B, d) mask."""
        if self.store is None:
            batch = self.encoder.documents(self.documents.get_many(doc_ids))
            tokens, mask = batch["doc_tokens"].to(self.device), batch["doc_mask"].to(self.device)
            return self.model.document_keys_values(self.model.encode_documents(tokens, mask)), mask.bool()
        rows, mask = self.store.padded(doc_ids)  # fp32 (an fp16 store's rows converted)
        rows, mask = rows.to(self.device), mask.to(self.device)
        return (self.model.document_keys_values(rows) if self.strategy == "s1" else rows), mask
