"""A re-ranker's data: its three tasks (`TaskConfig` -> `Tasks`), their loaders (`LoaderConfig`), the
LightningDataModule every package's data module subclasses (`RerankingDataModule`), and the training datasets over a
`common.data.samplers` sampler (`SamplerGroups`, `EncodedGroups`).

Every package's data module names three tasks (`common.data.specs.SourceSpec`: ``builtin:<split>``,
``irds:<ir_datasets id>`` or a mapping of TREC files), dev and test optionally, and asks the same of them: is a
split configured, its `RankingSource` (opened once), its qrels and candidates, which of its queries are evaluated
and which (query, document) pairs are re-ranked. The parts hand each other what they need as arguments:

- `TaskConfig`: the tasks and how they are evaluated (depth, samples, relevance level, what to do with documents
  without text, the samples' seed), the data module's ``--data.*`` options of the same names.
- `Tasks(config)`: the opened and checked tasks, their evaluated queries and re-ranked pairs.
- `LoaderConfig`: batch sizes, workers and the training order's seed; it makes a dataset's loaders.
- `RerankingDataModule(tasks, loaders)`: the LightningDataModule the rankers and the commands ask
  (``data.qrels("test")``, ``data.test_pairs()``); a subclass says how its training groups are drawn and encoded
  (`training_dataset`) and how its evaluation pairs are encoded (`pair_encoder`). Use it as

      class MyDataModule(RerankingDataModule):
          def __init__(self, train="builtin:train", dev="builtin:dev", test="builtin:test", depth=100, ..., seed=0):
              super().__init__(TaskConfig.of(locals()), LoaderConfig.of(locals()))
              self.save_hyperparameters()

          def training_dataset(self, source):
              sampler = PointwiseSampler(training_table(source), topics=source.topics(), ...)
              return EncodedGroups(sampler, source.topics(), source.documents(), self.encoder)

          def pair_encoder(self):
              return self.encoder

Evaluated queries. Those of a split with candidates, qrels and a topic, sorted (a task without judgments, whose
qrels are empty, `common.data.source`: those with candidates and a topic, every query its run re-ranks, with
nothing to measure; a dev task must have judgments, as validation measures it); a sample (``dev_queries``,
``test_queries``) is drawn with ``numpy.random.default_rng(seed).choice(..., replace=False)`` and sorted again, so
the same seed evaluates the same queries in every package. Each is re-ranked to its ``depth`` (dev: ``dev_depth``
where set) top candidates (`common.data.rerank.rerank_pairs`).

Documents without text. A task from files may judge or retrieve documents its collection lacks (a collection made
of the candidates' text misses most of TREC DL's judged passages). `Tasks` counts them when a split's task is
opened, before any loader exists, and ``missing_documents`` chooses: ``"skip"`` (the default) warns, naming how
many and a few ids, and leaves them out: of training, relevant documents from the qrels and candidates from the run;
of evaluation, candidates from the re-ranked pairs (they stay in the run below the re-ranked documents, in
first-stage order, as candidates below the depth do; the qrels are never cut, so metrics stay honest); ``"error"``
stops with `MissingDocumentsError`. No loader meets a missing document. A training task is checked from its table
(`common.data.training_table`: each distinct document once, not a dict of its lines) and trained on the table
without the missing documents. Tasks from ir_datasets are not checked: their collections hold every judged and
retrieved document, and looking up MS MARCO's 8.8M training passages would be a lookup each for nothing. `Tasks.check` opens and checks every configured split (a train command calls it before
fitting).

Loaders. torchdata's ``StatefulDataLoader`` (a checkpoint taken mid-epoch resumes at the next batch). ``batch_size``
is the global batch of an optimizer step: the training loader of each process loads its slice of every global batch
of an order drawn from ``seed`` (`common.training.global_batch`; on one process, the whole batch, shuffled by a
generator seeded with ``seed``). A data module builds each split's dataset once: its
`training_dataset`, and `common.data.rerank.RerankPairs` of the re-ranked pairs for dev and test; no dev task, no
validation loader.

`SamplerGroups` is a training dataset over a sampler (item ``(epoch, i)`` = its group i of that epoch, the keys the
training loader's sampler yields); its ``collate`` encodes a batch of groups. `EncodedGroups` encodes every document of the groups as one flat batch of
(query, document) pairs, positive first in each group (QDS-Transformer's, EARL's and MVA's).
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
from common.data.rerank import Encode, RerankPairs, rerank_pairs
from common.data.samplers import training_table
from common.data.source import RankingSource
from common.data.specs import SourceSpec, TaskSpecError, source_from_spec
from common.data.training_table import TrainingTable
from common.training.global_batch import GlobalBatchSampler

#: What ``missing_documents`` may say about documents without text (see the module docstring).
MISSING_DOCUMENTS = ("skip", "error")
#: Ids named in a missing-documents message.
NAMED = 5
SPLITS = ("train", "dev", "test")


class MissingDocumentsError(ValueError):
    """Documents a task needs that its collection lacks, under ``missing_documents="error"``."""


# --------------------------------------------------------------------------- the tasks


class _Options:
    """A config whose fields are options of a data module."""

    @classmethod
    def of(cls, arguments: Mapping):
        """The config of a data module's arguments (``locals()`` in its ``__init__``): each field the argument of its
        name; a field the data module has no option for keeps its default."""
        return cls(**{field.name: arguments[field.name] for field in fields(cls) if field.name in arguments})


@dataclass(frozen=True)
class TaskConfig(_Options):
    """A data module's three tasks and how they are evaluated (each field is the ``--data.*`` option of its name).

    Args:
        train, dev, test: the tasks (`common.data.specs.SourceSpec`); None: no such split.
        depth: candidates re-ranked per query (and, for the samplers, where negatives come from).
        dev_depth: candidates re-ranked per dev query (None: `depth`).
        dev_queries, test_queries: evaluate a seeded sample of this many queries (None: all).
        relevance_level: lowest qrels label counted relevant.
        missing_documents: ``skip`` or ``error`` (module docstring).
        seed: the samples' seed.
    """

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


class Tasks:
    """The tasks of a `TaskConfig`, each opened on first use and kept, and what is evaluated of them."""

    def __init__(self, config: TaskConfig):
        self.config = config
        self._sources: dict[str, RankingSource] = {}
        self._eval_pairs: dict[str, list[tuple[str, str]]] = {}

    @property
    def specs(self) -> dict[str, SourceSpec | None]:
        """Split -> its task's spec (None: not configured)."""
        return {"train": self.config.train, "dev": self.config.dev, "test": self.config.test}

    def has_split(self, split: str) -> bool:
        """Whether a task is configured for `split` (``train``, ``dev`` or ``test``)."""
        return self.specs[split] is not None

    def source(self, split: str) -> RankingSource:
        """The task of `split`, opened on first use and kept; ValueError where the split is None.

        The training task comes without the relevant documents and candidates its collection lacks (under
        ``missing_documents="skip"``; see the module docstring).
        """
        if split not in self._sources:
            if not self.has_split(split):
                raise ValueError(f"no {split} task configured (data.{split} is null)")
            source = source_from_spec(self.specs[split])
            self._sources[split] = _present_documents(source, self._missing_training_documents(split, source))
        return self._sources[split]

    def check(self) -> None:
        """Open every configured split's task, counting its documents without text (MissingDocumentsError); a dev
        task without judgments, which validation would have nothing to measure with, is a `TaskSpecError`."""
        for split in SPLITS:
            if self.has_split(split):
                source = self.source(split)
                if split == "dev" and not source.qrels():
                    raise TaskSpecError(f"data.dev ({source.name}): no qrels: validation measures the dev task "
                                        "against its judgments; give its qrels_path")
                if split != "train":
                    self.eval_pairs(split)

    def qrels(self, split: str) -> Qrels:
        return self.source(split).qrels()

    def candidates(self, split: str) -> Run:
        return self.source(split).candidates()

    def eval_depth(self, split: str) -> int:
        """Candidates re-ranked per query of `split`: ``dev_depth`` (if set) for dev, else ``depth``."""
        return (self.config.dev_depth if split == "dev" else None) or self.config.depth

    def eval_queries(self, split: str) -> list[str]:
        """The evaluated queries of `split`: those with candidates, qrels (where the task judges any) and a topic,
        sorted, cut to a seeded sample."""
        source = self.source(split)
        qids = set(source.candidates()) & set(source.topics())
        qids = sorted(qids & set(source.qrels()) if source.qrels() else qids)
        limit = self.config.dev_queries if split == "dev" else self.config.test_queries
        if limit is not None and limit < len(qids):
            rng = np.random.default_rng(self.config.seed)
            qids = sorted(rng.choice(qids, size=limit, replace=False).tolist())
        return qids

    def eval_pairs(self, split: str) -> list[tuple[str, str]]:
        """The (qid, docid) pairs re-ranked for `split`: each evaluated query's top `eval_depth` candidates that have
        text (`common.data.rerank.rerank_pairs`; the others stay below in first-stage order)."""
        if split not in self._eval_pairs:
            source = self.source(split)
            pairs = rerank_pairs(source.candidates(), self.eval_depth(split), self.eval_queries(split))
            missing = set()
            if _checked(source):
                missing = self._check_present(split, source, {"candidates": {doc_id for _, doc_id in pairs}})
            self._eval_pairs[split] = [pair for pair in pairs if pair[1] not in missing]
        return self._eval_pairs[split]

    def _missing_training_documents(self, split: str, source: RankingSource) -> set[str]:
        """Training: the relevant judged documents and candidates without text (checked per the policy), found from
        the columns of the task's table (`common.data.samplers.training_table`), not from dicts of its lines."""
        if split != "train" or not _checked(source):
            return set()
        level = self.config.relevance_level
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
        if self.config.missing_documents == "error":
            raise MissingDocumentsError(f"{message}; data.missing_documents=skip leaves them out")
        left_out = "training" if split == "train" else "re-ranking (kept below, in first-stage order)"
        rank_zero_warn(f"{message}: left out of {left_out}; data.missing_documents=error stops instead")
        return {d for ids in missing.values() for d in ids}


class _Ids(Sequence[str]):
    """The ids of some of a table's document codes, decoded as they are read."""

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
    """A training task without some documents: its qrels and candidates cut to those with text.

    Its table is the task's `without` the missing documents: saved beside the task's table where that one is saved
    (keyed by the missing documents), so every process maps one copy; in memory where the task's is.
    """

    def __init__(self, source: RankingSource, missing: set[str]):
        self._source, self._missing = source, missing
        self.name = source.name

    def __getattr__(self, name: str):  # the source's files (topics_path, ...) for cache fingerprints
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

    def topics(self) -> Topics:
        return self._source.topics()

    def qrels(self) -> Qrels:
        return {qid: {d: label for d, label in labels.items() if d not in self._missing}
                for qid, labels in self._source.qrels().items()}

    def candidates(self) -> Run:
        return {qid: {d: score for d, score in scores.items() if d not in self._missing}
                for qid, scores in self._source.candidates().items()}

    def documents(self):
        return self._source.documents()


def _checked(source: RankingSource) -> bool:
    """Whether `source`'s documents are checked: not for a source whose collection is complete (ir_datasets),
    where the check would only read every qrels and candidate to find nothing."""
    return not getattr(source, "complete_collection", False)


def _present_documents(source: RankingSource, missing: set[str]) -> RankingSource:
    return _PresentDocuments(source, missing) if missing else source


# --------------------------------------------------------------------------- the loaders


@dataclass(frozen=True)
class LoaderConfig(_Options):
    """How a data module's datasets are loaded (each field is the ``--data.*`` option of its name).

    Args:
        batch_size: training items (groups) of an optimizer step over every process (the global batch).
        eval_batch_size: evaluation pairs per batch of a process.
        num_workers: loader worker processes (0: in the main process).
        seed: the training order's seed.
        processes, accumulate: the processes and the batches accumulated per optimizer step that share
            `batch_size` (`common.training.global_batch.split_global_batch` sets them; no option).

    Every loader pins its batches where the trainer it feeds computes on a CUDA GPU (`pin_memory`): Lightning then
    copies them to the device without blocking. Every loader keeps its workers between epochs
    (``persistent_workers``, where it has any): a training run validates many times, and its dev loader would
    otherwise start and load its workers again each time. A training loader's workers draw each epoch's items
    from the ``(epoch, index)`` keys its sampler yields (`SamplerGroups`), not from an epoch their copy of the
    dataset holds.
    """

    batch_size: int
    eval_batch_size: int
    num_workers: int = 0
    seed: int = 0
    processes: int = 1
    accumulate: int = 1

    @property
    def process_batch_size(self) -> int:
        """Training items per batch of a process: `batch_size` / (`processes` x `accumulate`)."""
        return self.batch_size // (self.processes * self.accumulate)

    @staticmethod
    def pin_memory(trainer: L.Trainer | None) -> bool:
        """Whether the batches of a loader feeding `trainer` (None: none yet) are pinned: where its accelerator is
        CUDA."""
        from lightning.pytorch.accelerators import CUDAAccelerator

        return trainer is not None and isinstance(trainer.accelerator, CUDAAccelerator)

    def train(self, dataset: Dataset, rank: int = 0, trainer: L.Trainer | None = None):
        """Process `rank`'s training loader of `dataset`: its share of each global batch in an order drawn from
        `seed` (`common.training.global_batch.GlobalBatchSampler`), `process_batch_size` items a batch, for
        `trainer`."""
        sampler = GlobalBatchSampler(dataset, self.batch_size, self.processes, rank, self.seed)
        # Its workers' base seed from a generator of its own (the global one is dropout's); its workers are kept
        # between epochs: the epoch travels with each key the sampler yields.
        return self._loader(dataset, self.process_batch_size, trainer, sampler=sampler,
                            generator=torch.Generator().manual_seed(self.seed),
                            persistent_workers=self.num_workers > 0)  # fmt: skip

    def evaluation(self, dataset: Dataset, trainer: L.Trainer | None = None):
        """`dataset`'s evaluation loader for `trainer`: in order, `eval_batch_size` items a batch, its workers kept
        between epochs."""
        return self._loader(dataset, self.eval_batch_size, trainer, persistent_workers=self.num_workers > 0)

    def _loader(self, dataset, batch_size: int, trainer: L.Trainer | None, **options):
        from torchdata.stateful_dataloader import StatefulDataLoader

        return StatefulDataLoader(dataset, batch_size=batch_size, collate_fn=dataset.collate,
                                  num_workers=self.num_workers, pin_memory=self.pin_memory(trainer), **options)


# --------------------------------------------------------------------------- the data module


class RerankingDataModule(L.LightningDataModule):
    """The LightningDataModule of a re-ranker: three tasks (`tasks`, a `Tasks`), their datasets, each built once,
    and their loaders (`loaders`, a `LoaderConfig`); see the module docstring.

    A subclass defines `training_dataset` and `pair_encoder`, and calls ``save_hyperparameters()`` after
    ``super().__init__(...)``, so that its own arguments are the hyperparameters.
    """

    #: The splits whose datasets `setup` builds, where configured, per stage (fit builds the test's too, so that
    #: its documents are checked before training starts).
    stage_splits = {"fit": ("train", "dev", "test"), "validate": ("dev",), "test": ("test",)}
    #: The module's other arguments that may name an ir_datasets task, with what it reads of each (`TASK_PARTS` of
    #: `common.data.irds_files`): their files are checked with the splits' before anything is built
    #: (`common.commands.cli.RankerCLI`).
    other_tasks: dict[str, tuple[str, ...]] = {}

    def __init__(self, tasks: TaskConfig, loaders: LoaderConfig):
        super().__init__()
        self.tasks, self.loaders = Tasks(tasks), loaders
        self._datasets: dict[str, Dataset] = {}

    # --- what a subclass defines ---

    def training_dataset(self, source: RankingSource) -> Dataset:
        """The training dataset (a `SamplerGroups`) of the training task `source`."""
        raise NotImplementedError(f"{type(self).__name__} defines no training dataset")

    def pair_encoder(self) -> Encode:
        """How evaluation pairs are encoded: ``encode(query texts, documents) -> batch`` (`RerankPairs`)."""
        raise NotImplementedError(f"{type(self).__name__} defines no pair encoder")

    # --- what the rankers and commands ask (`Tasks`) ---

    @property
    def specs(self) -> dict[str, SourceSpec | None]:
        return self.tasks.specs

    @property
    def relevance_level(self) -> int:
        return self.tasks.config.relevance_level

    def has_split(self, split: str) -> bool:
        return self.tasks.has_split(split)

    def source(self, split: str) -> RankingSource:
        return self.tasks.source(split)

    def qrels(self, split: str) -> Qrels:
        return self.tasks.qrels(split)

    def candidates(self, split: str) -> Run:
        return self.tasks.candidates(split)

    def eval_queries(self, split: str) -> list[str]:
        return self.tasks.eval_queries(split)

    def eval_pairs(self, split: str) -> list[tuple[str, str]]:
        return self.tasks.eval_pairs(split)

    def check_tasks(self) -> None:
        self.tasks.check()

    # --- datasets and loaders ---

    def dataset(self, split: str) -> Dataset:
        """The dataset of `split`, built on first use: the training dataset, or the re-ranked pairs (`RerankPairs`)."""
        if split not in self._datasets:
            source = self.tasks.source(split)
            if split == "train":
                self._datasets[split] = self.training_dataset(source)
            else:
                self._datasets[split] = RerankPairs(self.tasks.eval_pairs(split), source.topics(), source.documents(),
                                                    self.pair_encoder())
        return self._datasets[split]

    def prepare_data(self) -> None:
        """Build the document stores (`common.data.docstore`, ir_datasets' own) of the tasks that `setup` opens for
        the trainer's stage (`stage_splits`; fit's where no trainer is attached), and the training task's table of
        qrels and candidates (`common.data.training_table`: an ir_datasets task's or a task of files'), where not
        built yet.

        Lightning runs this on one process per node while the others wait at a barrier without a timeout, so an
        hours-long build never meets a collective's. Each build also holds its cache's lock
        (`common.io.built_once`), which is what makes the stores built once where every process builds at once
        (torchrun, srun, or a rank that asks before this hook has run).
        """
        stage = self.trainer.state.fn.value if self.trainer is not None else "fit"
        for split in self.stage_splits.get(stage, ()):
            if self.has_split(split):
                source = source_from_spec(self.specs[split])
                source.documents().prepare()
                table = getattr(source, "training_table", None)  # a cached one (common.data.training_table)
                if split == "train" and callable(table) and {"qrels", "candidates"} <= source.provides():
                    table()  # (a task without them is refused when its sampler asks, as before)

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


# --------------------------------------------------------------------------- training datasets


class SamplerGroups(Dataset):
    """A training sampler's groups as a dataset: item ``(epoch, i)``, the key the training loader's sampler yields
    (`common.training.global_batch`), is the sampler's group i of that epoch; item i is group i of the sampler's own
    epoch (0 unless set).

    Subclasses add ``collate(groups) -> dict`` (the loader's ``collate_fn``), encoding the groups' queries (`topics`)
    and documents (`documents`, a `common.data.source.DocumentLookup`).
    """

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
    """Groups of a `common.data.samplers.PointwiseSampler` (positive first, then its negatives) as flat batches of
    (query, document) pairs: ``encode(query texts, documents)`` with ``labels`` (B,), ``qids``, ``doc_ids`` and
    ``group_size`` (documents per group) added."""

    def __init__(self, sampler, topics: Topics, documents, encode: Encode):
        super().__init__(sampler, topics, documents)
        self.encode = encode

    def collate(self, groups) -> dict:
        qids = [g.qid for g in groups for _ in g.doc_ids]
        doc_ids = [d for g in groups for d in g.doc_ids]
        batch = self.encode([self.topics[q] for q in qids], self.documents.get_many(doc_ids))
        batch["labels"] = torch.tensor([label for g in groups for label in g.labels], dtype=torch.float)
        return batch | {"qids": qids, "doc_ids": doc_ids, "group_size": len(groups[0].doc_ids)}
