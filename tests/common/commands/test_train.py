"""`common.commands.train`: what a `TrainCommand` declares becomes the command's options (``--compare_with`` with
baselines, ``--test_modes`` with test modes)."""

import importlib
from pathlib import Path

import pytest
from jsonargparse import ArgumentParser

from common.commands.train import TrainCommand


def declared(baselines=()) -> TrainCommand:
    return TrainCommand(name="x.train", default_config=Path("x.yaml"), model="x.M", data="x.D", monitor="dev/m",
                        run_name=str, paper="x", paper_tables=lambda *a: "", baselines=baselines)


def test_compare_with_takes_the_declared_baselines_only():
    parser = ArgumentParser(exit_on_error=False)
    declared(("de", "ca")).add_arguments(parser)
    assert parser.parse_args([]).compare_with == []
    assert parser.parse_args(["--compare_with", "[ca, de]"]).compare_with == ["ca", "de"]
    with pytest.raises(Exception, match="bm25"):
        parser.parse_args(["--compare_with", "[de, bm25]"])


def test_without_baselines_there_is_no_compare_with():
    parser = ArgumentParser(exit_on_error=False)
    declared().add_arguments(parser)
    with pytest.raises(Exception, match="compare_with"):
        parser.parse_args(["--compare_with", "[]"])


@pytest.mark.parametrize("command, baselines, modes", [
    ("qds.train", (), None), ("conformer_kernel.train", (), ("rerank", "fullrank")),
    ("earl.train", ("bert_ranker", "bert_siamese"), None), ("mva.train", ("de", "ca"), None),
])
def test_each_command_declares_its_baselines_and_test_modes(command, baselines, modes):
    declaration = importlib.import_module(command).COMMAND
    assert declaration.name == command and declaration.baselines == baselines
    assert (declaration.test_modes and declaration.test_modes.choices) == modes
