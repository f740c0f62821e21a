"""`common.training.tasks`: a data module's tasks and evaluated queries (`TaskConfig`), its loaders
(`LoaderConfig`), the data module over both (`RerankingDataModule`) and the training datasets over a sampler
(`SamplerGroups`, `EncodedGroups`)."""

import numpy as np
import pytest
import torch

from common.data.formats import Document, write_qrels, write_run, write_topics
from common.data.specs import TaskSpecError
from common.data.samplers import TrainingGroup
from common.data.training_table import TrainingTable
from common.training.tasks import (
    EncodedGroups, LoaderConfig, MissingDocumentsError, RerankingDataModule, SamplerGroups, TaskConfig,
)

#: q00..q19 have a topic, qrels and candidates; q20 has no candidates, q21 no qrels, q22 no topic.
WITH_ALL = [f"q{i:02d}" for i in range(20)]


@pytest.fixture
def spec(tmp_path) -> dict:
    topics, qrels, run = tmp_path / "topics.tsv", tmp_path / "qrels.txt", tmp_path / "run.trec"
    write_topics(topics, {q: f"query {q}" for q in [*WITH_ALL, "q20", "q21"]})
    write_qrels(qrels, {q: {"d1": 1} for q in [*WITH_ALL, "q20"]})
    write_run(run, {q: {"d1": 2.0, "d2": 1.0} for q in [*WITH_ALL, "q21", "q22"]})
    return {"topics_path": str(topics), "qrels_path": str(qrels), "candidates_path": str(run)}


class Data(RerankingDataModule):
    """A data module of the shape every package's has; its datasets are given, not built."""

    def __init__(self, train=None, dev=None, test=None, depth: int = 100, dev_queries: int | None = None,
                 test_queries: int | None = None, batch_size: int = 2, eval_batch_size: int = 3,
                 num_workers: int = 0, seed: int = 0):
        super().__init__(TaskConfig.of(locals()), LoaderConfig.of(locals()))
        self.save_hyperparameters()
        self.datasets = {}

    def dataset(self, split: str):
        return self.datasets[split]


def reference_sample(qids: list[str], size: int, seed: int) -> list[str]:
    """How QDS and the Conformer-Kernel drew their evaluation samples before the shared tasks."""
    return sorted(np.random.default_rng(seed).choice(sorted(qids), size=size, replace=False).tolist())


def test_splits_sources_qrels_and_candidates(spec):
    data = Data(train=None, dev=spec, test="builtin:test")
    assert [data.has_split(s) for s in ("train", "dev", "test")] == [False, True, True]
    source = data.source("dev")
    assert data.source("dev") is source  # opened once
    assert set(source.qrels()) == {*WITH_ALL, "q20"}
    assert source.candidates()["q21"] == {"d1": 2.0, "d2": 1.0}
    with pytest.raises(ValueError, match=r"no train task configured \(data.train is null\)"):
        data.source("train")


def test_eval_queries_have_candidates_qrels_and_a_topic(spec):
    assert Data(dev=spec, test=spec).eval_queries("dev") == WITH_ALL
    assert Data(dev=spec, test=spec, dev_queries=20, test_queries=50).eval_queries("test") == WITH_ALL  # no cut


def test_a_test_task_without_qrels_evaluates_every_query_with_candidates_and_a_topic(spec):
    """No judgments: q21 (no qrels) is re-ranked too; q20 (no candidates) and q22 (no topic) are still not."""
    unjudged = {key: path for key, path in spec.items() if key != "qrels_path"}
    data = Data(test=unjudged)
    assert data.source("test").qrels() == {}
    assert data.eval_queries("test") == [*WITH_ALL, "q21"]


def test_a_dev_task_without_qrels_is_refused_as_validation_measures_it(spec):
    unjudged = {key: path for key, path in spec.items() if key != "qrels_path"}
    with pytest.raises(TaskSpecError, match=r"^data.dev \(topics\): no qrels: validation measures the dev task"):
        Data(dev=unjudged).check_tasks()


def test_eval_queries_are_cut_to_a_seeded_sample_as_before(spec):
    data = Data(dev=spec, test=spec, dev_queries=5, test_queries=3)
    assert data.eval_queries("dev") == ["q05", "q06", "q09", "q10", "q13"] == reference_sample(WITH_ALL, 5, 0)
    assert data.eval_queries("test") == ["q10", "q12", "q15"] == reference_sample(WITH_ALL, 3, 0)
    other = Data(dev=spec, dev_queries=5, seed=7)
    assert other.eval_queries("dev") == ["q10", "q11", "q12", "q15", "q17"] == reference_sample(WITH_ALL, 5, 7)


def test_tasks_without_sample_settings_evaluate_every_query(spec):
    tasks = RerankingDataModule(TaskConfig(train=None, dev=None, test=spec, depth=1), LoaderConfig(1, 1))
    assert tasks.eval_queries("test") == WITH_ALL


def test_the_dev_depth_is_the_depth_unless_set(spec):
    tasks = RerankingDataModule(TaskConfig(train=None, dev=spec, test=spec, depth=1), LoaderConfig(1, 1))
    assert (tasks.eval_depth("dev"), tasks.eval_depth("test")) == (1, 1)
    tasks = RerankingDataModule(TaskConfig(train=None, dev=spec, test=spec, depth=1, dev_depth=2), LoaderConfig(1, 1))
    assert (tasks.eval_depth("dev"), tasks.eval_depth("test")) == (2, 1)


def test_configs_take_the_data_modules_arguments_of_their_names():
    arguments = {"self": None, "train": "t", "dev": None, "test": "s", "depth": 7, "pattern": "qds", "seed": 3,
                 "batch_size": 4, "eval_batch_size": 5}
    assert TaskConfig.of(arguments) == TaskConfig("t", None, "s", 7, seed=3)  # dev_depth & co at their defaults
    assert LoaderConfig.of(arguments) == LoaderConfig(batch_size=4, eval_batch_size=5, num_workers=0, seed=3)


def test_an_unknown_policy_is_named_when_the_tasks_are_configured():
    with pytest.raises(MissingDocumentsError, match="data.missing_documents: 'drop' is none of skip, error"):
        TaskConfig(None, None, "builtin:test", 100, missing_documents="drop")


def test_every_packages_data_module_samples_the_same_queries(spec):
    from conformer_kernel.data import ConformerKernelDataModule
    from earl.data import EARLDataModule
    from mva.data import MVADataModule
    from qds.data import QDSDataModule

    for cls in (QDSDataModule, ConformerKernelDataModule, EARLDataModule, MVADataModule):
        data = cls(train=None, dev=spec, test=spec, dev_queries=5, test_queries=3, seed=7)
        assert isinstance(data, RerankingDataModule)
        assert data.eval_queries("dev") == reference_sample(WITH_ALL, 5, 7)
        assert data.eval_queries("test") == reference_sample(WITH_ALL, 3, 7)


class Sampler:
    """Ten groups (their numbers); an epoch adds 100 times its number."""

    epoch = 0

    def __len__(self) -> int:
        return 10

    def __getitem__(self, index: int) -> int:
        return self.item(index, self.epoch)

    def item(self, index: int, epoch: int) -> int:
        return 100 * epoch + index


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


def test_sampler_groups_are_the_samplers_groups_of_the_epoch_of_each_key():
    groups = Groups(Sampler(), {"q1": "text"}, documents=None)
    assert len(groups) == 10 and groups[3] == 3 and groups.topics == {"q1": "text"}
    assert groups[2, 3] == 203 and groups[0, 3] == 3
    with pytest.raises(NotImplementedError, match="define collate"):
        SamplerGroups(Sampler(), {}, None).collate([0])


def _epoch(loader) -> list[int]:
    return [g for batch in loader for g in batch["groups"].tolist()]


def test_encoded_groups_are_flat_batches_of_pairs_positive_first():
    class Sampler2:
        groups = [TrainingGroup("q1", ("p1", "n1", "n2"), (1.0, 0.0, 0.0)), TrainingGroup("q2", ("p2", "n1", "n3"),
                                                                                        (1.0, 0.0, 0.0))]

        def __len__(self):
            return 2

        def __getitem__(self, index):
            return self.groups[index]

    class Documents:
        def get_many(self, doc_ids):
            return [Document(d, f"text of {d}") for d in doc_ids]

    def encode(queries, documents):
        return {"texts": [(q, d.text) for q, d in zip(queries, documents)]}

    groups = EncodedGroups(Sampler2(), {"q1": "one", "q2": "two"}, Documents(), encode)
    batch = groups.collate([groups[0], groups[1]])
    assert batch["texts"] == [("one", "text of p1"), ("one", "text of n1"), ("one", "text of n2"),
                              ("two", "text of p2"), ("two", "text of n1"), ("two", "text of n3")]
    assert batch["labels"].tolist() == [1.0, 0.0, 0.0, 1.0, 0.0, 0.0] and batch["labels"].dtype == torch.float
    assert batch["qids"] == ["q1"] * 3 + ["q2"] * 3 and batch["doc_ids"] == ["p1", "n1", "n2", "p2", "n1", "n3"]
    assert batch["group_size"] == 3


def test_the_training_loader_shuffles_with_the_seed():
    data = Data(train="unused", seed=3)
    data.datasets["train"] = Groups(Sampler(), {}, None)
    loader = data.train_dataloader()
    assert type(loader).__name__ == "StatefulDataLoader" and loader.batch_size == 2
    first = _epoch(loader)
    assert sorted(first) == list(range(10)) and first != list(range(10))
    assert _epoch(data.train_dataloader()) == first  # the same seed, the same order
    other = Data(train="unused", seed=4)
    other.datasets["train"] = Groups(Sampler(), {}, None)
    assert _epoch(other.train_dataloader()) != first


def test_evaluation_loaders_keep_the_order_and_no_dev_task_has_no_loader():
    data = Data(train="unused", test="unused")
    data.datasets["test"] = Pairs()
    batches = [batch["index"].tolist() for batch in data.test_dataloader()]
    assert batches == [[0, 1, 2], [3, 4, 5], [6]]  # eval_batch_size 3, in order
    assert data.test_pairs() == Pairs.pairs
    assert data.val_dataloader() == []
    with_dev = Data(dev="unused")
    with_dev.datasets["dev"] = Pairs()
    assert [batch["index"].tolist() for batch in with_dev.val_dataloader()][0] == [0, 1, 2]


def _stores(cache):
    """The collections whose document store is in `cache` (by the store's name: ``<collection stem>-<key>``)."""
    return sorted(p.name.rsplit("-", 1)[0] for p in (cache / "docstore").glob("*.sqlite"))


def test_prepare_data_builds_the_document_stores_of_the_stage_once(spec, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from lightning.pytorch.trainer.states import TrainerFn

    from common.data.formats import write_collection

    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "cache"))
    specs = {}
    for split in ("train", "test"):
        collection = tmp_path / f"{split}-docs.jsonl"
        write_collection(collection, [Document("d1", f"{split} one"), Document("d2", f"{split} two")])
        specs[split] = {**spec, "collection_path": str(collection)}

    testing = Data(train=specs["train"], test=specs["test"])
    testing.trainer = SimpleNamespace(state=SimpleNamespace(fn=TrainerFn.TESTING))
    testing.prepare_data()
    assert _stores(tmp_path / "cache") == ["test-docs"]  # test opens the test task alone
    assert not (tmp_path / "cache" / "training").exists()

    (store,) = (tmp_path / "cache" / "docstore").glob("test-docs-*.sqlite")
    built = store.stat().st_mtime_ns
    Data(train=specs["train"], test=specs["test"]).prepare_data()  # no trainer: fit's tasks
    assert _stores(tmp_path / "cache") == ["test-docs", "train-docs"]
    assert store.stat().st_mtime_ns == built  # opened, not rebuilt
    # and the training task's table of its qrels and run
    (table,) = [p for p in (tmp_path / "cache" / "training").iterdir() if p.is_dir()]
    assert table.name.startswith("run.trec-") and TrainingTable.is_saved(table)
