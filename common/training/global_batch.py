"""The paper's batch on any number of processes: ``--data.batch_size`` is the global batch of an optimizer step.

A config's ``batch_size`` (and its step counts, warm-up and ``val_check_interval``, all counted in optimizer steps)
is the papers' batch: the training groups of one optimizer step over every process. `split_global_batch` divides it
before launch: each of the world's processes (``num_nodes`` x ``devices``) loads ``batch_size / (world size x
accumulate_grad_batches)`` groups a batch, a global batch that does not divide so is refused in one line, and global
rank 0 prints the split once (``global batch 128 = 8 processes x 16``, with `` x 2 accumulated`` where batches are
accumulated).

The examples of each optimizer step do not depend on the number of processes. `GlobalBatchSampler`, the training
loader's sampler, draws an epoch's order of the whole dataset from the seed, as one process always has: the next
``torch.randperm`` of a generator seeded with the loader's ``seed`` (torchdata's ``RandomSampler`` over that
generator, so one process sees the order it always saw, epoch after epoch). Each global batch, ``batch_size``
consecutive indices of that order, is cut into as many contiguous slices as there are processes, and process r
loads the r-th (its accumulated batches, one after the other, within it). Under DDP the gradients are the mean over
the processes, so one optimizer step's gradients are those of one process over the same global batch. An epoch's
last global batch, when the dataset's size is not a multiple of the global batch, is split the same way if its
size divides among the processes; otherwise its slices are evened up with the epoch's first indices (fewer than
one per process, as ``DistributedSampler`` pads), so that every process loads as many batches.

Lightning leaves a training loader whose sampler is a ``DistributedSampler`` as it is (it puts its own
``DistributedSampler`` only in front of other samplers), so `GlobalBatchSampler` is one, and the evaluation loaders
keep Lightning's ``DistributedSampler`` and the assembly of their padded shares (`common.training.reranking`). Its
iterator saves the generator's state at the epoch's start and the indices it yielded, under the names torchdata's
``RandomSampler`` uses, and the generator's state when saved: a checkpoint taken mid-epoch by torchdata's
``StatefulDataLoader`` resumes at the next batch, and the epochs after it are the uninterrupted run's (the loader
draws its workers' base seed from the same generator after each epoch's order, a draw torchdata's sampler did not
restore). A state written by a loader over torchdata's sampler resumes its epoch the same.

The training datasets' groups depend on the seed, the epoch (``set_epoch``) and the index alone
(`common.data.samplers`), so every epoch's negatives are those of one process.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Sized

import torch
from torch.utils.data.distributed import DistributedSampler

from common.refusals import usage_error


def split_global_batch(data, trainer) -> None:
    """Divide the global batch of `data` (a `common.training.tasks.RerankingDataModule`; its ``loaders.batch_size``)
    among `trainer`'s processes and accumulated batches: set the per-process batch on ``data.loaders`` and print the
    split on global rank 0; a global batch that does not divide is refused (exit 2 in every process), in one line
    by global rank 0."""
    loaders = data.loaders
    world, accumulate = trainer.world_size, trainer.accumulate_grad_batches
    if loaders.batch_size % (world * accumulate):
        if not trainer.is_global_zero:  # launched by torchrun or srun: every process stops, rank zero says why
            raise SystemExit(2)
        accumulated = f" x {accumulate} accumulated batches" if accumulate > 1 else ""
        usage_error(f"--data.batch_size {loaders.batch_size} is the global batch of an optimizer step: it must divide "
                    f"among {world} {_processes(world)}{accumulated}; give a multiple of {world * accumulate}")
    data.loaders = dataclasses.replace(loaders, processes=world, accumulate=accumulate)
    if trainer.is_global_zero:
        accumulated = f" x {accumulate} accumulated" if accumulate > 1 else ""
        print(f"global batch {loaders.batch_size} = {world} {_processes(world)} x {data.loaders.process_batch_size}"
              f"{accumulated}", flush=True)


def _processes(count: int) -> str:
    return "process" if count == 1 else "processes"


class GlobalBatchSampler(DistributedSampler):
    """Process `rank`'s share of each global batch of `global_batch` indices of `dataset`, in an order drawn from
    `seed` for the whole dataset (module docstring); `processes` must divide `global_batch`."""

    def __init__(self, dataset: Sized, global_batch: int, processes: int, rank: int, seed: int):
        super().__init__(dataset, num_replicas=processes, rank=rank, shuffle=True, seed=seed)
        self.global_batch = global_batch
        self.generator = torch.Generator().manual_seed(seed)
        self.num_samples = len(self.share(list(range(len(dataset)))))
        self.total_size = self.num_samples * processes

    def share(self, order: list[int]) -> list[int]:
        """This process's indices of an epoch's `order`: the `rank`-th contiguous slice of each global batch."""
        batch, processes, rank = self.global_batch, self.num_replicas, self.rank
        size = batch // processes
        whole = len(order) - len(order) % batch
        mine = [i for start in range(0, whole, batch) for i in order[start + rank * size:start + (rank + 1) * size]]
        last = order[whole:]
        if last:
            size = -(-len(last) // processes)
            last += itertools.islice(itertools.cycle(order), size * processes - len(last))
            mine += last[rank * size:(rank + 1) * size]
        return mine

    def __iter__(self) -> Iterator[int]:
        return _EpochOrder(self)

    def __len__(self) -> int:
        return self.num_samples


class _EpochOrder(Iterator[int]):
    """One epoch of a `GlobalBatchSampler`: the generator's next permutation, this process's share of it; its state
    (the generator's state at the epoch's start, the indices yielded) resumes it (module docstring)."""

    def __init__(self, sampler: GlobalBatchSampler):
        self.sampler = sampler
        self._start()
        self.yielded = 0

    def _start(self) -> None:
        self.generator_state = self.sampler.generator.get_state()
        order = torch.randperm(len(self.sampler.dataset), generator=self.sampler.generator).tolist()
        self.indices = self.sampler.share(order)

    def __next__(self) -> int:
        if self.yielded == len(self.indices):
            raise StopIteration
        self.yielded += 1
        return self.indices[self.yielded - 1]

    def state_dict(self) -> dict:
        return {"yielded": self.yielded, "generator": self.generator_state,
                "generator_now": self.sampler.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.sampler.generator.set_state(state["generator"])
        self._start()
        self.yielded = state["yielded"]
        if "generator_now" in state:  # not in a state of torchdata's sampler
            self.sampler.generator.set_state(state["generator_now"])
