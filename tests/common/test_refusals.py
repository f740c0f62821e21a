"""`common.refusals`: the one-line refusal every command shares, and the argument types behind it."""

import argparse
import math

import pytest

from common.refusals import (
    ArgumentParser, checkpoint_file, input_errors, number_in, output_file_problem, output_folder, output_folder_problem,
    positive_int,
)


def _refusal(capsys, call) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit:
        call()
    return exit.value.code, capsys.readouterr().err


def test_a_parser_error_is_one_line_with_status_2(capsys):
    parser = ArgumentParser(prog="x")
    parser.add_argument("-k", type=positive_int)
    assert _refusal(capsys, lambda: parser.parse_args(["-k", "0"])) == (
        2, "error: argument -k: must be a positive integer, got 0\n")
    assert _refusal(capsys, lambda: parser.parse_args(["stray"])) == (2, "error: unrecognized arguments: stray\n")


@pytest.mark.parametrize("low, high, above_low, text, value", [
    (0, 1, False, "0", 0.0), (0, 1, False, "1", 1.0), (0, 1, True, "0.5", 0.5), (0, math.inf, False, "1e3", 1000.0),
])
def test_a_number_in_its_bounds_is_taken(low, high, above_low, text, value):
    assert number_in(low, high, above_low=above_low)(text) == value


@pytest.mark.parametrize("low, high, above_low, text, message", [
    (0, 1, False, "1.5", "must be a number >= 0 and <= 1, got 1.5"),
    (0, 1, True, "0", "must be a number > 0 and <= 1, got 0"),
    (0, math.inf, False, "-0.5", "must be a number >= 0, got -0.5"),
    (0, math.inf, False, "inf", "must be a number >= 0, got inf"),
    (0, 1, False, "nan", "must be a number >= 0 and <= 1, got nan"),
    (0, 1, False, "half", "must be a number >= 0 and <= 1, got half"),
])
def test_a_number_out_of_its_bounds_is_named(low, high, above_low, text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=f"^{message}$"):
        number_in(low, high, above_low=above_low)(text)


def test_a_checkpoint_is_a_file_torch_save_wrote(tmp_path):
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    with pytest.raises(argparse.ArgumentTypeError, match="^no such checkpoint file: "):
        checkpoint_file(str(tmp_path / "none.ckpt"))
    with pytest.raises(argparse.ArgumentTypeError, match="is a folder, not a file$"):
        checkpoint_file(str(tmp_path))
    with pytest.raises(argparse.ArgumentTypeError, match=r"notes.txt is not a checkpoint \(not a file torch.save"):
        checkpoint_file(str(tmp_path / "notes.txt"))


def test_where_an_output_can_go(tmp_path):
    (tmp_path / "file").write_text("x")
    assert output_folder(str(tmp_path / "new" / "deeper")) == tmp_path / "new" / "deeper"
    assert not (tmp_path / "new").exists()  # nothing made before there is something to write
    with pytest.raises(argparse.ArgumentTypeError, match=f"^{tmp_path / 'file'} is a file, not a folder$"):
        output_folder(str(tmp_path / "file" / "sub"))
    assert output_folder_problem(tmp_path) is None
    assert output_folder_problem(tmp_path / "file") == f"{tmp_path / 'file'} is a file, not a folder"
    assert output_file_problem(tmp_path / "new.trec") is None
    assert output_file_problem(tmp_path) == f"{tmp_path} is a folder, not a file"
    assert output_file_problem(tmp_path / "file") == f"{tmp_path / 'file'} already exists; pass --overwrite to replace it"
    assert output_file_problem(tmp_path / "file", overwrite=True) is None
    assert output_file_problem(tmp_path / "file" / "run.trec") == f"{tmp_path / 'file'} is a file, not a folder"


@pytest.mark.parametrize("error, line", [
    (ValueError("docs.tsv:3: duplicate topic id '1'"), "error: docs.tsv:3: duplicate topic id '1'\n"),
    (KeyError("Stemming algorithm 'x' not found"), "error: Stemming algorithm 'x' not found\n"),
])
def test_an_input_error_becomes_its_message_whole(capsys, error, line):
    def fail():
        with input_errors(ValueError, KeyError):
            raise error

    assert _refusal(capsys, fail) == (2, line)
