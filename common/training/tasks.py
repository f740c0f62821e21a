"""A re-ranker's tasks: the data module's splits (`TaskSplits`), loaders (`SplitLoaders`) and training dataset
(`SamplerGroups`); the task an evaluate command names is `common.commands.task_options`'.

Every package's data module names three tasks (`common.data.specs.SourceSpec`: ``builtin:<split>``,
``irds:<ir_datasets id>`` or a mapping of TREC files), dev and test optionally, and answers the
same questions of them: is a split configured, its `RankingSource` (opened once), its qrels and
candidates, and which of its queries are evaluated. `TaskSplits` answers them once for all.

It is a mixin rather than a member object, since the data module itself is what the models,
the training and evaluate commands and the tests ask (``data.qrels("test")``), and a member would
need the same five delegating methods in every package. Use it as

    class MyData(TaskSplits, L.LightningDataModule):
        def __init__(self, train="builtin:train", dev="builtin:dev", test="builtin:test",
                     dev_queries=None, test_queries=None, seed=0, ...):
            super().__init__()
            self.save_hyperparameters()
            self.specs = {"train": train, "dev": dev, "test": test}

What it reads of the data module: ``self.specs`` (split -> `SourceSpec` or None), and from
``self.hparams`` ``dev_queries`` / ``test_queries`` (evaluate a sample of that many queries; None
or absent: all) and ``seed`` (absent: 0). It keeps the opened sources in ``self._sources``.

The evaluated queries of a split are those with candidates, qrels and a topic, sorted; a sample is
drawn with ``numpy.random.default_rng(seed).choice(..., replace=False)`` and sorted again, so the
same seed evaluates the same queries in every package.

Documents without text. A task from files may judge or retrieve documents its collection lacks (a
collection made of the candidates' text misses most of TREC DL's judged passages). `TaskSplits`
counts them when a split's task is opened, before any loader exists, and ``hparams.missing_documents``
chooses: ``"skip"`` (the default) warns, naming how many and a few ids, and leaves them out: of
training, relevant documents from the qrels and candidates from the run; of evaluation, candidates
from the re-ranked pairs (`rerank_pairs`: they stay in the run below the re-ranked documents, in
first-stage order, as candidates below the depth do; the qrels are never cut, so metrics stay
honest); ``"error"`` stops with `MissingDocumentsError`. No loader meets a missing document. Tasks
from ir_datasets are not checked: their collections hold every judged and retrieved document, and
looking up MS MARCO's 37M training candidates would take minutes. `check_tasks` opens and checks
every configured split (a train command calls it before fitting).

`SplitLoaders` builds each split's dataset once, through the package's ``build_dataset(split)`` (a
training dataset, and `common.data.rerank.RerankPairs` for dev and test, each with a ``collate``), kept in
``self._datasets`` (a dict the data module creates), and makes their loaders:
torchdata's ``StatefulDataLoader`` (a checkpoint taken mid-epoch resumes at the next batch),
the training one shuffled by a generator seeded with ``hparams.seed``, ``hparams.batch_size``
items a training batch and ``hparams.eval_batch_size`` an evaluation one, ``hparams.num_workers``
workers. No dev task: no validation loader.

    class MyData(TaskSplits, SplitLoaders, L.LightningDataModule): ...

`SamplerGroups` is the training dataset over a `common.data.samplers` sampler (item i = its group
i, ``set_epoch`` forwarded); a package subclasses it with the ``collate`` that encodes its groups.
"""

from __future__ import annotations


import numpy as np
import torch
from torch.utils.data import Dataset

from lightning.pytorch.utilities import rank_zero_warn

from common.data.formats import Qrels, Run, Topics
from common.data.source import RankingSource
from common.data.specs import SourceSpec, source_from_spec
from common.data.rerank import rerank_pairs

#: What ``hparams.missing_documents`` may say about documents without text (see the module docstring).
MISSING_DOCUMENTS = ("skip", "error")
#: Ids named in a missing-documents message.
NAMED = 5


class MissingDocumentsError(ValueError):
    """Documents a task needs that its collection lacks, under ``missing_documents="error"``."""


class TaskSplits:
    """Mixin for a LightningDataModule with ``specs`` {"train", "dev", "test"} -> `SourceSpec` (see the module docstring)."""

    specs: dict[str, SourceSpec | None]

    def has_split(self, split: str) -> bool:
        """Whether a task is configured for `split` (``train``, ``dev`` or ``test``)."""
        return self.specs[split] is not None

    def source(self, split: str) -> RankingSource:
        """The task of `split`, opened on first use and kept; ValueError where the split is None.

        The training task comes without the relevant documents and candidates its collection lacks
        (under ``missing_documents="skip"``; see the module docstring).
        """
        sources = self.__dict__.setdefault("_sources", {})
        if split not in sources:
            if not self.has_split(split):
                raise ValueError(f"no {split} task configured (data.{split} is null)")
            source = source_from_spec(self.specs[split])
            sources[split] = _present_documents(source, self._missing_documents(split, source))
        return sources[split]

    def check_tasks(self) -> None:
        """Open every configured split's task, counting its documents without text (MissingDocumentsError)."""
        for split in ("train", "dev", "test"):
            if self.has_split(split):
                self.source(split)
                if split != "train":
                    self.eval_pairs(split)

    def eval_depth(self, split: str) -> int:
        """Candidates re-ranked per query of `split`: ``dev_depth`` (if set) for dev, else ``depth``."""
        depth = self.hparams.get("dev_depth") if split == "dev" else None
        return depth or self.hparams.depth

    def eval_pairs(self, split: str) -> list[tuple[str, str]]:
        """The (qid, docid) pairs re-ranked for `split`: each evaluated query's top `eval_depth` candidates
        that have text (`common.data.rerank.rerank_pairs`; the others stay below in first-stage order)."""
        pairs_by_split = self.__dict__.setdefault("_eval_pairs", {})
        if split not in pairs_by_split:
            source = self.source(split)
            pairs = rerank_pairs(source.candidates(), self.eval_depth(split), self.eval_queries(split))
            missing = set()
            if _checked(source):
                missing = self._check_present(split, source, {"candidates": {doc_id for _, doc_id in pairs}})
            pairs_by_split[split] = [pair for pair in pairs if pair[1] not in missing]
        return pairs_by_split[split]

    def _missing_documents(self, split: str, source: RankingSource) -> set[str]:
        """Training: the relevant judged documents and candidates without text (checked per the policy)."""
        if split != "train" or not _checked(source):
            return set()
        level = self.hparams.get("relevance_level", 1)
        topics, qrels = source.topics(), source.qrels()
        relevant = {d for qid, labels in qrels.items() if qid in topics
                    for d, label in labels.items() if label >= level}
        candidates = {d for qid, docs in source.candidates().items() if qid in topics for d in docs}
        return self._check_present(split, source, {f"relevant judged documents (label >= {level})": relevant,
                                                   "candidates": candidates})

    def _check_present(self, split: str, source: RankingSource, needed: dict[str, set[str]]) -> set[str]:
        """The ids of `needed` (what -> ids) that `source` has no text for; warns or raises per the policy."""
        policy = self.hparams.get("missing_documents", "skip")
        if policy not in MISSING_DOCUMENTS:
            raise MissingDocumentsError(f"data.missing_documents: {policy!r} is none of {', '.join(MISSING_DOCUMENTS)}")
        documents = source.documents()
        missing = {what: sorted(d for d in ids if d not in documents) for what, ids in needed.items()}
        if not any(missing.values()):
            return set()
        counts = "; ".join(f"{len(ids):,} of {len(needed[what]):,} {what}" for what, ids in missing.items() if ids)
        examples = ", ".join([d for ids in missing.values() for d in ids][:NAMED])
        message = f"data.{split} ({source.name}): {counts} have no text in its collection (e.g. {examples})"
        if policy == "error":
            raise MissingDocumentsError(f"{message}; data.missing_documents=skip leaves them out")
        left_out = "training" if split == "train" else "re-ranking (kept below, in first-stage order)"
        rank_zero_warn(f"{message}: left out of {left_out}; data.missing_documents=error stops instead")
        return {d for ids in missing.values() for d in ids}

    def qrels(self, split: str) -> Qrels:
        return self.source(split).qrels()

    def candidates(self, split: str) -> Run:
        return self.source(split).candidates()

    def eval_sample_size(self, split: str) -> int | None:
        """How many queries of `split` are evaluated: ``dev_queries`` for dev, else ``test_queries`` (None: all)."""
        return self.hparams.get("dev_queries" if split == "dev" else "test_queries")

    def eval_queries(self, split: str) -> list[str]:
        """The evaluated queries of `split`: those with candidates, qrels and a topic, sorted, cut to a seeded sample."""
        source = self.source(split)
        qids = sorted(set(source.candidates()) & set(source.qrels()) & set(source.topics()))
        limit = self.eval_sample_size(split)
        if limit is not None and limit < len(qids):
            rng = np.random.default_rng(self.hparams.get("seed", 0))
            qids = sorted(rng.choice(qids, size=limit, replace=False).tolist())
        return qids


class _PresentDocuments:
    """A training task without some documents: its qrels and candidates cut to those with text."""

    def __init__(self, source: RankingSource, missing: set[str]):
        self._source, self._missing = source, missing
        self.name = source.name
        self._qrels = {qid: {d: label for d, label in labels.items() if d not in missing}
                       for qid, labels in source.qrels().items()}
        self._candidates = {qid: {d: score for d, score in scores.items() if d not in missing}
                            for qid, scores in source.candidates().items()}

    def __getattr__(self, name: str):  # the source's files (topics_path, ...) for cache fingerprints
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._source, name)

    def topics(self) -> Topics:
        return self._source.topics()

    def qrels(self) -> Qrels:
        return self._qrels

    def candidates(self) -> Run:
        return self._candidates

    def documents(self):
        return self._source.documents()


def _checked(source: RankingSource) -> bool:
    """Whether `source`'s documents are checked: not for a source whose collection is complete (ir_datasets),
    where the check would only read every qrels and candidate (37M for MS MARCO training) to find nothing."""
    return not getattr(source, "complete_collection", False)


def _present_documents(source: RankingSource, missing: set[str]) -> RankingSource:
    return _PresentDocuments(source, missing) if missing else source


class SplitLoaders:
    """Mixin: the datasets of the data module's ``build_dataset(split)``, each built once, and their train/dev/test
    loaders (see the module docstring)."""

    def setup(self, stage: str) -> None:
        # the test split is built with fit too: its documents are checked before training starts
        if stage == "fit":
            self._dataset("train")
            if self.has_split("dev"):
                self._dataset("dev")
        if stage in ("test", "fit") and self.has_split("test"):
            self._dataset("test")
        if stage == "validate":
            self._dataset("dev")

    def _dataset(self, split: str) -> Dataset:
        if split not in self._datasets:
            self._datasets[split] = self.build_dataset(split)
        return self._datasets[split]

    def train_dataloader(self):
        generator = torch.Generator().manual_seed(self.hparams.seed)
        return self._loader(self._dataset("train"), self.hparams.batch_size, shuffle=True, generator=generator)

    def val_dataloader(self):
        return self._loader(self._dataset("dev"), self.hparams.eval_batch_size) if self.has_split("dev") else []

    def test_dataloader(self):
        return self._loader(self._dataset("test"), self.hparams.eval_batch_size)

    def test_pairs(self) -> list[tuple[str, str]]:
        """The test (qid, docid) pairs in the order the test loader visits them (``index`` refers to it)."""
        return self._dataset("test").pairs

    def _loader(self, dataset, batch_size: int, **options):
        from torchdata.stateful_dataloader import StatefulDataLoader

        return StatefulDataLoader(dataset, batch_size=batch_size, collate_fn=dataset.collate,
                                  num_workers=self.hparams.num_workers, **options)


class SamplerGroups(Dataset):
    """A training sampler's groups as a dataset: item i = ``sampler[i]``, and `set_epoch` draws another epoch's.

    Subclasses add ``collate(groups) -> dict`` (the loader's ``collate_fn``), encoding the groups' queries
    (`topics`) and documents (`documents`, a `common.data.source.DocumentLookup`). The model calls
    ``set_epoch(current_epoch)`` when each training epoch starts.
    """

    def __init__(self, sampler, topics: Topics, documents):
        self.sampler, self.topics, self.documents = sampler, topics, documents

    def __len__(self) -> int:
        return len(self.sampler)

    def __getitem__(self, index: int):
        return self.sampler[index]

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def collate(self, groups: list) -> dict:
        raise NotImplementedError(f"{type(self).__name__} encodes no batch: define collate(groups)")
