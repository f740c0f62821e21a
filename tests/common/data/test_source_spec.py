"""`source_from_spec`: the task names configs use (``builtin:<split>``, ``irds:<id>``, a mapping of files)."""

import pytest

from common.data.formats import write_topics
from common.data.irds import UnknownDatasetError
from common.data.source import FileSource, source_from_spec


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
    with pytest.raises(UnknownDatasetError):
        source_from_spec("irds:msmarco-documnt/train")
