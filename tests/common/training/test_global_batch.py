"""`common.training.global_batch`: the global batch split among processes (`split_global_batch`) and the training
sampler that hands each process its slice of every global batch (`GlobalBatchSampler`), on one process the order
torchdata's seeded ``RandomSampler`` gave the training loader."""

import lightning as L
import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from common.training.global_batch import GlobalBatchSampler, split_global_batch
from common.training.tasks import LoaderConfig, RerankingDataModule, TaskConfig


class Items(torch.utils.data.Dataset):
    """Items 0..n-1, each its own index; a batch is the list of them."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index

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


def epochs(batches_of, count: int) -> list[list[list[int]]]:
    return [list(batches_of) for _ in range(count)]


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
    """Item i of epoch e is 100 e + i, as a training dataset draws new groups each epoch (`set_epoch`)."""

    epoch = 0

    def __getitem__(self, index: int) -> int:
        return 100 * self.epoch + index

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch


def test_every_epochs_global_batches_and_items_are_one_processs():
    def run(processes: int) -> list[list[int]]:
        """Each global batch of 3 epochs, the processes' slices in rank order."""
        config = LoaderConfig(batch_size=6, eval_batch_size=1, seed=5, processes=processes)
        datasets = [EpochItems(30) for _ in range(processes)]
        loaders = [config.train(dataset, rank) for rank, dataset in enumerate(datasets)]
        steps = []
        for epoch in range(3):
            for dataset in datasets:
                dataset.set_epoch(epoch)
            steps += [[i for batch in batches for i in batch] for batches in zip(*loaders)]
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
    list(interrupted)  # epoch 1
    seen = []
    for batch in interrupted:
        seen.append(batch)
        if len(seen) == 2:
            break
    state = interrupted.state_dict()
    resumed = loader(24, 4, processes, rank)
    resumed.load_state_dict(state)
    assert [*seen, *resumed] == uninterrupted[1]
    assert list(resumed) == uninterrupted[2]  # and the next epoch


def test_a_state_of_the_seeded_random_sampler_resumes_on_one_process():
    uninterrupted = epochs(seeded_random_loader(24, 4), 2)
    before = seeded_random_loader(24, 4)
    list(before)
    iterator = iter(before)
    seen = [next(iterator), next(iterator)]
    resumed = loader(24, 4)
    resumed.load_state_dict(before.state_dict())
    assert [*seen, *resumed] == uninterrupted[1]


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
])  # fmt: skip
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
                                 "among 2 processes x 2 accumulated batches; give a multiple of 4\n")
    assert data.loaders.processes == 1


def test_a_loader_of_a_trainer_whose_batch_was_not_split_is_an_error():
    data = Data(8)
    data.trainer = trainer(2)
    with pytest.raises(RuntimeError, match="split_global_batch"):
        data.train_dataloader()
