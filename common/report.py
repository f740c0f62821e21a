"""Reproduced vs. reported: compare a run's metrics with the papers' tables.

The numbers printed in the four papers' results tables live in tidy CSVs at
``results/reported/<paper>.csv`` in the repository root (see the README there).
``common/reported`` is a symbolic link to that folder: a wheel ships its CSVs as the package data
``common/reported/*.csv`` (one copy in the repository, read the same way from a checkout, an editable install or an
installed wheel, with `importlib.resources`).
Columns: ``paper, table, dataset, split, setting, method, metric, value, note``.
``value`` is kept in the paper's own scale (e.g. MVA prints MRR@10 as 35.8).

API
---
``load_reported(paper=None, table=None, dataset=None, split=None, setting=None,
method=None, metric=None, root=None) -> DataFrame``
    Reported rows, filtered. Each filter takes one value or a list of values.
    ``table=3`` (or ``"3"``) also matches sub-tables ``"3a"``/``"3b"``.
    Paper ids: ``qds``, ``conformer_kernel``, ``earl``, ``mva`` (``-`` and ``_``
    are interchangeable; ``ck``/``qds-transformer`` are accepted aliases).

``compare(reproduced, paper, tables=None, dataset=None, method_map=None,
metric_map=None, include_missing=False, relevance_level=None) -> DataFrame``
    ``reproduced`` is the repo's ``metrics.json`` convention, a mapping
    ``run name -> measure name -> value`` with measures named as
    ``common.evaluate`` prints them (``ndcg_cut_10``, ``map``, ``mrr@10``, ...)
    and effectiveness values in the 0-1 scale; a path to such a JSON file is
    accepted too. ``method_map`` maps run names to the paper's method names
    (``{"qds": "QDS-Transformer"}``); a run with no entry is matched to the
    method whose name equals it, ignoring case and punctuation. Returns one
    row per matched (reported row, run) pair with ``reported``,
    ``reproduced`` (converted to the paper's scale) and
    ``diff = reproduced - reported`` (paper's scale), and the relevance level of
    each side (``reported_level``, ``reproduced_level``; see Relevance levels).
    Without ``dataset`` every dataset of the paper is matched, so pass it when a
    paper reports the same method on several collections. ``relevance_level``:
    the lowest label the reproduced binary measures counted relevant.

``to_markdown(df, float_format=None) -> str``
    A GitHub-flavoured markdown table (no ``tabulate`` needed).

``paper_dataset(paper, task) -> str | None``
    The ``dataset`` of the paper's CSV that a task spec (``builtin:<split>``,
    ``irds:<ir_datasets id>`` or a mapping of files, `common.data.source`)
    is: an ir_datasets id in :data:`IRDS_DATASETS` (or one under it, such as
    ``msmarco-document/trec-dl-2019/judged``) whose dataset the paper reports.
    Anything else is None: the built-in collection and files are none of the
    papers' datasets (a command's ``--dataset`` says when files are).

``write_task_info(output_dir, task, dataset)`` / ``read_task_info(metrics_path)``
    ``task.json`` beside ``metrics.json``: ``{"test": <task spec>, "dataset":
    <reported dataset id or null>}``, which every train and evaluate command
    writes (`common.commands.outputs`), so that a metrics file says what it
    was measured on (``metrics.json`` itself keeps its run -> measure -> value
    shape). ``task_label(task)`` names a task spec in messages.

Datasets. ``diff`` is a reproduction gap only when the metrics were measured on
the reported rows' dataset. The CLI reads the ``task.json`` beside the metrics
file and prints a ``note:`` line above the table (at the top of ``--output`` too)
when its dataset is null or differs from a compared row's (rows with dataset
``n/a``, parameter counts and timings, belong to none), or, without a
``task.json`` and without ``--dataset``, that the metrics file does not say
which dataset it was measured on, naming the compared rows' datasets. Exit
codes are the same with or without a note.

Relevance levels. Binary measures (MAP, MRR, recall, P, ...) count a document
relevant from a label on (trec_eval ``-l``), so on graded qrels (TREC DL) the
same run has two MAPs; NDCG uses the grades themselves. ``compare`` puts the
level of each side beside the numbers: ``reported_level`` is the level the
paper's number was measured at, where :data:`REPORTED_RELEVANCE_LEVELS` knows it
(with the evidence), ``1`` on datasets whose labels are all 1
(:data:`BINARY_DATASETS`), else ``not stated``; ``reproduced_level`` is the
``relevance_level`` passed (the CLI's ``--relevance_level``, else the
``data.relevance_level`` of the ``config.yaml`` beside the metrics file, which
every train command writes), else ``not given``. Graded measures show ``graded``
on both sides, measures of no relevance (timings, sizes) ``-``. The CLI prints a
``note:`` line when the two levels of a row differ (:func:`level_note`): diff is
then no reproduction gap.

Scale: a reported (paper, table, metric) group is in percent when its metric
is a bounded effectiveness measure (NDCG, MAP, MRR, RR, recall, precision,
NCG, ERR) and any of its values exceeds 1; reproduced values for such groups
are multiplied by 100 before differencing. Other metrics (latency, parameter
counts, FLOPs, ...) are compared as they are.

Errors: bad input (metrics file missing/unreadable/not JSON/wrong shape,
unknown paper, a selection with no reported rows) raises :class:`ReportError`;
a missing reported folder raises :class:`FileNotFoundError` (``root=`` or
``EFFICIENT_RANKERS_REPORTED`` naming none; or a checkout without symbolic links, where
``common/reported`` is a file naming the folder). The CLI turns both into one ``error: ...`` line on stderr, exit 2.

Typical use at the end of a paper package's evaluation::

    from common.report import compare, to_markdown
    df = compare(metrics, "qds", tables=2, dataset="trec-dl-2019-doc",
                 method_map={"qds": "QDS-Transformer"})
    print(to_markdown(df))

CLI::

    python -m common.report outputs/metrics.json --paper qds --table 2 \\
        --dataset trec-dl-2019-doc --map qds=QDS-Transformer --output report.md \\
        [--relevance_level 1]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Iterable, Mapping
from importlib.resources import files
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from common.io import atomic_write
from common.refusals import ArgumentParser, existing_file, output_file_problem

__all__ = [
    "COLUMNS",
    "KEY_COLUMNS",
    "ReportError",
    "reported_dir",
    "available_papers",
    "load_reported",
    "load_metrics",
    "percent_scaled",
    "REPORTED_RELEVANCE_LEVELS",
    "BINARY_DATASETS",
    "reported_level",
    "reproduced_level",
    "level_note",
    "read_relevance_level",
    "compare",
    "to_markdown",
    "paper_dataset",
    "task_label",
    "write_task_info",
    "read_task_info",
    "main",
]

#: Exact columns of every ``results/reported/<paper>.csv``.
COLUMNS = ["paper", "table", "dataset", "split", "setting", "method", "metric", "value", "note"]
#: Columns that identify one reported number.
KEY_COLUMNS = COLUMNS[:7]

#: Environment variable that overrides where the reported CSVs are read from.
ENV_VAR = "EFFICIENT_RANKERS_REPORTED"

_ALIASES = {
    "qds_transformer": "qds",
    "ck": "conformer_kernel",
    "conformer": "conformer_kernel",
    "ck_qti": "conformer_kernel",
}

# Bounded effectiveness measures: these may be printed as percentages.
_BOUNDED = re.compile(
    r"^(gdeval_)?(ndcg|map|mrr|recip_rank|recall|p_|p@|precision|ncg|err|success)",
    re.IGNORECASE,
)


#: ir_datasets ids -> the ``dataset`` of the reported CSVs; an id under one (``.../judged``) is the same dataset,
#: since evaluation keeps only the judged queries anyway.
IRDS_DATASETS = {
    "msmarco-document/trec-dl-2019": "trec-dl-2019-doc",
    "msmarco-document/trec-dl-2020": "trec-dl-2020-doc",
    "msmarco-document/dev": "msmarco-doc-dev",
    "msmarco-passage/trec-dl-2019": "trec-dl-2019-passage",
    "msmarco-passage/dev/small": "msmarco-passage-dev",
}

# Binary measures: what they count relevant depends on the relevance level (trec_eval -l). NDCG, NCG and ERR use
# the grades; gdeval's measures ignore -l.
_BINARY = re.compile(r"^(map|mrr|recip_rank|recall|p_|p@|precision|success|rprec|bpref|num_rel)", re.IGNORECASE)

#: (paper, dataset) -> the lowest label the paper's binary measures (MAP, MRR) counted relevant there, where the
#: repository has determined it; the evidence is in the comment. Other rows on graded qrels are "not stated".
REPORTED_RELEVANCE_LEVELS = {
    # EARL Table 2, TREC DL 2019 passages: trec_eval's default -l 1, not TREC DL's official -l 2. Re-orderings of
    # BM25's top 1,000 by published runs of NDCG@10 0.70-0.74 have MRR 0.95-0.99 and MAP 0.48-0.52 at level 1 but
    # MRR 0.84-0.91 and MAP 0.44-0.48 at level 2; the paper prints MRR 0.9349 and MAP 0.4836 at NDCG@10 0.7032
    # (results/earl/README.md, "Relevance level of Table 2's TREC DL numbers"; results/earl/relevance_level.csv).
    ("earl", "trec-dl-2019-passage"): 1,
}
#: Datasets whose qrels label every judged document 1 (MS MARCO's sparse dev judgements): level 1 is the only one.
BINARY_DATASETS = frozenset({"msmarco-passage-dev", "msmarco-doc-dev"})

#: The file beside ``metrics.json`` that names the task the metrics were measured on.
TASK_FILE = "task.json"

# Rounding applied to reproduced values and diffs (removes float noise such as
# 0.347 * 100 - 34.7 = -7e-15; reported values have at most 5 decimals).
_DECIMALS = 10


class ReportError(Exception):
    """Bad input to the report tooling (missing file, bad JSON, unknown paper, ...)."""


# --------------------------------------------------------------------------- reported
def reported_dir(root: str | os.PathLike | None = None) -> Path:
    """The folder holding the reported CSVs.

    ``root`` wins, then the ``EFFICIENT_RANKERS_REPORTED`` environment variable,
    then the package data ``common/reported`` (in a checkout the link to ``results/reported``,
    resolved; in an installed wheel its copy).
    """
    if root is not None:
        path = Path(root)
    elif os.environ.get(ENV_VAR):
        path = Path(os.environ[ENV_VAR])
    else:
        path = Path(str(files("common") / "reported")).resolve()
    if not path.is_dir():
        raise FileNotFoundError(
            f"reported results not found at {path}: load_reported reads the papers' CSVs there "
            f"(results/reported/*.csv of the repository); pass root=..., or set {ENV_VAR}"
        )
    return path


def available_papers(root: str | os.PathLike | None = None) -> list[str]:
    """Paper ids with a CSV in :func:`reported_dir`."""
    return sorted(p.stem for p in reported_dir(root).glob("*.csv"))


def _paper_id(paper: str, root: str | os.PathLike | None = None) -> str:
    key = str(paper).strip().lower().replace("-", "_").replace(" ", "_")
    key = _ALIASES.get(key, key)
    papers = available_papers(root)
    if key not in papers:
        raise ReportError(f"unknown paper {paper!r}; known papers: {', '.join(papers)}")
    return key


def _as_list(value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, (str, int, float)):
        return [str(value)]
    return [str(v) for v in value]


def _table_mask(col: pd.Series, tables: list[str]) -> pd.Series:
    wanted = {t.strip().lower() for t in tables}
    lowered = col.str.lower()
    base = lowered.str.extract(r"^(\d+)", expand=False)
    return lowered.isin(wanted) | base.isin(wanted)


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8")
    except (OSError, ValueError) as exc:  # a folder, pandas' parser errors, an empty file, bytes that are not UTF-8
        raise ReportError(f"{path}: not a CSV pandas can read ({str(exc).strip()})") from None
    if list(df.columns) != COLUMNS:
        raise ReportError(f"{path}: expected columns {COLUMNS}, found {list(df.columns)}")
    for row, (method, metric, value) in enumerate(zip(df["method"], df["metric"], df["value"]), start=1):
        try:
            float(value)
        except ValueError:
            raise ReportError(f"{path}: row {row} ({method}, {metric}): value {value!r} is not a number") from None
    df["value"] = df["value"].astype(float)
    return df


def load_reported(
    paper: str | None = None,
    table: Any = None,
    dataset: Any = None,
    split: Any = None,
    setting: Any = None,
    method: Any = None,
    metric: Any = None,
    root: str | os.PathLike | None = None,
) -> pd.DataFrame:
    """Reported numbers as a DataFrame with :data:`COLUMNS` (``value`` is float).

    Every filter takes a value or a list of values and matches exactly, except
    ``table`` where ``3`` also selects ``3a``/``3b``. Raises
    :class:`FileNotFoundError` when the CSV folder is absent and
    :class:`ReportError` for an unknown paper.
    """
    folder = reported_dir(root)
    papers = [_paper_id(paper, root)] if paper is not None else available_papers(root)
    frames = [_read_csv(folder / f"{p}.csv") for p in papers]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)
    tables = _as_list(table)
    if tables is not None:
        df = df[_table_mask(df["table"], tables)]
    for col, val in (("dataset", dataset), ("split", split), ("setting", setting),
                     ("method", method), ("metric", metric)):
        vals = _as_list(val)
        if vals is not None:
            df = df[df[col].isin(vals)]
    return df.reset_index(drop=True)


# --------------------------------------------------------------------------- reproduced
def load_metrics(path: str | os.PathLike) -> dict[str, dict[str, float]]:
    """Read and validate a ``metrics.json`` (run -> measure -> number)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file") from None
    except OSError as exc:
        raise ReportError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    try:
        return _validate_metrics(data)
    except ReportError as exc:
        raise ReportError(f"{path}: {exc}") from None


def _validate_metrics(data: Any) -> dict[str, dict[str, float]]:
    shape = 'expected {"run": {"measure": number, ...}, ...}'
    if not isinstance(data, Mapping):
        raise ReportError(f"{shape}, got a JSON {type(data).__name__}")
    out: dict[str, dict[str, float]] = {}
    for run, measures in data.items():
        if not isinstance(measures, Mapping):
            raise ReportError(f"{shape}; run {run!r} maps to {type(measures).__name__}")
        clean: dict[str, float] = {}
        for name, val in measures.items():
            if isinstance(val, bool) or not isinstance(val, (int, float)):
                raise ReportError(f"{shape}; {run!r}/{name!r} is not a number: {val!r}")
            clean[str(name)] = float(val)
        out[str(run)] = clean
    return out


def _norm(name: str) -> str:
    return re.sub(r"[^0-9a-z]+", "", str(name).lower())


def percent_scaled(reported: pd.DataFrame) -> pd.Series:
    """Boolean per row: is this reported value on a 0-100 scale?

    True for bounded effectiveness metrics (see module docstring) whose
    (paper, table, metric) group has any value above 1.
    """
    if reported.empty:
        return pd.Series([], dtype=bool, index=reported.index)
    bounded = reported["metric"].map(lambda m: bool(_BOUNDED.match(str(m))))
    group_max = reported.groupby(["paper", "table", "metric"])["value"].transform("max")
    return (bounded & (group_max > 1.0)).astype(bool)


def _measure_kind(metric: str) -> str:
    """``binary`` (depends on the relevance level), ``graded`` (another effectiveness measure) or ``-`` (none)."""
    if _BINARY.match(str(metric)):
        return "binary"
    return "graded" if _BOUNDED.match(str(metric)) else "-"


def reported_level(paper: str, dataset: str, metric: str) -> str:
    """The relevance level of a reported number, as `compare` prints it: the level (``"1"``, ``"2"``) where the
    repository knows it (:data:`REPORTED_RELEVANCE_LEVELS`, :data:`BINARY_DATASETS`), ``"not stated"`` for a binary
    measure where it does not, ``"graded"`` for NDCG and the like, ``"-"`` for a measure of no relevance."""
    kind = _measure_kind(metric)
    if kind != "binary":
        return kind
    if (paper, dataset) in REPORTED_RELEVANCE_LEVELS:
        return str(REPORTED_RELEVANCE_LEVELS[paper, dataset])
    return "1" if dataset in BINARY_DATASETS else "not stated"


def reproduced_level(metric: str, relevance_level: int | None) -> str:
    """The relevance level of a reproduced number: `relevance_level` (``"not given"`` where None) for a binary
    measure, ``"graded"`` or ``"-"`` otherwise (as `reported_level`)."""
    kind = _measure_kind(metric)
    if kind != "binary":
        return kind
    return "not given" if relevance_level is None else str(int(relevance_level))


def level_note(frame: pd.DataFrame) -> str | None:
    """The ``note:`` line for the rows of a `compare` frame whose reported and reproduced relevance levels are both
    known and differ (their diff compares numbers of different qrels), or None."""
    if frame.empty or "reported_level" not in frame:
        return None
    known = frame["reported_level"].str.isdigit() & frame["reproduced_level"].str.isdigit()
    differ = frame[known & (frame["reported_level"] != frame["reproduced_level"])]
    if differ.empty:
        return None
    groups = []
    for (dataset, reported, reproduced), rows in differ.groupby(["dataset", "reported_level", "reproduced_level"],
                                                                 sort=False):
        metrics = ", ".join(dict.fromkeys(rows["metric"]))
        groups.append(f"{metrics} on {dataset} reported at relevance level {reported} (labels >= {reported} "
                      f"relevant), reproduced at level {reproduced}")
    return (f"note: {'; '.join(groups)}: different measures, so their diff is no reproduction gap (python -m "
            f"common.evaluate QRELS RUN -l LEVEL measures the run at the paper's level)")


def read_relevance_level(metrics_path: str | os.PathLike) -> int | None:
    """``data.relevance_level`` of the ``config.yaml`` beside `metrics_path` (what a train command wrote), or None
    where there is no such file or setting."""
    path = Path(metrics_path).parent / "config.yaml"
    if not path.is_file():
        return None
    import yaml

    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ReportError(f"{path}: cannot read ({exc})") from None
    data = config.get("data") if isinstance(config, Mapping) else None
    level = data.get("relevance_level") if isinstance(data, Mapping) else None
    return level if isinstance(level, int) and not isinstance(level, bool) else None


def compare(
    reproduced: Mapping[str, Mapping[str, float]] | str | os.PathLike,
    paper: str,
    tables: Any = None,
    dataset: Any = None,
    method_map: Mapping[str, str] | None = None,
    metric_map: Mapping[str, str] | None = None,
    include_missing: bool = False,
    root: str | os.PathLike | None = None,
    table: Any = None,
    relevance_level: int | None = None,
) -> pd.DataFrame:
    """Join reproduced metrics against the paper's reported rows.

    Parameters
    ----------
    reproduced:
        ``{run: {measure: value}}`` (0-1 scale for effectiveness), or a path to
        a ``metrics.json`` of that shape.
    paper, tables, dataset:
        Which reported rows to compare against (see :func:`load_reported`);
        ``table=`` is accepted as an alias of ``tables=``.
    method_map:
        ``{run: paper method name}``. Runs without an entry are matched to a
        method whose name equals the run name ignoring case and punctuation;
        runs matching nothing are left out.
    metric_map:
        ``{reproduced measure: reported metric}`` for measures named
        differently from the CSVs (default: identical names).
    include_missing:
        Also return reported rows of matched methods whose measure the run
        lacks (``reproduced``/``diff`` are NaN).
    relevance_level:
        The lowest label the reproduced binary measures (MAP, MRR, ...)
        counted relevant (None: not given).

    Returns
    -------
    DataFrame with columns ``paper, table, dataset, split, setting, method,
    metric, run, reported, reproduced, diff, scale, reported_level,
    reproduced_level, note``; ``reproduced`` and ``diff`` are in the paper's
    scale (``scale`` is ``"0-1"`` or ``"0-100"`` for effectiveness measures,
    ``"raw"`` for anything else, compared unscaled); the levels are strings
    (`reported_level`, `reproduced_level`: ``"1"``, ``"graded"``, ...).
    Raises :class:`ReportError` when the paper/table/dataset selection has no
    reported rows, or when ``reproduced`` has the wrong shape.
    """
    if table is not None:
        if tables is not None:
            raise TypeError("compare() got both tables= and table=")
        tables = table
    if isinstance(reproduced, (str, os.PathLike)):
        reproduced = load_metrics(reproduced)
    else:
        reproduced = _validate_metrics(reproduced)
    method_map = dict(method_map or {})
    metric_map = dict(metric_map or {})

    reported = load_reported(paper, table=tables, dataset=dataset, root=root)
    if reported.empty:
        everything = load_reported(paper, root=root)
        raise ReportError(
            f"no reported rows for paper {_paper_id(paper, root)}"
            f"{' table ' + ','.join(_as_list(tables)) if tables is not None else ''}"
            f"{' dataset ' + ','.join(_as_list(dataset)) if dataset is not None else ''}; "
            f"tables: {', '.join(dict.fromkeys(everything['table']))}; "
            f"datasets: {', '.join(dict.fromkeys(everything['dataset']))}"
        )
    bounded = reported["metric"].map(lambda m: bool(_BOUNDED.match(str(m))))
    reported = reported.assign(_percent=percent_scaled(reported), _bounded=bounded)
    methods = list(dict.fromkeys(reported["method"]))
    by_norm: dict[str, str] = {}
    for m in methods:
        by_norm.setdefault(_norm(m), m)

    out_cols = ["paper", "table", "dataset", "split", "setting", "method", "metric",
                "run", "reported", "reproduced", "diff", "scale", "reported_level", "reproduced_level", "note"]
    rows: list[dict[str, Any]] = []
    for run, measures in reproduced.items():
        if run in method_map:
            method = method_map[run]
        else:
            method = by_norm.get(_norm(run))
        if method is None:
            continue
        renamed = {metric_map.get(k, k): v for k, v in measures.items()}
        for rec in reported[reported["method"] == method].to_dict("records"):
            val = renamed.get(rec["metric"])
            if val is None and not include_missing:
                continue
            factor = 100.0 if rec["_percent"] else 1.0
            repro = float("nan") if val is None else round(val * factor, _DECIMALS)
            rows.append({
                **{c: rec[c] for c in KEY_COLUMNS},
                "run": run,
                "reported": rec["value"],
                "reproduced": repro,
                "diff": round(repro - rec["value"], _DECIMALS),
                "scale": "0-100" if rec["_percent"] else ("0-1" if rec["_bounded"] else "raw"),
                "reported_level": reported_level(rec["paper"], rec["dataset"], rec["metric"]),
                "reproduced_level": reproduced_level(rec["metric"], relevance_level),
                "note": rec["note"],
            })
    return pd.DataFrame(rows, columns=out_cols)


# --------------------------------------------------------------------------- datasets
def paper_dataset(paper: str, task: Any, root: str | os.PathLike | None = None) -> str | None:
    """The ``dataset`` id of ``results/reported/<paper>.csv`` that task spec `task` is, or None.

    Only an ``irds:`` task in :data:`IRDS_DATASETS` (or under one of its ids) can be, and only when the
    paper reports that dataset; the built-in collection and tasks from files are none of the papers'.
    """
    if not isinstance(task, str) or not task.startswith("irds:"):
        return None
    ident = task[len("irds:"):]
    dataset = next((d for prefix, d in IRDS_DATASETS.items() if ident == prefix or ident.startswith(prefix + "/")),
                   None)
    if dataset is None or dataset not in set(load_reported(paper, root=root)["dataset"]):
        return None
    return dataset


def task_label(task: Any) -> str:
    """A task spec as messages name it: the spec itself, or for files the topics (or rank_llm) file."""
    if isinstance(task, Mapping):
        return f"the task from files {task.get('topics_path') or task.get('rank_llm_path')}"
    return str(task)


def write_task_info(output_dir: str | os.PathLike, task: Any, dataset: str | None, *, overwrite: bool = False) -> Path:
    """Write ``task.json`` (``{"test": task, "dataset": dataset}``) into `output_dir`, atomically and never over
    an existing one unless `overwrite`; returns its path."""
    path = Path(output_dir) / TASK_FILE
    spec = dict(task) if isinstance(task, Mapping) else task
    with atomic_write(path, overwrite=overwrite) as f:
        json.dump({"test": spec, "dataset": dataset}, f, indent=2, default=str)
        f.write("\n")
    return path


def read_task_info(metrics_path: str | os.PathLike) -> dict | None:
    """The ``task.json`` beside `metrics_path` (None where there is none); ReportError where it is malformed."""
    path = Path(metrics_path).parent / TASK_FILE
    if not path.is_file():
        return None
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ReportError(f"{path}: cannot read ({exc})") from None
    if not (isinstance(info, Mapping) and {"test", "dataset"} <= set(info)
            and isinstance(info["dataset"], (str, type(None)))):
        raise ReportError(f'{path}: expected {{"test": TASK, "dataset": DATASET or null}}')
    return dict(info)


def _dataset_note(metrics_path: str, info: Mapping | None, datasets: list[str], dataset_given: bool) -> str | None:
    """The ``note:`` line above a comparison whose rows are on `datasets` (see the module docstring), or None."""
    if not datasets:
        return None
    if info is None:
        if dataset_given:
            return None
        return (f"note: {metrics_path} does not say which dataset it was measured on (no {TASK_FILE} beside it); "
                f"the reported rows are on {', '.join(datasets)}: diff is a reproduction gap only where the metrics "
                f"were measured on the row's dataset (--dataset keeps that one's rows)")
    measured = info["dataset"]
    others = [d for d in datasets if d != measured]
    if not others:
        return None
    if measured is None:
        return (f"note: these metrics were measured on {task_label(info['test'])}; the reported rows are on "
                f"{', '.join(datasets)}: different datasets, so diff is no reproduction gap")
    return (f"note: these metrics were measured on {task_label(info['test'])} ({measured}); the reported rows on "
            f"{', '.join(others)} are on another dataset, so their diff is no reproduction gap "
            f"(--dataset {measured} leaves them out)")


# --------------------------------------------------------------------------- markdown
def _fmt_float(x: float) -> str:
    if math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.6g}"


def _cell(value: Any, float_format: Callable[[float], str]) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        text = float_format(value)
    else:
        try:
            if pd.isna(value):
                return "n/a"
        except (TypeError, ValueError):
            pass
        text = str(value)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def to_markdown(df: pd.DataFrame, float_format: Callable[[float], str] | None = None,
                columns: Iterable[str] | None = None) -> str:
    """Render ``df`` as a GitHub-flavoured markdown table (numeric columns right-aligned)."""
    fmt = float_format or _fmt_float
    cols = list(columns) if columns is not None else list(df.columns)
    header = [_cell(str(c), fmt) for c in cols]
    body = [[_cell(v, fmt) for v in rec] for rec in df[cols].itertuples(index=False, name=None)]
    numeric = [pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c]) for c in cols]
    widths = [max([3, len(h)] + [len(r[i]) for r in body]) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        padded = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric)]
        return "| " + " | ".join(padded) + " |"

    sep = "| " + " | ".join(("-" * (w - 1) + ":") if num else "-" * w for w, num in zip(widths, numeric)) + " |"
    return "\n".join([line(header), sep] + [line(r) for r in body]) + "\n"


# --------------------------------------------------------------------------- CLI
def _parse_map(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        run, sep, method = item.partition("=")
        if not sep or not run or not method:
            raise ReportError(f"--map {item!r}: expected RUN=METHOD, e.g. qds=QDS-Transformer")
        out[run] = method
    return out


def _build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m common.report",
        description=(
            "Compare reproduced metrics (metrics.json: run -> measure -> value, 0-1 scale, "
            "measure names as common.evaluate prints them) with the numbers reported in a "
            "paper's tables (results/reported/<paper>.csv) and print a markdown table with "
            "diff = reproduced - reported in the paper's scale."
        ),
        epilog=(
            "example: python -m common.report outputs/metrics.json --paper qds --table 2 "
            "--dataset trec-dl-2019-doc --map qds=QDS-Transformer --output outputs/report.md\n"
            "Runs without --map are matched to a paper method of the same name "
            "(case and punctuation ignored). A note above the table says when the task.json beside the metrics "
            "file names another dataset than a compared row's, or when there is no task.json (and no --dataset), "
            "and when a row's reported and reproduced relevance levels (columns reported_level, reproduced_level) "
            "differ. Exit status: 0 ok, 1 nothing matched, 2 bad input."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("metrics_json", metavar="METRICS_JSON", type=existing_file, help="reproduced metrics file")
    parser.add_argument("--paper", required=True,
                        help="paper id: qds, conformer_kernel, earl or mva")
    parser.add_argument("--table", action="append", metavar="TABLE",
                        help="restrict to a table (repeatable); 3 also selects 3a/3b")
    parser.add_argument("--dataset", action="append", metavar="DATASET",
                        help="restrict to a dataset id, e.g. trec-dl-2019-doc (repeatable)")
    parser.add_argument("--map", action="append", default=[], metavar="RUN=METHOD",
                        help="map a run name to the paper's method name (repeatable)")
    parser.add_argument("--metric_map", action="append", default=[], metavar="MEASURE=METRIC",
                        help="map a reproduced measure name to a reported metric name (repeatable)")
    parser.add_argument("--relevance_level", type=int, metavar="LEVEL",
                        help="the lowest label the reproduced MAP, MRR, ... counted relevant (trec_eval -l; default: "
                             "data.relevance_level of the config.yaml beside METRICS_JSON, else not given)")
    parser.add_argument("--include_missing", action="store_true",
                        help="also list reported rows of matched methods that the run lacks")
    parser.add_argument("--output", metavar="FILE.md",
                        help="also write the markdown table here (atomically)")
    parser.add_argument("--overwrite", action="store_true", help="allow --output to replace an existing file")
    return parser


def _check_output(out: str | None, overwrite: bool) -> None:
    """Refuse an --output that cannot be written before comparing anything, rather than after printing the table."""
    if out is None:
        return
    problem = output_file_problem(Path(out), overwrite)
    if problem:
        raise ReportError(f"--output: {problem}")


def main(argv: list[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    try:
        _check_output(args.output, args.overwrite)
        metrics = load_metrics(args.metrics_json)
        method_map = _parse_map(args.map)
        metric_map = _parse_map(args.metric_map)
        paper = _paper_id(args.paper)
        level = args.relevance_level
        if level is None:
            level = read_relevance_level(args.metrics_json)
        df = compare(metrics, paper, tables=args.table, dataset=args.dataset,
                     method_map=method_map, metric_map=metric_map,
                     include_missing=args.include_missing, relevance_level=level)
        if df.empty:
            known = load_reported(paper, table=args.table, dataset=args.dataset)
            print(
                f"error: {args.metrics_json}: no run/measure matched the reported rows of {paper}"
                f"{' table ' + ','.join(args.table) if args.table else ''}; runs: "
                f"{', '.join(metrics) or '(none)'}; reported methods: "
                f"{', '.join(dict.fromkeys(known['method'])) or '(none)'}; use --map RUN=METHOD",
                file=sys.stderr,
            )
            return 1
        text = to_markdown(df.drop(columns=["note"]))
        datasets = [d for d in dict.fromkeys(df["dataset"]) if d != "n/a"]
        note = _dataset_note(args.metrics_json, read_task_info(args.metrics_json), datasets, bool(args.dataset))
        notes = [line for line in (note, level_note(df)) if line]
        if notes:
            text = "\n".join(notes) + f"\n\n{text}"
        if args.output:
            try:
                with atomic_write(args.output, overwrite=args.overwrite) as f:
                    f.write(text)
            except OSError as exc:
                raise ReportError(f"{args.output}: cannot write ({exc.strerror or exc})") from None
    except (ReportError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # Printed once --output is written, so that a failed write prints nothing but its error.
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
