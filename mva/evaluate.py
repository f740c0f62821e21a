"""``python -m mva.evaluate --checkpoint CKPT --task TASK [--store DIR] [--rescore CA_CKPT]``: re-rank a candidate
run with a trained MVA, dual encoder (DE) or cross-attention model (CA) (Zhou and Devlin 2021, "Multi-Vector
Attention Models for Deep Re-ranking"), from the ``--store`` ``mva.index`` built from this checkpoint or end to end
(``--compare_end_to_end``: both, differences in ``exactness.json``), then CA re-scoring the first pass's top K for
each ``--rescore_top`` K (Table 6: ``run.<first>+ca@K.trec``; K at or beyond the depth is CA alone).

Outputs (a new ``--output_dir``): ``run.trec``, ``task.json``, ``costs.json`` (`mva.costs`' joint compute at the
task's real lengths, bytes per document) and, with qrels, ``metrics.json`` (last). Depth: ``--depth``, else the
checkpoint's data setting, else 1,000.
"""

from __future__ import annotations

import argparse
import json

from common.commands.store_commands import StoreEvaluation, queries_progress
from common.commands.store_options import add_evaluate_arguments, add_rerank_arguments, command_parser
from common.refusals import checkpoint_file, positive_int, usage_error
from mva import STORED
from mva.index import read_trained
from mva.train import DATASETS, paper_tables

#: Candidates re-ranked per query by a checkpoint without a depth setting: BM25's top 1,000 (Sec. 3).
DEFAULT_DEPTH = 1000
#: Table 6's K: how many of the first pass's top candidates CA re-scores.
RESCORE_TOP = (1, 10, 50)


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("python -m mva.evaluate", __doc__)
    add_evaluate_arguments(parser, "mva.index", "an mva.train checkpoint (MVA, DE or CA): the first pass",
                           "an mva.index store of this checkpoint (default: none, documents encoded at query time)")
    parser.add_argument("--rescore", type=checkpoint_file, default=None,
                        help="an mva.train checkpoint of CA re-scoring the first pass's top K (Table 6)")
    parser.add_argument("--rescore_top", type=positive_int, nargs="+", default=list(RESCORE_TOP),
                        help="with --rescore: each K re-scored (default 1 10 50)")
    add_rerank_arguments(parser, "mva", "batch", DATASETS, "its tables")
    return parser


def multi_pass_run(first: dict, rescore, topics, k: int, progress=None) -> dict:
    """Table 6: `rescore` (CA) re-orders each query's top `k` of the `first` run, the others staying below."""
    from common.data.formats import ranked, with_unscored_below

    run = {}
    for qid, scores in (progress or iter)(first.items()):
        top = [doc_id for doc_id, _ in ranked(scores)[:k]]
        run[qid] = dict(zip(top, rescore(topics[qid], top).tolist()))
    return with_unscored_below(run, first)


def costs_table(costs: dict, measures: dict, depth: int) -> str:
    """Table 6's columns: first pass, K, MRR@10, NDCG@10, joint compute (M MACs per query) and bytes/document."""
    import pandas as pd

    from common.report import to_markdown

    frame = pd.DataFrame([{"run": name, "first pass": c["first_pass"], "K": c["rescored"],
                           "MRR@10": measures[name]["mrr@10"], "NDCG@10": measures[name]["ndcg_cut_10"],
                           f"joint compute (M MACs/query, top {depth})": round(c["joint_mmacs"], 3),
                           "bytes/document": round(c["bytes_per_document"], 1)} for name, c in costs.items()])
    return to_markdown(frame)


class MVAEvaluation(StoreEvaluation):
    """MVA's evaluation (module docstring): a first pass, CA re-scoring its top K, costs.json."""

    package, strategies, default_depth = "mva", STORED, DEFAULT_DEPTH
    paper_tables = staticmethod(paper_tables)

    def check_args(self) -> None:
        super().check_args()
        if len(set(self.args.rescore_top)) != len(self.args.rescore_top):
            usage_error(f"--rescore_top: each K once, got {' '.join(map(str, self.args.rescore_top))}")

    def read_inputs(self):
        args = self.args
        state = read_trained(args.checkpoint, ("mva", "de", "ca"))
        if args.store is not None and state["hyper_parameters"]["architecture"] == "ca":
            usage_error(f"--store: {args.checkpoint} is CA's, which stores nothing: it reads query and document "
                        "together")
        store = self.open_store()
        self.rescore_state = None if args.rescore is None else read_trained(args.rescore, ("ca",), "--rescore")
        return state, store

    def data_module(self, **settings):
        from mva.data import MVADataModule

        return MVADataModule(**settings)

    def load_ranker(self, state: dict):
        from mva.store import load_ranker

        return load_ranker(state)

    def make_scorer(self, store):
        from mva.query_scorer import QueryScorer
        from mva.store import CrossScorer, data_encoder

        if self.ranker.hparams.architecture == "ca":
            return CrossScorer(self.ranker, data_encoder(self.data_settings, pairs=True), self.documents,
                               batch_size=self.args.batch_size, device=self.device)
        return QueryScorer(self.ranker.model, data_encoder(self.data_settings), batch_size=self.args.batch_size,
                           device=self.device, store=store, documents=self.documents)

    def describe(self) -> str:
        return f"{self.ranker.name}, {self.scorer.label}"

    def print_seconds(self, scorer, end_to_end: bool = False) -> None:
        if not end_to_end:
            print(f"scored in {scorer.seconds:.2f} s ({1000 * scorer.seconds / max(self.queries, 1):.1f} ms per "
                  "query)")

    def exactness_identity(self, store) -> dict:
        return {"architecture": self.ranker.name}

    def further_runs(self) -> list:
        """CA re-scoring the top K for each ``--rescore_top`` K, then every run's costs (costs.json)."""
        from common.data.formats import write_run
        from common.io import atomic_write
        from common.metrics import evaluate_run
        from mva.store import CrossScorer, data_encoder, load_ranker

        args, out, name, scorer, queries = self.args, self.out, self.ranker.name, self.scorer, self.queries
        stored = scorer.bytes_per_document if self.ranker.hparams.architecture != "ca" else 0.0
        costs = self.costs = {name: {"first_pass": name, "rescored": 0, "joint_mmacs": scorer.macs / max(queries, 1)
                                     / 1e6, "bytes_per_document": stored, "seconds": scorer.seconds}}
        written = []
        if self.rescore_state is not None:
            rescorer_ranker = load_ranker(self.rescore_state).to(self.device)
            rescore_settings = self.rescore_state.get("datamodule_hyper_parameters", {})
            for k in sorted(args.rescore_top):
                rescorer = CrossScorer(rescorer_ranker, data_encoder(rescore_settings, pairs=True), self.documents,
                                       batch_size=args.batch_size, device=self.device)
                multi_name = f"{name}+ca@{k}"
                multi = multi_pass_run(self.run, rescorer, self.topics, k, queries_progress(multi_name))
                write_run(out / f"run.{multi_name}.trec", multi, tag=multi_name)
                written.append(out / f"run.{multi_name}.trec")
                if self.qrels:  # a task without judgments: the run alone
                    self.others[multi_name] = evaluate_run(self.qrels, multi, self.ranker.measures,
                                                           relevance_level=self.level)
                ca_alone = k >= self.depth
                first_cost = 0.0 if ca_alone else costs[name]["joint_mmacs"]
                ca_cost = rescorer.macs / max(queries, 1) / 1e6 if k > 1 else 0.0  # K = 1 changes nothing (mva.costs)
                costs[multi_name] = {"first_pass": "N/A" if ca_alone else name, "rescored": k,
                                     "joint_mmacs": first_cost + ca_cost,
                                     "bytes_per_document": 0.0 if ca_alone else stored,
                                     "seconds": scorer.seconds + rescorer.seconds}
                print(f"{multi_name}: CA re-scored the top {k} in {rescorer.seconds:.2f} s")
        with atomic_write(out / "costs.json") as f:
            json.dump(costs, f, indent=2)
            f.write("\n")
        return [*written, out / "costs.json"]

    def tables(self, metrics: dict) -> list[str]:
        return [costs_table(self.costs, metrics, self.depth)]


def main(argv=None) -> dict:
    return MVAEvaluation(build_parser().parse_args(argv), argv).main()


if __name__ == "__main__":
    main()
