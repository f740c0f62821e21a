"""The generated tables of ``results/loaders/README.md``: the loaders' benchmark (``loaders.csv``,
``python -m common.commands.loader_benchmark``)."""

from __future__ import annotations

from common.report_tables.cells import Files, Table, TableError, markdown, number, rounded


def _cell(rows: dict, loader: str, workers: int, key: str, places: int) -> str:
    """`key` of the row of `loader` at `workers` workers to `places` places; a skipped row's reason."""
    row = rows.get((loader, workers))
    if row is None:
        raise TableError(f"loaders.csv has no row of {loader} at {workers} workers")
    value = number(row[key])
    return row["skipped"] if value is None else rounded(value, places, thousands=True)


def _throughput(files: Files) -> str:
    """Examples a second, ms to make one model step's input and seconds to the first batch, at each worker count."""
    measured = files.csv("loaders.csv")
    loaders = list(dict.fromkeys(r["impl"] for r in measured))  # in the file's order
    workers = sorted({int(r["workers"]) for r in measured})
    rows = {(r["impl"], int(r["workers"])): r for r in measured}
    cells = []
    for loader in loaders:
        first = rows[loader, workers[0]]
        cells.append([f"`{loader}`", first["batch_size"], first["n"],
                      *(_cell(rows, loader, w, "examples_per_s", 0) for w in workers),
                      *(_cell(rows, loader, w, "ms", 1) for w in workers),
                      *(_cell(rows, loader, w, "startup_s", 2) for w in workers)])
    header = ["loader", "batch", "n", *(f"examples/s, {w} workers" for w in workers),
              *(f"ms a step, {w}" for w in workers), *(f"first batch (s), {w}" for w in workers)]
    return markdown(header, "lrr" + "r" * 3 * len(workers), cells)


TABLES = [Table("loaders/throughput", _throughput)]
