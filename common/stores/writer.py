"""Building a representation store (`common.stores.representations`) with Lightning ``predict``: one prediction step per
shard, so Lightning's sampler splits the shards among devices and nodes, and a writer callback that writes each shard
as it is computed (memory stays flat); global rank zero writes the manifest once every shard is there. A killed build
resumes with ``resume=True``. `DocumentIndexer` and `EncodedShards` tokenise shards in loader workers into pinned
memory; `HostCopies` copies rows back without blocking, the host waiting once per shard. `build_representations`
builds a model's store from a `Representation` (what it stores of a document, under which identity).
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
        (shard,) = items
        return shard


class EncodedShards(ShardDataset):

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
    """Tensors copied from `device` to the host without waiting for each (module docstring)."""

    def __init__(self, device: torch.device):
        self.device, self.cuda = device, device.type == "cuda"

    def copy(self, tensor: Tensor) -> Tensor:
        return tensor.to("cpu", non_blocking=self.cuda)

    def wait(self) -> None:
        if self.cuda:
            torch.cuda.current_stream(self.device).synchronize()


def loader_options(trainer: L.Trainer | None, num_workers: int) -> dict:
    from common.training.tasks import LoaderConfig

    return {"num_workers": num_workers, "persistent_workers": num_workers > 0,
            "pin_memory": LoaderConfig.pin_memory(trainer)}


class DocumentIndexer(L.LightningModule):

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
        copies.wait()
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
        given = batch[0] if isinstance(batch, (tuple, list)) else batch
        if shard != given:
            raise ValueError(f"predict_step was given shard {given} and returned shard {shard}")
        self.writer.write_shard(shard, arrays)


def build_store(module: L.LightningModule, writer: StoreWriter, trainer_options: dict | None = None, *,
                shards: Callable[[list[int]], ShardDataset] = ShardDataset,
                num_workers: int = 0) -> RepresentationStore | None:
    """Compute the shards `writer` still lacks (`StoreWriter.pending`) with `module` and finish the store."""
    pending = writer.pending()
    options = dict(trainer_options or {})
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_model_summary=False,
                        callbacks=[StoreShardWriter(writer), *options.pop("callbacks", [])],
                        default_root_dir=writer.folder, **options)
    rank_zero_info(f"{writer.folder}: {len(pending)} of {writer.num_shards} shards to compute")
    if pending:
        dataset = shards(pending)
        loader = DataLoader(dataset, batch_size=1, collate_fn=dataset.collate, **loader_options(trainer, num_workers))
        trainer.predict(module, dataloaders=loader, return_predictions=False)
    trainer.strategy.barrier()
    return writer.finish() if trainer.is_global_zero else None


@dataclass
class Representation:

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
                          num_workers: int = 0) -> RepresentationStore | None:
    """Build (or, with `resume`, finish) the store of `documents` in `folder` with `representation` and `encoder`."""
    writer = StoreWriter(folder, doc_ids=doc_ids, width=representation.width, dtype=dtype, shard_size=shard_size,
                         identity={"checkpoint": checkpoint_sha256, "strategy": representation.strategy},
                         extra=representation.extra, resume=resume, verify=verify)
    indexer = DocumentIndexer(representation.model, representation.represent)
    shards = functools.partial(EncodedShards, doc_ids=writer.shard_doc_ids, documents=documents, encoder=encoder,
                               batch_size=batch_size)
    return build_store(indexer, writer, trainer_options, shards=shards, num_workers=num_workers)
