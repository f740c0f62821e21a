"""The paper's batch on any number of processes: ``--data.batch_size`` is the global batch of an optimizer step.

`split_global_batch` gives each process ``batch_size / (world size x accumulate_grad_batches)`` groups, refusing in
one line a batch that does not divide. `GlobalBatchSampler` draws an epoch's order from the seed and epoch alone
(`epoch_order`, torchdata ``RandomSampler``'s stream) and hands process r the r-th slice of each global batch, padding
an uneven last one with the epoch's first indices; it yields ``(epoch, index)`` keys and resumes mid-epoch, on the
process and accumulation counts it was written by (`resumable_here`).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Sized

import torch
from torch.utils.data.distributed import DistributedSampler

from common.refusals import usage_error


def split_global_batch(data, trainer) -> None:
    """Divide `data`'s global batch among `trainer`'s processes and accumulated batches."""
    loaders = data.loaders
    world, accumulate = trainer.world_size, trainer.accumulate_grad_batches
    problem = batch_problem(loaders.batch_size, world, accumulate)
    if problem:
        if not trainer.is_global_zero:
            raise SystemExit(2)
        usage_error(problem)
    data.loaders = dataclasses.replace(loaders, processes=world, accumulate=accumulate)
    if trainer.is_global_zero:
        accumulated = f" x {accumulate} accumulated" if accumulate > 1 else ""
        print(f"global batch {loaders.batch_size} = {world} {_processes(world)} x {data.loaders.process_batch_size}"
              f"{accumulated}", flush=True)


def batch_problem(batch_size: int, world: int, accumulate: int = 1) -> str | None:
    """Why `batch_size` cannot be shared by `world` processes accumulating `accumulate`, naming values that can."""
    share = world * accumulate
    if batch_size % share == 0:
        return None
    accumulated = f" x {accumulate} accumulated batches" if accumulate > 1 else ""
    below, above = batch_size - batch_size % share, batch_size - batch_size % share + share
    sizes = f"{below} or {above}" if below else f"{above}"
    fewer = max(p for p in range(1, world + 1) if batch_size % (p * accumulate) == 0) if batch_size % accumulate == 0 \
        else None
    keep = (f", or keep {batch_size} on {fewer} {_processes(fewer)} (--trainer.devices x --trainer.num_nodes)"
            if fewer else "")
    return (f"--data.batch_size {batch_size} is the global batch of an optimizer step: it must divide among {world} "
            f"{_processes(world)}{accumulated}; give --data.batch_size {sizes}{keep}")


def resumable_here(checkpoint: dict, processes: int, accumulate: int) -> str | None:
    """Why this process and accumulation count cannot resume `checkpoint`, or None."""
    written = checkpoint.get("global_batch") or {"processes": len(checkpoint.get("rng_states_by_rank") or [None])}
    then = (written["processes"], written.get("accumulate", accumulate))
    if then == (processes, accumulate):
        return None
    return (f"the checkpoint was written by {then[0]} {_processes(then[0])} accumulating {then[1]}, this run has "
            f"{processes} accumulating {accumulate}: resume it on {then[0]} {_processes(then[0])} "
            f"(--trainer.devices x --trainer.num_nodes) with --trainer.accumulate_grad_batches {then[1]}; its "
            "position in the data and each process's random generators mean nothing to other numbers")


def _processes(count: int) -> str:
    return "process" if count == 1 else "processes"


def epoch_order(size: int, seed: int, epoch: int) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epoch):
        torch.randperm(size, generator=generator)
        torch.empty((), dtype=torch.int64).random_(generator=generator)
    return torch.randperm(size, generator=generator).tolist()


class GlobalBatchSampler(DistributedSampler):
    """Process `rank`'s share of each global batch, as ``(epoch, index)`` keys (module docstring)."""

    def __init__(self, dataset: Sized, global_batch: int, processes: int, rank: int, seed: int):
        super().__init__(dataset, num_replicas=processes, rank=rank, shuffle=True, seed=seed)
        self.global_batch = global_batch
        self.num_samples = len(self.share(list(range(len(dataset)))))
        self.total_size = self.num_samples * processes
        self.resumed_epoch = 0

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

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return _EpochOrder(self, max(self.epoch, self.resumed_epoch))

    def __len__(self) -> int:
        return self.num_samples


class _EpochOrder(Iterator[tuple[int, int]]):

    def __init__(self, sampler: GlobalBatchSampler, epoch: int):
        self.sampler = sampler
        self._begin(epoch)
        self.yielded = 0

    def _begin(self, epoch: int) -> None:
        self.epoch = epoch
        self.indices = self.sampler.share(epoch_order(len(self.sampler.dataset), self.sampler.seed, epoch))

    def __next__(self) -> tuple[int, int]:
        if self.yielded == len(self.indices):
            raise StopIteration
        self.yielded += 1
        return self.epoch, self.indices[self.yielded - 1]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "yielded": self.yielded}

    def load_state_dict(self, state: dict) -> None:
        epoch = state["epoch"]
        self._begin(epoch)
        self.yielded = state["yielded"]
        done = self.yielded == len(self.indices)
        self.sampler.resumed_epoch = max(self.sampler.resumed_epoch, epoch + done)
