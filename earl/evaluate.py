"""``python -m earl.evaluate --checkpoint CKPT --task TASK [--store DIR]``: re-rank a candidate run with a trained
EARL (Gao, Dai, Callan 2020, "EARL: Speedup Transformer-based Rankers with Pre-computed Representation") and compare
with Table 2: T_qry once per query, then the judge blocks over the top ``--depth`` candidates in batches, their keys
and values read from an ``earl.index`` store (S2), computed from its D (S1), or end to end without ``--store``.
``--compare_end_to_end`` also scores end to end and writes the differences to ``exactness.json``.

The store must come from this very checkpoint file and hold every candidate, else it is refused. Depth: ``--depth``,
else the checkpoint's data setting, else 1,000 (Sec. 4.1). Writes ``run.trec``, ``task.json`` and, with qrels,
``metrics.json``; scoring runs in one process (global rank zero).
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
    """EARL's evaluation through `earl.query_scorer.QueryScorer`, compared with Table 2."""

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
                           device=self.device, store=store, documents=self.documents)

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
