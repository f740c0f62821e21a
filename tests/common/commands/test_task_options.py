"""`common.commands.task_options`: the task, devices and output folder of an evaluate command line, checked at once and
refused in one line with exit status 2 (`common.refusals`)."""

import argparse
import re
from pathlib import Path

import pytest

from common.data.formats import Document, write_collection, write_qrels, write_run, write_topics
from common.data.specs import source_from_spec
from common.commands.run_folder import LAUNCHER_VARIABLES, launched_as_global_zero
from common.commands.task_options import add_task_arguments, fresh_output_dir, lightning_devices, task_spec_from_args


@pytest.fixture
def files(tmp_path) -> dict[str, str]:
    """The four files of a task: --topics, --qrels, --run and --collection."""
    paths = {name: tmp_path / name for name in ("topics.tsv", "qrels.txt", "run.trec", "docs.tsv")}
    write_topics(paths["topics.tsv"], {"q1": "a query"})
    write_qrels(paths["qrels.txt"], {"q1": {"d1": 1}})
    write_run(paths["run.trec"], {"q1": {"d1": 2.0, "d2": 1.0}})
    write_collection(paths["docs.tsv"], [Document("d1", "some text"), Document("d2", "other text")])
    return dict(zip(("topics", "qrels", "run", "collection"), map(str, paths.values())))


def _parse(option: str, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_task_arguments(parser, option, "the task")
    return parser.parse_args(argv)


def _flags(files: dict[str, str]) -> list[str]:
    return [arg for name, path in files.items() for arg in (f"--{name}", path)]


def _refused(capsys, call) -> str:
    """The one line `call` ends with, asserting exit status 2 and nothing else printed."""
    with pytest.raises(SystemExit) as exit_info:
        call()
    assert exit_info.value.code == 2
    printed = capsys.readouterr()
    assert printed.out == "" and len(printed.err.splitlines()) == 1
    return printed.err.strip()


def test_a_named_task_is_taken_as_it_is():
    assert task_spec_from_args(_parse("candidates", ["--candidates", "builtin:test"]), "candidates") == "builtin:test"
    args = _parse("task", ["--task", "irds:msmarco-document/trec-dl-2020/judged", "--topics", "ignored"])
    assert task_spec_from_args(args, "task") == "irds:msmarco-document/trec-dl-2020/judged"


def test_a_task_from_files_is_a_file_source_mapping(files):
    task = task_spec_from_args(_parse("candidates", _flags(files)), "candidates")
    assert task == {"topics_path": files["topics"], "qrels_path": files["qrels"], "candidates_path": files["run"],
                    "collection_path": files["collection"]}
    assert source_from_spec(task).qrels() == {"q1": {"d1": 1}}  # a spec `common.data.source` opens


def test_a_task_from_files_needs_all_four(files, capsys):
    some = {name: files[name] for name in ("topics", "run")}
    line = _refused(capsys, lambda: task_spec_from_args(_parse("candidates", _flags(some)), "candidates"))
    assert line == ("error: give --candidates TASK, or --topics, --qrels, --run and --collection, "
                    "or --rank_llm and --qrels")


def test_a_task_from_a_rank_llm_file_is_a_rank_llm_source_mapping(files, tmp_path, capsys):
    """``--rank_llm FILE --qrels FILE``: the queries, hits and their text from the JSON, labels from the qrels."""
    path = tmp_path / "rank_llm.json"
    path.write_text('[{"query": "a query", "hits": [{"qid": "q1", "docid": "d1", "rank": 1, "score": 2.0, '
                    '"content": "some text"}, {"qid": "q1", "docid": "d2", "rank": 2, "score": 1.0, '
                    '"content": "other text"}]}]')
    task = task_spec_from_args(_parse("task", ["--rank_llm", str(path), "--qrels", files["qrels"]]), "task")
    assert task == {"rank_llm_path": str(path), "qrels_path": files["qrels"]}
    source = source_from_spec(task)
    assert source.topics() == {"q1": "a query"} and source.qrels() == {"q1": {"d1": 1}}
    line = _refused(capsys, lambda: task_spec_from_args(_parse("task", ["--rank_llm", str(path)]), "task"))
    assert line == "error: --rank_llm: give the qrels it is measured with as --qrels (a rank_llm file holds none)"
    absent = str(tmp_path / "absent.json")
    args = _parse("task", ["--rank_llm", absent, "--qrels", files["qrels"]])
    assert _refused(capsys, lambda: task_spec_from_args(args, "task")) == f"error: --rank_llm: no such file: {absent}"


def test_a_missing_file_or_an_unknown_task_is_named_by_its_option(files, tmp_path, capsys):
    absent = str(tmp_path / "absent.tsv")
    args = _parse("task", _flags({**files, "qrels": absent}))
    assert _refused(capsys, lambda: task_spec_from_args(args, "task")) == f"error: --qrels: no such file: {absent}"
    line = _refused(capsys, lambda: task_spec_from_args(_parse("task", ["--task", "builtin:nope"]), "task"))
    assert line.startswith("error: --task: unknown built-in split 'nope'")
    line = _refused(capsys, lambda: task_spec_from_args(_parse("task", ["--task", "irds:no/such-id"]), "task"))
    assert line.startswith("error: --task: unknown ir_datasets id 'no/such-id'")


def test_devices_are_lightnings():
    for given in ("auto", "1", "4", "-1", "0,1", "0,", "2"):
        assert lightning_devices(given) == given
    for bad in ("0", "-2", "many", "1.5", "", ",", "0,a"):
        with pytest.raises(argparse.ArgumentTypeError, match="must be auto, a number of devices"):
            lightning_devices(bad)


def test_an_evaluate_output_folder_is_new_or_empty_and_not_created(tmp_path, monkeypatch, capsys):
    assert fresh_output_dir(tmp_path / "given", "x-evaluate") == tmp_path / "given"
    assert not (tmp_path / "given").exists()
    (tmp_path / "empty").mkdir()
    assert fresh_output_dir(str(tmp_path / "empty"), "x-evaluate") == tmp_path / "empty"
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "run.trec").write_text("")
    line = _refused(capsys, lambda: fresh_output_dir(tmp_path / "used", "x-evaluate"))
    assert line == f"error: --output_dir: {tmp_path / 'used'} is not empty: choose a new one"
    line = _refused(capsys, lambda: fresh_output_dir(tmp_path / "used" / "run.trec", "x-evaluate"))
    assert line == f"error: --output_dir: {tmp_path / 'used' / 'run.trec'} is a file, not a folder"
    monkeypatch.chdir(tmp_path)
    default = fresh_output_dir(None, "x-evaluate")
    assert default.parent == Path("outputs") and re.fullmatch(r"x-evaluate-\d{8}-\d{6}", default.name)


#: What each launcher sets in the processes it starts: (global rank zero's, another's).
LAUNCHED = {
    "torchrun": ({"RANK": "0", "GROUP_RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "2"},
                 {"RANK": "1", "GROUP_RANK": "0", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "2"}),
    "torchrun, second node": ({"RANK": "0", "GROUP_RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                               "WORLD_SIZE": "2"},
                              {"RANK": "1", "GROUP_RANK": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                               "WORLD_SIZE": "2"}),
    "lightning": ({}, {"LOCAL_RANK": "1", "NODE_RANK": "0", "WORLD_SIZE": "2"}),  # the first starts the others
    "lightning, once it has started them": ({"LOCAL_RANK": "0", "NODE_RANK": "0", "WORLD_SIZE": "2"},
                                            {"LOCAL_RANK": "1", "NODE_RANK": "0", "WORLD_SIZE": "2"}),
    "lightning, second node": ({}, {"NODE_RANK": "1"}),
    "srun": ({"SLURM_NTASKS": "2", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
              "SLURM_JOB_NAME": "rank", "SLURM_NTASKS_PER_NODE": "2"},
             {"SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NODEID": "0",
              "SLURM_JOB_NAME": "rank", "SLURM_NTASKS_PER_NODE": "2"}),
}  # fmt: skip


def _launched(monkeypatch, variables: dict[str, str]) -> None:
    """This process as a launcher would have started it: only `variables` of the launchers' set."""
    for name in (*LAUNCHER_VARIABLES, "WORLD_SIZE", "LOCAL_WORLD_SIZE", "SLURM_PROCID", "SLURM_LOCALID",
                 "SLURM_NODEID", "SLURM_JOB_NAME", "SLURM_NTASKS_PER_NODE"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("launcher", sorted(LAUNCHED))
def test_global_rank_zero_is_told_from_the_launchers_environment(monkeypatch, launcher):
    zero, other = LAUNCHED[launcher]
    _launched(monkeypatch, zero)
    assert launched_as_global_zero()
    _launched(monkeypatch, other)
    assert not launched_as_global_zero()


def test_only_global_rank_zero_checks_the_output_folder(tmp_path, monkeypatch, capsys):
    used = tmp_path / "used"
    used.mkdir()
    (used / "run.trec").write_text("")
    _launched(monkeypatch, LAUNCHED["torchrun"][1])
    assert fresh_output_dir(used, "x-evaluate") == used  # rank zero's folder, which this launch may have begun
    assert fresh_output_dir(tmp_path / "new", "x-evaluate") == tmp_path / "new" and not (tmp_path / "new").exists()
    _launched(monkeypatch, LAUNCHED["torchrun"][0])
    line = _refused(capsys, lambda: fresh_output_dir(used, "x-evaluate"))
    assert line == f"error: --output_dir: {used} is not empty: choose a new one"
