"""``python -m earl.evaluate --checkpoint CKPT --task TASK [--store DIR]``: re-rank a candidate run with a trained
EARL (Gao, Dai, Callan: "EARL: Speedup Transformer-based Rankers with Pre-computed Representation", 2020), from
precomputed document representations or end to end, and compare with the paper's Table 2.

Sec. 3.3: each query is encoded once by T_qry; its top ``--depth`` candidates are then judged in batches of
``--batch_size`` by the K judge blocks alone, their keys and values read from the ``--store`` that ``python -m
earl.index`` built (S2), or computed from its D (S1). Without ``--store`` the candidates go through T_doc at query
time (end to end), by the same code but for where D comes from, so the two can be compared: with a store,
``--compare_end_to_end`` also scores the same pairs end to end and prints the largest absolute score difference
and the NDCG@10 change (fp32 stores: float rounding; fp16: the cost of half-precision rows), and writes them
to ``exactness.json``.

``CKPT`` is an `earl.train` checkpoint of EARL; queries and passages are encoded with its tokenizer and lengths.
The store must have been built from this very checkpoint file (its sha256): another's is refused in one line
naming both. Every re-ranked candidate must be in the store: one that is not (a store of another collection)
is refused in one line naming it, rather than left out, which would change the metrics without a word.
Candidates without text in the task's collection are left below the re-ranked ones with a warning, as in
training (`common.training.tasks`). ``TASK``: ``irds:msmarco-passage/trec-dl-2019/judged``, ``builtin:test``,
``--topics/--qrels/--run/--collection`` files, or ``--rank_llm FILE --qrels FILE`` (a rank_llm candidate file:
topics, candidates and text in one).

Depth: ``--depth``, else the checkpoint's data setting ``depth`` (what `earl.train` re-ranked), else 1,000 (the
paper's BM25 top 1,000, Sec. 4.1); the command prints which depth and why. ``--test_queries`` evaluates a seeded
sample of the queries (seed 0, as data.test_queries).

Outputs (a new ``--output_dir``, default ``outputs/earl-evaluate-<time>``): ``run.trec``, ``task.json`` and
``metrics.json`` (NDCG@10, MAP, MRR, MRR@10; BM25 under ``bm25``; with ``--compare_end_to_end`` the end-to-end
run under ``<name>_end_to_end``), written by `common.commands.outputs.write_results`, metrics.json last; without
``--qrels`` (files or a rank_llm file) ``run.trec`` and ``task.json``, and no metrics. The metrics are
printed beside BM25's and, where the task is one of Table 2's MS MARCO datasets (``--dataset`` for files), beside
the paper's. Scoring runs in one process on the one device ``--accelerator`` and ``--devices`` name (one query at a
time, the paper's online setting): launched as several (``torchrun``, ``srun``), global rank zero does all of it and
the others return at once.

Precision: ``--precision`` (default: the one the checkpoint's run trained with, where its run folder says so, else
32-true) is the autocast the scoring runs under, the scores staying float32; float32 matmuls run at
``--matmul_precision`` (``high``, TF32 on GPUs, as in training; ``highest`` for a GPU comparison with end-to-end
scores to float rounding; `common.commands.task_options`).

Bad input ends in one line naming the option or the file, with exit status 2, before anything is written
(`common.refusals`): the options, the task's names and the store's folder at once, before torch and Lightning are
imported; an ``irds:`` task's files that are neither present nor downloadable, one line each
(`common.data.irds_files`); a checkpoint that is not EARL's once read; a malformed task file once the task is
opened; a store of another checkpoint or without a candidate once it is opened, before the output folder is created.
"""

from __future__ import annotations

import argparse

from common.commands.store_commands import StoreEvaluation
from common.commands.store_options import add_evaluate_arguments, add_rerank_arguments, command_parser
from earl import STRATEGIES
from earl.index import read_trained
from earl.train import DATASETS, paper_tables

#: Candidates re-ranked per query by a checkpoint without a depth setting: BM25's top 1,000 (Sec. 4.1).
DEFAULT_DEPTH = 1000


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("python -m earl.evaluate", __doc__)
    add_evaluate_arguments(parser, "earl.index", "an earl.train checkpoint of EARL",
                           "an earl.index store of this checkpoint (default: none, T_doc at query time)")
    add_rerank_arguments(parser, "earl", "judge batch", DATASETS, "Table 2")
    return parser


class EARLEvaluation(StoreEvaluation):
    """EARL's evaluation: T_qry once per query, then the judge blocks over each candidate's keys and values, read
    from an S1 or S2 store or computed by T_doc at query time (`earl.query_scorer.QueryScorer`); compared with
    Table 2."""

    package, strategies, default_depth = "earl", STRATEGIES, DEFAULT_DEPTH

    def paper_tables(self, metrics: dict, task, dataset: str | None) -> str:
        """`earl.train.paper_tables`, with the relevance level the metrics were measured at beside the paper's."""
        return paper_tables(metrics, task, dataset, relevance_level=self.level)

    def read_inputs(self):
        return read_trained(self.args.checkpoint), self.open_store()

    def data_module(self, **settings):
        from earl.data import EARLDataModule

        return EARLDataModule(**settings)

    def load_ranker(self, state: dict):
        from earl.store import load_ranker

        return load_ranker(state)

    def make_scorer(self, store):
        from earl.query_scorer import QueryScorer
        from earl.store import data_encoder

        return QueryScorer(self.ranker.model, data_encoder(self.data_settings), batch_size=self.args.batch_size,
                           device=self.device, store=store, documents=self.documents)  # fmt: skip

    def describe(self) -> str:
        return self.scorer.label

    def print_seconds(self, scorer, end_to_end: bool = False) -> None:
        print(f"scored in {scorer.seconds:.2f} s ({1000 * scorer.seconds / max(self.queries, 1):.1f} ms per query, "
              f"{scorer.label})")

    def exactness_identity(self, store) -> dict:
        return {"strategy": store.identity["strategy"]}


def main(argv=None) -> dict:
    return EARLEvaluation(build_parser().parse_args(argv), argv).main()


if __name__ == "__main__":
    main()
