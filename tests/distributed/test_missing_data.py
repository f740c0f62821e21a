"""A command whose ir_datasets data is missing stops before anything starts: one line per missing file, all of them.

Each command runs in a subprocess on a fake ``IR_DATASETS_HOME`` (a tmp folder) with every download routed to a
proxy that refuses connections (a socket bound but not listening), so a download is impossible whatever the network
of the machine. The files expected missing are read from ir_datasets' own download list (``etc/downloads.json``):
each entry's ``cache_path`` under ``<home>/msmarco-document`` and its URL, independent of how
`common.data.irds_files` walks the handlers. With the files present (tiny MS MARCO document files written from the
built-in collection, in ir_datasets' formats), the check passes and a tiny run trains on them.
"""

import gzip
import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from common.data.builtin import builtin_source
from tests.qds.test_train import TINY

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
QDS_CHECKPOINT = REPO / "tests" / "fixtures" / "checkpoints" / "qds.ckpt"
CK_CHECKPOINT = REPO / "tests" / "fixtures" / "checkpoints" / "conformer_kernel.ckpt"
#: The tasks of the QDS paper configs, and the entries of ir_datasets' download list each reads.
PAPER_TASKS = {"--data.train": "msmarco-document/train", "--data.dev": "msmarco-document/dev",
               "--data.test": "msmarco-document/trec-dl-2019/judged"}
ENTRIES = {"--data.train": "train", "--data.dev": "dev", "--data.test": "trec-dl-2019"}
PARTS = ("queries", "qrels", "scoreddocs")


@pytest.fixture
def refusing_proxy():
    """A local port that refuses connections while the test runs: the proxy every download is sent to."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound, never listening: a connection is refused at once
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


def command(args: list[str], home: Path, proxy: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("no_proxy", "all_proxy")}
    env.update(IR_DATASETS_HOME=str(home), HTTPS_PROXY=proxy, HTTP_PROXY=proxy, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def download_list() -> dict:
    """ir_datasets' MS MARCO document entries (read from the package, without importing it)."""
    package = Path(importlib.util.find_spec("ir_datasets").origin).parent
    return json.loads((package / "etc" / "downloads.json").read_text())["msmarco-document"]


def expected_missing(home: Path, options: list[str]) -> dict[str, tuple[str, set[str]]]:
    """File -> (its URL, the options needing it): the collection for every option, and each task's own three."""
    entries = download_list()
    files: dict[str, tuple[str, set[str]]] = {}
    for key, needers in [("docs", set(options)), *((f"{ENTRIES[o]}/{p}", {o}) for o in options for p in PARTS)]:
        files[str(home / "msmarco-document" / entries[key]["cache_path"])] = (entries[key]["url"], needers)
    return files


def check_refusal(done: subprocess.CompletedProcess, expected: dict[str, tuple[str, set[str]]]) -> None:
    """Exit status 2 and, on stderr, exactly one ``error:`` line per expected file, saying how to get it (``download
    URL``, or ``ir_datasets makes it from URL`` for a file it extracts) and naming the options that need it."""
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert "Traceback" not in done.stderr and all(line.startswith("error: ") for line in lines), done.stderr[-3000:]
    named = {line.split(": missing ")[1].split(", a file of the ")[0]: line for line in lines}
    assert len(named) == len(lines) == len(expected)
    assert set(named) == set(expected)
    for path, (how, options) in expected.items():
        line = named[path]
        if "://" in how.split()[0]:
            how = f"download {how}"
        assert f"; {how}" in line and "not downloadable now: no connection to 127.0.0.1:" in line, line
        tasks = line[len("error: "):line.index(": missing ")]
        assert {task.split(" irds:")[0] for task in tasks.split(", ")} == options


def test_a_paper_config_without_its_data_names_every_missing_file(tmp_path, refusing_proxy):
    out = tmp_path / "run"
    done = command(["-m", "qds.train", "--config", "qds/configs/trec-dl-2019.yaml", "--output_dir", str(out)],
                   tmp_path / "irds", refusing_proxy)
    check_refusal(done, expected_missing(tmp_path / "irds", list(PAPER_TASKS)))
    assert len(done.stderr.splitlines()) == 10  # the collection, and the queries, qrels and candidates of 3 tasks
    assert not out.exists()


def test_evaluate_without_its_data_names_every_missing_file(tmp_path, refusing_proxy):
    out = tmp_path / "eval"
    done = command(["-m", "qds.evaluate", "--checkpoint", str(QDS_CHECKPOINT), "--task",
                    f"irds:{PAPER_TASKS['--data.test']}", "--output_dir", str(out)], tmp_path / "irds", refusing_proxy)
    expected = {path: (url, {"--task"}) for path, (url, _) in
                expected_missing(tmp_path / "irds", ["--data.test"]).items()}
    check_refusal(done, expected)
    assert not out.exists()


def test_ck_evaluate_asks_of_orcas_only_its_queries_and_clicks(tmp_path, refusing_proxy):
    home, out = tmp_path / "irds", tmp_path / "eval"
    done = command(["-m", "conformer_kernel.evaluate", "--checkpoint", str(CK_CHECKPOINT), "--task",
                    "irds:msmarco-document/trec-dl-2020/judged", "--orcas", "irds:msmarco-document/orcas",
                    "--output_dir", str(out)], home, refusing_proxy)
    entries = download_list()
    keys = {"docs": "--task", **{f"trec-dl-2020/{p}": "--task" for p in PARTS},
            "orcas/queries": "--orcas", "orcas/qrels": "--orcas"}  # not orcas/scoreddocs: the field reads no run
    check_refusal(done, {str(home / "msmarco-document" / entries[key]["cache_path"]): (entries[key]["url"], {option})
                         for key, option in keys.items()})
    assert not out.exists()


def test_a_ck_orcas_config_names_the_orcas_files_with_the_tasks(tmp_path, refusing_proxy):
    home, out = tmp_path / "irds", tmp_path / "run"
    config = "conformer_kernel/configs/trec-dl-2020/ndrm1-orcas-rerank.yaml"
    done = command(["-m", "conformer_kernel.train", "--config", config, "--output_dir", str(out)], home, refusing_proxy)
    entries = download_list()
    splits = {"--data.train": "train", "--data.dev": "trec-dl-2019", "--data.test": "trec-dl-2020"}
    keys = {"docs": set(splits), **{f"{entry}/{p}": {option} for option, entry in splits.items() for p in PARTS},
            "orcas/queries": {"--data.orcas"}, "orcas/qrels": {"--data.orcas"}}
    check_refusal(done, {str(home / "msmarco-document" / entries[key]["cache_path"]): (entries[key]["url"], options)
                         for key, options in keys.items()})
    assert not out.exists()


def test_a_passage_config_names_extracted_files_and_local_copies(tmp_path, refusing_proxy):
    # ir_datasets' msmarco_passage.py, by hand: the collection is extracted from collectionandqueries.tar.gz; the
    # train queries (of split200-train and of split200-valid, the dev task) from queries.tar.gz; the big candidate
    # runs are downloaded with no cache path, so a copy goes to downloads/<md5>; TREC DL 2019's small queries file is
    # kept only extracted. The training task is read for its queries and passages alone (its qrels and candidates
    # are the dev task's files only): its groups are triples-small's triples, which ir_datasets maps to ids from
    # triples.train.small.tar.gz (no cache path: downloads/<md5>) with the collection and the train queries.
    home, out = tmp_path / "irds", tmp_path / "run"
    done = command(["-m", "earl.train", "--config", "earl/configs/msmarco/earl-cls.yaml", "--output_dir", str(out)],
                   home, refusing_proxy)
    web = "https://msmarco.z22.web.core.windows.net/msmarcoranking"
    passage, copies = home / "msmarco-passage", home / "downloads"
    train, dev, test, triples = "--data.train", "--data.dev", "--data.test", "--data.train_triples"
    check_refusal(done, {
        str(passage / "collectionandqueries.tar.gz"): (f"{web}/collectionandqueries.tar.gz",
                                                       {train, dev, test, triples}),
        str(passage / "queries.tar.gz"): (f"{web}/queries.tar.gz", {train, dev, triples}),
        str(passage / "train" / "qrels"): (f"{web}/qrels.train.tsv", {dev}),
        str(copies / "d99fdbd5b2ea84af8aa23194a3263052"): (f"{web}/top1000.train.tar.gz", {dev}),
        str(copies / "c13bf99ff23ca691105ad12eab837f84"): (f"{web}/triples.train.small.tar.gz", {triples}),
        str(passage / "trec-dl-2019" / "queries.tsv"):
            (f"ir_datasets makes it from {web}/msmarco-test2019-queries.tsv.gz", {test}),
        str(passage / "trec-dl-2019" / "qrels"): ("https://trec.nist.gov/data/deep/2019qrels-pass.txt", {test}),
        str(copies / "ec9e012746aa9763c7ff10b3336a3ce1"): (f"{web}/msmarco-passagetest2019-top1000.tsv.gz", {test}),
    })
    assert not out.exists()


def fake_msmarco_document(home: Path) -> None:
    """The MS MARCO document files the paper configs read, tiny: the built-in collection and splits in ir_datasets'
    formats (TREC documents with url and title lines, gzipped query TSVs, qrels and runs), at ir_datasets' paths."""
    entries = download_list()

    def put(key: str, text: str) -> None:
        path = home / "msmarco-document" / entries[key]["cache_path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        gzipped = entries[key]["url"].endswith(".gz")
        path.write_bytes(gzip.compress(text.encode()) if gzipped else text.encode())

    put("docs", "".join(f"<DOC>\n<DOCNO>{d.doc_id}</DOCNO>\n<TEXT>\nhttp://example.org/{d.doc_id}\n{d.title}\n"
                        f"{d.text}\n</TEXT>\n</DOC>\n" for d in builtin_source("test").documents().documents()))
    for split, option in zip(("train", "dev", "test"), ENTRIES):
        source, entry = builtin_source(split), ENTRIES[option]
        put(f"{entry}/queries", "".join(f"{qid}\t{text}\n" for qid, text in source.topics().items()))
        put(f"{entry}/qrels", "".join(f"{qid} 0 {d} {label}\n" for qid, labels in source.qrels().items()
                                      for d, label in labels.items()))
        put(f"{entry}/scoreddocs", "".join(
            f"{qid} Q0 {d} {rank} {score} bm25\n" for qid, scores in source.candidates().items()
            for rank, (d, score) in enumerate(sorted(scores.items(), key=lambda item: -item[1]), 1)))


def test_with_the_files_present_the_run_trains_and_a_removed_one_is_named_alone(tmp_path, refusing_proxy):
    home = tmp_path / "irds"
    fake_msmarco_document(home)
    tasks = [arg for option, task in PAPER_TASKS.items() for arg in (option, f"irds:{task}")]
    out = tmp_path / "run"
    done = command(["-m", "qds.train", *TINY, *tasks, "--trainer.accelerator", "cpu", "--output_dir", str(out)],
                   home, refusing_proxy)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "error:" not in done.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert len(builtin_source("test").qrels()) == 100 and 0 < metrics["qds"]["ndcg_cut_10"] <= 1

    removed = home / "msmarco-document" / download_list()["trec-dl-2019/qrels"]["cache_path"]
    removed.unlink()
    done = command(["-m", "qds.train", *TINY, *tasks, "--output_dir", str(tmp_path / "again")], home, refusing_proxy)
    url = download_list()["trec-dl-2019/qrels"]["url"]
    check_refusal(done, {str(removed): (url, {"--data.test"})})
    assert not (tmp_path / "again").exists()
