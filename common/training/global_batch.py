"""The paper's batch on any number of processes: ``--data.batch_size`` is the global batch of an optimizer step.

A config's ``batch_size`` (and its step counts, warm-up and ``val_check_interval``, all counted in optimizer steps)
is the papers' batch: the training groups of one optimizer step over every process. `split_global_batch` divides it
before launch: each of the world's processes (``num_nodes`` x ``devices``) loads ``batch_size / (world size x
accumulate_grad_batches)`` groups a batch, and global rank 0 prints the split once (``global batch 128 = 8 processes x
16``, with `` x 2 accumulated`` where batches are accumulated). A global batch that does not divide so is refused in
one line naming the nearest values that do, the batch sizes on either side and the most processes that share the
paper's batch (``--data.batch_size 128 ... must divide among 24 processes; give --data.batch_size 120 or 144, or keep
128 on 16 processes``): changing the batch changes the experiment, so it is the user's choice, not a silent one.
(Gradient accumulation divides a process's share further, ``--trainer.accumulate_grad_batches``, where a share does
not fit a device's memory.)

The examples of each optimizer step do not depend on the number of processes. `GlobalBatchSampler`, the training
loader's sampler, draws an epoch's order of the whole dataset from the seed and the epoch alone (`epoch_order`):
epoch e's is the (e + 1)-th ``torch.randperm`` of a generator seeded with the loader's ``seed``, one int64 drawn
after each permutation, the stream torchdata's ``RandomSampler`` gives a ``StatefulDataLoader`` whose generator it
shares (the loader draws its workers' base seed from it after each epoch's order), so one process sees the order it
always saw, epoch after epoch. Each global batch, ``batch_size`` consecutive indices of that order, is
cut into as many contiguous slices as there are processes, and process r loads the r-th (its accumulated batches,
one after the other, within it). Under DDP the gradients are the mean over the processes, so one optimizer step's
gradients are those of one process over the same global batch. An epoch's last global batch, when the dataset's
size is not a multiple of the global batch, is split the same way if its size divides among the processes;
otherwise its slices are evened up with the epoch's first indices (fewer than one per process, as
``DistributedSampler`` pads), so that every process loads as many batches.

The epoch travels with every index: the sampler yields ``(epoch, index)`` keys, and a training dataset
(`common.training.tasks.SamplerGroups`) draws item ``index`` of that epoch (its negatives depend on the seed, the
epoch and the index alone: `common.data.samplers`). So the epoch of the data is the loop's wherever the item is
made, in the main process or in a loader worker, persistent or not, and whatever hooks a resumed loop skips
(Lightning 2.6 runs no ``on_train_epoch_start`` when it restarts in the middle of an epoch). A new iterator's epoch
is the one Lightning's ``set_epoch`` names (it sets it before each epoch's iterator), or, where later, the one a
loaded state leaves next (its own epoch, or the next where it had yielded everything): a resumed loader whose
workers start the next epoch's iterator before Lightning names the epoch (it then only reads the state) begins the
right one. Nothing counts iterators: a loader with workers makes two per epoch.

Lightning leaves a training loader whose sampler is a ``DistributedSampler`` as it is (it puts its own
``DistributedSampler`` only in front of other samplers), so `GlobalBatchSampler` is one, and the evaluation loaders
keep Lightning's ``DistributedSampler`` and the assembly of their padded shares (`common.training.reranking`). Its
iterator's state is the epoch and the indices it yielded (torchdata's ``StatefulDataLoader`` saves it in
checkpoints): a checkpoint taken mid-epoch resumes at the next batch of the same epoch, and the epochs after it are
the uninterrupted run's. A state of torchdata's ``RandomSampler`` (the generator at the epoch's start and the
indices yielded) resumes its epoch the same, the epoch told by replaying the stream to that generator state.

A checkpoint's position is a count of this process's indices, which means nothing to another number of processes
or of accumulated batches: a run resumes on the numbers it was written by (`resumable_here` says why not, and the
training command refuses in one line before any step, `common.commands.cli.RankerCLI`).
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
    by global rank 0 naming the nearest values that work (`batch_problem`)."""
    loaders = data.loaders
    world, accumulate = trainer.world_size, trainer.accumulate_grad_batches
    problem = batch_problem(loaders.batch_size, world, accumulate)
    if problem:
        if not trainer.is_global_zero:  # launched by torchrun or srun: every process stops, rank zero says why
            raise SystemExit(2)
        usage_error(problem)
    data.loaders = dataclasses.replace(loaders, processes=world, accumulate=accumulate)
    if trainer.is_global_zero:
        accumulated = f" x {accumulate} accumulated" if accumulate > 1 else ""
        print(f"global batch {loaders.batch_size} = {world} {_processes(world)} x {data.loaders.process_batch_size}"
              f"{accumulated}", flush=True)


def batch_problem(batch_size: int, world: int, accumulate: int = 1) -> str | None:
    """Why a global batch of `batch_size` cannot be shared by `world` processes accumulating `accumulate` batches
    (each must load as many items a batch), naming the nearest values that work: the multiples of
    ``world x accumulate`` on either side of `batch_size`, and the most processes up to `world` that share
    `batch_size` itself (the paper's global batch kept); None where it divides."""
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
    """Why a run of `processes` processes accumulating `accumulate` batches cannot resume `checkpoint` (a training
    checkpoint's contents, whose ``global_batch`` entry `common.training.reranking.RerankingEvaluation` writes), or
    None where it can: the loader's position and every process's generators are those of the numbers it was
    written by (module docstring)."""
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
    """Epoch `epoch`'s order of `size` indices: the (epoch + 1)-th ``torch.randperm`` of a generator seeded with
    `seed`, one int64 drawn after each permutation (the loader's base seed; module docstring)."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epoch):
        torch.randperm(size, generator=generator)
        torch.empty((), dtype=torch.int64).random_(generator=generator)
    return torch.randperm(size, generator=generator).tolist()


def _epoch_at(size: int, seed: int, state: torch.Tensor, limit: int = 10_000) -> int:
    """The epoch whose permutation a generator in `state` draws next, replaying the stream of `epoch_order` (a state
    of torchdata's ``RandomSampler``, saved at an epoch's start)."""
    generator = torch.Generator().manual_seed(seed)
    for epoch in range(limit):
        if torch.equal(generator.get_state(), state):
            return epoch
        torch.randperm(size, generator=generator)
        torch.empty((), dtype=torch.int64).random_(generator=generator)
    raise ValueError(f"no epoch of seed {seed} in the first {limit} starts at the sampler state saved")


class GlobalBatchSampler(DistributedSampler):
    """Process `rank`'s share of each global batch of `global_batch` indices of `dataset`, in an order drawn from
    `seed` and the epoch for the whole dataset, as ``(epoch, index)`` keys (module docstring); `processes` must
    divide `global_batch`."""

    def __init__(self, dataset: Sized, global_batch: int, processes: int, rank: int, seed: int):
        super().__init__(dataset, num_replicas=processes, rank=rank, shuffle=True, seed=seed)
        self.global_batch = global_batch
        self.num_samples = len(self.share(list(range(len(dataset)))))
        self.total_size = self.num_samples * processes
        self.resumed_epoch = 0  # the epoch a loaded state leaves next (module docstring)

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
    """One epoch of a `GlobalBatchSampler`: this process's share of the epoch's order, as ``(epoch, index)`` keys;
    its state (the epoch, the indices yielded) resumes it (module docstring)."""

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
        epoch = state.get("epoch")
        if epoch is None:  # torchdata's RandomSampler: the generator's state at the epoch's start
            epoch = _epoch_at(len(self.sampler.dataset), self.sampler.seed, state["generator"])
        self._begin(epoch)
        self.yielded = state["yielded"]
        done = self.yielded == len(self.indices)
        self.sampler.resumed_epoch = max(self.sampler.resumed_epoch, epoch + done)
