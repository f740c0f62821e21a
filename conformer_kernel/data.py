"""`ConformerKernelDataModule`: the LightningDataModule of the Conformer-Kernel (Mitra et al. 2021): training groups of
the official sampler (`common.data.samplers.LabelGroupSampler`: per query, a document of each of two label groups of
its top 100 and random documents, up to 4), re-ranking of each query's top `depth` (`common.training.tasks`), and the
vocabulary, IDFs and embeddings of the training task (`conformer_kernel.vocab`) or of a checkpoint (`use_featurizer`).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Literal

import torch
from jsonargparse.typing import NonNegativeInt, PositiveInt, restricted_number_type

from common.data.formats import Document, Topics
from common.data.samplers import from_source
from common.data.source import RankingSource
from common.data.specs import SourceSpec, source_fingerprint, source_from_spec
from common.training.tasks import MISSING_DOCUMENTS, LoaderConfig, RerankingDataModule, SamplerGroups, TaskConfig
from conformer_kernel import MAX_DOC_TERMS, MAX_ORCAS_TERMS, MAX_QUERY_TERMS, NUM_WORKERS
from conformer_kernel.features import Featurizer, encode_pairs
from conformer_kernel.orcas import ORCAS_PARTS, orcas_from_spec
from conformer_kernel.vocab import EmbeddingOptions, Resources

#: Documents per training query: RankNet needs two (`common.data.samplers.LabelGroupSampler`).
GroupSize = restricted_number_type("GroupSize", int, (">=", 2), docstring="an integer of at least 2")


class TrainGroups(SamplerGroups):
    """The sampler's groups; `collate` makes `Features` (Q groups x D documents) and labels (Q, D)."""

    def __init__(self, sampler, topics: Topics, documents, featurizer: Featurizer):
        super().__init__(sampler, topics, documents)
        self.featurizer = featurizer

    def collate(self, groups) -> dict:
        f = self.featurizer
        queries = [f.query_terms(self.topics[g.qid]) for g in groups]
        docs = [[f.document_terms(d) for d in self.documents.get_many(list(g.doc_ids))] for g in groups]
        return {"features": f.batch(queries, docs), "labels": torch.tensor([g.labels for g in groups])}


class ConformerKernelDataModule(RerankingDataModule):
    """Training, dev and test data (see the module docstring).

    Args:
        train: the training task: builtin:<split>, irds:<ir_datasets id>, TREC files as nested keys
            (--data.train.topics_path, .qrels_path, .candidates_path, .collection_path, .name) or a rank_llm
            candidate file (--data.train.rank_llm_path, .qrels_path, .name), either cut to the training or held-out
            part of its judged queries (.queries train|heldout); see the README, "Your own data".
            Its queries and collection also give the vocabulary, IDFs and word2vec embeddings.
        dev: the task whose dev NDCG@10 selects the checkpoint, in the same forms; null: none (the final weights).
        test: the task evaluated after training, in the same forms; null: none.
        orcas: ORCAS clicked queries as an extra document field (``irds:msmarco-document/orcas``, files), or None.
        max_query_terms: query terms read (paper: 20).
        max_doc_terms: document terms read (paper: 4,000).
        max_orcas_terms: terms of the ORCAS field read (official: 2,000).
        collections: further tasks whose documents join the training task's in the vocabulary, IDFs and word2vec
            (the paper's: all of MS MARCO, test documents included; a rank_llm task, whose collection is its
            candidates, needs the test task's here). Queries come from the training task alone.
        embedding_dim: word2vec dimension (paper/official: 128); the model's hidden size is twice it (IN || OUT).
        embedding_window: word2vec context window (official: 10).
        min_count: a term's least count to enter the vocabulary, word2vec's (official: 100).
        embedding_epochs: word2vec training epochs (official: 5).
        embedding_workers: word2vec threads (1 is reproducible).
        depth: candidates per query, for the training label groups and for re-ranking (top 100).
        group_size: documents per training query, at least 2 (official: 4).
        dev_queries: evaluate dev on a sample of this many queries, drawn with `seed` (None: all).
        test_queries: evaluate test on a sample of this many queries (None: all).
        relevance_level: lowest qrels label counted relevant.
        missing_documents: ``skip`` leaves the documents a task judges or retrieves but its collection lacks
            out of training and re-ranking, with a warning naming how many; ``error`` stops (`common.training.tasks`).
        batch_size: training queries per batch (paper: 32).
        eval_batch_size: (query, document) pairs per evaluation batch.
        num_workers: loader worker processes (0: in the main process).
        seed: seed of word2vec, the training groups and order, the dev and test samples (not --seed_everything's).
    """

    def __init__(
        self,
        train: SourceSpec = "builtin:train",
        dev: SourceSpec | None = "builtin:dev",
        test: SourceSpec | None = "builtin:test",
        orcas: SourceSpec | None = None,
        collections: list[SourceSpec] | None = None,
        max_query_terms: PositiveInt = MAX_QUERY_TERMS,
        max_doc_terms: PositiveInt = MAX_DOC_TERMS,
        max_orcas_terms: PositiveInt = MAX_ORCAS_TERMS,
        embedding_dim: PositiveInt = 128,
        embedding_window: PositiveInt = 10,
        min_count: NonNegativeInt = 100,
        embedding_epochs: PositiveInt = 5,
        embedding_workers: PositiveInt = 1,
        depth: PositiveInt = 100,
        group_size: GroupSize = 4,
        dev_queries: PositiveInt | None = None,
        test_queries: PositiveInt | None = None,
        relevance_level: int = 1,
        missing_documents: Literal[MISSING_DOCUMENTS] = "skip",
        batch_size: PositiveInt = 32,
        eval_batch_size: PositiveInt = 64,
        num_workers: NonNegativeInt = NUM_WORKERS,
        seed: int = 0,
    ):
        super().__init__(TaskConfig.of(locals()), LoaderConfig.of(locals()))
        self.save_hyperparameters()
        self._resources: Resources | None = None
        self._featurizer: Featurizer | None = None

    @property
    def resources(self) -> Resources:
        """Vocabulary, IDFs and embeddings of the training task and `collections` (built once, cached)."""
        if self._resources is None:
            if not self.has_split("train"):
                raise ValueError("no vocabulary: configure a training task (data.train) or call use_featurizer")
            source = self.source("train")
            others = [(spec, source_from_spec(spec)) for spec in self.hparams.collections or []]
            key = source_fingerprint(self.specs["train"], source)
            if others:
                key = {"train": key, "collections": [source_fingerprint(spec, other) for spec, other in others]}
            h = self.hparams
            options = EmbeddingOptions(h.embedding_dim, h.embedding_window, h.min_count, h.embedding_epochs, h.seed,
                                       h.embedding_workers)
            documents = _unique_documents([source, *(other for _, other in others)])
            self._resources = Resources.cached(key, source.topics().values(), documents, options)
        return self._resources

    @property
    def vocab_size(self) -> int:
        return len(self.resources)

    def use_featurizer(self, featurizer: Featurizer) -> None:
        """Featurise as a checkpoint does (its vocabulary, IDFs, limits and ORCAS field), not from the training task."""
        self._resources, self._featurizer = featurizer.resources, featurizer
        self._datasets.clear()

    @property
    def featurizer(self) -> Featurizer:
        if self._featurizer is None:
            h = self.hparams
            self._featurizer = Featurizer(self.resources, h.max_query_terms, h.max_doc_terms, h.max_orcas_terms,
                                          orcas_from_spec(h.orcas))
        return self._featurizer

    #: Fit leaves the test split to test.
    stage_splits = {"fit": ("train", "dev"), "validate": ("dev",), "test": ("test",)}
    #: ORCAS (``--data.orcas irds:msmarco-document/orcas``): its files are checked with the splits'.
    other_tasks = {"orcas": ORCAS_PARTS}

    def training_dataset(self, source: RankingSource) -> TrainGroups:
        h = self.hparams
        sampler = from_source("label_groups", source, depth=h.depth, group_size=h.group_size,
                              relevance_level=h.relevance_level, seed=h.seed)
        return TrainGroups(sampler, source.topics(), source.documents(), self.featurizer)

    def pair_encoder(self) -> partial:
        return partial(encode_pairs, self.featurizer)


def _unique_documents(sources: list[RankingSource]) -> Iterator[Document]:
    """The documents of `sources` in order, each id once (the same passage may be a candidate of two tasks)."""
    seen: set[str] = set()
    for source in sources:
        for document in source.documents().documents():
            if document.doc_id not in seen:
                seen.add(document.doc_id)
                yield document
