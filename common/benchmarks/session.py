"""One run of a benchmark command (`Session`): existing results refused without ``--overwrite``, torch's thread
count set for the run and restored after, the report on stdout (stderr with ``--json``, whose rows alone go to
stdout), progress on stderr, the rows written as CSV and JSONL, a plot and a text table."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from common.refusals import usage_error


def output_paths(folder: Path, stem: str, extensions: Sequence[str] = ("csv", "jsonl", "png")) -> dict[str, Path]:
    """``{extension: folder/stem.extension}``: the files a benchmark writes."""
    return {extension: folder / f"{stem}.{extension}" for extension in extensions}


class Session:
    """One run of a benchmark command, a context manager over its measurements; `paths`: its output files by kind."""

    def __init__(self, args: argparse.Namespace, paths: dict[str, Path]):
        self.paths, self.json, self.overwrite, self.threads = paths, args.json, args.overwrite, args.threads
        self.report = sys.stderr if args.json else sys.stdout
        self._threads_before = None

    def __enter__(self) -> Session:
        existing = [str(p) for p in self.paths.values() if p.exists()]
        if existing and not self.overwrite:
            usage_error(f"refusing to overwrite {', '.join(existing)} (pass --overwrite)")
        import torch

        self._threads_before = torch.get_num_threads()
        if self.threads:
            torch.set_num_threads(self.threads)
        return self

    def __exit__(self, *exc) -> None:
        import torch

        torch.set_num_threads(self._threads_before)

    def say(self, text: str) -> None:
        print(text, file=self.report, flush=True)

    def log(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def emit(self, row: dict, progress: str | None = None) -> dict:
        """A measured row: its JSON line on stdout with ``--json``, and its `progress` line; returns `row`."""
        if self.json:
            print(json.dumps(row), flush=True)
        if progress:
            self.log(progress)
        return row

    def finish(self, rows: list[dict], fields: Sequence[str] | None = None, *, plot: Callable | None = None,
               table: Callable[[list[dict]], str] | Sequence[tuple[str, str]] | None = None,
               documents: dict[str, object] | None = None) -> int:
        """Write `rows` (CSV of `fields`, default every key; JSONL), `documents` as JSON, ``plot(rows, path,
        overwrite)``, print ``table(rows)`` (or a `text_table` of (key, spec) columns); returns the exit status, 1
        (nothing written) where no row was measured."""
        if all(row.get("skipped") for row in rows):
            print("no measurement succeeded", file=sys.stderr)
            return 1
        import csv

        from common.io import atomic_write

        fields = fields or list(dict.fromkeys(key for row in rows for key in row))
        with atomic_write(self.paths["csv"], overwrite=self.overwrite) as f:
            writer = csv.DictWriter(f, fieldnames=list(fields), extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        if "jsonl" in self.paths:
            with atomic_write(self.paths["jsonl"], overwrite=self.overwrite) as f:
                f.writelines(json.dumps(row) + "\n" for row in rows)
        for kind, document in (documents or {}).items():
            with atomic_write(self.paths[kind], overwrite=self.overwrite) as f:
                json.dump(document, f, indent=1)
                f.write("\n")
        if plot is not None:
            plot(rows, self.paths["png"], self.overwrite)
        if table is not None:
            self.say(table(rows) if callable(table) else text_table(rows, [(key, key, spec) for key, spec in table]))
        self.say(f"wrote {', '.join(str(p) for p in self.paths.values())}")
        return 0


def rounded(value: float | None, digits: int) -> float | None:
    """`value` rounded to `digits` decimals; None stays None (a row's missing measurement)."""
    return None if value is None else round(value, digits)


def significant(value: float, digits: int = 4) -> float:
    """`value` to `digits` significant digits: a rate keeps its precision whatever its magnitude."""
    return float(f"{value:.{digits}g}")


def text_table(rows: list[dict], columns: Sequence[tuple[str, str | Callable[[dict], object], str]]) -> str:
    """`rows` as a text table of (header, key or function of the row, format spec) columns: the first aligned left,
    the others right, None printed as ``-``."""
    cells = [[header for header, _, _ in columns]]
    for row in rows:
        values = (key(row) if callable(key) else row.get(key) for _, key, _ in columns)
        cells.append(["-" if value is None else format(value, spec) for value, (_, _, spec) in zip(values, columns)])
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(cell.ljust(width) if i == 0 else cell.rjust(width)
                               for i, (cell, width) in enumerate(zip(line, widths))) for line in cells)
