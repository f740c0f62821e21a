"""``python -m common.data.bm25``, ``common.evaluate``, ``common.data.builtin`` and ``common.report`` refuse bad
input in one line naming the option, or the file (and line), before anything is built or written.

Each case runs the command on files under ``tmp_path/inputs`` (``{in}`` in the arguments and the expected text),
which must be left as they were.
"""

import pytest

from tests.bad_input.refusal import refused, write_inputs

pytestmark = pytest.mark.slow  # the second tier (README, "Tests")

FILES = {
    "docs.tsv": "d1\tthe cat sat\nd2\tdogs chase cats\n",
    "topics.tsv": "1\tcat\n2\tunicorn\n",
    "run.trec": "1 Q0 d1 1 1.0 bm25\n",
    "no_tab.tsv": "d1\tthe cat\nd2 dogs chase cats\n",
    "duplicate.tsv": "d1\tthe cat\n\nd2\tdogs\nd1\tbirds\n",
    "empty.tsv": "",
    "stopwords.tsv": "d1\tthe a of\nd2\tx y and\n",
    "docs.csv": "d1,the cat\n",
    "bad_topics.tsv": "1 cat\n",
    "no_topics.tsv": "# nothing but a comment\n\n",
    "twice_topics.tsv": "1\tcat\n1\tdog\n",
    "qrels.txt": "1 0 d1 1\n",
    "empty.trec": "",
    "other.trec": "2 Q0 d1 1 1.0 bm25\n",
    "bad_qrels.txt": "1 0 d1\n",
    "bad_run.trec": "1 Q0 d1 1 high bm25\n",
    "not_a_build/notes.txt": "mine\n",
    "no_collection/manifest.json": "{}\n",
    "bad_collection/manifest.json": "{}\n",
    "bad_collection/collection.jsonl": "not json\n",
    "metrics.json": '{"qds": {"ndcg_cut_10": 0.61}}\n',
    "bad.json": "{not json\n",
    "list.json": "[1, 2]\n",
    "text_value.json": '{"qds": {"map": "high"}}\n',
    "report.md": "keep me\n",
    "with_task/metrics.json": '{"qds": {"ndcg_cut_10": 0.61}}\n',
    "with_task/task.json": "[]\n",
}

BM25 = ["--collection", "{in}/docs.tsv", "--topics", "{in}/topics.tsv", "--output", "run.trec"]
BM25_CASES = [
    (["--collection", "{in}/no_tab.tsv"],
     "{in}/no_tab.tsv:2: expected 2-4 tab-separated columns (docid [url] [title] text), got 1"),
    (["--collection", "{in}/duplicate.tsv"], "{in}/duplicate.tsv:4: duplicate document id 'd1' (first on line 1)"),
    (["--collection", "{in}/empty.tsv"], "{in}/empty.tsv: no document to index (the collection is empty)"),
    (["--collection", "{in}/stopwords.tsv"],
     "{in}/stopwords.tsv: no document has an indexable term (only stopwords or one-character tokens)"),
    (["--collection", "{in}/missing.tsv"], "argument --collection: no such file: {in}/missing.tsv"),
    (["--collection", "{in}"], "argument --collection: {in} is a folder, not a file"),
    (["--collection", "{in}/docs.csv"], "argument --collection: {in}/docs.csv: cannot tell the collection format"),
    (["--topics", "{in}/missing.tsv"], "argument --topics: no such file: {in}/missing.tsv"),
    (["--topics", "{in}/bad_topics.tsv"], "{in}/bad_topics.tsv:1: expected 'qid<TAB>text'"),
    (["--topics", "{in}/no_topics.tsv"], "{in}/no_topics.tsv: no topic (expected qid<TAB>text lines)"),
    (["--topics", "{in}/twice_topics.tsv"], "{in}/twice_topics.tsv:2: duplicate topic id '1"),
    (["-k", "0"], "argument -k: must be a positive integer, got 0"),
    (["--stemmer", "klingon"], "argument --stemmer: must be one of none, arabic, "),
    (["--stemmer", "klingon"], "porter, portuguese, romanian, russian, serbian, sesotho, spanish, swedish, tamil, "
                               "turkish, yiddish, got klingon"),
    (["--k1", "-0.5"], "argument --k1: must be a number >= 0, got -0.5"),
    (["--k1", "inf"], "argument --k1: must be a number >= 0, got inf"),
    (["--b", "1.5"], "argument --b: must be a number >= 0 and <= 1, got 1.5"),
    (["--b", "half"], "argument --b: must be a number >= 0 and <= 1, got half"),
    (["--tag", "my run"], "argument --tag: must be one word without spaces or tabs, got 'my run'"),
    (["--output", "{in}/run.trec"], "{in}/run.trec already exists; pass --overwrite to replace it"),
    (["--output", "{in}", "--overwrite"], "argument --output: {in} is a folder, not a file"),
    (["--output", "{in}/docs.tsv/run.trec"], "argument --output: {in}/docs.tsv is a file, not a folder"),
]

EVALUATE_CASES = [
    (["{in}", "{in}/run.trec"], "argument qrels: {in} is a folder, not a file"),
    (["{in}/qrels.txt", "{in}"], "argument run: {in} is a folder, not a file"),
    (["{in}/qrels.txt", "{in}/missing.trec"], "argument run: no such file: {in}/missing.trec"),
    (["{in}/qrels.txt", "{in}/empty.trec"],
     "run {in}/empty.trec, qrels {in}/qrels.txt: no query has both results and relevance judgments"),
    (["{in}/qrels.txt", "{in}/other.trec"],
     "run {in}/other.trec, qrels {in}/qrels.txt: no query has both results and relevance judgments"),
    (["{in}/bad_qrels.txt", "{in}/run.trec"], "{in}/bad_qrels.txt:1: expected 4 fields 'qid iter docid rel', got 3"),
    (["{in}/qrels.txt", "{in}/bad_run.trec"], "{in}/bad_run.trec:1: score 'high' is not a number"),
    (["-M", "0", "{in}/qrels.txt", "{in}/run.trec"], "argument -M/--depth: must be a positive integer, got 0"),
    (["-m", "nope", "{in}/qrels.txt", "{in}/run.trec"], "argument -m/--measure: unknown measure 'nope'"),
    (["-l", "two", "{in}/qrels.txt", "{in}/run.trec"], "argument -l/--relevance_level: invalid int value: 'two'"),
    (["{in}/qrels.txt"], "give both QRELS and RUN, or neither"),
]

BUILTIN_CASES = [
    (["--seed", "-1"], "argument --seed: must be a non-negative integer, got -1"),
    (["--seed", "one"], "argument --seed: must be a non-negative integer, got one"),
    (["--output_dir", "{in}/docs.tsv"], "argument --output_dir: {in}/docs.tsv is a file, not a folder"),
    (["--output_dir", "{in}/docs.tsv/builtin", "--overwrite"], "argument --output_dir: {in}/docs.tsv is a file, not a folder"),
    (["--output_dir", "{in}/not_a_build"], "argument --output_dir: {in}/not_a_build holds no complete built-in collection "
                                     "(no manifest.json); remove it, or pass --overwrite"),
    (["--output_dir", "{in}/no_collection"], "{in}/no_collection/collection.jsonl: no such file"),
    (["--output_dir", "{in}/bad_collection"], "{in}/bad_collection/collection.jsonl:1: invalid JSON"),
]

REPORT = ["--paper", "qds", "--table", "2", "--map", "qds=QDS-Transformer"]
REPORT_CASES = [
    (["{in}/missing.json", *REPORT], "argument METRICS_JSON: no such file: {in}/missing.json"),
    (["{in}", *REPORT], "argument METRICS_JSON: {in} is a folder, not a file"),
    (["{in}/bad.json", *REPORT], "{in}/bad.json: invalid JSON (Expecting property name enclosed in double quotes "
                                 "at line 1 column 2)"),
    (["{in}/list.json", *REPORT], '{in}/list.json: expected {"run": {"measure": number, ...}, ...}, got a JSON list'),
    (["{in}/text_value.json", *REPORT], "{in}/text_value.json: expected {\"run\": {\"measure\": number, ...}, ...}; "
                                        "'qds'/'map' is not a number: 'high'"),
    (["{in}/metrics.json", "--table", "2"], "the following arguments are required: --paper"),
    (["{in}/metrics.json", "--paper", "bert"], "unknown paper 'bert'; known papers: conformer_kernel, earl, mva, qds"),
    (["{in}/metrics.json", "--paper", "qds", "--table", "9"], "no reported rows for paper qds table 9; tables: 2, "),
    (["{in}/metrics.json", "--paper", "qds", "--map", "qds"], "--map 'qds': expected RUN=METHOD"),
    (["{in}/metrics.json", *REPORT, "--output", "{in}/report.md"],
     "--output: {in}/report.md already exists; pass --overwrite to replace it"),
    (["{in}/metrics.json", *REPORT, "--output", "{in}", "--overwrite"], "--output: {in} is a folder, not a file"),
    (["{in}/metrics.json", *REPORT, "--output", "{in}/docs.tsv/report.md"],
     "--output: {in}/docs.tsv is a file, not a folder"),
    (["{in}/with_task/metrics.json", *REPORT],
     '{in}/with_task/task.json: expected {"test": TASK, "dataset": DATASET or null}'),
]

HEADER = "paper,table,dataset,split,setting,method,metric,value,scale,note\n"
REPORTED_CASES = [
    (HEADER + "qds,2,d,test,s,QDS-Transformer,map,0.3,0-1,\nqds,2,d,test,s,QDS-Transformer,mrr,high,0-1,\n",
     "{in}/reported/qds.csv: row 2 (QDS-Transformer, mrr): value 'high' is not a number"),
    (HEADER + "qds,2,d,test,s,QDS-Transformer,map,0.3,0-1,\nqds,2,d,test,s,QDS-Transformer,mrr,0.3,0-1,,extra\n",
     "{in}/reported/qds.csv: not a CSV pandas can read (Error tokenizing data. C error: Expected 10 fields in line 3"),
    ("paper,method,value\nqds,QDS-Transformer,0.3\n", "{in}/reported/qds.csv: expected columns"),
    ("", "{in}/reported/qds.csv: not a CSV pandas can read (No columns to parse from file)"),
]


@pytest.fixture
def inputs(tmp_path):
    return write_inputs(tmp_path / "inputs", FILES)


@pytest.mark.parametrize("args, expect", BM25_CASES)
def test_bm25_refuses(tmp_path, inputs, args, expect):
    # Options given twice: argparse keeps the last, so a case's own replaces the base's.
    refused("common.data.bm25", BM25 + args, tmp_path, expect, inputs=inputs)


@pytest.mark.parametrize("args, expect", EVALUATE_CASES)
def test_evaluate_refuses(tmp_path, inputs, args, expect):
    refused("common.evaluate", args, tmp_path, expect, inputs=inputs)


@pytest.mark.parametrize("args, expect", BUILTIN_CASES)
def test_builtin_refuses(tmp_path, inputs, args, expect):
    refused("common.data.builtin", args, tmp_path, expect, inputs=inputs)


@pytest.mark.parametrize("args, expect", REPORT_CASES)
def test_report_refuses(tmp_path, inputs, args, expect):
    refused("common.report", args, tmp_path, expect, inputs=inputs)


@pytest.mark.parametrize("csv, expect", REPORTED_CASES)
def test_report_refuses_a_malformed_reported_csv(tmp_path, inputs, monkeypatch, csv, expect):
    (inputs / "reported").mkdir()
    (inputs / "reported" / "qds.csv").write_text(csv)
    monkeypatch.setenv("EFFICIENT_RANKERS_REPORTED", str(inputs / "reported"))
    refused("common.report", ["{in}/metrics.json", *REPORT], tmp_path, expect, inputs=inputs)


@pytest.mark.parametrize("module, expect", [
    ("common.data.bm25", "the following arguments are required: --collection"),
    ("common.report", "argument METRICS_JSON: no such file: 1"),
])
def test_a_fresh_process_exits_with_status_2(tmp_path, module, expect):
    refused(module, ["--no_such_option", "1"], tmp_path, expect, fresh_process=True)
