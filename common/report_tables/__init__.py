"""The tables of ``results/*/README.md`` made from the files beside them: ``python -m common.report_tables``.

A README marks each table made from committed files (a run's ``metrics.json`` under ``results/<package>/runs/<name>/``,
a benchmark's CSV or JSON) between ``<!-- table: <package>/<name> -->`` and ``<!-- /table -->``; the registry
(`TABLES`, a module of specs per package) says which files and columns make it. The command writes every marked table
again (each README atomically, where something changed); ``--check`` writes nothing and exits 1 naming each table that
differs. Rows whose run is still to do show empty cells and a line naming it. An unknown or missing marked id, or a
malformed file, is an error (exit status 2). docs/report_tables.md has the details.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

from common.io import atomic_write
from common.refusals import ArgumentParser
from common.report_tables.cells import Files, Table, TableError

__all__ = ["Table", "TableError", "TABLES", "results_dir", "generate", "check", "update", "main"]

START = re.compile(r"^<!-- table: (?P<id>[\w./-]+) -->$")
END = "<!-- /table -->"


def _registry() -> dict[str, Table]:
    from common.report_tables import (conformer_kernel_tables, earl_tables, kernels_tables, loaders_tables, mva_tables,
                                      qds_tables, scale_tables)

    tables: dict[str, Table] = {}
    for module in (mva_tables, earl_tables, qds_tables, conformer_kernel_tables, kernels_tables, scale_tables,
                   loaders_tables):
        for table in module.TABLES:
            if tables.setdefault(table.id, table) is not table:
                raise ValueError(f"table {table.id} registered twice")
    return tables


#: Every generated table by id.
TABLES = _registry()


def results_dir() -> Path:
    """``results/`` of this source checkout."""
    return Path(__file__).resolve().parents[2] / "results"


def generate(table: Table, root: Path) -> str:
    """`table`'s text from the files under `root` (a ``results/`` folder), with the line of runs still to do."""
    files = Files(root / table.package)
    text = table.render(files).rstrip("\n")
    note = files.pending_note()
    return f"{text}\n\n{note}" if note else text


def _blocks(text: str, readme: str) -> list[tuple[str, int, int]]:
    """The marked tables of a README: (id, index of the first line inside, index of the end marker)."""
    found, start = [], None
    for i, line in enumerate(text.split("\n")):
        match = START.match(line)
        if match:
            if start is not None:
                raise TableError(f"{readme}:{i + 1}: table {match['id']} starts inside table {start[0]}")
            start = (match["id"], i + 1)
        elif line == END:
            if start is None:
                raise TableError(f"{readme}:{i + 1}: {END} without a table before it")
            found.append((start[0], start[1], i))
            start = None
    if start is not None:
        raise TableError(f"{readme}: table {start[0]} has no {END}")
    return found


def _regenerated(root: Path, tables: dict[str, Table]) -> dict[str, tuple[Path, str, str, list[str]]]:
    """Each README: (path, its text, its text with every marked table made again, the ids that changed)."""
    out, seen = {}, {}
    for path in sorted(root.glob("*/README.md")):
        name, text = f"results/{path.parent.name}/README.md", path.read_text(encoding="utf-8")
        lines = text.split("\n")
        changed = []
        for table_id, first, end in reversed(_blocks(text, name)):
            table = tables.get(table_id)
            if table is None:
                raise TableError(f"{name}: table {table_id} is not in the registry (common.report_tables)")
            if table.package != path.parent.name:
                raise TableError(f"{name}: table {table_id} belongs to results/{table.package}/README.md")
            if table_id in seen:
                raise TableError(f"{name}: table {table_id} is marked twice")
            seen[table_id] = name
            try:
                new = generate(table, root).split("\n") + [""]
            except TableError as exc:
                raise TableError(f"{name}: table {table_id}: {exc}") from None
            if lines[first:end] != new:
                changed.append(table_id)
                lines[first:end] = new
        out[name] = (path, text, "\n".join(lines), changed[::-1])
    missing = [t for t in tables if t not in seen]
    if missing:
        raise TableError(f"tables not marked in their README: {', '.join(missing)}")
    return out


def check(root: Path | None = None, tables: dict[str, Table] | None = None) -> list[str]:
    """One line for each marked table whose README text differs from what its files give (empty: all agree)."""
    problems = []
    for name, (_, text, new, changed) in _regenerated(root or results_dir(), tables or TABLES).items():
        for table_id in changed:
            diff = [d for d in difflib.unified_diff(text.split("\n"), new.split("\n"), lineterm="", n=0)
                    if d[:1] in "+-" and d[:3] not in ("+++", "---")]
            problems.append(f"{name}: table {table_id} differs from its files ({'; '.join(diff[:4])})")
    return problems


def update(root: Path | None = None, tables: dict[str, Table] | None = None) -> list[str]:
    """Write every README whose marked tables changed (atomically); returns a line per README written."""
    written = []
    for name, (path, _, new, changed) in _regenerated(root or results_dir(), tables or TABLES).items():
        if changed:
            with atomic_write(path, overwrite=True) as f:
                f.write(new)
            written.append(f"{name}: {', '.join(changed)}")
    return written


def _build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m common.report_tables", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 naming each README and table that differs from its files")
    parser.add_argument("--results", type=Path, default=None, metavar="DIR",
                        help="the results folder (default: results/ of this checkout)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    root = args.results or results_dir()
    try:
        if args.check:
            problems = check(root)
            for line in problems:
                print(line, file=sys.stderr)
            if not problems:
                print(f"{len(TABLES)} tables agree with their files")
            return 1 if problems else 0
        written = update(root)
    except (TableError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in written:
        print(f"written: {line}")
    if not written:
        print(f"{len(TABLES)} tables already agree with their files")
    return 0
