"""`common.commands.train`: what a `TrainCommand` declares becomes the command's options and checks (``--compare_with``
with baselines, ``--test_modes`` with test modes), read here from the committed schemas, which
``tests/common/commands/test_help.py`` keeps equal to the live parsers'."""

from pathlib import Path

import pytest
import yaml

from common.commands.help import COMMANDS, command_files
from common.commands.train import TrainCommand, check_bert_lengths


def declared(baselines=(), check=None) -> TrainCommand:
    return TrainCommand(name="x.train", default_config=Path("x.yaml"), model="x.M", data="x.D", monitor="dev/m",
                        run_name=str, paper="x", paper_tables=lambda *a: "", check=check,
                        baselines=baselines)  # fmt: skip


@pytest.mark.parametrize("baselines, said", [
    (("de",), "de"), (("de", "ca"), "de and/or ca"), (("a", "b", "c"), "a, b and/or c"),
])  # fmt: skip
def test_compare_with_lists_the_declared_baselines(baselines, said):
    command = declared(baselines)
    assert command.check_settings({"compare_with": list(baselines)}) is None
    problem = command.check_settings({"compare_with": [baselines[0], "bm25"]})
    assert problem == f"--compare_with: must list {said}, got bm25"


def test_the_commands_own_check_comes_first():
    command = declared(("de",), check=lambda config: "--model.x: no" if config["model"]["x"] else None)
    assert command.check_settings({"model": {"x": 1}, "compare_with": ["bm25"]}) == "--model.x: no"
    assert command.check_settings({"model": {"x": 0}, "compare_with": ["bm25"]}).startswith("--compare_with:")


def test_options_follow_the_declarations():
    import importlib

    for command in COMMANDS:
        options = yaml.safe_load(command_files(command)[1].read_text())["options"]
        declaration = importlib.import_module(command).COMMAND
        assert declaration.name == command
        assert ("--compare_with" in options) == bool(declaration.baselines)
        modes = declaration.test_modes
        assert ("--test_modes" in options) == (modes is not None)
        if modes is not None:
            assert options["--test_modes"]["default"] == list(modes.choices)


def test_bert_lengths_leave_room_for_cls_a_token_and_sep():
    assert check_bert_lengths({"data": {"query_length": 3, "passage_length": 48}}) is None
    assert check_bert_lengths({"data": {"query_length": 2}}) == (
        "--data.query_length: must leave room for [CLS], a token and [SEP] (at least 3), got 2")
    assert check_bert_lengths({}) is None
