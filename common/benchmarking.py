"""The benchmark harness: what every ``python -m <package>.benchmark`` command shares, so that a benchmark module
keeps only what it times.

- The command line: `benchmark_parser` gives every benchmark the same options (``--repeats``, ``--threads``,
  ``--output_dir``, ``--overwrite``, ``--json``, and where asked ``--device``, ``--seed``, ``--timeout`` and the
  internal ``--_one`` of a measurement in a fresh process); `parse` refuses a value given twice to a list option;
  argument types beside `common.refusals`' (`probability`, `fraction`, `even_int`, `int_above`).
  Errors are one line (`common.refusals`), and torch is imported only inside what needs it: a benchmark's ``--help``
  and its argument errors do not wait for it.
- Where a run writes: by default a new ``outputs/<name>-benchmark-<time>`` (`default_output_dir`; ``outputs/`` is
  git-ignored), never the committed ``results/<name>/``, which ``--output_dir results/<name> --overwrite`` replaces
  (each results README's commands name it).
- A run: `Session` refuses existing results without ``--overwrite``, sets torch's thread count for the run and
  restores it after (a benchmark's ``main`` called in-process leaves the caller's count as it was), prints the
  report on stdout (on stderr with ``--json``, whose rows alone go to stdout) and progress on stderr, and writes the
  rows as CSV and JSONL (`write_rows`), a plot (`draw`; `bar_chart` of the rows' ``ms``) and a text table
  (`text_table`). Rates are kept to 4 significant digits (`significant`) whatever their magnitude.
- Timing: `times_ms` (CUDA synchronised around each call), `median_ms`, `spread_ms` (minimum, median, maximum),
  `wall_and_cpu_ms` (the process's CPU time beside the wall clock), `PartTimes` (the parts of a timed call);
  `count_flops`. A model's step on a batch: `training_step` (loss, backward, Adam) or `inference_step`, measured
  by `measure_step` (the peak memory of its first call, then the median of the timed ones).
- Store reads as a user pays them: `draw_candidates` (a first stage's top N, scattered over a store, a new draw
  each repeat), `noise_documents` (a store's rows of seeded noise, at memory speed), `evict_from_page_cache` and
  `cached_fraction` (cold reads, and how cold), `median_query` (the median query with its parts).
- Memory: `peak_mb(step, device)`, the peak of one call above what was in use before it: CUDA's allocator peak
  (`cuda_peak_mb`), on CPU the rise of the peak resident set (`reset_peak_rss`, `peak_rss_mb`; `max_rss_mb`, the
  lifetime peak, where the peak cannot be reset). `available_mb` and `limit_data_segment` keep a measurement that
  would not fit from waking the kernel's OOM killer.
- A measurement in a fresh process, whose peak resident set is then its own: `measure_in_child` runs
  ``python -m <module> --_one SPEC``, the child answers with `answer`; a failure, in a child or in this process
  (`guarded`), is a row skipped with its reason, so a sweep goes on.
- The machine: `cpu_model`, `cpu_description` (model, vector extensions, logical CPUs: runs on machines that
  differ in CPU model compare by it), `gpu_description`, `machine` (what a row records of it).
- Fits: `polyfit` and `fit_value`, a least-squares polynomial of a measurement against the length.
- BERT-sized models built from scratch: `BertSize` (as options: `add_size_options`, `resolve_size`); their inputs
  of random words (`random_words`, `bert_query`, `bert_documents`), and `bert_pairs`, a ranker's ``[CLS] query
  [SEP] document [SEP]``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from common.refusals import ArgumentParser, number_in, output_folder, positive_float, positive_int, usage_error

DEVICES = ("cpu", "cuda")
#: A dropout rate: from 0 to 1.
probability = number_in(0, 1)
#: A share of a budget: above 0, at most 1.
fraction = number_in(0, 1, above_low=True)
MB = 2**20

# --------------------------------------------------------------------------- the command line


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default after its help, but for None: the help of those options says what they default to."""

    def _get_help_string(self, action: argparse.Action) -> str:
        return action.help if action.default is None else super()._get_help_string(action)


#: What the default ``--output_dir`` holds in place of the time the run starts (`parse` writes it in).
_START_TIME = "<time>"


def default_output_dir(results: str) -> str:
    """A benchmark's default ``--output_dir`` before `parse` writes the start time in: under the git-ignored
    ``outputs/``, so that a run neither overwrites nor adds to the committed ``results/<results>``."""
    return f"outputs/{results}-benchmark-{_START_TIME}"


def benchmark_parser(prog: str, description: str, *, results: str, writes: str, repeats: int | None,
                     repeats_help: str, threads: int | None = None, devices: bool = True, device: str | None = None,
                     seed: str | None = None, timeout: float | None = None, child: bool = False) -> ArgumentParser:
    """A parser with the options every benchmark takes, in a group of their own after the benchmark's options.

    `results` names the benchmark's committed folder ``results/<results>`` and its default ``--output_dir``, a new
    ``outputs/<results>-benchmark-<time>`` (`default_output_dir`); `writes` names what goes there; ``--repeats``
    defaults to `repeats`, ``--threads`` to `threads` (None: torch's own count). With `devices`, ``--device`` (`device`;
    None: cuda where available, `resolve_device`); with `seed` (its help), ``--seed``; with `timeout`, ``--timeout``
    seconds per measurement in a fresh process; with `child`, the hidden ``--_one SPEC`` of `measure_in_child`.
    """
    parser = ArgumentParser(prog=prog, description=description, formatter_class=_Help)
    shared = parser.add_argument_group("options every benchmark takes")
    shared.add_argument("--repeats", type=positive_int, default=repeats, help=repeats_help)
    if devices:
        shared.add_argument("--device", choices=DEVICES, default=device,
                            help="cpu or cuda" + ("" if device else " (default: cuda where available)"))
    shared.add_argument("--threads", type=positive_int, default=threads,
                        help="torch.set_num_threads for the run, restored after it" + ("" if threads else
                                                                                       " (default: torch's)"))
    if seed:
        shared.add_argument("--seed", type=int, default=0, help=seed)
    if timeout:
        shared.add_argument("--timeout", type=positive_float, default=timeout,
                            help="seconds per measurement in a fresh process; one past it is a skipped row")
    shared.add_argument("--output_dir", type=output_folder, default=default_output_dir(results),
                        help=f"where {writes} go (<time>: the run's start); --output_dir results/{results} "
                             "--overwrite replaces the committed results")
    shared.add_argument("--overwrite", action="store_true", help="replace existing result files")
    shared.add_argument("--json", action="store_true",
                        help="print one JSON object per measurement per line on stdout (the rest on stderr)")
    if child:
        shared.add_argument("--_one", help=argparse.SUPPRESS)
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """`parser`'s arguments, a list option's (``--lengths 512 1024``...) refused where a value is given twice (it
    would be measured twice); the default ``--output_dir`` with the start time written in."""
    args = parser.parse_args(argv)
    default = parser.get_default("output_dir")
    if default is not None and args.output_dir == Path(default):
        args.output_dir = Path(default.replace(_START_TIME, time.strftime("%Y%m%d-%H%M%S")))
    for action in parser._actions:
        if action.nargs == "+":
            refuse_repeats(action.option_strings[0], getattr(args, action.dest))
    return args


def even_int(reason: str) -> Callable[[str], int]:
    """An argparse type: a positive even integer; an odd one is refused with `reason`."""

    def even(text: str) -> int:
        value = positive_int(text)
        if value % 2:
            raise argparse.ArgumentTypeError(f"must be even ({reason}), got {value}")
        return value

    return even


def int_above(low: int, reason: str) -> Callable[[str], int]:
    """An argparse type: a positive integer above `low`; one at most `low` is refused with `reason`."""

    def above(text: str) -> int:
        value = positive_int(text)
        if value <= low:
            raise argparse.ArgumentTypeError(f"must be above {low} ({reason}), got {value}")
        return value

    return above


def resolve_device(requested: str | None) -> str:
    """`requested` (one of `DEVICES`), or cuda where available when None; cuda requested without CUDA ends the
    command (`common.refusals.usage_error`)."""
    import torch

    available = torch.cuda.is_available()
    if requested == "cuda" and not available:
        usage_error("argument --device: cuda is not available here")
    return requested or ("cuda" if available else "cpu")


def refuse_repeats(option: str, values: Iterable) -> None:
    """End the command if a value of the list `option` is given twice (it would be measured twice)."""
    seen = set()
    for value in values:
        if value in seen:
            usage_error(f"argument {option}: {value} is given twice")
        seen.add(value)


def refuse_existing(paths: Iterable[Path], overwrite: bool) -> None:
    """End the command if any of `paths` exists and `overwrite` is off: results are replaced only on request."""
    existing = [str(p) for p in paths if p.exists()]
    if existing and not overwrite:
        usage_error(f"refusing to overwrite {', '.join(existing)} (pass --overwrite)")


# --------------------------------------------------------------------------- a run


def output_paths(folder: Path, stem: str, extensions: Sequence[str] = ("csv", "jsonl", "png")) -> dict[str, Path]:
    """``{extension: folder/stem.extension}``: the files a benchmark writes."""
    return {extension: folder / f"{stem}.{extension}" for extension in extensions}


class Session:
    """One run of a benchmark command, a context manager over its measurements (see the module docstring).

    `paths` are its output files by kind (``csv``, ``jsonl``, ``png``, others written by `finish`'s `documents`).
    """

    def __init__(self, args: argparse.Namespace, paths: dict[str, Path]):
        self.paths, self.json, self.overwrite, self.threads = paths, args.json, args.overwrite, args.threads
        self.report = sys.stderr if args.json else sys.stdout
        self._threads_before = None

    def __enter__(self) -> Session:
        refuse_existing(self.paths.values(), self.overwrite)
        import torch

        self._threads_before = torch.get_num_threads()
        if self.threads:
            torch.set_num_threads(self.threads)
        return self

    def __exit__(self, *exc) -> None:
        import torch

        torch.set_num_threads(self._threads_before)

    def say(self, text: str) -> None:
        """A line of the report: stdout, or stderr with ``--json``."""
        print(text, file=self.report, flush=True)

    def log(self, text: str) -> None:
        """A progress line, on stderr."""
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
        """Write `rows` (CSV with the `fields` columns, by default every key of the rows in order; JSONL), each of
        `documents` as JSON to its path, the plot (``plot(rows, path, overwrite)``) and print ``table(rows)`` (`table`
        as (key, format spec) columns: `text_table` of them): the exit status, 0; 1 (nothing written) when no row was
        measured (every row skipped, or none)."""
        if all(row.get("skipped") for row in rows):
            print("no measurement succeeded", file=sys.stderr)
            return 1
        from common.io import atomic_write

        fields = fields or list(dict.fromkeys(key for row in rows for key in row))
        write_rows(rows, fields, self.paths["csv"], self.paths.get("jsonl"), self.overwrite)
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


def write_rows(rows: list[dict], fields: Sequence[str], csv_path: Path, jsonl_path: Path | None = None,
               overwrite: bool = False) -> None:
    """Write a benchmark's measurement `rows`: CSV with the `fields` columns in order (other keys left out,
    a missing one empty) and, where `jsonl_path` is given, one JSON object per row with every key.

    Atomic (`common.io.atomic_write`); an existing file is replaced only with `overwrite`.
    """
    import csv

    from common.io import atomic_write

    with atomic_write(csv_path, overwrite=overwrite) as f:
        writer = csv.DictWriter(f, fieldnames=list(fields), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    if jsonl_path is not None:
        with atomic_write(jsonl_path, overwrite=overwrite) as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)


def rounded(value: float | None, digits: int) -> float | None:
    """`value` rounded to `digits` decimals; None stays None (a row's missing measurement)."""
    return None if value is None else round(value, digits)


def significant(value: float, digits: int = 4) -> float:
    """`value` to `digits` significant digits: a rate keeps its precision whatever its magnitude."""
    return float(f"{value:.{digits}g}")


def text_table(rows: list[dict], columns: Sequence[tuple[str, str | Callable[[dict], object], str]]) -> str:
    """`rows` as a text table: each column a (header, key or function of the row, format spec); the first column is
    aligned left, the others right, None printed as ``-``."""
    cells = [[header for header, _, _ in columns]]
    for row in rows:
        values = (key(row) if callable(key) else row.get(key) for _, key, _ in columns)
        cells.append(["-" if value is None else format(value, spec) for value, (_, _, spec) in zip(values, columns)])
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(cell.ljust(width) if i == 0 else cell.rjust(width)
                               for i, (cell, width) in enumerate(zip(line, widths))) for line in cells)


# --------------------------------------------------------------------------- BERT-sized models


#: bert-base-uncased's vocabulary size and its [PAD], [CLS] and [SEP] ids; random words are drawn from FIRST_WORD on.
BERT_VOCAB_SIZE, BERT_PAD, BERT_CLS, BERT_SEP, FIRST_WORD = 30522, 0, 101, 102, 1000


@dataclass(frozen=True)
class BertSize:
    """A BERT's size, for benchmarks that build one from scratch (random weights: timing does not depend on them)."""

    #: The names of the sizes as options and as `common.encoders.pretrained.bert_config` takes them.
    OPTIONS: ClassVar[tuple[str, ...]] = ("num_layers", "hidden_size", "num_heads", "intermediate_size")

    layers: int
    hidden: int
    heads: int
    intermediate: int

    def describe(self) -> str:
        return f"L={self.layers}, h={self.hidden}, {self.heads} heads, FFN {self.intermediate}"

    def options(self) -> dict[str, int]:
        """The size by `OPTIONS` name."""
        return dict(zip(self.OPTIONS, (self.layers, self.hidden, self.heads, self.intermediate)))

    def hf_config(self) -> dict[str, int]:
        """The size as the configs of Hugging Face's BERT family (``RobertaConfig``...) name it."""
        return {"num_hidden_layers": self.layers, "hidden_size": self.hidden, "num_attention_heads": self.heads,
                "intermediate_size": self.intermediate}


def add_size_options(parser: argparse.ArgumentParser, sizes: dict[str, BertSize]) -> None:
    """The `BertSize.OPTIONS` as options (``--num_layers``...), each left out defaulting to the size of the device
    in `sizes` (`resolve_size`)."""
    for name in BertSize.OPTIONS:
        defaults = ", ".join(f"{size.options()[name]} on {device.upper()}" for device, size in sizes.items())
        parser.add_argument(f"--{name}", type=positive_int, help=f"{name.replace('_', ' ')} (default: {defaults})")


def resolve_size(args: argparse.Namespace, sizes: dict[str, BertSize]) -> None:
    """Set the size options left out to those of ``sizes[args.device]``; a head count that does not divide the hidden
    size ends the command."""
    for name, value in sizes[args.device].options().items():
        setattr(args, name, getattr(args, name) or value)
    if args.hidden_size % args.num_heads:
        usage_error(f"argument --num_heads: must divide the hidden size {args.hidden_size}, got {args.num_heads}")


def random_words(count: int, length: int, seed: int):
    """(count, length) random ids of bert-base-uncased's words (`FIRST_WORD` on), drawn from `seed`."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randint(FIRST_WORD, BERT_VOCAB_SIZE, (count, length), generator=generator)


def bert_query(length: int, seed: int):
    """A query of `length` tokens, (1, length) ids ``[CLS]`` `random_words` ``[SEP]`` drawn from `seed`, and its
    mask."""
    import torch

    words = random_words(1, length - 2, seed)
    tokens = torch.cat([torch.tensor([[BERT_CLS]]), words, torch.tensor([[BERT_SEP]])], dim=1)
    return tokens, torch.ones_like(tokens)


def bert_documents(words):
    """Documents ``[CLS] words`` (count, 1 + length) of `words` (count, length)."""
    import torch

    return torch.cat([torch.full((len(words), 1), BERT_CLS), words], dim=1)


def bert_pairs(query, documents, sep: int = BERT_SEP) -> dict:
    """BERT's pair inputs ``query documents[i] [SEP]`` for each row of `documents` (count, d): `query` (1, q) is the
    shared first segment, [CLS] and its [SEP] included; the token types are 1 from the document on."""
    import torch

    tokens = torch.cat([query.expand(len(documents), -1), documents, torch.full((len(documents), 1), sep)], dim=1)
    types = torch.zeros_like(tokens)
    types[:, query.shape[1]:] = 1
    return {"pair_tokens": tokens, "pair_mask": torch.ones_like(tokens), "pair_types": types}


# --------------------------------------------------------------------------- plots


@dataclass
class Line:
    """A series of a `Panel`: its points, ``(x, y)`` or ``(x, y, text)`` with the text (if any) beside the point, a
    matplotlib format (``"o-"``: markers and a line; ``"--"``, ``"o"``, ``"x"``...) and a colour."""

    label: str
    points: list[tuple]
    style: str = "o-"
    color: str | None = None


@dataclass
class Panel:
    """One chart of a figure: its lines, axis labels, which axes are logarithmic (``log``), ``bars`` (the x values
    are categories and each line a series of bars beside the others) and ``ticks`` (an x tick at every x value)."""

    title: str
    xlabel: str
    ylabel: str
    lines: list[Line]
    log: str = "xy"
    bars: bool = False
    ticks: bool = False


def bar_chart(rows: list[dict], path: Path, *, label: Callable[[dict], str], text: Callable[[dict], str | None],
              passes: Sequence[str], ylabel: str, title: str, overwrite: bool = False) -> None:
    """Bars of the rows' ``ms``, one panel per length ``n``, the rows of each of `passes` a series of bars side by side,
    each bar at its row's `label` with its `text` above it; rows without ``ms`` (skipped) are left out."""
    measured = [r for r in rows if r["ms"] is not None]
    panels = [Panel(f"n = {n}", "", ylabel, log="y", bars=True, lines=[
        Line(pass_, [(label(r), r["ms"], text(r)) for r in measured if (r["n"], r["pass"]) == (n, pass_)])
        for pass_ in passes]) for n in sorted({r["n"] for r in measured})]
    labels = {label(r) for r in measured}
    draw(panels, path, columns=1, size=(max(8, 0.55 * len(labels) + 2), 4.5), title=title, overwrite=overwrite)


def draw(panels: list[Panel], path: Path, *, title: str = "", columns: int | None = None,
         size: tuple[float, float] = (6.0, 4.5), overwrite: bool = False) -> None:
    """Draw `panels`, `columns` to a row (default: all in one row), each `size` inches, into the PNG `path`
    (atomically; an existing file replaced only with `overwrite`)."""
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


# --------------------------------------------------------------------------- timing


def times_ms(step: Callable[[], object], repeats: int, device: str) -> list[float]:
    """Milliseconds of each of `repeats` calls of `step`, in order."""
    import torch

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        step()
        sync()
        times.append((time.perf_counter() - start) * 1000)
    return times


def median_ms(step: Callable[[], object], repeats: int, device: str) -> float:
    """Median milliseconds of `repeats` calls of `step`."""
    return statistics.median(times_ms(step, repeats, device))


def spread_ms(times: Sequence[float]) -> dict[str, float]:
    """``ms`` (the median), ``ms_min`` and ``ms_max`` of timed calls: how far a run's calls differ."""
    return {"ms": statistics.median(times), "ms_min": min(times), "ms_max": max(times)}


def wall_and_cpu_ms(step: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median wall-clock ms of `repeats` calls of `step` on the CPU and the median process CPU ms of the same calls
    (all threads' CPU time: with one thread, the time the work took whatever else the machine ran)."""
    cpu = []

    def step_with_cpu_time():
        start = time.process_time()
        step()
        cpu.append((time.process_time() - start) * 1000)

    return median_ms(step_with_cpu_time, repeats, "cpu"), statistics.median(cpu)


class PartTimes:
    """Milliseconds spent in the named parts of a timed call, summed over the call: ``with parts("read_ms"): ...``;
    `ms` holds them by name, each 0.0 until timed."""

    def __init__(self, names: Iterable[str]):
        self.ms = dict.fromkeys(names, 0.0)

    @contextlib.contextmanager
    def __call__(self, name: str):
        start = time.perf_counter()
        yield
        self.ms[name] += (time.perf_counter() - start) * 1000


def training_step(model, loss: Callable[[object], object], lr: float) -> Callable[[object], None]:
    """One training step of `model` (put in train mode) on a batch: ``loss(batch)``, backward, an Adam step with
    learning rate `lr`, and the gradients cleared at the end (the next batch starts without them)."""
    import torch

    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)

    def step(batch) -> None:
        loss(batch).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def inference_step(model) -> Callable[[object], object]:
    """A forward of `model` (put in eval mode) on a batch, in inference mode."""
    import torch

    model.eval()

    def step(batch):
        with torch.inference_mode():
            return model(batch)

    return step


def measure_step(step: Callable[[object], object], batch, *, warmup: int, repeats: int, device: str) -> dict:
    """``peak_mb`` of the first call of `step` on `batch` (`peak_mb`), then `warmup` - 1 untimed calls, and ``ms``,
    the median of `repeats` timed ones."""
    peak = peak_mb(lambda: step(batch), device)
    for _ in range(warmup - 1):
        step(batch)
    return {"ms": median_ms(lambda: step(batch), repeats, device), "peak_mb": peak}


def count_flops(step: Callable[[], object]) -> int:
    """FLOPs `torch.utils.flop_counter.FlopCounterMode` counts in one call of `step` (SDPA's CPU flash kernel,
    which its table lacks, counted as its other SDPA kernels are)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

    def cpu_flash(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return sdpa_flop_count(query_shape, key_shape, value_shape)

    custom = {}
    if hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu"):
        custom[torch.ops.aten._scaled_dot_product_flash_attention_for_cpu] = cpu_flash
    with FlopCounterMode(display=False, custom_mapping=custom) as counter:
        step()
    return counter.get_total_flops()


# --------------------------------------------------------------------------- store reads as a user pays them

#: Documents in a benchmark's store, over which each query's candidates are drawn: enough that a top 1,000
#: scatters over about every shard of 1,000, as over a real collection's.
STORE_DOCUMENTS = 100_000


def add_store_options(parser: argparse.ArgumentParser, stores: str, *, capped_by: str = "",
                      documents: int = STORE_DOCUMENTS) -> None:
    """``--store_documents`` (default `documents`) and ``--store_dir`` of a benchmark whose candidates are read from
    `stores` (a phrase: "each store"); `capped_by` names what may hold a store to fewer documents. Check with
    `check_store_options`."""
    add = parser.add_argument
    add("--store_documents", type=positive_int, default=documents, help=f"documents in {stores}, over which "
        f"each query's candidates are drawn (at least --candidates{'; fewer where ' + capped_by if capped_by else ''})")
    add("--store_dir", type=output_folder, help="where the stores are built and kept, reused when their identity "
        "matches: every store stays (default: a temporary folder under $TMPDIR, each store removed once measured: "
        "one on disk at a time)")


def check_store_options(args: argparse.Namespace) -> None:
    """Refuse a store too small to draw a query's ``--candidates`` distinct documents from."""
    if args.store_documents < args.candidates:
        usage_error(f"argument --store_documents: a query draws --candidates {args.candidates} distinct documents; "
                    f"got {args.store_documents}")


def draw_candidates(documents: int, count: int, seed: int, repeat: int):
    """A first stage's `count` candidates as a BM25 top-N would give them: distinct positions in a store of
    `documents`, uniformly at random and in the draw's order (a ranking has no relation to a store's order), a
    different draw for each `repeat` (``numpy.random.default_rng((seed, repeat))``): (count,) int64."""
    import numpy as np

    if not 0 < count <= documents:
        raise ValueError(f"cannot draw {count} distinct candidates from {documents} documents")
    return np.random.default_rng((seed % 2**64, repeat)).choice(documents, size=count, replace=False)


def noise_documents(seed: int, first: int, count: int, rows: int, width: int, dtype: str = "float32"):
    """Documents `first` to `first` + `count` - 1 of a seeded collection of noise, (count, rows, width) of `dtype`:
    each document a window of one pool of standard normal noise (2^24 values, or twice a document) at its own offset
    (a multiplicative hash of its position), so a store of any size is written at memory speed and no two documents'
    bytes are the same. The rows of a document depend only on `seed`, its position and its shape (a test reads them
    back from a store)."""
    import numpy as np

    size = rows * width
    length = max(1 << 24, 2 * size)
    pool = _noise_pool(seed % 2**64, length, np.dtype(dtype).name)
    span = length - size + 1
    out = np.empty((count, size), dtype=pool.dtype)
    for i in range(count):
        start = ((first + i) * 2654435761 + seed) % span  # Knuth's multiplicative hash of the position
        out[i] = pool[start : start + size]
    return out.reshape(count, rows, width)


@functools.lru_cache(maxsize=2)
def _noise_pool(seed: int, length: int, dtype: str):
    import numpy as np

    pool = np.random.default_rng(seed).standard_normal(length, dtype=np.float32).astype(dtype)
    pool.flags.writeable = False
    return pool


def evict_from_page_cache(paths: Iterable[str | os.PathLike]) -> bool:
    """Write `paths` back to disk and drop their pages from the page cache (``fsync``, then ``posix_fadvise(fd, 0, 0,
    POSIX_FADV_DONTNEED)``): on Linux the next touch of any of their bytes is then a disk read, but for pages some
    process has mapped in (those stay) and on a file system kept in memory (tmpfs). False, and nothing dropped,
    where the system has no ``posix_fadvise``; `cached_fraction` tells what stayed."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return False
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # dirty pages cannot be dropped
            advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return True


def cached_fraction(paths: Iterable[str | os.PathLike]) -> float | None:
    """The share of `paths`' pages in the page cache now (``mincore`` over a fresh read-only map, which reads
    none of them); None where ``mincore`` cannot be called (not Linux or another Unix with a C library to load)."""
    import numpy as np

    try:
        mincore = ctypes.CDLL(None, use_errno=True).mincore
    except (OSError, AttributeError):
        return None
    mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    page, resident, total = os.sysconf("SC_PAGE_SIZE"), 0, 0
    for path in paths:
        size = os.path.getsize(path)
        if not size:
            continue
        pages = -(-size // page)
        vector = (ctypes.c_ubyte * pages)()
        mapped = np.memmap(path, dtype=np.uint8, mode="r")  # offset 0: the map starts on a page
        failed = mincore(ctypes.c_void_p(mapped.ctypes.data), size, vector)
        del mapped
        if failed:
            return None
        resident += int((np.frombuffer(vector, dtype=np.uint8) & 1).sum())
        total += pages
    return resident / total if total else 0.0


def median_query(records: Sequence[dict], key: str = "ms") -> dict:
    """The timed query at the median of `key` among `records` (one dict of numbers per query), every field of it;
    with an even count the mean of the middle two, field by field. Its parts then add up to its total as each
    query's did, which the medians of each part taken apart need not."""
    ordered = sorted(records, key=lambda record: record[key])
    middle = ordered[(len(ordered) - 1) // 2 : len(ordered) // 2 + 1]
    return {name: sum(record[name] for record in middle) / len(middle) for name in middle[0]}


# --------------------------------------------------------------------------- memory


def peak_mb(step: Callable[[], object], device: str) -> float:
    """Peak memory of one call of `step` above what was in use before it (see the module docstring)."""
    if device == "cuda":
        return cuda_peak_mb(step)
    reset = reset_peak_rss()
    before = rss_mb()
    step()
    return max((peak_rss_mb() if reset else max_rss_mb()) - before, 0.0)


def cuda_peak_mb(step: Callable[[], object]) -> float:
    """Peak CUDA memory one call of `step` allocates above what was allocated before it."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    step()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / MB


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MB


def max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def reset_peak_rss() -> bool:
    """Return freed heap pages to the system and reset the peak resident set (VmHWM) to the current one.

    The peak above the resident set before a call is then that call's alone, as in a fresh
    process. False where Linux's ``/proc/self/clear_refs`` cannot be written: then only
    `max_rss_mb` is left, right only in a fresh process.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)  # glibc keeps freed small blocks resident otherwise
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # 5: reset the peak resident set size
        return True
    except OSError:
        return False


def peak_rss_mb() -> float:
    return _status_kb("VmHWM:") / 1024


def _status_kb(key: str, path: str = "/proc/self/status") -> int:
    with open(path) as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key))


def available_mb() -> float:
    """MemAvailable of /proc/meminfo (memory the kernel can give without swapping), in MB."""
    return _status_kb("MemAvailable:", "/proc/meminfo") / 1024


def limit_data_segment(share: float) -> None:
    """RLIMIT_DATA = this process's data segment now + `share` of MemAvailable: an allocation beyond it fails with
    an error in this process instead of waking the OOM killer."""
    limit = _status_kb("VmData:") * 1024 + int(share * available_mb() * MB)
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))


# --------------------------------------------------------------------------- a measurement in a fresh process


def guarded(measure: Callable[..., dict], /, *args, **kwargs) -> dict:
    """``measure(*args, **kwargs)``, or ``{"skipped": its error's first line}`` when it fails (out of memory, a
    kernel that cannot run here): one row's failure does not lose the others. What it left is freed either way."""
    try:
        return measure(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - any failure is the row's, with its reason
        return {"skipped": f"{type(error).__name__}: {error}".splitlines()[0][:300]}
    finally:
        import gc

        import torch

        gc.collect()  # the measurement's model, optimizer and inputs
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()


def measure_in_child(module: str, spec: dict, timeout: float, env: dict[str, object] | None = None) -> dict:
    """Run one measurement as ``python -m module --_one SPEC`` (`spec` as JSON, the keyword arguments of the
    measurement its `answer` calls), with the variables `env` set: its result, or ``{"skipped": reason}``."""
    command = [sys.executable, "-m", module, "--_one", json.dumps(spec)]
    if env:
        command = ["env", *(f"{key}={value}" for key, value in env.items()), *command]
    result = run_isolated(command, timeout)
    if result.get("skipped", "").startswith("over the"):
        result["skipped"] += " (--timeout)"
    return result


def answer(spec: str, measure: Callable[..., dict]) -> int:
    """The child's side of `measure_in_child`: ``measure(**spec)``, `guarded`, printed as one JSON line."""
    print(json.dumps(guarded(measure, **json.loads(spec))))
    return 0


def run_isolated(command: list[str], timeout: float) -> dict:
    """Run one measurement as `command` in a fresh process (its peak resident set is then its own).

    The command prints a JSON object as its last line; a failure or a timeout gives
    ``{"skipped": reason}`` (the last line of its error output), so a sweep goes on.
    """
    import subprocess

    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"skipped": f"over the {timeout:.0f} s time limit"}
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return {"skipped": lines[-1] if lines else f"exit status {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- the machine


#: The x86 vector extensions that decide a kernel's peak rate, as /proc/cpuinfo names them.
VECTOR_EXTENSIONS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
                     "avx512_fp16", "amx_tile", "amx_bf16")


def _cpuinfo(path: Path) -> dict[str, str]:
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError), open(path) as f:
        for line in f:
            if not line.strip():
                break  # the first processor's block describes them all
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    return fields


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's marketing name (``model name`` of Linux's `cpuinfo`; elsewhere `platform.processor()`)."""
    import platform

    return _cpuinfo(cpuinfo).get("model name") or platform.processor() or platform.machine()


def cpu_description(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """'MODEL (family F, model M), N logical CPUs, EXT EXT ...': the CPU this process runs on, with the vector
    extensions of `VECTOR_EXTENSIONS` it has."""
    fields = _cpuinfo(cpuinfo)
    name = cpu_model(cpuinfo)
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    flags = set(fields.get("flags", "").split())
    extensions = [e for e in VECTOR_EXTENSIONS if e in flags]
    return f"{name}, {os.cpu_count()} logical CPUs" + (f", {' '.join(extensions)}" if extensions else "")


def gpu_description(device: str) -> str | None:
    """The GPU's name on cuda, else None."""
    import torch

    return torch.cuda.get_device_name() if device == "cuda" else None


def machine() -> dict:
    """What a row records of the machine it was measured on now: torch's ``threads``, the ``cpu`` (`cpu_model`)
    and the 1-minute load average ``load_1min`` (other jobs slow a measurement)."""
    import torch

    return {"threads": torch.get_num_threads(), "cpu": cpu_model(), "load_1min": round(os.getloadavg()[0], 2)}


def describe_machine() -> str:
    """`machine` as a line of a report."""
    here = machine()
    return f"{here['cpu']}, {here['threads']} thread(s); load {here['load_1min']:.2f}"


# --------------------------------------------------------------------------- fits


def polyfit(points: Sequence[tuple[float, float]], degree: int) -> dict | None:
    """The least-squares polynomial of `degree` through `points` (x, y): ``coefficients`` lowest order first, its
    ``r2``, and the x values (``lengths``); None with too few points."""
    import numpy as np

    if len(points) <= degree:
        return None
    x, y = (np.array(v, dtype=float) for v in zip(*sorted(points)))
    coefficients = np.polyfit(x, y, degree)
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(((y - np.polyval(coefficients, x)) ** 2).sum()) / total if total > 0 else 1.0
    return {"degree": degree, "coefficients": [float(c) for c in coefficients[::-1]], "r2": r2,
            "lengths": [int(v) for v in x]}


def fit_value(fit: dict | None, x):
    """The `polyfit` polynomial at `x` (a number or an array); None without a fit."""
    return None if fit is None else sum(c * x**i for i, c in enumerate(fit["coefficients"]))
