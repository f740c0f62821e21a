"""What the table specs share: reading a results folder's files (`Files`, which notes the runs still to do: a
``runs/<name>/`` with its ``command.txt`` but no ``metrics.json``), formatting numbers, writing a markdown table.
"""

from __future__ import annotations

import csv
import json
import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

#: The file beside every metrics.json of ``runs/<name>/``: the command and seed that wrote it.
COMMAND = "command.txt"


class TableError(Exception):
    """A table cannot be made from the files (a missing or malformed file, a run or measure a file lacks)."""


@dataclass(frozen=True)
class Table:
    """One generated table: `render` makes its text from its results folder's `Files`."""

    id: str
    render: Callable[[Files], str]

    @property
    def package(self) -> str:
        return self.id.split("/", 1)[0]


class Files:
    """The files of one results folder, read for one table; `pending` collects what is still to be run."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.pending: list[str] = []

    def _name(self, relative: str) -> str:
        return f"results/{self.folder.name}/{relative}"

    def json(self, relative: str) -> Any:
        """A JSON file of the folder (a TableError where it is missing or not JSON)."""
        try:
            return json.loads((self.folder / relative).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise TableError(f"{self._name(relative)}: no such file") from None
        except (OSError, ValueError) as exc:
            raise TableError(f"{self._name(relative)}: not readable JSON ({exc})") from None

    @staticmethod
    def run_folder(run: str) -> str:
        """The folder of run `run` in the results folder: ``runs/<run>``, or `run` itself where it names its folder
        (``selection/<setting>``)."""
        return run if "/" in run else f"runs/{run}"

    def run_file(self, run: str, name: str = "metrics.json") -> Any:
        """``runs/<run>/<name>`` (JSON, or a CSV's rows), or None (noted as pending) where not written yet; a run folder
        without its command.txt is refused."""
        folder = self.run_folder(run)
        if not (self.folder / folder / COMMAND).is_file():
            raise TableError(f"{self._name(folder)}: no {COMMAND} (every run folder names its command and seed)")
        relative = f"{folder}/{name}"
        if not (self.folder / relative).is_file():
            if relative not in self.pending:
                self.pending.append(relative)
            return None
        return self.csv(relative) if name.endswith(".csv") else self.json(relative)

    def measures(self, run: str, key: str, file: str = "metrics.json") -> dict | None:
        """Run `key`'s entry of ``runs/<run>/<file>`` (metrics.json: measure -> value), or None while pending."""
        data = self.run_file(run, file)
        if data is None:
            return None
        if key not in data:
            where = self._name(f"{self.run_folder(run)}/{file}")
            raise TableError(f"{where}: no run {key!r} (it has {', '.join(data)})")
        return data[key]

    def csv(self, relative: str) -> list[dict[str, str]]:
        """The rows of a CSV file of the folder, as written (strings; empty cells are '')."""
        try:
            with open(self.folder / relative, newline="", encoding="utf-8") as f:
                return list(csv.DictReader(f))
        except FileNotFoundError:
            raise TableError(f"{self._name(relative)}: no such file") from None

    def pending_note(self) -> str:
        """The line under a table whose runs are not all there yet ('' when none is pending)."""
        if not self.pending:
            return ""
        files = ", ".join(f"`{p}`" for p in self.pending)
        command = "`python -m common.report_tables`".replace(" ", "\0")  # kept on one line
        text = (f"Empty cells: not run yet ({files}; the command is in each folder's `{COMMAND}`). {command} fills "
                f"them in once the files are there.")
        return textwrap.fill(text, 116, break_long_words=False, break_on_hyphens=False).replace("\0", " ")


def value(row: dict | None, measure: str, what: str = "") -> float | None:
    """`row[measure]` as a float (None where `row` is None, pending); a TableError where the measure is missing."""
    if row is None:
        return None
    if measure not in row:
        raise TableError(f"{what or 'a row'} has no {measure!r} (it has {', '.join(row)})")
    return float(row[measure])


def number(text: str) -> float | None:
    """A CSV cell as a float; None for an empty cell."""
    return float(text) if text not in ("", None) else None


def rounded(x: float, places: int, thousands: bool = False) -> str:
    """`x` to `places` places, rounded half up from the decimal the file wrote (67.55 -> 67.6, where ``:.1f``
    rounds the binary float down to 67.5)."""
    d = Decimal(repr(float(x))).quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP)
    return f"{d:,}" if thousands else str(d)


def fixed(places: int, thousands: bool = True):
    """A formatter: `places` places (half up), with thousands separators; '' for a missing value."""
    return lambda x: "" if x is None or math.isnan(x) else rounded(x, places, thousands)


#: Effectiveness measures: 4 places, as trec_eval prints them.
metric = fixed(4, thousands=False)


def by_size(x: float | None, steps: tuple[tuple[float, int], ...] = ((0.1, 3), (10, 2), (1000, 1))) -> str:
    """`x` with fewer places as it grows (0.038, 2.51, 150.7, 98,197)."""
    if x is None or math.isnan(x):
        return ""
    return rounded(x, next((places for bound, places in steps if abs(x) < bound), 0), thousands=True)


def bold(text: str) -> str:
    return f"**{text}**" if text else text


def markdown(header: list[str], align: str, rows: list[list[str]]) -> str:
    """A GitHub table in the READMEs' style (``|---|---:|``): `align` is one letter a column, ``l`` or ``r``."""
    if len(align) != len(header) or any(len(r) != len(header) for r in rows):
        raise ValueError("every row needs one cell per column")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(line.replace("  |", " |") for line in lines)


#: The measures of the rankers' metrics.json, as the tables head them.
NDCG, MAP, MRR, MRR10, NCG100 = ("NDCG@10", "ndcg_cut_10"), ("MAP", "map"), ("MRR", "recip_rank"), \
    ("MRR@10", "mrr@10"), ("NCG@100", "ncg@100")


def metrics_table(first: str, measures: list[tuple[str, str]], rows: list[tuple[str, str, str]], *,
                  bold_best: bool = False, more: tuple[str, ...] = (),
                  more_cells: Callable[[Files, int], list[str]] | None = None) -> Callable[[Files], str]:
    """A table's render: runs (`rows`: label, run folder under ``runs/``, run name in its metrics.json) by `measures`
    ((header, measure) each), 4 places; `bold_best`: each column's highest value in bold (once every run is there);
    `more`: the headers of right-aligned columns after them, whose cells `more_cells(files, i)` gives for row i."""
    def render(files: Files) -> str:
        values = [[value(files.measures(run, key), measure, f"{files.run_folder(run)} {key}")
                   for _, measure in measures] for _, run, key in rows]
        complete = all(x is not None for v in values for x in v)  # no best while a run is still to do
        best = [max((v[i] for v in values if v[i] is not None), default=None) for i in range(len(measures))]
        cells = [[label] + [bold(metric(x)) if bold_best and complete and x == best[i] else metric(x)
                            for i, x in enumerate(v)] + (more_cells(files, j) if more else [])
                 for j, ((label, _, _), v) in enumerate(zip(rows, values))]
        return markdown([first] + [h for h, _ in measures] + list(more), "l" + "r" * (len(measures) + len(more)),
                        cells)
    return render


def selection_table(key: str, rows: list[tuple[str, str]]) -> Callable[[Files], str]:
    """A table's render of settings compared on held-out queries (`rows`: label, folder under ``selection/``, run
    `key` in its metrics.json): NDCG@10 and MRR@10 on them (each column's best in bold once all are in), BM25's
    NDCG@10 on the same queries, the folder."""
    runs = [(label, f"selection/{folder}", key) for label, folder in rows]

    def more_cells(files: Files, i: int) -> list[str]:
        return [metric(value(files.measures(runs[i][1], "bm25"), NDCG[1])), f"`{runs[i][1]}`"]

    return metrics_table("setting compared", [("held-out NDCG@10", NDCG[1]), ("MRR@10", MRR10[1])], runs,
                         bold_best=True, more=("BM25's NDCG@10", "folder"), more_cells=more_cells)


def store_dtypes_table(key: str, rows: list[tuple[str, str, str]]) -> Callable[[Files], str]:
    """A table's render of stores of one collection in several dtypes (`rows`: model, stored rows, run folder; run
    `key` in its metrics.json): NDCG@10, MRR@10, and from ``store_reads.csv`` (`common.stores.read_benchmark`) the
    bytes per document and the median query's cold and warm reads of its candidates."""
    def render(files: Files) -> str:
        reads = {row["store"]: row for row in files.csv("store_reads.csv")}
        cells = []
        for model, dtype, run in rows:
            measures, read = files.measures(run, key), reads.get(run)
            numbers = [fixed(places)(number(read[k])) if read else ""
                       for k, places in (("bytes_per_document", 0), ("read_ms", 2), ("warm_read_ms", 2))]
            cells.append([model, dtype, metric(value(measures, NDCG[1])), metric(value(measures, MRR10[1])),
                          *numbers, f"`runs/{run}`"])
        candidates = {row["candidates"] for row in reads.values()}
        header = ["model", "stored rows", "NDCG@10", "MRR@10", "bytes / document",
                  f"read a query's {', '.join(sorted(candidates))} candidates, cold (ms)", "warm (ms)", "file"]
        return markdown(header, "llrrrrrl", cells)
    return render
