"""The figures of the benchmarks: panels of lines or of bars side by side (`draw`), and `bar_chart`, the rows' ``ms``
as bars, one panel per length."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Line:
    """A series of a `Panel`: points ``(x, y)`` or ``(x, y, text)``, a matplotlib format and a colour."""

    label: str
    points: list[tuple]
    style: str = "o-"
    color: str | None = None


@dataclass
class Panel:
    """One chart: its lines, axis labels, the logarithmic axes (``log``), ``bars`` (x values are categories, each line
    a series of bars) and ``ticks`` (a tick at every x value)."""

    title: str
    xlabel: str
    ylabel: str
    lines: list[Line]
    log: str = "xy"
    bars: bool = False
    ticks: bool = False


def bar_chart(rows: list[dict], path: Path, *, label: Callable[[dict], str], text: Callable[[dict], str | None],
              passes: Sequence[str], ylabel: str, title: str, overwrite: bool = False) -> None:
    """Bars of the measured rows' ``ms``, a panel per length ``n``, a series per pass, at `label` with `text` above."""
    measured = [r for r in rows if r["ms"] is not None]
    panels = [Panel(f"n = {n}", "", ylabel, log="y", bars=True, lines=[
        Line(pass_, [(label(r), r["ms"], text(r)) for r in measured if (r["n"], r["pass"]) == (n, pass_)])
        for pass_ in passes]) for n in sorted({r["n"] for r in measured})]
    labels = {label(r) for r in measured}
    draw(panels, path, columns=1, size=(max(8, 0.55 * len(labels) + 2), 4.5), title=title, overwrite=overwrite)


def draw(panels: list[Panel], path: Path, *, title: str = "", columns: int | None = None,
         size: tuple[float, float] = (6.0, 4.5), overwrite: bool = False) -> None:
    """Draw `panels`, `columns` to a row (default: all), each `size` inches, into the PNG `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from common.io import atomic_write

    columns = columns or len(panels)
    figure, axes = plt.subplots(-(-len(panels) // columns), columns, squeeze=False,
                                figsize=(size[0] * columns, size[1] * -(-len(panels) // columns)))
    for axis, panel in zip(axes.flat, panels):
        (_draw_bars if panel.bars else _draw_lines)(axis, panel)
        axis.set_title(panel.title, fontsize=9)
        axis.set_xlabel(panel.xlabel)
        axis.set_ylabel(panel.ylabel)
        if "x" in panel.log and not panel.bars:
            axis.set_xscale("log")
        if "y" in panel.log:
            axis.set_yscale("log")
        if panel.ticks:
            ticks = sorted({p[0] for line in panel.lines for p in line.points})
            axis.set_xticks(ticks, [str(t) for t in ticks])
        axis.grid(True, which="both", alpha=0.3)
        if any(line.label and line.points for line in panel.lines):
            axis.legend(fontsize=8)
    for axis in axes.flat[len(panels):]:
        axis.set_visible(False)
    if title:
        figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    with atomic_write(path, "wb", overwrite=overwrite) as f:
        figure.savefig(f, format="png", dpi=110)
    plt.close(figure)


def _draw_lines(axis, panel: Panel) -> None:
    for line in panel.lines:
        if line.points:
            axis.plot([p[0] for p in line.points], [p[1] for p in line.points], line.style, color=line.color,
                      label=line.label or None)
        for x, y, *text in line.points:
            if text and text[0]:
                axis.annotate(text[0], (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8,
                              color=line.color)


def _draw_bars(axis, panel: Panel) -> None:
    categories = list(dict.fromkeys(p[0] for line in panel.lines for p in line.points))
    width = 0.8 / max(len(panel.lines), 1)
    for i, line in enumerate(panel.lines):
        offset = (i - (len(panel.lines) - 1) / 2) * width
        for j, (x, y, *text) in enumerate(line.points):
            bar = axis.bar(categories.index(x) + offset, y, width=width, color=line.color or f"C{i}",
                           label=line.label if j == 0 else None)[0]
            if text and text[0]:
                axis.annotate(text[0], (bar.get_x() + width / 2, y), ha="center", va="bottom", fontsize=6, rotation=90)
    axis.set_xticks(range(len(categories)), categories, fontsize=7, rotation=90)
    tops = [p[1] for line in panel.lines for p in line.points]
    if tops and "y" in panel.log:
        axis.set_ylim(top=2 * max(tops))  # room for the labels above the bars
