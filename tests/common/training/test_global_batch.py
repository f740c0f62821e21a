"""`common.training.global_batch`: the global batch split among processes (`split_global_batch`) and the training
sampler that hands each process its slice of every global batch (`GlobalBatchSampler`), on one process the order
torchdata's seeded ``RandomSampler`` gave the training loader."""

import lightning as L
import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from common.training.global_batch import GlobalBatchSampler, epoch_order, split_global_batch
from common.training.tasks import LoaderConfig, RerankingDataModule, TaskConfig


class Items(torch.utils.data.Dataset):
    """Items 0..n-1, each its own index (of an ``(epoch, index)`` key too); a batch is the list of them."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key: int | tuple[int, int]) -> int:
        return key[1] if isinstance(key, tuple) else key

    @staticmethod
    def collate(items: list[int]) -> list[int]:
        return items


def loader(n: int, batch_size: int, processes: int = 1, rank: int = 0, accumulate: int = 1, seed: int = 3):
    config = LoaderConfig(batch_size=batch_size, eval_batch_size=1, seed=seed, processes=processes,
                          accumulate=accumulate)
    return config.train(Items(n), rank)


def seeded_random_loader(n: int, batch_size: int, seed: int = 3) -> StatefulDataLoader:
    """The training loader before the global batch: shuffled by torchdata's sampler over a seeded generator."""
    return StatefulDataLoader(Items(n), batch_size=batch_size, collate_fn=Items.collate, shuffle=True,
                              generator=torch.Generator().manual_seed(seed))


def epochs(batches_of, count: int, first: int = 0) -> list[list[list[int]]]:
    """`count` epochs of loader `batches_of`, each epoch named to its sampler first, as Lightning names it."""
    return [list(_epoch(batches_of, epoch)) for epoch in range(first, first + count)]


def _epoch(loader, epoch: int):
    if hasattr(loader.sampler, "set_epoch"):
        loader.sampler.set_epoch(epoch)
    return loader


@pytest.mark.parametrize("n, batch", [(10, 2), (10, 4), (7, 3), (1, 2), (33, 8)])
def test_one_process_loads_the_order_of_the_seeded_random_sampler_epoch_after_epoch(n, batch):
    assert epochs(loader(n, batch), 3) == epochs(seeded_random_loader(n, batch), 3)
    assert epochs(loader(n, batch), 1) != epochs(loader(n, batch, seed=4), 1) or n == 1


@pytest.mark.parametrize("processes, accumulate", [(2, 1), (4, 1), (2, 2), (1, 4)])
def test_each_process_loads_its_contiguous_slice_of_every_global_batch(processes, accumulate):
    n, batch = 48, 8
    whole = [i for b in seeded_random_loader(n, batch) for i in b]
    mine = [list(loader(n, batch, processes, rank, accumulate)) for rank in range(processes)]
    size = batch // processes
    assert all(len(m) == n // batch * accumulate for m in mine)  # as many batches in every process
    for step in range(n // batch):
        for rank in range(processes):
            slice_ = [i for b in mine[rank][step * accumulate:(step + 1) * accumulate] for i in b]
            assert slice_ == whole[step * batch + rank * size:step * batch + (rank + 1) * size]


class EpochItems(Items):
    """Item ``(e, i)`` is 100 e + i, as a training dataset draws new groups each epoch."""

    def __getitem__(self, key: tuple[int, int]) -> int:
        epoch, index = key
        return 100 * epoch + index


def test_every_epochs_global_batches_and_items_are_one_processs():
    def run(processes: int) -> list[list[int]]:
        """Each global batch of 3 epochs, the processes' slices in rank order."""
        config = LoaderConfig(batch_size=6, eval_batch_size=1, seed=5, processes=processes)
        loaders = [config.train(EpochItems(30), rank) for rank in range(processes)]
        steps = []
        for epoch in range(3):
            steps += [[i for batch in batches for i in batch] for batches in zip(*(_epoch(x, epoch) for x in loaders))]
        return steps

    one = run(1)
    assert len(one) == 15 and sorted(i for step in one[10:] for i in step) == list(range(200, 230))
    assert run(2) == one and run(3) == one


def test_a_last_global_batch_that_does_not_divide_is_evened_up_with_the_epochs_first_indices():
    whole = [i for b in seeded_random_loader(11, 4) for i in b]  # global batches of 4, 4 and 3
    mine = [list(loader(11, 4, 2, rank)) for rank in (0, 1)]  # 2 items each per batch
    assert mine[0] == [whole[0:2], whole[4:6], whole[8:10]]
    assert mine[1] == [whole[2:4], whole[6:8], [whole[10], whole[0]]]  # one index repeated, as DistributedSampler
    assert [len(GlobalBatchSampler(Items(11), 4, 2, rank, seed=3)) for rank in (0, 1)] == [6, 6]
    divides = [list(loader(10, 4, 2, rank)) for rank in (0, 1)]  # the last global batch, 2 items, divides: exact
    ten = [i for b in seeded_random_loader(10, 4) for i in b]
    assert divides[0][-1] == [ten[8]] and divides[1][-1] == [ten[9]]


def test_the_sampler_is_a_distributed_sampler_lightning_leaves_in_place():
    sampler = loader(10, 4, 2, 1).sampler
    assert isinstance(sampler, torch.utils.data.DistributedSampler)
    assert (sampler.num_replicas, sampler.rank, len(sampler)) == (2, 1, 5)


@pytest.mark.parametrize("processes, rank", [(1, 0), (2, 1)])
def test_a_loader_resumed_mid_epoch_loads_the_rest_as_the_uninterrupted_one(processes, rank):
    uninterrupted = epochs(loader(24, 4, processes, rank), 3)
    interrupted = loader(24, 4, processes, rank)
    list(interrupted)  # epoch 0
    seen = []
    for batch in _epoch(interrupted, 1):
        seen.append(batch)
        if len(seen) == 2:
            break
    state = interrupted.state_dict()
    resumed = loader(24, 4, processes, rank)
    resumed.load_state_dict(state)
    assert [*seen, *resumed] == uninterrupted[1]
    assert list(_epoch(resumed, 2)) == uninterrupted[2]  # and the next epoch


@pytest.mark.parametrize("epoch", [1, 2])
def test_a_new_loader_resumed_mid_epoch_draws_that_epochs_items_and_the_next_ones(epoch):
    """The state taken in the middle of epoch 1 (or 2) and loaded into a loader that has begun no epoch (a new
    process) gives that epoch's items, which depend on the epoch, then the next epoch's."""
    config = LoaderConfig(batch_size=4, eval_batch_size=1, seed=7)
    uninterrupted = epochs(config.train(EpochItems(24)), 4)
    interrupted = config.train(EpochItems(24))
    epochs(interrupted, epoch)
    iterator = iter(_epoch(interrupted, epoch))
    seen = [next(iterator), next(iterator), next(iterator)]
    resumed = config.train(EpochItems(24))  # its sampler named no epoch: a new process restores the loader first
    resumed.load_state_dict(interrupted.state_dict())
    assert [*seen, *resumed] == uninterrupted[epoch]
    assert min(i for batch in uninterrupted[epoch] for i in batch) == 100 * epoch
    assert list(_epoch(resumed, epoch + 1)) == uninterrupted[epoch + 1]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_saved_after_an_epochs_last_batch_resumes_at_the_next_epoch(workers):
    """A new loader restored from the state after epoch 1's last batch begins epoch 2, even where its workers start
    that epoch's iterator before Lightning names the epoch."""
    config = LoaderConfig(batch_size=4, eval_batch_size=1, seed=7, num_workers=workers)
    uninterrupted = epochs(config.train(EpochItems(8)), 3)
    interrupted = config.train(EpochItems(8))
    epochs(interrupted, 1)
    iterator = iter(_epoch(interrupted, 1))
    next(iterator), next(iterator)  # every batch of epoch 1, not yet the end of its iterator
    resumed = config.train(EpochItems(8))
    resumed.load_state_dict(interrupted.state_dict())
    assert list(resumed) == [] and list(resumed) == uninterrupted[2]


def test_lightnings_set_epoch_names_the_epoch_a_new_iterator_begins():
    config = LoaderConfig(batch_size=4, eval_batch_size=1, seed=7)
    uninterrupted = epochs(config.train(EpochItems(8)), 3)
    loader = config.train(EpochItems(8))
    loader.sampler.set_epoch(2)  # as Lightning does before each epoch's iterator
    assert list(loader) == uninterrupted[2]


@pytest.mark.parametrize("persistent", [False, True])
def test_workers_draw_the_loops_epoch_persistent_or_not(persistent):
    """Loader workers hold copies of the dataset; a persistent worker keeps the copy it started with. The epoch
    travels with the keys, so they draw every epoch's items as the main process does."""
    config = LoaderConfig(batch_size=4, eval_batch_size=1, seed=7)
    in_process = epochs(config.train(EpochItems(12)), 3)
    workers = StatefulDataLoader(EpochItems(12), batch_size=4, collate_fn=Items.collate, num_workers=2,
                                 persistent_workers=persistent,
                                 sampler=config.train(EpochItems(12)).sampler)
    assert epochs(workers, 3) == in_process
    assert in_process[2][0][0] >= 200


def test_an_epochs_order_is_the_seeded_random_samplers_stream():
    """`epoch_order` replays torchdata's seeded RandomSampler as a StatefulDataLoader draws from its generator (the
    permutation, then a base seed, each epoch)."""
    orders = [[i for b in batches for i in b] for batches in epochs(seeded_random_loader(13, 13), 4)]
    assert [epoch_order(13, 3, epoch) for epoch in range(4)] == orders


# --------------------------------------------------------------------------- split_global_batch


class Data(RerankingDataModule):
    def __init__(self, batch_size: int):
        super().__init__(TaskConfig(train="unused", dev=None, test=None, depth=10),
                         LoaderConfig(batch_size=batch_size, eval_batch_size=1))
        self.datasets = {"train": Items(40)}

    def dataset(self, split: str):
        return self.datasets[split]


def trainer(devices: int, accumulate: int = 1) -> L.Trainer:
    """A trainer of `devices` CPU processes (not launched: this process is global rank zero)."""
    return L.Trainer(accelerator="cpu", devices=devices, strategy="ddp" if devices > 1 else "auto",
                     accumulate_grad_batches=accumulate, logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False)


@pytest.mark.parametrize("devices, accumulate, printed, per_process", [
    (2, 1, "global batch 8 = 2 processes x 4", 4),
    (2, 2, "global batch 8 = 2 processes x 2 x 2 accumulated", 2),
    (1, 1, "global batch 8 = 1 process x 8", 8),
])
def test_the_global_batch_is_divided_and_the_split_printed_once(devices, accumulate, printed, per_process, capsys):
    data, run = Data(8), trainer(devices, accumulate)
    split_global_batch(data, run)
    assert capsys.readouterr().out == printed + "\n"
    loaders = data.loaders
    assert (loaders.batch_size, loaders.processes, loaders.accumulate) == (8, devices, accumulate)
    data.trainer = run
    train = data.train_dataloader()
    assert train.batch_size == per_process and train.sampler.num_replicas == devices


def test_a_global_batch_the_processes_do_not_divide_is_refused_in_one_line(capsys):
    data = Data(6)
    with pytest.raises(SystemExit) as exit:
        split_global_batch(data, trainer(2, 2))
    assert exit.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err == ("error: --data.batch_size 6 is the global batch of an optimizer step: it must divide "
                                 "among 2 processes x 2 accumulated batches; give --data.batch_size 4 or 8, or keep 6 on "
                                 "1 process (--trainer.devices x --trainer.num_nodes)\n")
    assert data.loaders.processes == 1


@pytest.mark.parametrize("batch, world, accumulate, nearest", [
    (128, 24, 1, "give --data.batch_size 120 or 144, or keep 128 on 16 processes"),  # EARL's batch on 24 GPUs
    (256, 24, 1, "give --data.batch_size 240 or 264, or keep 256 on 16 processes"),  # MVA's
    (32, 24, 1, "give --data.batch_size 24 or 48, or keep 32 on 16 processes"),  # the Conformer-Kernel's
    (1, 8, 1, "give --data.batch_size 8, or keep 1 on 1 process"),  # QDS-Transformer's one group a step
    (12, 8, 1, "give --data.batch_size 8 or 16, or keep 12 on 6 processes"),
    (12, 4, 2, "give --data.batch_size 8 or 16, or keep 12 on 3 processes"),  # 3 x 2 accumulated
    (9, 2, 2, "give --data.batch_size 8 or 12"),  # no number of processes accumulating 2 shares 9
])
def test_a_refusal_names_the_nearest_batches_and_the_most_processes_that_keep_the_batch(batch, world, accumulate,
                                                                                       nearest):
    from common.training.global_batch import batch_problem

    problem = batch_problem(batch, world, accumulate)
    assert problem.endswith(nearest) or problem.endswith(nearest + " (--trainer.devices x --trainer.num_nodes)")
    for size in (int(n) for n in nearest.split("batch_size ")[1].split(",")[0].split(" or ")):
        assert batch_problem(size, world, accumulate) is None  # the named sizes divide
    if "keep" in nearest:
        processes = int(nearest.rsplit(" on ", 1)[1].split()[0])
        assert batch_problem(batch, processes, accumulate) is None
        assert all(batch_problem(batch, p, accumulate) for p in range(processes + 1, world + 1))
    assert batch_problem(batch, 1, 1) is None or batch % accumulate


def test_a_loader_of_a_trainer_whose_batch_was_not_split_is_an_error():
    data = Data(8)
    data.trainer = trainer(2)
    with pytest.raises(RuntimeError, match="split_global_batch"):
        data.train_dataloader()


def test_a_checkpoint_resumes_on_the_numbers_of_processes_and_accumulated_batches_it_was_written_by():
    from common.training.global_batch import resumable_here

    written = {"global_batch": {"processes": 2, "accumulate": 4}}
    assert resumable_here(written, 2, 4) is None
    assert "written by 2 processes accumulating 4, this run has 8 accumulating 4" in resumable_here(written, 8, 4)
    assert "this run has 2 accumulating 1" in resumable_here(written, 2, 1)
    older = {"rng_states_by_rank": [{}, {}]}  # a checkpoint of before the entry: its processes, by their states
    assert resumable_here(older, 2, 3) is None and resumable_here({}, 1, 1) is None
    assert "written by 1 process" in resumable_here({}, 2, 1)
