"""The selection runs of the TREC DL configs (``results/{mva,earl}/selection/<setting>/command.txt``, listed in each
README's "How settings are chosen"): each is its package's selection config with flags, a config that differs from
the TREC DL one only in its tasks, DL 2020's training part and its held-out part (`common.data.query_split`), so that
no selection run reads the test year. The resolved configs are tests/fixtures/resolved_configs.json's (held against
the real parser by tests/test_resolved_configs.py); the slow tier parses every command's flags."""

import importlib
import json
import shlex
from pathlib import Path

import pytest

from tests.printed_config import printed_config

REPO = Path(__file__).resolve().parents[2]
RESOLVED = json.loads((REPO / "tests" / "fixtures" / "resolved_configs.json").read_text())
PACKAGES = ("mva", "earl")
DL20 = {"rank_llm_path": "../shared/data/trec_dl/candidates_with_text/rank_llm.BM25.retrieve_results_dl20.json",
        "qrels_path": "../shared/data/trec_dl/qrels/qrels.dl20-passage.txt", "split_seed": 0, "heldout_one_in": 4}


def selection_config(package: str) -> str:
    return f"{package}/configs/trec-dl-passages-minilm-selection.yaml"


def commands(package: str) -> dict[str, list[list[str]]]:
    """Each selection folder's training commands (its command.txt's ``python -m`` lines, continuations joined), as
    argument lists after ``python -m <module>``."""
    found = {}
    for path in sorted((REPO / "results" / package / "selection").glob("*/command.txt")):
        text = path.read_text().replace("\\\n", " ")
        found[path.parent.name] = [shlex.split(line)[2:] for line in text.splitlines() if line.startswith("python")]
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_the_selection_config_changes_only_the_tasks(package):
    base, selection = RESOLVED[f"{package}/configs/trec-dl-passages-minilm.yaml"], RESOLVED[selection_config(package)]
    assert {k: v for k, v in selection.items() if k != "data"} == {k: v for k, v in base.items() if k != "data"}
    assert ({k: v for k, v in selection["data"].items() if k not in ("train", "test")}
            == {k: v for k, v in base["data"].items() if k not in ("train", "test")})
    assert selection["data"]["train"] == {**DL20, "name": "trec-dl-2020-passages-train", "queries": "train"}
    assert selection["data"]["test"] == {**DL20, "name": "trec-dl-2020-passages-heldout", "queries": "heldout"}
    assert selection["data"]["dev"] is None and "dl19" not in json.dumps(selection)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_selection_run_is_the_selection_config_with_flags_and_is_listed(package):
    found = commands(package)
    assert found, f"no results/{package}/selection/*/command.txt"
    readme = (REPO / "results" / package / "README.md").read_text()
    for name, lines in found.items():
        assert lines, name
        for args in lines:
            assert args[:3] == [f"{package}.train", "--config", selection_config(package)], name
            assert "dl19" not in " ".join(args) and not any(a.startswith("--data.test") for a in args), name
        assert f"`selection/{name}`" in readme, f"{name} is not listed in results/{package}/README.md"


@pytest.mark.slow
@pytest.mark.parametrize("package, name, index", [(p, n, i) for p in PACKAGES for n, lines in commands(p).items()
                                                  for i in range(len(lines))])
def test_each_selection_command_parses_to_a_run_tested_on_the_heldout_queries(package, name, index):
    module, *args = commands(package)[name][index]
    args = [str(REPO / a) if a == selection_config(package) else a for a in args]
    config = printed_config(importlib.import_module(module).main, module, *args)
    assert config["data"]["test"]["queries"] == "heldout" and config["data"]["train"]["queries"] == "train"
