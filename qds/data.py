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
from qds.batches import MAX_PASSAGES, MAX_SENTENCES, Encoder
from qds.inputs import ALL_PATTERNS, InputLayout


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
        max_sentences: PositiveInt = MAX_SENTENCES,
        max_passages: PositiveInt = MAX_PASSAGES,
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
