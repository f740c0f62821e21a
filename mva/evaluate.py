"""``python -m mva.evaluate --checkpoint CKPT --task TASK [--store DIR] [--rescore CA_CKPT]``: re-rank a candidate
run with a trained MVA, dual encoder (DE) or cross-attention model (CA) (Zhou and Devlin: "Multi-Vector Attention
Models for Deep Re-ranking", 2021), from precomputed document representations or end to end, optionally followed
by CA re-scoring the first pass's top K (Table 6).

Each query is encoded once; its top ``--depth`` candidates are then scored in batches of ``--batch_size``, their
rows (MVA's [D_K | D_V] timesteps, DE's [CLS] vector) read from the ``--store`` that ``python -m mva.index`` built
from this very checkpoint file, or, without ``--store``, computed by the encoder at query time by the same code
(end to end). With a store, ``--compare_end_to_end`` also scores the same pairs end to end and writes the largest
absolute score difference and the NDCG@10 change to ``exactness.json`` (an fp32 store: float rounding).

Multi-pass (Table 6): ``--rescore CA_CKPT`` (an ``mva.train`` checkpoint of CA) re-scores, for each K of
``--rescore_top`` (default 1 10 50, Table 6's), the first pass's top K; those K are ordered by CA, the other
candidates stay below them in the first pass's order. K at or beyond the depth is CA alone (Table 6's "N/A" row).
Each is written as ``run.<first>+ca@K.trec`` and measured under ``<first>+ca@K`` in metrics.json.

Joint compute (`mva.costs`'s convention: multiply-accumulates of the scoring head once documents are stored, the
query's encoding left out, here per query over its candidates at the task's real lengths) and the bytes per
document are written to ``costs.json`` for every run and printed as Table 6 prints them.

``TASK``: ``irds:msmarco-passage/dev/small``, ``builtin:test``, ``--topics/--qrels/--run/--collection`` files, or
``--rank_llm FILE --qrels FILE`` (a rank_llm candidate file: topics, candidates and text in one).
Depth: ``--depth``, else the checkpoint's data setting ``depth``, else 1,000 (the paper's BM25 top 1,000).
``--test_queries`` evaluates a seeded sample of the queries (seed 0, as data.test_queries).

Outputs (a new ``--output_dir``, default ``outputs/mva-evaluate-<time>``): ``run.trec``, ``task.json``,
``costs.json`` and ``metrics.json`` (NDCG@10, MAP, MRR, MRR@10; BM25 under ``bm25``), metrics.json last.

Bad input ends in one line naming the option or the file, with exit status 2, before anything is written
(`common.refusals`): the options, the task's names and the store's folder before torch is imported; a checkpoint that
is not of the architecture its option needs once read; a store of another checkpoint or without a candidate once
opened, before the output folder is created.
"""

from __future__ import annotations

import argparse
import json

from common.commands.store_options import check_candidates, device_name, existing_store, open_store, resolve_device
from common.commands.task_options import add_task_arguments, fresh_output_dir, resolve_depth, task_spec_from_args
from common.refusals import ArgumentParser, checkpoint_file, input_errors, positive_int, usage_error
from mva.index import read_trained

#: Candidates re-ranked per query by a checkpoint without a depth setting: BM25's top 1,000 (Sec. 3).
DEFAULT_DEPTH = 1000
#: Table 6's K: how many of the first pass's top candidates CA re-scores.
RESCORE_TOP = (1, 10, 50)
#: The paper's dataset, ``--dataset``'s choice: `mva.outputs.DATASETS` (that module's imports are heavier).
DATASETS = ("msmarco-passage-dev",)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m mva.evaluate", description=__doc__.split("\n\n")[0],
                            epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, type=checkpoint_file,
                        help="an mva.train checkpoint (MVA, DE or CA): the first pass")
    add_task_arguments(parser, "task", "task to re-rank: builtin:<split> or irds:<ir_datasets id>")
    parser.add_argument("--store", type=existing_store("mva.index"), default=None,
                        help="an mva.index store of this checkpoint (default: none, documents encoded at query time)")
    parser.add_argument("--compare_end_to_end", action="store_true",
                        help="with --store: also score the same pairs end to end and report the differences")
    parser.add_argument("--rescore", type=checkpoint_file, default=None,
                        help="an mva.train checkpoint of CA re-scoring the first pass's top K (Table 6)")
    parser.add_argument("--rescore_top", type=positive_int, nargs="+", default=list(RESCORE_TOP),
                        help="with --rescore: each K re-scored (default 1 10 50)")
    parser.add_argument("--output_dir", help="default: a new outputs/mva-evaluate-<time>")
    parser.add_argument("--depth", type=positive_int, default=None,
                        help="candidates re-ranked per query (default: the checkpoint's data.depth, else 1000)")
    parser.add_argument("--test_queries", type=positive_int, default=None,
                        help="evaluate a sample of this many queries (seed 0, as data.test_queries; default all)")
    parser.add_argument("--batch_size", type=positive_int, default=128, help="candidates per batch (default 128)")
    parser.add_argument("--dataset", default=None, choices=DATASETS,
                        help="the paper's dataset the task is, to compare with its tables (default: an irds: task's "
                             "own; files and builtin: none)")
    parser.add_argument("--relevance_level", type=int, default=None,
                        help="lowest relevant label for MAP/MRR (default: the checkpoint's data setting, else 1)")
    parser.add_argument("--device", type=device_name, default="auto",
                        help="where to score: auto (cuda if there is one), cpu, cuda or cuda:N (default auto)")
    return parser


def check_args(args: argparse.Namespace) -> None:
    """What the option types do not check, before anything is imported."""
    if args.compare_end_to_end and args.store is None:
        usage_error("--compare_end_to_end: compares a store's scores with end-to-end ones; give --store")
    if len(set(args.rescore_top)) != len(args.rescore_top):
        usage_error(f"--rescore_top: each K once, got {' '.join(map(str, args.rescore_top))}")


def multi_pass_run(first: dict, rescore, topics, k: int) -> dict:
    """Table 6: `rescore` (a `mva.store.CrossScorer`) re-scores each query's top `k` of the `first` pass run; they
    are ordered by it, and the others stay below in the first pass's order."""
    from common.data.formats import ranked, with_unscored_below

    run = {}
    for qid, scores in first.items():
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


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    check_args(args)
    out = fresh_output_dir(args.output_dir, "mva-evaluate")
    task = task_spec_from_args(args, "task")
    from common.commands.quiet import quiet_lightning

    quiet_lightning()  # Lightning's advertisements and two deprecation warnings of its own making

    # torch alone: a foreign checkpoint, or a store of another checkpoint, is refused before the data loads
    state = read_trained(args.checkpoint, ("mva", "de", "ca"))
    first_architecture = state["hyper_parameters"]["architecture"]
    if args.store is not None and first_architecture == "ca":
        usage_error(f"--store: {args.checkpoint} is CA's, which stores nothing: it reads query and document together")
    store = None if args.store is None else open_store(args.store, args.checkpoint, "mva.index", ("mva", "de"))
    rescore_state = None
    if args.rescore is not None:
        rescore_state = read_trained(args.rescore, ("ca",), "--rescore")

    from common.commands.cli import INPUT_ERRORS
    from common.io import atomic_write
    from common.metrics import evaluate_run
    from common.report import paper_dataset
    from common.data.rerank import reranked_run
    from common.commands.outputs import metrics_table, write_results
    from common.stores.scoring import compare_scores, exactness_line, score_pairs
    from mva.data import MVADataModule
    from mva.outputs import PAPER, paper_tables
    from mva.ranker import MEASURES
    from mva.store import CrossScorer, QueryScorer, data_encoder, load_ranker

    data_settings = state.get("datamodule_hyper_parameters", {})
    keep = ("tokenizer", "tokenizer_task", "query_length", "passage_length", "relevance_level")
    settings = {k: v for k, v in data_settings.items() if k in keep}
    if args.relevance_level is not None:
        settings["relevance_level"] = args.relevance_level
    depth, depth_source = resolve_depth(args.depth, data_settings, DEFAULT_DEPTH)
    data = MVADataModule(train=None, dev=None, test=task, architecture=first_architecture, depth=depth,
                         test_queries=args.test_queries, **settings)  # fmt: skip
    with input_errors(*INPUT_ERRORS):
        data.check_tasks()  # the task's files read before anything is built, printed or written
    pairs = data.eval_pairs("test")
    if store is not None:
        check_candidates(store, pairs, "mva.index")
    device = resolve_device(args.device)
    ranker = load_ranker(state).to(device)
    source = data.source("test")
    documents, topics = source.documents(), source.topics()
    if first_architecture == "ca":
        scorer = CrossScorer(ranker, data_encoder(data_settings, pairs=True), documents, batch_size=args.batch_size,
                             device=device)  # fmt: skip
        label = "end to end"
    else:
        try:
            scorer = QueryScorer(ranker, data_encoder(data_settings), batch_size=args.batch_size, device=device,
                                 store=store, documents=documents)  # fmt: skip
        except ValueError as error:  # a store of this checkpoint cannot have another width, unless tampered with
            usage_error(f"--store: {error}")
        label = scorer.label
    queries = len({qid for qid, _ in pairs})
    print(f"re-ranking the top {depth} candidates per query ({depth_source}): {len(pairs):,} pairs of {queries:,} "
          f"queries, {ranker.name}, {label}")
    out.mkdir(parents=True, exist_ok=True)
    candidates, qrels, level = data.candidates("test"), data.qrels("test"), data.relevance_level
    scores = score_pairs(scorer, pairs, topics)
    print(f"scored in {scorer.seconds:.2f} s ({1000 * scorer.seconds / max(queries, 1):.1f} ms per query)")
    run = reranked_run(pairs, scores, candidates)
    name = ranker.name
    stored = scorer.bytes_per_document if first_architecture != "ca" else 0.0
    costs = {name: {"first_pass": name, "rescored": 0, "joint_mmacs": scorer.macs / max(queries, 1) / 1e6,
                    "bytes_per_document": stored, "seconds": scorer.seconds}}  # fmt: skip
    others, report = {}, None
    if args.compare_end_to_end:
        reference_scorer = QueryScorer(ranker, data_encoder(data_settings), batch_size=args.batch_size,
                                       device=device, documents=documents)  # fmt: skip
        reference = score_pairs(reference_scorer, pairs, topics)
        reference_run = reranked_run(pairs, reference, candidates)
        others[f"{name}_end_to_end"] = evaluate_run(qrels, reference_run, MEASURES, relevance_level=level)
        report = compare_scores(scores, reference, pairs, evaluate_run(qrels, run, MEASURES, relevance_level=level),
                                others[f"{name}_end_to_end"])  # fmt: skip
        report = {"store": str(args.store), "architecture": name, "dtype": store.dtype,
                  "bytes_per_document": stored, "store_seconds": scorer.seconds,
                  "end_to_end_seconds": reference_scorer.seconds, **report}  # fmt: skip
        with atomic_write(out / "exactness.json") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    written = []
    if rescore_state is not None:
        from common.data.formats import write_run

        rescorer_ranker = load_ranker(rescore_state).to(device)
        rescore_settings = rescore_state.get("datamodule_hyper_parameters", {})
        for k in sorted(args.rescore_top):
            rescorer = CrossScorer(rescorer_ranker, data_encoder(rescore_settings, pairs=True), documents,
                                   batch_size=args.batch_size, device=device)  # fmt: skip
            multi = multi_pass_run(run, rescorer, topics, k)
            multi_name = f"{name}+ca@{k}"
            write_run(out / f"run.{multi_name}.trec", multi, tag=multi_name)
            written.append(out / f"run.{multi_name}.trec")
            others[multi_name] = evaluate_run(qrels, multi, MEASURES, relevance_level=level)
            ca_alone = k >= depth
            first_cost = 0.0 if ca_alone else costs[name]["joint_mmacs"]
            ca_cost = rescorer.macs / max(queries, 1) / 1e6 if k > 1 else 0.0  # K = 1 changes nothing (mva.costs)
            costs[multi_name] = {"first_pass": "N/A" if ca_alone else name, "rescored": k,
                                 "joint_mmacs": first_cost + ca_cost,
                                 "bytes_per_document": 0.0 if ca_alone else stored,
                                 "seconds": scorer.seconds + rescorer.seconds}  # fmt: skip
            print(f"{multi_name}: CA re-scored the top {k} in {rescorer.seconds:.2f} s")
    with atomic_write(out / "costs.json") as f:
        json.dump(costs, f, indent=2)
        f.write("\n")
    dataset = args.dataset or paper_dataset(PAPER, task)
    metrics = write_results(out, name, run, qrels, candidates, level, measures=MEASURES, task=task, dataset=dataset,
                            others=others)  # fmt: skip
    print()
    print(metrics_table(metrics, f"{source.name}: {len(run)} queries, top {depth} re-ranked, {label}", MEASURES))
    print()
    print(costs_table(costs, metrics, depth))
    print()
    print(paper_tables(metrics, task, dataset))
    if report is not None:
        print()
        print(exactness_line(label, report))
    files = [out / "run.trec", *written, out / "costs.json", out / "metrics.json", out / "task.json"]
    if report is not None:
        files.append(out / "exactness.json")
    print(f"\nwritten: {', '.join(map(str, files))}")
    return metrics


if __name__ == "__main__":
    main()
