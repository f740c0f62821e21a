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
run under ``<name>_end_to_end``), written by `common.commands.outputs.write_results`, metrics.json last. The metrics are
printed beside BM25's and, where the task is one of Table 2's MS MARCO datasets (``--dataset`` for files), beside
the paper's. Scoring runs in one process on ``--device`` (one query at a time, the paper's online setting).

Bad input ends in one line naming the option or the file, with exit status 2, before anything is written
(`common.refusals`): the options, the task's names and the store's folder at once, before torch and Lightning are
imported; a checkpoint that is not EARL's once read; a malformed task file once the task is opened; a store of
another checkpoint or without a candidate once it is opened, before the output folder is created.
"""

from __future__ import annotations

import argparse
import json

from common.commands.store_options import check_candidates, device_name, existing_store, open_store, resolve_device
from common.commands.task_options import add_task_arguments, fresh_output_dir, resolve_depth, task_spec_from_args
from common.refusals import ArgumentParser, checkpoint_file, input_errors, positive_int, usage_error
from earl.index import STRATEGIES, read_trained

#: Candidates re-ranked per query by a checkpoint without a depth setting: BM25's top 1,000 (Sec. 4.1).
DEFAULT_DEPTH = 1000
#: Table 2's MS MARCO datasets, ``--dataset``'s choices: `earl.outputs.DATASETS` (that module imports torch).
DATASETS = ("msmarco-passage-dev", "trec-dl-2019-passage")


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m earl.evaluate", description=__doc__.split("\n\n")[0],
                            epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, type=checkpoint_file, help="an earl.train checkpoint of EARL")
    add_task_arguments(parser, "task", "task to re-rank: builtin:<split> or irds:<ir_datasets id>")
    parser.add_argument("--store", type=existing_store("earl.index"), default=None,
                        help="an earl.index store of this checkpoint (default: none, T_doc at query time)")
    parser.add_argument("--compare_end_to_end", action="store_true",
                        help="with --store: also score the same pairs end to end and report the differences")
    parser.add_argument("--output_dir", help="default: a new outputs/earl-evaluate-<time>")
    parser.add_argument("--depth", type=positive_int, default=None,
                        help="candidates re-ranked per query (default: the checkpoint's data.depth, else 1000)")
    parser.add_argument("--test_queries", type=positive_int, default=None,
                        help="evaluate a sample of this many queries (seed 0, as data.test_queries; default all)")
    parser.add_argument("--batch_size", type=positive_int, default=128,
                        help="candidates per judge batch (default 128)")
    parser.add_argument("--dataset", default=None, choices=DATASETS,
                        help="the paper's dataset the task is, to compare with Table 2 (default: an irds: task's own; "
                             "files and builtin: none)")
    parser.add_argument("--relevance_level", type=int, default=None,
                        help="lowest relevant label for MAP/MRR (default: the checkpoint's data setting, else 1)")
    parser.add_argument("--device", type=device_name, default="auto",
                        help="where to score: auto (cuda if there is one), cpu, cuda or cuda:N (default auto)")
    return parser


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    if args.compare_end_to_end and args.store is None:
        usage_error("--compare_end_to_end: compares a store's scores with end-to-end ones; give --store")
    out = fresh_output_dir(args.output_dir, "earl-evaluate")
    task = task_spec_from_args(args, "task")
    from common.commands.quiet import quiet_lightning

    quiet_lightning()  # Lightning's advertisements and two deprecation warnings of its own making

    # torch alone: a foreign checkpoint, or a store of another checkpoint, is refused before Lightning loads
    state = read_trained(args.checkpoint)
    store = None if args.store is None else open_store(args.store, args.checkpoint, "earl.index", STRATEGIES)

    from common.commands.cli import INPUT_ERRORS
    from common.io import atomic_write
    from common.metrics import evaluate_run
    from common.report import paper_dataset
    from common.data.rerank import reranked_run
    from common.commands.outputs import metrics_table, write_results
    from common.stores.scoring import compare_scores, exactness_line, score_pairs
    from earl.data import EARLDataModule
    from earl.outputs import PAPER, paper_tables
    from earl.ranker import MEASURES
    from earl.store import QueryScorer, data_encoder, load_ranker

    data_settings = state.get("datamodule_hyper_parameters", {})
    keep = ("tokenizer", "tokenizer_task", "query_length", "passage_length", "relevance_level")
    settings = {k: v for k, v in data_settings.items() if k in keep}
    if args.relevance_level is not None:
        settings["relevance_level"] = args.relevance_level
    depth, depth_source = resolve_depth(args.depth, data_settings, DEFAULT_DEPTH)
    data = EARLDataModule(train=None, dev=None, test=task, architecture="earl", depth=depth,
                          test_queries=args.test_queries, **settings)  # fmt: skip
    with input_errors(*INPUT_ERRORS):
        data.check_tasks()  # the task's files read before anything is built, printed or written
    pairs = data.eval_pairs("test")
    if store is not None:
        check_candidates(store, pairs, "earl.index")
    device = resolve_device(args.device)
    ranker = load_ranker(state)
    model, encoder = ranker.ranker.to(device), data_encoder(data_settings)
    source = data.source("test")
    documents, topics = source.documents(), source.topics()
    try:
        scorer = QueryScorer(model, encoder, batch_size=args.batch_size, device=device, store=store,
                             documents=documents)  # fmt: skip
    except ValueError as error:  # a store of this checkpoint cannot have another width, unless it was tampered with
        usage_error(f"--store: {error}")
    queries = len({qid for qid, _ in pairs})
    print(f"re-ranking the top {depth} candidates per query ({depth_source}): {len(pairs):,} pairs of {queries:,} "
          f"queries, {scorer.label}")
    out.mkdir(parents=True, exist_ok=True)
    candidates, qrels = data.candidates("test"), data.qrels("test")
    scores = score_pairs(scorer, pairs, topics)
    print(f"scored in {scorer.seconds:.2f} s ({1000 * scorer.seconds / max(queries, 1):.1f} ms per query, "
          f"{scorer.label})")
    run = reranked_run(pairs, scores, candidates)
    others, report = {}, None
    if args.compare_end_to_end:
        reference_scorer = QueryScorer(model, encoder, batch_size=args.batch_size, device=device, documents=documents)
        reference = score_pairs(reference_scorer, pairs, topics)
        print(f"scored in {reference_scorer.seconds:.2f} s "
              f"({1000 * reference_scorer.seconds / max(queries, 1):.1f} ms per query, end to end)")
        reference_run = reranked_run(pairs, reference, candidates)
        level = data.relevance_level
        others[f"{ranker.name}_end_to_end"] = evaluate_run(qrels, reference_run, MEASURES, relevance_level=level)
        report = compare_scores(scores, reference, pairs, evaluate_run(qrels, run, MEASURES, relevance_level=level),
                                others[f"{ranker.name}_end_to_end"])  # fmt: skip
        report = {"store": str(args.store), "strategy": store.identity["strategy"], "dtype": store.dtype,
                  "bytes_per_document": store.bytes_per_document, "store_seconds": scorer.seconds,
                  "end_to_end_seconds": reference_scorer.seconds, **report}  # fmt: skip
        with atomic_write(out / "exactness.json") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    dataset = args.dataset or paper_dataset(PAPER, task)
    metrics = write_results(out, ranker.name, run, qrels, candidates, data.relevance_level, measures=MEASURES,
                            task=task, dataset=dataset, others=others)  # fmt: skip
    print()
    print(metrics_table(metrics, f"{source.name}: {len(run)} queries, top {depth} re-ranked, {scorer.label}",
                        MEASURES))  # fmt: skip
    print()
    print(paper_tables(metrics, task, dataset))
    if report is not None:
        print()
        print(exactness_line(scorer.label, report))
    written = [out / "run.trec", out / "metrics.json", out / "task.json"]
    if report is not None:
        written.append(out / "exactness.json")
    print(f"\nwritten: {', '.join(map(str, written))}")
    return metrics


if __name__ == "__main__":
    main()
