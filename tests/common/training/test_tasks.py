"""`common.training.tasks`: a data module's tasks and evaluated queries (`TaskSplits`), its loaders (`SplitLoaders`) and the
training dataset over a sampler (`SamplerGroups`)."""

import lightning as L
import numpy as np
import pytest
import torch

from common.data.formats import write_qrels, write_run, write_topics
from common.training.tasks import SamplerGroups, SplitLoaders, TaskSplits

#: q00..q19 have a topic, qrels and candidates; q20 has no candidates, q21 no qrels, q22 no topic.
WITH_ALL = [f"q{i:02d}" for i in range(20)]


@pytest.fixture
def spec(tmp_path) -> dict:
    topics, qrels, run = tmp_path / "topics.tsv", tmp_path / "qrels.txt", tmp_path / "run.trec"
    write_topics(topics, {q: f"query {q}" for q in [*WITH_ALL, "q20", "q21"]})
    write_qrels(qrels, {q: {"d1": 1} for q in [*WITH_ALL, "q20"]})
    write_run(run, {q: {"d1": 2.0, "d2": 1.0} for q in [*WITH_ALL, "q21", "q22"]})
    return {"topics_path": str(topics), "qrels_path": str(qrels), "candidates_path": str(run)}


class Tasks(TaskSplits, SplitLoaders, L.LightningDataModule):
    """A data module of the shape every package's has; its datasets are given, not built."""

    def __init__(self, train=None, dev=None, test=None, dev_queries: int | None = None,
                 test_queries: int | None = None, batch_size: int = 2, eval_batch_size: int = 3,
                 num_workers: int = 0, seed: int = 0):
        super().__init__()
        self.save_hyperparameters()
        self.specs = {"train": train, "dev": dev, "test": test}
        self.datasets = {}

    def _dataset(self, split: str):
        return self.datasets[split]


def reference_sample(qids: list[str], size: int, seed: int) -> list[str]:
    """How QDS and the Conformer-Kernel drew their evaluation samples before `TaskSplits`."""
    return sorted(np.random.default_rng(seed).choice(sorted(qids), size=size, replace=False).tolist())


# --------------------------------------------------------------------------- TaskSplits


def test_splits_sources_qrels_and_candidates(spec):
    data = Tasks(train=None, dev=spec, test="builtin:test")
    assert [data.has_split(s) for s in ("train", "dev", "test")] == [False, True, True]
    source = data.source("dev")
    assert data.source("dev") is source  # opened once
    assert data.qrels("dev") == source.qrels() and set(data.qrels("dev")) == {*WITH_ALL, "q20"}
    assert data.candidates("dev")["q21"] == {"d1": 2.0, "d2": 1.0}
    with pytest.raises(ValueError, match=r"no train task configured \(data.train is null\)"):
        data.source("train")


def test_eval_queries_have_candidates_qrels_and_a_topic(spec):
    assert Tasks(dev=spec, test=spec).eval_queries("dev") == WITH_ALL
    assert Tasks(dev=spec, test=spec, dev_queries=20, test_queries=50).eval_queries("test") == WITH_ALL  # no cut


def test_eval_queries_are_cut_to_a_seeded_sample_as_before(spec):
    data = Tasks(dev=spec, test=spec, dev_queries=5, test_queries=3)
    assert data.eval_queries("dev") == ["q05", "q06", "q09", "q10", "q13"] == reference_sample(WITH_ALL, 5, 0)
    assert data.eval_queries("test") == ["q10", "q12", "q15"] == reference_sample(WITH_ALL, 3, 0)
    other = Tasks(dev=spec, dev_queries=5, seed=7)
    assert other.eval_queries("dev") == ["q10", "q11", "q12", "q15", "q17"] == reference_sample(WITH_ALL, 5, 7)


def test_a_data_module_without_sample_settings_evaluates_every_query(spec):
    class Bare(TaskSplits):
        hparams = {}  # no dev_queries, test_queries nor seed

        def __init__(self):
            self.specs = {"train": None, "dev": None, "test": spec}

    assert Bare().eval_queries("test") == WITH_ALL


def test_both_packages_data_modules_sample_the_same_queries(spec):
    from conformer_kernel.data import ConformerKernelData
    from qds.data import QDSDataModule

    for cls in (QDSDataModule, ConformerKernelData):
        data = cls(train=None, dev=spec, test=spec, dev_queries=5, test_queries=3, seed=7)
        assert isinstance(data, TaskSplits) and isinstance(data, SplitLoaders)
        assert data.eval_queries("dev") == reference_sample(WITH_ALL, 5, 7)
        assert data.eval_queries("test") == reference_sample(WITH_ALL, 3, 7)


# --------------------------------------------------------------------------- SamplerGroups and SplitLoaders


class Sampler:
    """Ten groups (their numbers); an epoch adds 100 times its number."""

    def __init__(self):
        self.epoch = 0

    def __len__(self) -> int:
        return 10

    def __getitem__(self, index: int) -> int:
        return 100 * self.epoch + index

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch


class Groups(SamplerGroups):
    def collate(self, groups: list[int]) -> dict:
        return {"groups": torch.tensor(groups)}


class Pairs(torch.utils.data.Dataset):
    pairs = [("q1", f"d{i}") for i in range(7)]

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> int:
        return index

    def collate(self, indices: list[int]) -> dict:
        return {"index": torch.tensor(indices)}


def test_sampler_groups_are_the_samplers_and_follow_its_epochs():
    groups = Groups(Sampler(), {"q1": "text"}, documents=None)
    assert len(groups) == 10 and groups[3] == 3 and groups.topics == {"q1": "text"}
    groups.set_epoch(2)
    assert groups[3] == 203
    with pytest.raises(NotImplementedError, match="define collate"):
        SamplerGroups(Sampler(), {}, None).collate([0])


def _epoch(loader) -> list[int]:
    return [g for batch in loader for g in batch["groups"].tolist()]


def test_the_training_loader_shuffles_with_the_seed():
    data = Tasks(train="unused", seed=3)
    data.datasets["train"] = Groups(Sampler(), {}, None)
    loader = data.train_dataloader()
    assert type(loader).__name__ == "StatefulDataLoader" and loader.batch_size == 2
    first = _epoch(loader)
    assert sorted(first) == list(range(10)) and first != list(range(10))
    assert _epoch(data.train_dataloader()) == first  # the same seed, the same order
    other = Tasks(train="unused", seed=4)
    other.datasets["train"] = Groups(Sampler(), {}, None)
    assert _epoch(other.train_dataloader()) != first


def test_evaluation_loaders_keep_the_order_and_no_dev_task_has_no_loader():
    data = Tasks(train="unused", test="unused")
    data.datasets["test"] = Pairs()
    batches = [batch["index"].tolist() for batch in data.test_dataloader()]
    assert batches == [[0, 1, 2], [3, 4, 5], [6]]  # eval_batch_size 3, in order
    assert data.test_pairs() == Pairs.pairs
    assert data.val_dataloader() == []
    with_dev = Tasks(dev="unused")
    with_dev.datasets["dev"] = Pairs()
    assert [batch["index"].tolist() for batch in with_dev.val_dataloader()][0] == [0, 1, 2]
