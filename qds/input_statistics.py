"""``python -m qds.input_statistics``: the lengths and densities behind QDS's benchmark input, into one JSON file.

``queries`` (words per query), ``sentences`` (words per sentence, split as QDS's inputs are), ``density`` (each
pattern's nonzero fraction on the benchmark input, `qds.inputs.exact_density`) and ``builtin_pairs`` (tokens of the
built-in candidates' inputs); written to results/qds/input_statistics.json by default.
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import fmean

from common.refusals import ArgumentParser, existing_file, input_errors, output_file_problem, positive_int, usage_error
from qds import MAX_LENGTH, WINDOW
from qds.benchmark import SYSTEMS, WINDOW_TYPE

TRECDL = "../shared/data/trec_dl"
TOPICS = [f"{TRECDL}/topics/topics.msmarco-doc.dev.txt", f"{TRECDL}/topics/topics.dl19-doc.txt",
          f"{TRECDL}/topics/topics.dl20.txt"]
CANDIDATES = f"{TRECDL}/candidates_with_text/rank_llm.BM25.retrieve_results_dl19.json"
OUTPUT = Path(__file__).resolve().parents[1] / "results" / "qds" / "input_statistics.json"
PATTERNS = tuple(s for s in SYSTEMS if s != "dense")


def lengths(values: list[int]) -> dict:
    """Count, mean and largest of a list of lengths."""
    return {"count": len(values), "mean": round(fmean(values), 4), "max": max(values)}


def query_words(path: Path) -> dict:
    """Words per query of a topics file."""
    from common.data.formats import read_topics

    return lengths([len(text.split()) for text in read_topics(path).values()])


def sentence_words(path: Path, top: int) -> dict:
    """Words per sentence of each query's first `top` passages in a rank_llm file (in the file's order)."""
    from common.data.rank_llm import read_rank_llm
    from qds.sentences import split_sentences

    task = read_rank_llm(path)
    words = [len(sentence.split()) for hits in task.candidates.values() for doc_id in list(hits)[:top]
             for sentence in split_sentences(task.documents[doc_id].text)]
    return {"queries": len(task.candidates), "passages_per_query": top, **lengths(words)}


def densities(n: int, window: int, query_tokens: int, sentence_tokens: int) -> dict:
    """Each pattern's attention density in each layout, on the benchmark's input."""
    from qds.inputs import LAYOUTS, exact_density

    return {layout: {p: round(exact_density(p, n, query_tokens, sentence_tokens, window, layout), 6) for p in PATTERNS}
            for layout in LAYOUTS}


def builtin_pairs(depth: int) -> dict:
    """Tokens of the QDS input of each built-in test query's top-`depth` candidates."""
    from common.data.rerank import rerank_pairs
    from common.data.specs import source_from_spec
    from qds.batches import Encoder

    source, encoder = source_from_spec("builtin:test"), Encoder("qds", "builtin", max_length=MAX_LENGTH)
    topics, documents = source.topics(), source.documents()
    pairs = rerank_pairs(source.candidates(), depth)
    tokens = []
    for start in range(0, len(pairs), 100):
        batch = pairs[start : start + 100]
        inputs = encoder([topics[qid] for qid, _ in batch], [documents[doc_id] for _, doc_id in batch])
        tokens += inputs["attention_mask"].sum(1).tolist()
    return {"depth": depth, "max_length": MAX_LENGTH, **lengths(tokens)}


def parse_args(argv: list[str] | None):
    parser = ArgumentParser(prog="python -m qds.input_statistics", description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--topics", type=existing_file, nargs="+", default=TOPICS, metavar="FILE",
        help="TREC topics files (qid<TAB>text) whose words per query are counted (default: MS MARCO document dev, "
             "TREC DL 2019 documents and TREC DL 2020, under ../shared/data, relative to the checkout's root as the "
             "configs' paths are)")
    add("--rank_llm", type=existing_file, default=CANDIDATES, metavar="FILE",
        help="a rank_llm candidate file whose passages are split into sentences (default: BM25's TREC DL 2019)")
    add("--top", type=positive_int, default=20, help="passages per query split into sentences")
    add("--n", type=positive_int, default=MAX_LENGTH, help="the benchmark input's length in tokens")
    add("--window", type=WINDOW_TYPE, default=WINDOW, help="local attention window w, even")
    add("--query_tokens", type=positive_int, default=8, help="the benchmark input's query tokens")
    add("--sentence_tokens", type=positive_int, default=25, help="the benchmark input's tokens per sentence")
    add("--depth", type=positive_int, default=100, help="built-in candidates per test query whose tokens are counted")
    add("--output", type=Path, default=OUTPUT, help="the JSON file to write")
    add("--overwrite", action="store_true", help="replace an existing output file")
    args = parser.parse_args(argv)
    for path in args.topics:
        if not Path(path).is_file():
            usage_error(f"argument --topics: no such file: {path}")
    problem = output_file_problem(args.output, args.overwrite)
    if problem:
        usage_error(f"argument --output: {problem}")
    if args.n < args.query_tokens + 5:
        usage_error(f"argument --n: must be at least --query_tokens + 5 = {args.query_tokens + 5}, got {args.n}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from common.data.formats import DataFormatError
    from common.io import atomic_write

    with input_errors(DataFormatError):
        statistics = {"queries": {str(path): query_words(path) for path in args.topics},
                      "sentences": {"candidates": str(args.rank_llm), **sentence_words(args.rank_llm, args.top)}}
    statistics["density"] = {"n": args.n, "window": args.window, "query_tokens": args.query_tokens,
                             "sentence_tokens": args.sentence_tokens,
                             **densities(args.n, args.window, args.query_tokens, args.sentence_tokens)}
    statistics["builtin_pairs"] = builtin_pairs(args.depth)
    with atomic_write(args.output, overwrite=args.overwrite) as f:
        json.dump(statistics, f, indent=1)
        f.write("\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
