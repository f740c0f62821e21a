"""A task of files without judgments for the evaluate commands' tests, and what every evaluate command must write
for it: the re-ranked run of every query and every candidate, task.json, and no metrics.json.

The task: the first built-in test queries, each with its top BM25 candidates, and one query of its own that no qrels
file of the built-in collection judges (so that a command that kept only judged queries would lose it), over the
built-in collection.
"""

import json
from pathlib import Path

from common.data.builtin import builtin_source
from common.data.formats import Run, ranked, read_run, write_run, write_topics

#: The query of the task's own: a topic and candidates, judged by no qrels.
UNJUDGED_QUERY = "never-judged"


def unjudged_task(folder: Path, queries: int = 2, per_query: int = 3) -> tuple[list[str], Run]:
    """The command-line flags of the task (``--topics --run --collection``, no ``--qrels``), written into `folder`,
    and its candidates: `queries` built-in test queries with their top `per_query` BM25 candidates each, and
    `UNJUDGED_QUERY` with the first query's."""
    source = builtin_source("test")
    topics, run = source.topics(), source.candidates()
    qids = sorted(run)[:queries]
    candidates = {qid: dict(ranked(run[qid])[:per_query]) for qid in qids}
    candidates[UNJUDGED_QUERY] = dict(candidates[qids[0]])
    texts = {qid: topics[qid] for qid in qids} | {UNJUDGED_QUERY: "a query nobody judged"}
    write_topics(folder / "topics.tsv", texts)
    write_run(folder / "candidates.trec", candidates)
    flags = ["--topics", str(folder / "topics.tsv"), "--run", str(folder / "candidates.trec"),
             "--collection", str(source.collection_path)]
    return flags, candidates


def assert_reranked_without_metrics(out: Path, candidates: Run, run_file: str = "run.trec") -> None:
    """`out` holds the re-ranked run of every query and every candidate of `candidates`, task.json naming a task
    without qrels, and no metrics.json."""
    run = read_run(out / run_file)
    assert {qid: sorted(docs) for qid, docs in run.items()} == {qid: sorted(docs) for qid, docs in candidates.items()}
    assert not (out / "metrics.json").exists()
    task = json.loads((out / "task.json").read_text())["test"]
    assert "qrels_path" not in task and task["candidates_path"].endswith("candidates.trec")
