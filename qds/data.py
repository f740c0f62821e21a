"""QDS-Transformer's LightningDataModule: pointwise training groups and re-ranking of candidate runs.

- Tasks come from `common.data.specs.source_from_spec`: ``builtin:<split>``,
  ``irds:<ir_datasets id>`` (``msmarco-document/train``, ``msmarco-document/dev``,
  ``msmarco-document/trec-dl-2019/judged`` for the paper) or a mapping of TREC files.
- Training (official ``utils.Data.batch_iter``): every relevant (query, document) pair with
  `negatives` non-relevant documents from the query's top-`depth` candidates, labels 1/0
  (`common.data.samplers.PointwiseSampler`); new negatives each epoch. ``positives:
  candidates`` (the default) takes, as the official code does (``src/utils.py`` lines
  272-279), only the relevant documents among the top-100 candidates; ``qrels`` every judged
  relevant one. Tasks, loaders and evaluated queries: `common.training.tasks.RerankingDataModule`;
  torchdata's ``StatefulDataLoader``, so a checkpoint taken mid-epoch resumes at the next batch.
- Evaluation: every query's top-`depth` candidates (100: the TREC DL re-ranking subtask) are
  scored; the dev split may be cut to `dev_queries` queries (drawn with the seed; the official
  code's ``num_sample_eval``) and `dev_depth` candidates, since MS MARCO dev is 5,193 queries.
  Evaluation pairs are batched in order of document length, which wastes little on padding.
- Inputs: `qds.inputs` (QDS: sentences by `qds.sentences` in the ``official`` or ``sos``
  layout; FirstP/MaxP: RoBERTa pairs). Document tokens are computed in the loader (its workers when
  ``num_workers > 0``) and kept per process.
"""

from __future__ import annotations

from typing import Literal

import torch
from jsonargparse.typing import NonNegativeInt, PositiveInt
from torch import Tensor

from common.data.formats import Document
from common.data.samplers import POSITIVES, PointwiseSampler, training_table
from common.data.specs import SourceSpec
from common.encoders.tokenizers import LazyTokenizer, resolved_tokenizer_task
from common.training.tasks import MISSING_DOCUMENTS, EncodedGroups, LoaderConfig, RerankingDataModule, TaskConfig
from qds.inputs import ALL_PATTERNS, BASELINES, LAYOUTS, InputLayout, build_qds_input, pad, pair_input, passages
from qds.sentences import split_sentences


class Encoder(LazyTokenizer):
    """Turns (query text, document) pairs into a model batch for one pattern (see `qds.inputs`)."""

    def __init__(self, pattern: str, tokenizer: str, max_length: int = 2048, max_sentences: int = 256,
                 max_passages: int = 16, tokenizer_task: SourceSpec | None = None, layout: str = "official"):
        if pattern not in ALL_PATTERNS:
            raise ValueError(f"unknown pattern {pattern!r}; expected one of {', '.join(ALL_PATTERNS)}")
        if layout not in LAYOUTS:
            raise ValueError(f"unknown input layout {layout!r}; expected one of {', '.join(LAYOUTS)}")
        super().__init__(tokenizer, tokenizer_task)
        self.pattern, self.layout = pattern, layout
        self.max_length = min(max_length, 512) if pattern in BASELINES else max_length
        self.max_sentences, self.max_passages = max_sentences, max_passages

    def __call__(self, queries: list[str], documents: list[Document]) -> dict[str, Tensor]:
        tok = self.tokenizer
        query_ids = tok(queries, add_special_tokens=False)["input_ids"]
        bos, eos, pad_id = tok.bos_token_id, tok.eos_token_id, tok.pad_token_id
        if self.pattern in BASELINES:
            return self._pairs(query_ids, documents, bos, eos, pad_id)
        inputs = [
            build_qds_input(q, self._sentences(d), bos=bos, eos=eos, max_length=self.max_length,
                            max_sentences=self.max_sentences, layout=self.layout)
            for q, d in zip(query_ids, documents)
        ]  # fmt: skip
        input_ids = pad([x.input_ids for x in inputs], pad_id)
        return {
            "input_ids": input_ids,  # (B, N)
            "attention_mask": (input_ids != pad_id).long(),
            "global_attention_mask": pad([x.global_mask(self.pattern) for x in inputs], 0),
        }

    def _sentences(self, document: Document) -> list[list[int]]:
        """Token ids of the title then each sentence of the body (the URL is dropped, as in the official code; the
        official layout keeps an empty title, as its ``[title] + sent_tokenize(body)`` does)."""
        cached = self._cache.get(document.doc_id)
        if cached is None:
            title = [document.title] if document.title.strip() or self.layout == "official" else []
            sentences = title + split_sentences(document.text)
            cached = self.tokenizer(sentences, add_special_tokens=False)["input_ids"] if sentences else []
            if len(self._cache) >= 100_000:
                self._cache.clear()
            self._cache[document.doc_id] = cached
        return cached

    def _pairs(self, query_ids, documents, bos, eos, pad_id) -> dict[str, Tensor]:
        sequences, owner = [], []
        for i, (q, d) in enumerate(zip(query_ids, documents)):
            words = f"{d.title} {d.text}".split()
            texts = [" ".join(words)] if self.pattern == "firstp" else passages(words, max_passages=self.max_passages)
            for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]:
                sequences.append(pair_input(q, ids, bos=bos, eos=eos, max_length=self.max_length))
                owner.append(i)
        input_ids = pad(sequences, pad_id)
        return {
            "input_ids": input_ids,
            "attention_mask": (input_ids != pad_id).long(),
            "passage_doc": torch.tensor(owner),  # (P,) the document of each sequence
            "num_docs": torch.tensor(len(documents)),
        }


class QDSDataModule(RerankingDataModule):
    """Training, dev and test data of QDS-Transformer (see the module docstring).

    Args:
        train: the training task: builtin:<split>, irds:<ir_datasets id>, TREC files as nested keys
            (--data.train.topics_path, .qrels_path, .candidates_path, .collection_path, .name) or a rank_llm
            candidate file (--data.train.rank_llm_path, .qrels_path, .name); see the README, "Your own data".
        dev: the task whose dev MRR@10 selects the checkpoint, in the same forms; null: none (the final
            weights are tested).
        test: the task re-ranked after training, in the same forms; null: none.
        pattern: the model's pattern (linked from the model in the CLI).
        tokenizer: Hugging Face name or path (``roberta-base``); ``builtin``: a byte-level BPE trained on the
            built-in collection; ``train``: one trained on the training task's collection and queries (cached).
        tokenizer_task: the task whose collection and queries train the ``train`` tokenizer (default: the
            training task; evaluate passes the checkpoint's).
        max_length: longest input in tokens, query and document (paper and official code: 2048; the baselines
            read at most 512).
        max_sentences: most document sentences read, each after its marker (official code: 256).
        layout: ``official``: the QDS input token for token as the official code builds it, ``<s> <s> query </s>``
            then ``<s> <s> sentence </s>`` per sentence (what the released checkpoint was trained on); ``sos``: one
            [SOS] per sentence and no sentence ``</s>`` (`qds.inputs`). Measured on the built-in default: see
            results/qds/README.md, "Input layouts".
        max_passages: most passages of a document scored by MaxP (150 words, stride 75; 16 read about as much as
            QDS's 2048 tokens).
        negatives: non-relevant candidates per positive (official: 1).
        positives: ``candidates``: a relevant document is a training positive only when it is among the query's
            top-`depth` candidates (the official sampler); ``qrels``: every judged relevant document.
        depth: candidates re-ranked per query (TREC DL: top 100); also where negatives come from.
        dev_queries: evaluate dev on a sample of this many queries, drawn with `seed` (None: all; MS MARCO dev has
            5,193).
        dev_depth: re-rank this many candidates per dev query (None: `depth`).
        test_queries: evaluate test on this many queries (None: all; a sample for quick checks).
        relevance_level: lowest qrels label counted relevant, for training and MRR/MAP.
        missing_documents: ``skip`` leaves the documents a task judges or retrieves but its collection lacks
            out of training and re-ranking, with a warning naming how many; ``error`` stops (`common.training.tasks`).
        batch_size: training groups per batch (each is 1 + `negatives` documents).
        eval_batch_size: pairs per evaluation batch.
        num_workers: loader worker processes (0: in the main process).
        seed: seed of the negatives, the training order and the dev and test samples (not ``--seed_everything``'s).
    """

    def __init__(
        self,
        train: SourceSpec = "builtin:train",
        dev: SourceSpec | None = "builtin:dev",
        test: SourceSpec | None = "builtin:test",
        pattern: Literal[ALL_PATTERNS] = "qds",
        tokenizer: str = "builtin",
        tokenizer_task: SourceSpec | None = None,
        max_length: PositiveInt = 2048,
        max_sentences: PositiveInt = 256,
        max_passages: PositiveInt = 16,
        layout: InputLayout = "official",
        negatives: PositiveInt = 1,
        positives: Literal[POSITIVES] = "candidates",
        depth: PositiveInt = 100,
        dev_queries: PositiveInt | None = None,
        dev_depth: PositiveInt | None = None,
        test_queries: PositiveInt | None = None,
        relevance_level: int = 1,
        missing_documents: Literal[MISSING_DOCUMENTS] = "skip",
        batch_size: PositiveInt = 1,
        eval_batch_size: PositiveInt = 16,
        num_workers: NonNegativeInt = 0,
        seed: int = 0,
    ):
        # Resolved before save_hyperparameters, as the CLI resolves the model's (`qds.train`): Lightning requires the
        # two hyperparameters to agree, and checkpoints keep the task.
        tokenizer_task = resolved_tokenizer_task(tokenizer, tokenizer_task, train)
        super().__init__(TaskConfig.of(locals()), LoaderConfig.of(locals()))
        self.save_hyperparameters()
        self.encoder = Encoder(pattern, tokenizer, max_length, max_sentences, max_passages, tokenizer_task, layout)

    def training_dataset(self, source) -> EncodedGroups:
        h = self.hparams
        sampler = PointwiseSampler(training_table(source), negatives=h.negatives, depth=h.depth,
                                   positives=h.positives, relevance_level=h.relevance_level, seed=h.seed)
        return EncodedGroups(sampler, source.topics(), source.documents(), self.encoder)

    def pair_encoder(self) -> Encoder:
        return self.encoder
