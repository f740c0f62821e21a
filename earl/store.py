"""EARL's precomputed document representations (Gao, Dai, Callan 2020, Sec. 3.3): what ``earl.index`` stores
(`representation`) and the random stores ``earl.benchmark`` times (`random_stores`). A store holds one row per real
token ([CLS], the words, [SEP]): S1 D = T_doc(doc), width h; S2 D' of Eq. 25, width 2·K·h; it is identified by the
checkpoint file's sha256 and the strategy.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from common.benchmarks.bert_inputs import bert_documents, random_words
from common.benchmarks.store_reads import write_noise
from common.encoders.bert_inputs import BertInputs
from common.stores.representations import MANIFEST, RepresentationStore, StoreWriter
from common.stores.scoring import load_module
from common.stores.writer import Representation
from earl.model import EARL
from earl.query_scorer import store_width
from earl.ranker import EARLRanker


def load_ranker(state: dict) -> EARLRanker:
    """The `EARLRanker` of checkpoint contents `state`, in eval mode on the CPU."""
    return load_module(EARLRanker, state)


def data_encoder(data_settings: dict) -> BertInputs:
    """The `BertInputs` of a checkpoint's data settings: queries and passages cut as in training."""
    return BertInputs(False, data_settings.get("tokenizer", "builtin"), data_settings.get("query_length", 16),
                      data_settings.get("passage_length", 128), data_settings.get("tokenizer_task"))


def representation(ranker: EARLRanker, encoder: BertInputs, strategy: str) -> Representation:
    """What the `strategy` store of `ranker` holds (S1: D; S2: D') over every real token, and its description."""
    model = ranker.model
    width = store_width(model, strategy)  # checks the strategy

    def represent(tokens: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        documents = model.encode_documents(tokens, mask)
        return (documents if strategy == "s1" else model.document_keys_values(documents)), mask.bool()

    extra = {"model": ranker.name, "num_blocks": model.num_blocks, "hidden_size": model.hidden_size,
             "heads": model.doc_encoder.config.num_attention_heads, "passage_length": encoder.passage_length,
             "tokenizer": encoder.tokenizer_name}
    return Representation(model, represent, width, strategy, extra, rows=document_row_counts)


def document_row_counts(mask: Tensor) -> Tensor:
    """(B, d) token mask -> (B,) rows a store keeps of each document: its real tokens."""
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


#: The row types of `random_stores` by their short names.
ROW_TYPES = {"fp32": "float32", "fp16": "float16", "int8": "int8"}


def document_words(n: int, count: int, seed: int) -> Tensor:
    """`count` random documents' n - 1 words each, (count, n - 1), drawn from `seed` and n."""
    return random_words(count, n - 1, seed * 1_000_003 + n)


def random_stores(root: Path, model: EARL, *, name: str, checkpoint: str, strategies: Sequence[str], n: int,
                  count: int, dtype: str, documents: str, seed: int, shard_size: int,
                  batch_size: int) -> dict[str, RepresentationStore]:
    """The `strategies` stores of `count` documents ``d{i}`` of n rows under `root` (reopened or resumed): T_doc of
    `document_words` (S2: its D') with `documents` ``encoded``, else seeded noise of the store's width."""
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
                                        extra=extra, resume=True)
    for writer in writers.values() if documents == "random" else ():
        write_noise(writer, seed * 1_000_003 + n, n)
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
