"""`source_from_spec`: the task names configs use (``builtin:<split>``, ``irds:<id>``, a mapping of files)."""

import pytest

from common.data.formats import write_topics
from common.data.source import FileSource
from common.data.specs import TaskSpecError, check_spec, source_from_spec


def test_builtin_split():
    source = source_from_spec("builtin:dev")
    assert isinstance(source, FileSource) and source.name == "builtin-dev"
    assert len(source.topics()) == 100


def test_mapping_of_files(tmp_path):
    write_topics(tmp_path / "topics.tsv", {"q1": "hello world"})
    source = source_from_spec({"topics_path": str(tmp_path / "topics.tsv"), "name": "mine"})
    assert source.name == "mine" and source.topics() == {"q1": "hello world"}


@pytest.mark.parametrize("spec", ["msmarco-document/train", "irds:", "builtin-test", {"qrels_path": "q"},
                                  {"topics_path": "t", "run": "r"}])
def test_malformed_specs_say_what_is_expected(spec):
    with pytest.raises(ValueError, match="topics_path|builtin:<split>"):
        source_from_spec(spec)


def test_irds_ids_are_resolved_in_the_registry():
    with pytest.raises(TaskSpecError, match="unknown ir_datasets id 'msmarco-documnt/train'; did you mean one of: "
                                           "msmarco-document/train"):
        source_from_spec("irds:msmarco-documnt/train")


@pytest.mark.parametrize("spec, message", [
    ({"topics_path": "t", "qrel_path": "q"},
     "data.train.qrel_path: unknown key; a task from files takes topics_path, qrels_path, candidates_path, "
     "collection_path, name (topics_path required), one from a rank_llm file takes rank_llm_path, qrels_path, name"),
    ({"qrels_path": "q"}, "data.train.topics_path: missing; a task from files needs topics_path"),
    ({"rank_llm_path": "r", "candidates_path": "c"}, "data.train.candidates_path: unknown key"),
    ({"rank_llm_path": "nowhere.json"}, "data.train.rank_llm_path: no such file: nowhere.json"),
    ("builtin:tset", "data.train: unknown built-in split 'tset' in 'builtin:tset'; expected one of builtin:train, "
                     "builtin:dev, builtin:test"),
    ("/data/topics.tsv", "data.train: cannot read the task '/data/topics.tsv'; expected builtin:<split>"),
])
def test_check_spec_names_the_option_and_what_it_accepts(spec, message):
    with pytest.raises(TaskSpecError) as error:
        check_spec(spec, "data.train")
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_check_spec_accepts_existing_files(tmp_path):
    write_topics(tmp_path / "topics.tsv", {"q1": "hello"})
    check_spec({"topics_path": str(tmp_path / "topics.tsv"), "name": "x"}, "data.test")
    check_spec("builtin:dev")
