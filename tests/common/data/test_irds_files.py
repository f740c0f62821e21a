"""`refuse_missing_files` (common.data.irds_files) on datasets made of ir_datasets' own file objects.

Each test registers a small dataset under a unique id (removed afterwards) whose handlers read through ir_datasets'
real ``Download``, ``Cache``, ``GzipExtract``, ``ExpectedFile``, ``TarExtractAll``/``RelativePath`` objects over
files in tmp_path, so the expected missing files are known by construction. The network is blocked (name lookups
and connects raise and are recorded): no test downloads, and "not downloadable" is what the blocked network gives.
"""

import gzip
import socket

import pytest

ir_datasets = pytest.importorskip("ir_datasets")

from ir_datasets.datasets.base import Dataset, ExpectedFile  # noqa: E402
from ir_datasets.formats import TrecQrels, TrecScoredDocs, TsvDocs, TsvQueries  # noqa: E402
from ir_datasets.util import Cache, Download, GzipExtract, RelativePath, RequestsDownload, TarExtractAll  # noqa: E402

from common.data.irds import IrDatasetsSource  # noqa: E402
from common.data.irds_files import Needed, missing_files, needed_files, refuse_missing_files  # noqa: E402

URL = "https://data.example.invalid/tiny"
QUERIES, QRELS, RUN = "q1\tcats\nq2\tdogs\n", "q1 0 d1 1\nq2 0 d2 1\n", "q1 Q0 d1 1 2.5 bm25\nq2 Q0 d2 1 1.5 bm25\n"
DOCS = "d1\tcats purr\nd2\tdogs bark\n"
FILES = {"queries": ("queries.tsv", QUERIES), "qrels": ("qrels.txt", QRELS), "scoreddocs": ("run.txt", RUN),
         "docs": ("docs.tsv", DOCS)}


pytestmark = pytest.mark.usefixtures("network")  # offline; `network`, `register`: conftest.py


def downloads(home):
    """A dataset of four downloads, each saved under `home` as ir_datasets' DownloadConfig would; none written."""
    dl = {part: Download([RequestsDownload(f"{URL}/{name}")], cache_path=str(home / name))
          for part, (name, _) in FILES.items()}
    return Dataset(TsvQueries(dl["queries"]), TrecQrels(dl["qrels"], {1: "relevant"}), TrecScoredDocs(dl["scoreddocs"]),
                   TsvDocs(dl["docs"]))


def place(home, *parts):
    for part in parts:
        name, text = FILES[part]
        (home / name).write_text(text)


def line(option, dataset_id, path, part, url):
    return (f"{option} irds:{dataset_id}: missing {path}, a file of the {part}; download {url} to that path "
            f"(not downloadable now: no connection to data.example.invalid:443)")


def test_every_missing_file_is_one_line_naming_the_option_file_and_url(tmp_path, register, capsys, network):
    dataset_id = register(downloads(tmp_path))
    place(tmp_path, "qrels")
    with pytest.raises(SystemExit) as exit:
        refuse_missing_files([f"irds:{dataset_id}"], ["--data.dev"])
    assert exit.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "error: " + line("--data.dev", dataset_id, tmp_path / "docs.tsv", "documents", f"{URL}/docs.tsv"),
        "error: " + line("--data.dev", dataset_id, tmp_path / "queries.tsv", "queries", f"{URL}/queries.tsv"),
        "error: " + line("--data.dev", dataset_id, tmp_path / "run.txt", "candidates (scoreddocs)", f"{URL}/run.txt"),
    ]
    assert network == ["data.example.invalid"]  # one connection tried for the three files, none downloaded
    assert sorted(p.name for p in tmp_path.iterdir()) == ["qrels.txt"]  # nothing written


def test_quiet_refuses_without_a_word(tmp_path, register, capsys):
    dataset_id = register(downloads(tmp_path))
    with pytest.raises(SystemExit) as exit:
        refuse_missing_files([f"irds:{dataset_id}"], ["--data.dev"], quiet=True)
    assert exit.value.code == 2 and capsys.readouterr().err == ""


def test_present_files_pass_without_the_network(tmp_path, register, network):
    dataset_id = register(downloads(tmp_path))
    place(tmp_path, *FILES)
    refuse_missing_files([f"irds:{dataset_id}", "builtin:test", {"topics_path": "t"}], ["--data.train", "--x", "--y"])
    assert network == []


def test_a_file_two_tasks_need_is_one_line_naming_both(tmp_path, register):
    shared = Download([RequestsDownload(f"{URL}/docs.tsv")], cache_path=str(tmp_path / "docs.tsv"))
    train = register(Dataset(TsvDocs(shared), TsvQueries(Download([RequestsDownload(f"{URL}/q")],
                                                                  cache_path=str(tmp_path / "q")))))
    test = register(Dataset(TsvDocs(shared)))
    assert missing_files([f"irds:{train}", f"irds:{test}"], ["--data.train", "--data.test"]) == [
        line(f"--data.train irds:{train}, --data.test", test, tmp_path / "docs.tsv", "documents", f"{URL}/docs.tsv"),
        line("--data.train", train, tmp_path / "q", "queries", f"{URL}/q"),
    ]


def test_a_reachable_host_makes_an_absent_file_downloadable(tmp_path, register, monkeypatch):
    tried = []

    class Connection:
        def close(self):
            pass

    def connect(address, timeout=None):
        tried.append(address)
        return Connection()

    monkeypatch.setattr(socket, "create_connection", connect)
    dataset_id = register(downloads(tmp_path))
    assert missing_files([f"irds:{dataset_id}"], ["--data.train"]) == []
    assert tried == [("data.example.invalid", 443)]
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example.invalid:3128")  # a download would go through it
    assert missing_files([f"irds:{dataset_id}"], ["--data.train"]) == []
    assert tried[-1] == ("proxy.example.invalid", 3128)


def test_parts_limit_what_is_checked(tmp_path, register):
    dataset_id = register(downloads(tmp_path))
    found = missing_files([f"irds:{dataset_id}"], ["--orcas"], parts=[("queries", "qrels")])
    assert [entry.split(": missing ")[1].split(",")[0] for entry in found] == [str(tmp_path / "queries.tsv"),
                                                                             str(tmp_path / "qrels.txt")]


def test_a_cached_extract_stands_for_its_download(tmp_path, register):
    # ir_datasets keeps some files extracted (Cache over GzipExtract): the extract present, the archive is not needed.
    archive = Download([RequestsDownload(f"{URL}/queries.tsv.gz")], cache_path=str(tmp_path / "queries.tsv.gz"))
    extracted = tmp_path / "queries.tsv"
    dataset = Dataset(TsvQueries(Cache(GzipExtract(archive), extracted)))
    assert needed_files(dataset, "queries") == [Needed(str(tmp_path / "queries.tsv.gz"), (f"{URL}/queries.tsv.gz",))]
    (tmp_path / "queries.tsv.gz").write_bytes(gzip.compress(QUERIES.encode()))
    assert needed_files(dataset, "queries") == []
    (tmp_path / "queries.tsv.gz").unlink()
    extracted.write_text(QUERIES)
    assert needed_files(dataset, "queries") == []


def test_a_streamed_download_under_a_cache_names_the_cache(tmp_path, register):
    streamed = Download([RequestsDownload(f"{URL}/queries.tsv.gz")])  # no cache_path: kept nowhere
    dataset_id = register(Dataset(TsvQueries(Cache(GzipExtract(streamed), tmp_path / "queries.tsv"))))
    assert missing_files([f"irds:{dataset_id}"], ["--candidates"]) == [
        f"--candidates irds:{dataset_id}: missing {tmp_path / 'queries.tsv'}, a file of the queries; ir_datasets "
        f"makes it from {URL}/queries.tsv.gz (not downloadable now: no connection to data.example.invalid:443)"]


def test_licensed_data_gives_ir_datasets_instructions(tmp_path, register):
    corpus = tmp_path / "disks45" / "corpus"
    dataset_id = register(Dataset(TsvDocs(ExpectedFile(corpus, instructions="Place the TREC disks\n  at {path}"))))
    assert missing_files([f"irds:{dataset_id}"], ["--data.test"]) == [
        f"--data.test irds:{dataset_id}: missing {corpus}, a file of the documents; Place the TREC disks at {corpus}"]


def test_a_file_missing_from_an_extracted_folder(tmp_path, register):
    archive = Download([RequestsDownload(f"{URL}/all.tar.gz")], cache_path=str(tmp_path / "all.tar.gz"))
    folder = tmp_path / "all"
    dataset_id = register(Dataset(TsvQueries(RelativePath(TarExtractAll(archive, folder), "topics.tsv"))))
    assert missing_files([f"irds:{dataset_id}"], ["--t"]) == [
        line("--t", dataset_id, tmp_path / "all.tar.gz", "queries", f"{URL}/all.tar.gz")]  # the archive, as downloaded
    folder.mkdir()  # extracted, but without the file
    assert missing_files([f"irds:{dataset_id}"], ["--t"]) == [
        f"--t irds:{dataset_id}: missing {folder / 'topics.tsv'}, a file of the queries; {folder} is there but "
        f"lacks it"]
    (folder / "topics.tsv").write_text(QUERIES)
    assert missing_files([f"irds:{dataset_id}"], ["--t"]) == []


def test_a_filtered_subset_needs_its_parents_files(tmp_path, register):
    from ir_datasets.datasets.base import FilteredQueries
    from ir_datasets.util import Lazy

    parent = downloads(tmp_path)
    subset = register(Dataset(FilteredQueries(parent.queries_handler(), Lazy(lambda: {"q1"})), parent))
    assert [entry.split(", a file of the ")[1].split(";")[0] for entry in missing_files([f"irds:{subset}"], ["--x"])] \
        == ["documents", "queries", "qrels", "candidates (scoreddocs)"]


def test_a_built_document_store_stands_for_the_collection(tmp_path, register):
    dataset = downloads(tmp_path)
    dataset_id = register(dataset)
    place(tmp_path, *FILES)
    assert IrDatasetsSource(dataset_id).documents()["d1"].text == "cats purr"  # ir_datasets builds its store
    (tmp_path / "docs.tsv").unlink()
    assert needed_files(dataset, "docs") == []
    assert IrDatasetsSource(dataset_id).documents()["d2"].text == "dogs bark"  # read from the store indeed


def test_specs_and_options_must_pair():
    with pytest.raises(ValueError, match="2 task specs but 1 option names"):
        missing_files(["irds:a", "irds:b"], ["--x"])


def test_a_file_missing_after_the_check_ends_in_one_line(tmp_path, register, capsys, monkeypatch):
    """What the train and evaluate commands do with a task's files (`common.commands.cli.INPUT_ERRORS`): a file that
    went missing after the check fails where ir_datasets reads it, and ends the command in one line."""
    from common.commands.cli import INPUT_ERRORS
    from common.refusals import input_errors

    monkeypatch.setenv("IR_DATASETS_DL_TRIES", "1")  # one failed try, no retry loop
    dataset_id = register(downloads(tmp_path))
    with pytest.raises(SystemExit) as exit, input_errors(*INPUT_ERRORS):
        IrDatasetsSource(dataset_id).topics()
    assert exit.value.code == 2
    # ir_datasets' own warning of the failed download may come first; the refusal is one line, the last
    (said,) = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("[WARNING]")]
    assert said.startswith(f"error: ir_datasets dataset '{dataset_id}': could not get the files for its queries")
    assert f"{tmp_path / 'queries.tsv'} (from {URL}/queries.tsv)" in said
