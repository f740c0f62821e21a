"""``python -m common.evaluate QRELS RUN``: trec_eval-style evaluation of a TREC run, as trec_eval 9.0.8 prints it
(``measure<TAB>qid<TAB>value``, names padded to 22 characters; ``-q`` per query first, then ``all``; 4 decimals, integer
counts, gdeval measures with 5 decimals). Bad input: one line, exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence

from common.data.formats import DataFormatError, read_qrels, read_run
from common.metrics import DEFAULT_MEASURES, MeasureResult, evaluate, parse_measures
from common.refusals import ArgumentParser, existing_file, input_errors, positive_int, usage_error

DESCRIPTION = """\
Evaluate a TREC run (qid Q0 docid rank score tag; the rank column is ignored:
documents are ranked by score descending, ties by docid descending) against
TREC qrels (qid iter docid label), reproducing trec_eval 9.0.8 and gdeval.pl
1.3 to the digits they print."""

EPILOG = f"""\
measures (-m, repeatable):
  trec_eval's names, e.g. map, recip_rank, ndcg_cut_10, P_10, recall_1000,
  bpref, Rprec, num_rel_ret; its -m syntax for parameters, e.g.
  ndcg_cut.10,20 or recall.100,1000; a bare family for trec_eval's default
  cutoffs (P, recall, ndcg_cut: 5,10,15,20,30,100,200,500,1000); and its groups
  all_trec, official, set. Also:
    mrr@K           recip_rank on the top K documents (trec_eval -M K -m recip_rank)
    gdeval_ndcg@K   gdeval.pl -k K nDCG (gain 2^label - 1; 5 decimals)
    gdeval_err@K    gdeval.pl -k K ERR (Chapelle et al. 2009; 5 decimals)
    ncg@K           normalised cumulative gain (Conformer-Kernel, TREC DL 2020)
  and ir_measures' names, computed as ir_measures 0.4.3 computes them: nDCG,
  nDCG@K (ndcg, ndcg_cut_K), AP, AP@K (map, map_cut_K), RR (recip_rank),
  RR@K (MS MARCO's MRR@K: tied scores by docid ascending), P@K, R@K,
  Success@K, Bpref, each with an optional (rel=N), e.g. AP(rel=2),
  RR(rel=2)@10. These take their relevance level from rel= (default 1), not
  from -l, and average over every query of the qrels, as with -c.
  default: {" ".join(DEFAULT_MEASURES)}

output:
  one line per value, as trec_eval prints it: the measure (padded to 22
  characters), TAB, the query id (-q) or "all", TAB, the value. trec_eval
  measures have 4 decimals and counts (num_*) none; gdeval measures have
  gdeval.pl's 5 decimals and topic ids (2024-127266 is reported as 127266).
  Exit status 2, with a one-line message, on a usage error or malformed input.

examples:
  python -m common.evaluate            # BM25 on the built-in collection's test queries
  python -m common.evaluate qrels.dl19-passage.txt run.txt -l 2 -c
  python -m common.evaluate -q -m ndcg_cut.10 -m mrr@10 -m gdeval_err@20 qrels run
"""


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m common.evaluate", description=DESCRIPTION, epilog=EPILOG,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("qrels", nargs="?", help="relevance judgments: qid iter docid label (labels may be graded or "
                        "negative). With neither QRELS nor RUN, the built-in collection's test qrels and BM25 run are "
                        "evaluated")
    parser.add_argument("run", nargs="?", help="ranking to evaluate: qid Q0 docid rank score tag")
    parser.add_argument("-m", "--measure", dest="measures", action="append", metavar="MEASURE",
                        help="measure to compute; repeat for several (see below)")
    parser.add_argument("-q", "--per_query", dest="per_query", action="store_true",
                        help="print each query's values before the 'all' summary (trec_eval -q)")
    parser.add_argument("-l", "--relevance_level", dest="relevance_level", type=int, default=1, metavar="LEVEL",
                        help="lowest label that counts as relevant for binary measures such as map, recip_rank, "
                        "recall, P (trec_eval -l; default 1; TREC DL passage MAP/RR/recall use 2). nDCG measures use "
                        "the labels themselves; gdeval and NCG measures ignore it")
    parser.add_argument("-c", "--complete", action="store_true",
                        help="average over all queries of the qrels, a query missing from the run scoring 0 "
                        "(trec_eval -c; gdeval/NCG: the queries with a label > 0). Default: the queries in both files")
    parser.add_argument("-M", "--depth", type=positive_int, metavar="DEPTH",
                        help="evaluate only the top DEPTH documents of each query (trec_eval -M)")
    return parser


def format_results(results: Mapping[str, MeasureResult], per_query: bool) -> str:
    lines = []
    if per_query:
        printed = [result for result in results.values() if result.printed_per_query]
        for qid in sorted({qid for result in printed for qid in result.values}):
            lines += [(r.name, qid, r.format(r.values[qid])) for r in printed if qid in r.values]
    lines += [(result.name, "all", result.format(result.summary)) for result in results.values()]
    return "".join(f"{measure:<22}\t{qid}\t{value}\n" for measure, qid, value in lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    measures = args.measures or list(DEFAULT_MEASURES)
    try:
        parse_measures(measures)
    except ValueError as error:
        parser.error(f"argument -m/--measure: {error}")
    if (args.qrels is None) != (args.run is None):
        parser.error("give both QRELS and RUN, or neither (the built-in collection's BM25 test run)")
    for name in ("qrels", "run"):
        try:
            if getattr(args, name) is not None:
                existing_file(getattr(args, name))
        except argparse.ArgumentTypeError as error:
            parser.error(f"argument {name}: {error}")
    with input_errors(DataFormatError, OSError):
        if args.qrels is None:
            from common.data.builtin import builtin_source

            source = builtin_source("test")
            print(f"# built-in collection: BM25 top-100 of the test queries\n# {source.candidates_path}", file=sys.stderr)
            args.qrels, args.run = str(source.qrels_path), str(source.candidates_path)
        qrels, run = read_qrels(args.qrels), read_run(args.run)
    try:
        results = evaluate(qrels, run, measures, relevance_level=args.relevance_level, complete=args.complete,
                           depth=args.depth)
    except ValueError as error:
        usage_error(f"run {args.run}, qrels {args.qrels}: {error}")
    sys.stdout.write(format_results(results, args.per_query))
    return 0


if __name__ == "__main__":
    sys.exit(main())
