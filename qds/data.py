"""QDS-Transformer's LightningDataModule: pointwise training groups and re-ranking of candidate runs.

Training (official ``utils.Data.batch_iter``): each relevant pair with `negatives` negatives from the query's
top-`depth` candidates (``positives: candidates``: only relevant documents among them, as ``src/utils.py`` 272-279).
Evaluation: every query's top-`depth` candidates; dev may be cut to `dev_queries` and `dev_depth`. Inputs:
`qds.batches.Encoder`. Details: docs/qds.md.
"""

from __future__ import annotations

from typing import Literal

from jsonargparse.typing import NonNegativeInt, PositiveInt

from common.data.samplers import POSITIVES, PointwiseSampler, training_table
from common.data.specs import SourceSpec
from common.encoders.tokenizers import resolved_tokenizer_task
from common.training.tasks import MISSING_DOCUMENTS, EncodedGroups, LoaderConfig, RerankingDataModule, TaskConfig
from qds import LAYOUT, MAX_LENGTH, NEGATIVES, PATTERN, TOKENIZER
from qds.batches import MAX_PASSAGES, MAX_SENTENCES, Encoder
from qds.inputs import ALL_PATTERNS, InputLayout


class QDSDataModule(RerankingDataModule):
    """Training, dev and test data of QDS-Transformer (see the module docstring).

    Args:
        train: the training task: builtin:<split>, irds:<id>, TREC files or a rank_llm file (README, "Your own data").
        dev: the task whose dev MRR@10 selects the checkpoint, in the same forms; null: none (final weights tested).
        test: the task re-ranked after training, in the same forms; null: none.
        pattern: the model's pattern (linked from the model in the CLI).
        tokenizer: Hugging Face name or path; ``builtin``: a BPE of the built-in collection; ``train``: of the task's.
        tokenizer_task: the task whose collection and queries train the ``train`` tokenizer (default: training's).
        max_length: longest input in tokens, query and document (paper: 2048; the baselines read at most 512).
        max_sentences: most document sentences read, each after its marker (official code: 256).
        layout: ``official``: the official code's input token for token; ``sos``: one [SOS] per sentence.
        max_passages: most 150-word passages of a document scored by MaxP.
        negatives: non-relevant candidates per positive (official: 1).
        positives: ``candidates``: relevant documents among the top-`depth` (official); ``qrels``: every judged one.
        depth: candidates re-ranked per query (TREC DL: top 100); also where negatives come from.
        dev_queries: evaluate dev on a sample of this many queries, drawn with `seed` (None: all).
        dev_depth: re-rank this many candidates per dev query (None: `depth`).
        test_queries: evaluate test on this many queries (None: all).
        relevance_level: lowest qrels label counted relevant, for training and MRR/MAP.
        missing_documents: ``skip`` (with a warning) or ``error`` on documents a task names but its collection lacks.
        batch_size: training groups per batch (each is 1 + `negatives` documents).
        eval_batch_size: pairs per evaluation batch.
        num_workers: loader worker processes (0: in the main process).
        seed: seed of the negatives, the training order and the dev and test samples.
    """

    def __init__(self, train: SourceSpec = "builtin:train", dev: SourceSpec | None = "builtin:dev",
                 test: SourceSpec | None = "builtin:test", pattern: Literal[ALL_PATTERNS] = PATTERN,
                 tokenizer: str = TOKENIZER, tokenizer_task: SourceSpec | None = None,
                 max_length: PositiveInt = MAX_LENGTH, max_sentences: PositiveInt = MAX_SENTENCES,
                 max_passages: PositiveInt = MAX_PASSAGES, layout: InputLayout = LAYOUT,
                 negatives: PositiveInt = NEGATIVES, positives: Literal[POSITIVES] = "candidates",
                 depth: PositiveInt = 100, dev_queries: PositiveInt | None = None, dev_depth: PositiveInt | None = None,
                 test_queries: PositiveInt | None = None, relevance_level: int = 1,
                 missing_documents: Literal[MISSING_DOCUMENTS] = "skip", batch_size: PositiveInt = 1,
                 eval_batch_size: PositiveInt = 16, num_workers: NonNegativeInt = 0, seed: int = 0):
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
