"""EARL's precomputed document representations (Gao, Dai, Callan 2020, Sec. 3.3): what ``python -m earl.index``
stores and how ``python -m earl.evaluate`` scores from it, in one place so that the two agree; and the stores of
random documents that ``python -m earl.benchmark`` times.

- A store (`common.stores.representations`) holds, per document, one row per REAL token of the passage as training
  encoded it (`common.encoders.bert_inputs.BertInputs` with the checkpoint's tokenizer and passage length): [CLS],
  the words and [SEP], never padding. Strategy S1 stores D = T_doc(doc) (width h); S2 stores D' of Eq. 25, every
  judge block's keys and values of D side by side (`EARL.document_keys_values`, width 2·K·h), so S2 costs 2·K times
  S1's bytes.
- What made the numbers is the store's identity: ``checkpoint`` (the sha256 of the checkpoint file,
  `common.stores.representations.checkpoint_hash`) and ``strategy``; its ``extra`` records the model's shape and
  the encoding (judge blocks, hidden size, heads, passage length, tokenizer). A store is opened with the
  checkpoint's hash expected, so another checkpoint's store, right shapes and wrong numbers, is refused.
- Indexing (`representation`, built by `common.stores.writer.build_representations`): Lightning ``predict``, a step
  per shard; each document's rows are cut back to its real tokens, as many as `document_row_counts` tells from its
  token mask alone (the store's size estimated before it is built, `common.stores.size`).
- Scoring (`earl.query_scorer.QueryScorer`, a `common.stores.scoring.StoreScorer`): per query, T_qry once (Eqs. 14-16),
  then the candidates in batches through the judge blocks (Eqs. 17-22) with their keys and values read from an S2 store,
  computed from an S1 store's D (the n^2 d term of Table 1 that S2 saves), or, end to end, from T_doc at query time. The
  three paths differ only in where the keys and values come from: fp32 stores score as end-to-end does, to float
  rounding (the tests hold them within 1e-5); an fp16 store rounds the stored rows to half precision (about 3 decimal
  digits), and `common.stores.scoring.compare_scores` measures what that costs.
- Stores of random documents (`random_stores`, what ``python -m earl.benchmark`` times): the same S1 and S2 rows
  for documents ``d0``, ``d1``... of random words (`document_words`) through a model of random weights, or seeded
  noise of each store's own width; the store's identity says which (``checkpoint``: the weights' description,
  ``documents``).

Matrix products run at the float32 matmul precision the command sets (``--matmul_precision``: ``high``, TF32 on
GPUs, as training; ``highest``, full fp32, so that a GPU run's stored and end-to-end scores agree as closely as a
CPU run's, as ``earl.evaluate --compare_end_to_end`` measures them).

This module imports torch and Lightning (`earl.query_scorer` neither); the command lines (`earl.index`,
`earl.evaluate`) answer ``--help`` and bad options without them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from common.benchmarks.bert_inputs import bert_documents, random_words
from common.benchmarks.store_reads import noise_documents
from common.encoders.bert_inputs import BertInputs
from common.stores.representations import MANIFEST, RepresentationStore, StoreWriter
from common.stores.scoring import load_module
from common.stores.writer import Representation
from earl.model import EARL
from earl.query_scorer import store_width
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


# --- indexing --------------------------------------------------------------------------------------------------


def representation(ranker: EARLRanker, encoder: BertInputs, strategy: str) -> Representation:
    """What the `strategy` store of `ranker` holds: D = T_doc(doc) (S1) or D' of Eq. 25 (S2) over every real
    token ([CLS], the words, [SEP]); beside the identity, the model's shape and the passages' encoding."""
    model = ranker.model
    width = store_width(model, strategy)  # checks the strategy

    def represent(tokens: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        documents = model.encode_documents(tokens, mask)
        return (documents if strategy == "s1" else model.document_keys_values(documents)), mask.bool()

    extra = {"model": ranker.name, "num_blocks": model.num_blocks, "hidden_size": model.hidden_size,
             "heads": model.doc_encoder.config.num_attention_heads, "passage_length": encoder.passage_length,
             "tokenizer": encoder.tokenizer_name}  # fmt: skip
    return Representation(model, represent, width, strategy, extra, rows=document_row_counts)


def document_row_counts(mask: Tensor) -> Tensor:
    """(B, d) token mask -> (B,) rows a store keeps of each document: its real tokens, either strategy."""
    return mask.bool().sum(1)


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


# --- stores of random documents --------------------------------------------------------------------------------

#: The row types of `random_stores` by their short names.
ROW_TYPES = {"fp32": "float32", "fp16": "float16"}


def document_words(n: int, count: int, seed: int) -> Tensor:
    """`count` random documents' n - 1 words each, (count, n - 1), drawn from `seed` and n."""
    return random_words(count, n - 1, seed * 1_000_003 + n)


def random_stores(root: Path, model: EARL, *, name: str, checkpoint: str, strategies: Sequence[str], n: int,
                  count: int, dtype: str, documents: str, seed: int, shard_size: int,
                  batch_size: int) -> dict[str, RepresentationStore]:
    """The `strategies` stores of `count` random documents ``d0``, ``d1``... of n tokens under `root` (folders named
    from `name`). With `documents` ``encoded``, from one pass over D, T_doc of ``[CLS]`` and `document_words`, S2's
    rows `EARL.document_keys_values` of D, as `representation` stores them; with ``random``, each store's rows are
    seeded noise of its own width (`common.benchmarking.noise_documents`; S2's are not D' of S1's: timing does not
    depend on the values, and a store of 100,000 documents is written at disk speed). `checkpoint` describes the
    weights, `dtype` is a `ROW_TYPES` name. The documents are encoded on the model's device, their words drawn on
    the host. A finished store of the same identity is opened, not rebuilt; an unfinished one is resumed."""
    stores, writers = {}, {}
    for strategy in strategies:
        folder = root / f"{name}_n{n}_{strategy}_{dtype}_{documents}_{count}"
        identity = {"checkpoint": checkpoint, "strategy": strategy, "length": n, "documents": documents, "count": count}
        if (folder / MANIFEST).exists():
            stores[strategy] = RepresentationStore.open(folder, expect=identity)
            continue
        extra = {"judge_blocks": model.num_blocks, "heads": model.doc_encoder.config.num_attention_heads}
        writers[strategy] = StoreWriter(folder, doc_ids=[f"d{i}" for i in range(count)], dtype=ROW_TYPES[dtype],
                                        shard_size=shard_size, width=store_width(model, strategy), identity=identity,
                                        extra=extra, resume=True)  # fmt: skip
    for writer in writers.values() if documents == "random" else ():
        for shard in writer.pending():
            first, last = shard * shard_size, min(shard * shard_size + shard_size, count)
            writer.write_shard(shard, list(noise_documents(seed * 1_000_003 + n, first, last - first, n, writer.width,
                                                           ROW_TYPES[dtype])))
    encoding = writers if documents == "encoded" else {}
    words = document_words(n, count, seed) if encoding else None
    device = next(model.parameters()).device
    with torch.inference_mode():
        for shard in sorted(set().union(*(set(w.pending()) for w in encoding.values()))):
            first, last = shard * shard_size, min(shard * shard_size + shard_size, count)
            hidden = torch.cat([model.encode_documents(part, torch.ones_like(part))
                                for part in bert_documents(words[first:last]).to(device).split(batch_size)])
            for strategy, writer in encoding.items():
                if shard in writer.pending():
                    writer.write_shard(shard, list(hidden if strategy == "s1" else model.document_keys_values(hidden)))
    return {strategy: stores[strategy] if strategy in stores else writers[strategy].finish()
            for strategy in strategies}
