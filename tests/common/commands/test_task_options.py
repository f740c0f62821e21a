"""`common.commands.task_options`: the task, devices and output folder of an evaluate command line, checked at once and
refused in one line with exit status 2 (`common.refusals`)."""

import argparse
import re
from pathlib import Path

import pytest

from common.data.formats import Document, write_collection, write_qrels, write_run, write_topics
from common.data.specs import source_from_spec
from common.commands.run_folder import LAUNCHER_VARIABLES, launched_as_global_zero
from common.commands.task_options import (add_process_arguments, add_task_arguments, check_one_device,
                                          fresh_output_dir, lightning_devices, one_device, task_spec_from_args)


@pytest.fixture
def files(tmp_path) -> dict[str, str]:
    """The four files of a task: --topics, --qrels, --run and --collection."""
    paths = {name: tmp_path / name for name in ("topics.tsv", "qrels.txt", "run.trec", "docs.tsv")}
    write_topics(paths["topics.tsv"], {"q1": "a query"})
    write_qrels(paths["qrels.txt"], {"q1": {"d1": 1}})
    write_run(paths["run.trec"], {"q1": {"d1": 2.0, "d2": 1.0}})
    write_collection(paths["docs.tsv"], [Document("d1", "some text"), Document("d2", "other text")])
    return dict(zip(("topics", "qrels", "run", "collection"), map(str, paths.values())))


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_task_arguments(parser, "the task")
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
    assert task_spec_from_args(_parse(["--task", "builtin:test"])) == "builtin:test"
    args = _parse(["--task", "irds:msmarco-document/trec-dl-2020/judged", "--topics", "ignored"])
    assert task_spec_from_args(args) == "irds:msmarco-document/trec-dl-2020/judged"


def test_a_task_from_files_is_a_file_source_mapping(files):
    task = task_spec_from_args(_parse(_flags(files)))
    assert task == {"topics_path": files["topics"], "qrels_path": files["qrels"], "candidates_path": files["run"],
                    "collection_path": files["collection"]}
    assert source_from_spec(task).qrels() == {"q1": {"d1": 1}}  # a spec `common.data.source` opens


def test_a_task_from_files_needs_topics_run_and_collection(files, capsys):
    some = {name: files[name] for name in ("topics", "qrels", "run")}
    line = _refused(capsys, lambda: task_spec_from_args(_parse(_flags(some))))
    assert line == ("error: give --task TASK, or --topics, --run and --collection (and --qrels to compute metrics), "
                    "or --rank_llm (and --qrels)")


def test_a_task_from_files_without_qrels_judges_nothing(files):
    """No --qrels: a `FileSource` mapping without qrels_path, whose qrels are empty and whose queries are all kept."""
    unjudged = {name: path for name, path in files.items() if name != "qrels"}
    task = task_spec_from_args(_parse(_flags(unjudged)))
    assert task == {"topics_path": files["topics"], "candidates_path": files["run"],
                    "collection_path": files["collection"]}
    source = source_from_spec(task)
    assert source.qrels() == {} and source.candidates() == {"q1": {"d1": 2.0, "d2": 1.0}}


def test_a_task_from_a_rank_llm_file_is_a_rank_llm_source_mapping(files, tmp_path, capsys):
    """``--rank_llm FILE --qrels FILE``: the queries, hits and their text from the JSON, labels from the qrels."""
    path = tmp_path / "rank_llm.json"
    path.write_text('[{"query": "a query", "hits": [{"qid": "q1", "docid": "d1", "rank": 1, "score": 2.0, '
                    '"content": "some text"}, {"qid": "q1", "docid": "d2", "rank": 2, "score": 1.0, '
                    '"content": "other text"}]}]')
    task = task_spec_from_args(_parse(["--rank_llm", str(path), "--qrels", files["qrels"]]))
    assert task == {"rank_llm_path": str(path), "qrels_path": files["qrels"]}
    source = source_from_spec(task)
    assert source.topics() == {"q1": "a query"} and source.qrels() == {"q1": {"d1": 1}}
    unjudged = task_spec_from_args(_parse(["--rank_llm", str(path)]))  # no --qrels: re-ranked, not measured
    assert unjudged == {"rank_llm_path": str(path)} and source_from_spec(unjudged).qrels() == {}
    absent = str(tmp_path / "absent.json")
    args = _parse(["--rank_llm", absent, "--qrels", files["qrels"]])
    assert _refused(capsys, lambda: task_spec_from_args(args)) == f"error: --rank_llm: no such file: {absent}"


def test_a_missing_file_or_an_unknown_task_is_named_by_its_option(files, tmp_path, capsys):
    absent = str(tmp_path / "absent.tsv")
    args = _parse(_flags({**files, "qrels": absent}))
    assert _refused(capsys, lambda: task_spec_from_args(args)) == f"error: --qrels: no such file: {absent}"
    line = _refused(capsys, lambda: task_spec_from_args(_parse(["--task", "builtin:nope"])))
    assert line.startswith("error: --task: unknown built-in split 'nope'")
    line = _refused(capsys, lambda: task_spec_from_args(_parse(["--task", "irds:no/such-id"])))
    assert line.startswith("error: --task: unknown ir_datasets id 'no/such-id'")


def test_devices_are_lightnings():
    for given in ("auto", "1", "4", "-1", "0,1", "0,", "2"):
        assert lightning_devices(given) == given
    for bad in ("0", "-2", "many", "1.5", "", ",", "0,a"):
        with pytest.raises(argparse.ArgumentTypeError, match="must be auto, a number of devices"):
            lightning_devices(bad)


def _one_device_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_process_arguments(parser)
    return parser.parse_args(list(argv))


def test_a_one_process_command_takes_one_device_of_lightnings_options(monkeypatch, capsys):
    """`check_one_device` and `one_device` (EARL's and MVA's evaluate, mva.pretrain): the CPU, the first GPU or the
    GPU of an index; several devices, nodes, another accelerator or a GPU this machine lacks refused in one line."""
    import torch

    def device(*argv: str):
        args = _one_device_args(*argv)
        check_one_device(args, "x.evaluate", "one query at a time")
        return one_device(args)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert device() == device("--accelerator", "cpu", "--devices", "1") == torch.device("cpu")
    assert _refused(capsys, lambda: device("--accelerator", "gpu")) == (
        "error: --accelerator: cuda:0 is not available on this machine")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert device() == device("--accelerator", "cuda", "--devices", "1") == torch.device("cuda:0")
    assert device("--devices", "1,") == torch.device("cuda:1") and device("--accelerator", "cpu") == torch.device("cpu")
    assert _refused(capsys, lambda: device("--devices", "2,")) == (
        "error: --devices: cuda:2 is not available on this machine")
    one = "x.evaluate computes in one process (one query at a time)"
    assert _refused(capsys, lambda: device("--devices", "2")) == (
        f"error: --devices: {one}: give one device (auto, 1, or an index such as 0,); got 2")
    assert _refused(capsys, lambda: device("--num_nodes", "2")) == f"error: --num_nodes: {one}; give 1"
    assert _refused(capsys, lambda: device("--accelerator", "tpu")) == (
        "error: --accelerator: x.evaluate computes on auto, cpu, gpu, cuda; got tpu")
    assert _refused(capsys, lambda: device("--accelerator", "cpu", "--devices", "0,")) == (
        "error: --devices: an index names a GPU; --accelerator cpu takes auto or 1, got 0,")


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
}


def _launched(monkeypatch, variables: dict[str, str]) -> None:
    """This process as a launcher would have started it: only `variables` of the launchers' set."""
    for name in (*LAUNCHER_VARIABLES, "WORLD_SIZE", "LOCAL_WORLD_SIZE", "SLURM_PROCID", "SLURM_LOCALID",
                 "SLURM_NODEID", "SLURM_JOB_NAME", "SLURM_NTASKS_PER_NODE"):
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
