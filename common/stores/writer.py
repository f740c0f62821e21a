"""Building a representation store (`common.stores.representations`) with Lightning ``predict``: one prediction step per
shard, so that Lightning's distributed sampler splits the shards among devices and nodes, and a prediction writer
that writes each shard as soon as it is computed.

Writing from the writer callback, and never returning the predictions, keeps memory flat however large the
collection: a shard's arrays live from its prediction step to its write. Each process writes only the shards it
was given (predict's sampler repeats none); once every process is done, global rank zero checks that all the
shards are there and writes the manifest. A killed build resumes with a writer made with ``resume=True``: only
the shards missing or found broken are computed again.

`build_representations` builds a model's store: a `Representation` says what the model stores of a document (EARL's
D or D', MVA's [D_K | D_V] or DE's vector) and under which identity (the checkpoint file's sha256 and a strategy).

This module imports torch and Lightning; `common.stores.representations`, which reads the stores, does not.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import lightning as L
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from common.stores.representations import RepresentationStore, StoreWriter


class ShardDataset(Dataset):
    """Item i: the i-th shard still to write, an index into the writer's shards."""

    def __init__(self, pending: list[int]):
        self.pending = list(pending)

    def __len__(self) -> int:
        return len(self.pending)

    def __getitem__(self, index: int) -> int:
        return self.pending[index]

    @staticmethod
    def collate(items: list[int]) -> int:
        (shard,) = items  # one shard per prediction step
        return shard


class DocumentIndexer(L.LightningModule):
    """`build_store`'s module for document encoders: ``predict_step(shard)`` encodes that shard's documents with
    `encoder` (``encoder.documents(docs) -> {"doc_tokens", "doc_mask"}``, `common.encoders.bert_inputs.BertInputs`) in
    batches of `batch_size` and returns each one's rows: those `represent` keeps.

    `represent(tokens, mask)` maps (B, d) token ids and mask to (B, t, width) rows and their (B, t) keep mask (the
    rows a document owns: its real tokens, or timesteps); it belongs to `model`, which Lightning moves to the
    device. Within a shard the documents go in order of length (less padding); a document's rows do not depend on
    its batch, so the order changes nothing.
    """

    def __init__(self, model: nn.Module, represent: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]], encoder,
                 documents, writer: StoreWriter, batch_size: int):  # fmt: skip
        super().__init__()
        self.model, self.represent, self.encoder, self.documents = model, represent, encoder, documents
        self.writer, self.batch_size = writer, batch_size

    def predict_step(self, shard_index: int, batch_idx: int = 0) -> tuple[int, list[Tensor]]:
        docs = self.documents.get_many(self.writer.shard_doc_ids(shard_index))
        order = sorted(range(len(docs)), key=lambda i: (len(docs[i].title) + len(docs[i].text), i))
        arrays: list[Tensor | None] = [None] * len(docs)
        for start in range(0, len(order), self.batch_size):
            part = order[start : start + self.batch_size]
            batch = self.encoder.documents([docs[i] for i in part])
            rows, keep = self.represent(batch["doc_tokens"].to(self.device), batch["doc_mask"].to(self.device))
            rows, keep = rows.float().cpu(), keep.bool().cpu()
            for j, i in enumerate(part):
                arrays[i] = rows[j][keep[j]]
        return shard_index, arrays


class StoreShardWriter(BasePredictionWriter):
    """Writes each prediction, ``(shard_index, arrays)``, as that shard of the store (`StoreWriter.write_shard`)."""

    def __init__(self, writer: StoreWriter):
        super().__init__(write_interval="batch")
        self.writer = writer

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx=0):
        shard, arrays = prediction
        if shard != batch:
            raise ValueError(f"predict_step was given shard {batch} and returned shard {shard}")
        self.writer.write_shard(shard, arrays)


def build_store(module: L.LightningModule, writer: StoreWriter,
                trainer_options: dict | None = None) -> RepresentationStore | None:
    """Compute the shards `writer` still lacks (`StoreWriter.pending`) with `module` and finish the store.

    `module`'s ``predict_step(shard_index)`` (a ``batch_idx`` argument is optional) is given one shard index at a
    time, reads that shard's documents (their ids are ``writer.shard_doc_ids(shard_index)``, so a module keeps a
    reference to the writer or to the same doc ids) and returns ``(shard_index, arrays)``: one (rows, width)
    matrix per document, in that order, as numpy arrays or tensors (on any device: they are moved to the CPU),
    cast to the store's dtype when written. It must not depend on which other shards a process computes, so that
    a resumed or distributed build writes what a single uninterrupted one would.

    `trainer_options` go to ``lightning.Trainer`` (``accelerator``, ``devices``, ``num_nodes``, ``strategy``,
    ``precision``, ``enable_progress_bar``: Lightning's bar counts shards on rank zero). Every process calls this;
    global rank zero returns the finished store once all have written their shards, the others None.
    """
    pending = writer.pending()
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_model_summary=False,
                        callbacks=[StoreShardWriter(writer)], default_root_dir=writer.folder,
                        **(trainer_options or {}))
    rank_zero_info(f"{writer.folder}: {len(pending)} of {writer.num_shards} shards to compute")
    if pending:  # every process, each given its part of the shards by Lightning's sampler
        loader = DataLoader(ShardDataset(pending), batch_size=1, collate_fn=ShardDataset.collate)
        trainer.predict(module, dataloaders=loader, return_predictions=False)
    trainer.strategy.barrier()  # rank zero finishes once every shard exists
    return writer.finish() if trainer.is_global_zero else None


@dataclass
class Representation:
    """What a store of a model holds: `represent` (`DocumentIndexer`'s: (B, d) token ids and mask -> (B, t, `width`)
    rows and their (B, t) keep mask) belongs to `model`, which Lightning moves to the device; `strategy` names it in
    the store's identity, beside the checkpoint; `extra` (the model's shape, the passages' encoding) is recorded.
    `rows` maps the (B, d) token mask alone to the (B,) rows `represent` keeps of each document (its keep mask's
    sum), without the model: the store's size is estimated from it before a build (`common.stores.size`)."""

    model: nn.Module
    represent: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]
    width: int
    strategy: str
    extra: dict
    rows: Callable[[Tensor], Tensor]


def build_representations(representation: Representation, encoder, documents, doc_ids: Sequence[str],
                          folder: str | os.PathLike, *, checkpoint_sha256: str, dtype: str = "float32",
                          shard_size: int = 1000, batch_size: int = 128, resume: bool = False, verify: bool = False,
                          trainer_options: dict | None = None) -> RepresentationStore | None:  # fmt: skip
    """Build (or, with `resume`, finish) the store of `documents` (`doc_ids`, in that order) in `folder`, each one's
    rows `representation`'s, documents encoded by `encoder` in batches of `batch_size` (`DocumentIndexer`); returns
    it on global rank zero, None on the other ranks (`build_store`).

    Its identity is ``{"checkpoint": checkpoint_sha256, "strategy": representation.strategy}``;
    `common.stores.representations.StoreMismatchError` where `resume` finds an unfinished store of another plan
    (another checkpoint, strategy, dtype, collection or shard size), before anything is computed. `verify`: a resumed
    build re-reads the shards it keeps against their checksums (`StoreWriter`)."""
    writer = StoreWriter(folder, doc_ids=doc_ids, width=representation.width, dtype=dtype, shard_size=shard_size,
                         identity={"checkpoint": checkpoint_sha256, "strategy": representation.strategy},
                         extra=representation.extra, resume=resume, verify=verify)  # fmt: skip
    indexer = DocumentIndexer(representation.model, representation.represent, encoder, documents, writer, batch_size)
    return build_store(indexer, writer, trainer_options)
