"""`common.training.tasks.LoaderConfig`'s loaders as a data module hands them to its trainer: pinned batches where the
trainer computes on a CUDA GPU (told from a trainer whose accelerator is Lightning's CUDA one: no GPU is needed to
build the loaders), and workers kept between epochs, the training loader's too (its epoch travels with its keys:
`tests/common/training/test_global_batch.py` draws every epoch's items through persistent workers)."""

from types import SimpleNamespace

import pytest
from lightning.pytorch.accelerators import CPUAccelerator, CUDAAccelerator
from torch.utils.data import Dataset

from tests.common.training.test_tasks import Data

ON_GPU = SimpleNamespace(accelerator=CUDAAccelerator())
ON_CPU = SimpleNamespace(accelerator=CPUAccelerator())


class Items(Dataset):
    """Eight numbers, collated as a list."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> int:
        return index

    @staticmethod
    def collate(items: list[int]) -> list[int]:
        return items


def data_module(trainer, num_workers: int) -> Data:
    data = Data(dev="builtin:dev", test="builtin:test", num_workers=num_workers)
    data.datasets = {"dev": Items(), "test": Items()}
    data.trainer = trainer
    return data


@pytest.mark.parametrize("trainer, pinned", [(ON_GPU, True), (ON_CPU, False), (None, False)])
def test_evaluation_loaders_pin_where_the_trainer_computes_on_cuda(trainer, pinned):
    data = data_module(trainer, num_workers=0)
    for loader in (data.val_dataloader(), data.test_dataloader()):
        assert loader.pin_memory is pinned
        assert loader.num_workers == 0 and loader.persistent_workers is False  # no workers to keep


@pytest.mark.parametrize("trainer", [ON_GPU, ON_CPU])
def test_evaluation_workers_are_kept_between_epochs(trainer):
    data = data_module(trainer, num_workers=2)
    for loader in (data.val_dataloader(), data.test_dataloader()):
        assert loader.num_workers == 2 and loader.persistent_workers is True
        assert loader.pin_memory is (trainer is ON_GPU)


def test_a_training_loader_pins_on_cuda_and_keeps_its_workers_between_epochs():
    config = Data(num_workers=2).loaders
    for trainer, pinned in ((ON_GPU, True), (ON_CPU, False), (None, False)):
        loader = config.train(Items(), 0, trainer)
        assert loader.pin_memory is pinned and loader.persistent_workers is True
        assert loader.batch_size == 2 and loader.num_workers == 2
    assert Data(num_workers=0).loaders.train(Items(), 0, ON_CPU).persistent_workers is False


def test_a_persistent_evaluation_loader_gives_the_same_batches_every_epoch():
    loader = data_module(ON_CPU, num_workers=2).val_dataloader()
    assert [list(loader), list(loader)] == [[[0, 1, 2], [3, 4, 5], [6, 7]]] * 2
