"""Building a representation store (`common.stores.representations`) with Lightning ``predict``: one prediction step per
shard, so that Lightning's distributed sampler splits the shards among devices and nodes, and a prediction writer
that writes each shard as soon as it is computed.

Writing from the writer callback, and never returning the predictions, keeps memory flat however large the
collection: a shard's arrays live from its prediction step to its write. Each process writes only the shards it
was given (predict's sampler repeats none); once every process is done, global rank zero checks that all the
shards are there and writes the manifest. A killed build resumes with a writer made with ``resume=True``: only
the shards missing or found broken are computed again.

Feeding the device (`DocumentIndexer`, `EncodedShards`): a shard's documents are read and tokenised by the loader's
``collate_fn``, so in its worker processes where there are any (``num_workers``), while the model encodes the shard
before; the batches come in pinned memory where the accelerator is CUDA (`loader_options`) and are copied to it
without blocking. The rows come back the same way (`HostCopies`): each batch's rows are copied into pinned host
memory without waiting for them, and the host waits once per shard, before the shard is cut into its documents'
matrices; so the host queues the next batch while the device computes this one. The alternative, the shard's rows
kept on the device and copied once, would hold a whole shard's padded rows (EARL's S2: 2·K·h floats a token) in
device memory; the pinned copies hold them in host memory, where the shard's arrays must be anyway to be written.

`build_representations` builds a model's store: a `Representation` says what the model stores of a document (EARL's
D or D', MVA's [D_K | D_V] or DE's vector) and under which identity (the checkpoint file's sha256 and a strategy).

This module imports torch and Lightning; `common.stores.representations`, which reads the stores, does not.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import lightning as L
import torch
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from common.stores.representations import RepresentationStore, StoreWriter


class ShardDataset(Dataset):
    """Item i: the i-th shard still to write, an index into the writer's shards; a step's batch is that index."""

    def __init__(self, pending: list[int]):
        self.pending = list(pending)

    def __len__(self) -> int:
        return len(self.pending)

    def __getitem__(self, index: int) -> int:
        return self.pending[index]

    def collate(self, items: list[int]):
        (shard,) = items  # one shard per prediction step
        return shard


class EncodedShards(ShardDataset):
    """A step's batch is ``(shard, batches)``: the shard's index and its documents (`doc_ids`: shard -> its ids),
    read from `documents` and encoded by `encoder` (``encoder.documents(docs) -> {"doc_tokens", "doc_mask"}``,
    `common.encoders.bert_inputs.BertInputs`) in batches of `batch_size` in order of length (less padding), each
    ``(positions, tokens, mask)``: the (B,) positions of its documents in the shard, their (B, d) token ids and mask.
    A document's rows do not depend on its batch, so the order changes nothing. It is the loader's ``collate_fn``
    that reads and encodes: in the loader's worker processes where it has any."""

    def __init__(self, pending: list[int], doc_ids: Callable[[int], list[str]], documents, encoder, batch_size: int):
        super().__init__(pending)
        self.doc_ids = {shard: doc_ids(shard) for shard in self.pending}
        self.documents, self.encoder, self.batch_size = documents, encoder, batch_size

    def collate(self, items: list[int]) -> tuple[int, list[tuple[Tensor, Tensor, Tensor]]]:
        shard = super().collate(items)
        docs = self.documents.get_many(self.doc_ids[shard])
        order = sorted(range(len(docs)), key=lambda i: (len(docs[i].title) + len(docs[i].text), i))
        batches = []
        for start in range(0, len(order), self.batch_size):
            part = order[start : start + self.batch_size]
            batch = self.encoder.documents([docs[i] for i in part])
            batches.append((torch.tensor(part), batch["doc_tokens"], batch["doc_mask"]))  # (B,), (B, d), (B, d)
        return shard, batches


class HostCopies:
    """Tensors copied from `device` to the host without waiting for each (module docstring): `copy` queues a copy
    and returns its host tensor, whose values are there once `wait` returns. On a CUDA device the copy is
    ``non_blocking`` into pinned memory (torch allocates the destination pinned), and `wait` synchronises the
    current stream once; elsewhere copies are plain ones and `wait` does nothing."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.device = device

    def copy(self, tensor: Tensor) -> Tensor:
        return tensor.to("cpu", non_blocking=self.cuda)

    def wait(self) -> None:
        if self.cuda:
            torch.cuda.current_stream(self.device).synchronize()


def loader_options(trainer: L.Trainer | None, num_workers: int) -> dict:
    """A prediction loader's options: `num_workers` workers, kept for the loader's life (``persistent_workers``),
    and pinned batches where `trainer`'s accelerator is CUDA (their copies to the device then do not block), as the
    evaluation loaders of `common.training.tasks.LoaderConfig`."""
    from common.training.tasks import LoaderConfig

    pinned = LoaderConfig.pin_memory(trainer)
    return {"num_workers": num_workers, "persistent_workers": num_workers > 0, "pin_memory": pinned}


class DocumentIndexer(L.LightningModule):
    """`build_store`'s module for document encoders: ``predict_step((shard, batches))`` (`EncodedShards`) returns
    each of the shard's documents' rows, those `represent` keeps.

    `represent(tokens, mask)` maps (B, d) token ids and mask to (B, t, width) rows and their (B, t) keep mask (the
    rows a document owns: its real tokens, or timesteps); it belongs to `model`, which Lightning moves to the
    device. The rows are copied to the host as `HostCopies` says, in the dtype they are computed in (bfloat16 under
    ``bf16-mixed``: half the bytes), and made float32 there.
    """

    def __init__(self, model: nn.Module, represent: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]):
        super().__init__()
        self.model, self.represent = model, represent

    def predict_step(self, batch: tuple[int, list], batch_idx: int = 0) -> tuple[int, list[Tensor]]:
        shard, batches = batch
        copies = HostCopies(self.device)
        pending = []
        for positions, tokens, mask in batches:
            rows, keep = self.represent(tokens.to(self.device, non_blocking=True),
                                        mask.to(self.device, non_blocking=True))  # (B, t, width), (B, t)
            pending.append((positions, copies.copy(rows), copies.copy(keep)))
        copies.wait()  # once a shard: every batch's rows are on the host
        arrays: list[Tensor | None] = [None] * sum(len(positions) for positions, _, _ in pending)
        for positions, rows, keep in pending:
            rows, keep = rows.float(), keep.bool()
            for j, i in enumerate(positions.tolist()):
                arrays[i] = rows[j][keep[j]]
        return shard, arrays


class StoreShardWriter(BasePredictionWriter):
    """Writes each prediction, ``(shard_index, arrays)``, as that shard of the store (`StoreWriter.write_shard`)."""

    def __init__(self, writer: StoreWriter):
        super().__init__(write_interval="batch")
        self.writer = writer

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx=0):
        shard, arrays = prediction
        given = batch[0] if isinstance(batch, (tuple, list)) else batch  # an EncodedShards batch, or a ShardDataset's
        if shard != given:
            raise ValueError(f"predict_step was given shard {given} and returned shard {shard}")
        self.writer.write_shard(shard, arrays)


def build_store(module: L.LightningModule, writer: StoreWriter, trainer_options: dict | None = None, *,
                shards: Callable[[list[int]], ShardDataset] = ShardDataset,
                num_workers: int = 0) -> RepresentationStore | None:  # fmt: skip
    """Compute the shards `writer` still lacks (`StoreWriter.pending`) with `module` and finish the store.

    `module`'s ``predict_step(batch)`` (a ``batch_idx`` argument is optional) is given one shard at a time, as
    ``shards(pending)``'s loader makes it: a `ShardDataset`'s gives the shard's index alone (the module reads its
    documents: their ids are ``writer.shard_doc_ids(shard_index)``, so a module keeps a reference to the writer or
    to the same doc ids), an `EncodedShards`' the index and the shard's encoded documents. It returns
    ``(shard_index, arrays)``: one (rows, width) matrix per document, in that order, as numpy arrays or tensors (on
    any device: they are moved to the CPU), cast to the store's dtype when written. It must not depend on which
    other shards a process computes, so that a resumed or distributed build writes what a single uninterrupted one
    would.

    `trainer_options` go to ``lightning.Trainer`` (``accelerator``, ``devices``, ``num_nodes``, ``strategy``,
    ``precision``, ``enable_progress_bar``: Lightning's bar counts shards on rank zero; ``callbacks``, such as a
    command's progress, beside the one that writes the shards); the loader has
    `num_workers` workers (`loader_options`). Every process calls this; global rank zero returns the finished store
    once all have written their shards, the others None.
    """
    pending = writer.pending()
    options = dict(trainer_options or {})
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_model_summary=False,
                        callbacks=[StoreShardWriter(writer), *options.pop("callbacks", [])],
                        default_root_dir=writer.folder, **options)  # fmt: skip
    rank_zero_info(f"{writer.folder}: {len(pending)} of {writer.num_shards} shards to compute")
    if pending:  # every process, each given its part of the shards by Lightning's sampler
        dataset = shards(pending)
        loader = DataLoader(dataset, batch_size=1, collate_fn=dataset.collate,
                            **loader_options(trainer, num_workers))  # fmt: skip
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
                          trainer_options: dict | None = None,
                          num_workers: int = 0) -> RepresentationStore | None:  # fmt: skip
    """Build (or, with `resume`, finish) the store of `documents` (`doc_ids`, in that order) in `folder`, each one's
    rows `representation`'s, documents encoded by `encoder` in batches of `batch_size` by `num_workers` loader
    workers (`EncodedShards`, `DocumentIndexer`); returns it on global rank zero, None on the other ranks
    (`build_store`).

    Its identity is ``{"checkpoint": checkpoint_sha256, "strategy": representation.strategy}``;
    `common.stores.representations.StoreMismatchError` where `resume` finds an unfinished store of another plan
    (another checkpoint, strategy, dtype, collection or shard size), before anything is computed. `verify`: a resumed
    build re-reads the shards it keeps against their checksums (`StoreWriter`)."""
    writer = StoreWriter(folder, doc_ids=doc_ids, width=representation.width, dtype=dtype, shard_size=shard_size,
                         identity={"checkpoint": checkpoint_sha256, "strategy": representation.strategy},
                         extra=representation.extra, resume=resume, verify=verify)  # fmt: skip
    indexer = DocumentIndexer(representation.model, representation.represent)
    shards = functools.partial(EncodedShards, doc_ids=writer.shard_doc_ids, documents=documents, encoder=encoder,
                               batch_size=batch_size)  # fmt: skip
    return build_store(indexer, writer, trainer_options, shards=shards, num_workers=num_workers)
