"""Bad command-line input ends in one line on stderr, ``error: <what>`` naming the option or the file and line, exit
status 2 (argparse's), no traceback: `usage_error`, `ArgumentParser`, `SettingError` (a setting refused where it is
used), argparse types, what keeps a command from writing where it would, and `input_errors` (a bad input file's error
as that line). Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn


def usage_error(message: str) -> NoReturn:
    """Print ``error: <message>`` on stderr and exit with status 2."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


class SettingError(ValueError):
    """A setting no type can refuse, raised where it is used: ``error: --<option>: <message>``."""

    def __init__(self, option: str, message: str):
        super().__init__(f"{option}: {message}")
        self.option, self.message = option, message


class ArgumentParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line, ``error: argument --k: ...``, with exit status 2."""

    def error(self, message: str) -> NoReturn:
        usage_error(message)


def _parsed(text: str, kind: type, accepted: Callable[[float], bool], what: str):
    """`text` as a `kind` that is `accepted`, else refused: ``must be <what>, got <text>``."""
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not accepted(value):
        raise argparse.ArgumentTypeError(f"must be {what}, got {text}")
    return value


def positive_int(text: str) -> int:
    return _parsed(text, int, lambda value: value >= 1, "a positive integer")


def nonnegative_int(text: str) -> int:
    return _parsed(text, int, lambda value: value >= 0, "a non-negative integer")


def positive_float(text: str) -> float:
    """A finite number above 0."""
    return _parsed(text, float, lambda value: 0 < value < math.inf, "a positive number")


def number_in(low: float, high: float = math.inf, *, above_low: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number from `low` (above it with `above_low`) to `high`."""
    bounds = f"{'>' if above_low else '>='} {low:g}" + (f" and <= {high:g}" if math.isfinite(high) else "")

    def number(text: str) -> float:
        return _parsed(text, float, lambda value: math.isfinite(value) and value <= high
                       and (low < value if above_low else low <= value), f"a number {bounds}")

    return number


def existing_file(text: str) -> Path:
    """The path of an existing file (not a folder)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder, not a file")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    return path


def checkpoint_file(text: str) -> Path:
    """The path of a file ``torch.save`` wrote (a zip archive)."""
    path = Path(text)
    if not path.is_file() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"no such checkpoint file: {text}")
    existing_file(text)
    if not zipfile.is_zipfile(path):
        raise argparse.ArgumentTypeError(f"{text} is not a checkpoint (not a file torch.save wrote)")
    return path


def _unwritable(nearest: Path) -> str | None:
    """Why nothing can be made in `nearest`, the nearest existing folder above a path to be written, or None."""
    if not nearest.is_dir():
        return f"{nearest} is a file, not a folder"
    if not os.access(nearest, os.W_OK | os.X_OK):
        return f"cannot write in {nearest}"
    return None


def output_folder_problem(path: Path) -> str | None:
    """What keeps `path` from being a folder to write into (existing, or one that can be made), or None."""
    return _unwritable(next(p for p in (path, *path.parents) if p.exists()))  # "." or "/" at the latest


def output_folder(text: str) -> Path:
    """An argparse type: a folder to write into (`output_folder_problem`)."""
    problem = output_folder_problem(Path(text))
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return Path(text)


def output_file_problem(path: Path, overwrite: bool = False) -> str | None:
    """What keeps a file from being written at `path` (a file there without `overwrite`...), or None."""
    if path.is_dir():
        return f"{path} is a folder, not a file"
    if path.exists() and not overwrite:
        return f"{path} already exists; pass --overwrite to replace it"
    return _unwritable(next(p for p in path.parents if p.exists()))


@contextlib.contextmanager
def input_errors(*errors: type[BaseException]) -> Iterator[None]:
    """Any of `errors` (whose message names the file and line, or the option) raised inside ends the command in one
    line."""
    try:
        yield
    except errors as error:
        # A KeyError's str() is its message quoted; any other's is the message.
        usage_error(error.args[0] if isinstance(error, KeyError) and error.args else str(error))
