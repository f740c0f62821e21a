"""A re-ranker's data: its tasks (`TaskConfig`), loaders (`LoaderConfig`), the LightningDataModule every package's
data module subclasses (`RerankingDataModule`) and the training datasets over a sampler (`SamplerGroups`,
`EncodedGroups`). Evaluated queries: those with candidates, qrels (where judged) and a topic, a seeded sample
(``default_rng(seed).choice``) where asked. Documents without text (tasks of files): ``missing_documents="skip"``
leaves them out of training and re-ranking with a warning (qrels never cut), ``"error"`` raises (docs/training_tasks.md)
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch.utils.data import Dataset

from common.data.formats import Qrels, Run, Topics
from common.data.query_split import SplitError
from common.data.rerank import Encode, RerankPairs, rerank_pairs
from common.data.samplers import training_table
from common.data.source import RankingSource
from common.data.specs import SourceSpec, TaskSpecError, source_from_spec
from common.data.training_table import TrainingTable
from common.training.global_batch import GlobalBatchSampler

MISSING_DOCUMENTS = ("skip", "error")
#: Ids named in a missing-documents message.
NAMED = 5
SPLITS = ("train", "dev", "test")


class MissingDocumentsError(ValueError):
    """Documents a task needs that its collection lacks, under ``missing_documents="error"``."""


class _Options:
    @classmethod
    def of(cls, arguments: Mapping):
        """The config of a data module's arguments (``locals()`` in its ``__init__``), fields without one defaulted."""
        return cls(**{field.name: arguments[field.name] for field in fields(cls) if field.name in arguments})


@dataclass(frozen=True)
class TaskConfig(_Options):
    """A data module's three tasks (`common.data.specs.SourceSpec`; None: no such split) and how they are evaluated,
    each field the ``--data.*`` option of its name; ``dev_depth`` None: ``depth``; ``dev_queries``, ``test_queries``:
    a seeded sample of this many (None: all)."""

    train: SourceSpec | None
    dev: SourceSpec | None
    test: SourceSpec | None
    depth: int
    dev_depth: int | None = None
    dev_queries: int | None = None
    test_queries: int | None = None
    relevance_level: int = 1
    missing_documents: str = "skip"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.missing_documents not in MISSING_DOCUMENTS:
            raise MissingDocumentsError(f"data.missing_documents: {self.missing_documents!r} is none of "
                                        f"{', '.join(MISSING_DOCUMENTS)}")


class _Ids(Sequence[str]):

    def __init__(self, table: TrainingTable, codes: np.ndarray):
        self._table, self._codes = table, codes

    def __len__(self) -> int:
        return len(self._codes)

    def __getitem__(self, i):
        return self._table.doc_ids(self._codes[i : i + 1])[0] if isinstance(i, int) else self._table.doc_ids(
            self._codes[i])

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self._codes), 1 << 16):
            yield from self._table.doc_ids(self._codes[start : start + (1 << 16)])


class _PresentDocuments:
    """A training task without some documents: its qrels, candidates and table cut to those with text."""

    def __init__(self, source: RankingSource, missing: set[str]):
        self._source, self._missing = source, missing
        self.name = source.name

    def __getattr__(self, name: str):  # topics, documents, the source's files (topics_path, ...)
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._source, name)

    def training_table(self) -> TrainingTable:
        table = training_table(self._source)
        missing = np.sort(table.codes(self._missing))
        if table.folder is None:
            return table.without(missing)
        key = hashlib.sha256(missing.astype("<i8").tobytes()).hexdigest()[:16]
        return TrainingTable.saved(table.folder.with_name(f"{table.folder.name}-present-{key}"),
                                   lambda: table.without(missing), {**table.meta.get("source", {}),
                                                                    "without_documents": len(missing)})

    def qrels(self) -> Qrels:
        return {qid: {d: label for d, label in labels.items() if d not in self._missing}
                for qid, labels in self._source.qrels().items()}

    def candidates(self) -> Run:
        return {qid: {d: score for d, score in scores.items() if d not in self._missing}
                for qid, scores in self._source.candidates().items()}


def _checked(source: RankingSource) -> bool:
    """Whether `source`'s documents are checked: not where its collection is complete (ir_datasets)."""
    return not getattr(source, "complete_collection", False)


@dataclass(frozen=True)
class LoaderConfig(_Options):
    """How a data module's datasets are loaded (``--data.*`` options): ``batch_size`` is the global batch, which
    ``processes`` and ``accumulate`` share (`common.training.global_batch.split_global_batch` sets them)."""

    batch_size: int
    eval_batch_size: int
    num_workers: int = 0
    seed: int = 0
    processes: int = 1
    accumulate: int = 1

    @property
    def process_batch_size(self) -> int:
        return self.batch_size // (self.processes * self.accumulate)

    @staticmethod
    def pin_memory(trainer: L.Trainer | None) -> bool:
        """Whether a loader feeding `trainer` (None: none yet) pins its batches: where its accelerator is CUDA."""
        from lightning.pytorch.accelerators import CUDAAccelerator

        return trainer is not None and isinstance(trainer.accelerator, CUDAAccelerator)

    def train(self, dataset: Dataset, rank: int = 0, trainer: L.Trainer | None = None):
        """Process `rank`'s training loader: its share of each global batch, in an order drawn from `seed`."""
        sampler = GlobalBatchSampler(dataset, self.batch_size, self.processes, rank, self.seed)
        # the workers' base seed from a generator of its own (the global one is dropout's)
        return self._loader(dataset, self.process_batch_size, trainer, sampler=sampler,
                            generator=torch.Generator().manual_seed(self.seed), persistent_workers=self.num_workers > 0)

    def evaluation(self, dataset: Dataset, trainer: L.Trainer | None = None):
        """`dataset`'s evaluation loader for `trainer`, in order."""
        return self._loader(dataset, self.eval_batch_size, trainer, persistent_workers=self.num_workers > 0)

    def _loader(self, dataset, batch_size: int, trainer: L.Trainer | None, **options):
        from torchdata.stateful_dataloader import StatefulDataLoader

        return StatefulDataLoader(dataset, batch_size=batch_size, collate_fn=dataset.collate,
                                  num_workers=self.num_workers, pin_memory=self.pin_memory(trainer), **options)


class RerankingDataModule(L.LightningDataModule):
    """A re-ranker's LightningDataModule: its tasks (`tasks`), each opened once, their evaluated queries and pairs,
    datasets and loaders; a subclass defines `training_dataset` and `pair_encoder`."""

    #: The splits whose datasets `setup` builds per stage (fit: the test's too, checked before training).
    stage_splits = {"fit": ("train", "dev", "test"), "validate": ("dev",), "test": ("test",)}
    #: Other arguments that may name an ir_datasets task, with what is read of each (`common.data.irds_files`'
    #: `TASK_PARTS`), checked with the splits' before anything is built (`common.commands.cli.RankerCLI`).
    other_tasks: dict[str, tuple[str, ...]] = {}

    @classmethod
    def split_parts(cls, data) -> dict[str, tuple[str, ...]]:
        """The parts of its ir_datasets task a split reads where it reads fewer than all of
        `common.data.irds_files.TASK_PARTS`, by split, under the data options `data` (a mapping); checked as
        `other_tasks`."""
        return {}

    def __init__(self, tasks: TaskConfig, loaders: LoaderConfig):
        super().__init__()
        self.tasks, self.loaders = tasks, loaders
        self._sources: dict[str, RankingSource] = {}
        self._eval_pairs: dict[str, list[tuple[str, str]]] = {}
        self._datasets: dict[str, Dataset] = {}

    def training_dataset(self, source: RankingSource) -> Dataset:
        raise NotImplementedError(f"{type(self).__name__} defines no training dataset")

    def pair_encoder(self) -> Encode:
        """How evaluation pairs are encoded: ``encode(query texts, documents) -> batch`` (`RerankPairs`)."""
        raise NotImplementedError(f"{type(self).__name__} defines no pair encoder")

    @property
    def specs(self) -> dict[str, SourceSpec | None]:
        return {"train": self.tasks.train, "dev": self.tasks.dev, "test": self.tasks.test}

    def has_split(self, split: str) -> bool:
        return self.specs[split] is not None

    def source(self, split: str) -> RankingSource:
        """The task of `split`, opened once (training: without the documents its collection lacks)."""
        if split not in self._sources:
            if not self.has_split(split):
                raise ValueError(f"no {split} task configured (data.{split} is null)")
            source = source_from_spec(self.specs[split])
            missing = self._missing_training_documents(split, source)
            self._sources[split] = _PresentDocuments(source, missing) if missing else source
        return self._sources[split]

    def check_tasks(self) -> None:
        """Open every configured split's task, counting its documents without text; a dev task without judgments is
        a `TaskSpecError`, a split of too few judged queries a `SplitError` naming the split."""
        for split in SPLITS:
            if self.has_split(split):
                try:
                    source = self.source(split)
                    if split == "dev" and not source.qrels():
                        raise TaskSpecError(f"data.dev ({source.name}): no qrels: validation measures the dev task "
                                            "against its judgments; give its qrels_path")
                    if split != "train":
                        self.eval_pairs(split)
                except SplitError as error:
                    raise SplitError(f"data.{split}.heldout_one_in: {error}") from None

    def eval_depth(self, split: str) -> int:
        return (self.tasks.dev_depth if split == "dev" else None) or self.tasks.depth

    def eval_queries(self, split: str) -> list[str]:
        """The evaluated queries of `split`, sorted, cut to a seeded sample."""
        source = self.source(split)
        qids = set(source.candidates()) & set(source.topics())
        qids = sorted(qids & set(source.qrels()) if source.qrels() else qids)
        limit = self.tasks.dev_queries if split == "dev" else self.tasks.test_queries
        if limit is not None and limit < len(qids):
            rng = np.random.default_rng(self.tasks.seed)
            qids = sorted(rng.choice(qids, size=limit, replace=False).tolist())
        return qids

    def eval_pairs(self, split: str) -> list[tuple[str, str]]:
        """The (qid, docid) pairs re-ranked for `split`: each evaluated query's top candidates with text."""
        if split not in self._eval_pairs:
            source = self.source(split)
            pairs = rerank_pairs(source.candidates(), self.eval_depth(split), self.eval_queries(split))
            candidates = {"candidates": {doc_id for _, doc_id in pairs}}
            missing = self._check_present(split, source, candidates) if _checked(source) else set()
            self._eval_pairs[split] = [pair for pair in pairs if pair[1] not in missing]
        return self._eval_pairs[split]

    def _missing_training_documents(self, split: str, source: RankingSource) -> set[str]:
        """Training: the relevant judged documents and candidates without text, from the task's table's columns."""
        if split != "train" or not _checked(source):
            return set()
        level = self.tasks.relevance_level
        table = training_table(source)
        topics = np.array([qid.encode("utf-8") for qid in source.topics()], dtype=np.bytes_)
        queries = np.isin(table.queries, topics)  # (Q,) bool: the queries trained on
        return self._check_present(split, source, {
            f"relevant judged documents (label >= {level})": _Ids(table, table.relevant_documents(queries, level)),
            "candidates": _Ids(table, table.candidate_documents(queries))})

    def _check_present(self, split: str, source: RankingSource, needed: dict[str, Collection[str]]) -> set[str]:
        """The ids of `needed` (what -> ids) that `source` has no text for; warns or raises per the policy."""
        documents = source.documents()
        missing = {what: sorted(d for d in ids if d not in documents) for what, ids in needed.items()}
        if not any(missing.values()):
            return set()
        counts = "; ".join(f"{len(ids):,} of {len(needed[what]):,} {what}" for what, ids in missing.items() if ids)
        examples = ", ".join([d for ids in missing.values() for d in ids][:NAMED])
        message = f"data.{split} ({source.name}): {counts} have no text in its collection (e.g. {examples})"
        if self.tasks.missing_documents == "error":
            raise MissingDocumentsError(f"{message}; data.missing_documents=skip leaves them out")
        left_out = "training" if split == "train" else "re-ranking (kept below, in first-stage order)"
        rank_zero_warn(f"{message}: left out of {left_out}; data.missing_documents=error stops instead")
        return {d for ids in missing.values() for d in ids}

    def dataset(self, split: str) -> Dataset:
        """The dataset of `split`, built on first use."""
        if split not in self._datasets:
            source = self.source(split)
            self._datasets[split] = self.training_dataset(source) if split == "train" else RerankPairs(
                self.eval_pairs(split), source.topics(), source.documents(), self.pair_encoder())
        return self._datasets[split]

    def prepare_data(self) -> None:
        """Build the document stores of the tasks `setup` opens and what training reads (`prepare_training`), each
        once."""
        stage = self.trainer.state.fn.value if self.trainer is not None else "fit"
        for split in self.stage_splits.get(stage, ()):
            if self.has_split(split):
                source = source_from_spec(self.specs[split])
                source.documents().prepare()
                if split == "train":
                    self.prepare_training(source)

    def prepare_training(self, source: RankingSource) -> None:
        """Build what the training groups of `source` are drawn from, where it is cached: its training table."""
        table = getattr(source, "training_table", None)  # a cached one (common.data.training_table)
        if callable(table) and {"qrels", "candidates"} <= source.provides():
            table()  # a task without them is refused when its sampler asks

    def setup(self, stage: str) -> None:
        for split in self.stage_splits.get(stage, ()):
            if self.has_split(split):
                self.dataset(split)

    def train_dataloader(self):
        trainer = self.trainer
        if trainer is None:
            return self.loaders.train(self.dataset("train"))
        if (trainer.world_size, trainer.accumulate_grad_batches) != (self.loaders.processes, self.loaders.accumulate):
            raise RuntimeError("the global batch is not split among the trainer's processes: call "
                               "common.training.global_batch.split_global_batch(data, trainer) before fitting")
        return self.loaders.train(self.dataset("train"), trainer.global_rank, trainer)

    def val_dataloader(self):
        return self.loaders.evaluation(self.dataset("dev"), self.trainer) if self.has_split("dev") else []

    def test_dataloader(self):
        return self.loaders.evaluation(self.dataset("test"), self.trainer)

    def test_pairs(self) -> list[tuple[str, str]]:
        """The test (qid, docid) pairs in the order the test loader visits them (``index`` refers to it)."""
        return self.dataset("test").pairs


class SamplerGroups(Dataset):
    """A training sampler's groups as a dataset: item ``(epoch, i)`` (the training loader's keys) is the sampler's
    group i of that epoch, item i its group i of its own epoch. Subclasses add ``collate(groups) -> dict``."""

    def __init__(self, sampler, topics: Topics, documents):
        self.sampler, self.topics, self.documents = sampler, topics, documents

    def __len__(self) -> int:
        return len(self.sampler)

    def __getitem__(self, key: int | tuple[int, int]):
        if isinstance(key, tuple):
            epoch, index = key
            return self.sampler.item(index, epoch)
        return self.sampler[key]

    def collate(self, groups: list) -> dict:
        raise NotImplementedError(f"{type(self).__name__} encodes no batch: define collate(groups)")


class EncodedGroups(SamplerGroups):
    """A `common.data.samplers.PointwiseSampler`'s groups (positive first) as flat batches of (query, document) pairs:
    ``encode(query texts, documents)`` with ``labels`` (B,), ``qids``, ``doc_ids`` and ``group_size`` added."""

    def __init__(self, sampler, topics: Topics, documents, encode: Encode):
        super().__init__(sampler, topics, documents)
        self.encode = encode

    def collate(self, groups) -> dict:
        qids = [g.qid for g in groups for _ in g.doc_ids]
        doc_ids = [d for g in groups for d in g.doc_ids]
        batch = self.encode([self.topics[q] for q in qids], self.documents.get_many(doc_ids))
        batch["labels"] = torch.tensor([label for g in groups for label in g.labels], dtype=torch.float)
        return batch | {"qids": qids, "doc_ids": doc_ids, "group_size": len(groups[0].doc_ids)}
