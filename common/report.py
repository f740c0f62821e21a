"""Reproduced vs. reported: a run's metrics beside the numbers of the papers' tables (``results/reported/<paper>.csv``,
shipped in a wheel through the ``common/reported`` link), each ``value`` in the paper's own ``scale``. `compare` puts
``diff = reproduced - reported`` in that scale and each side's relevance level beside them (binary measures depend on
trec_eval's ``-l``); ``task.json`` beside a ``metrics.json`` names the task measured (`write_task_info`), and the CLI
notes where its dataset or the relevance levels differ from a row's. docs/report.md has the details.

    python -m common.report outputs/metrics.json --paper qds --table 2 --dataset trec-dl-2019-doc \\
        --map qds=QDS-Transformer [--output report.md] [--relevance_level 1]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path
from typing import Any

import pandas as pd

from common.data.query_split import PART_NAMES
from common.io import atomic_write
from common.refusals import ArgumentParser, existing_file, output_file_problem

#: Exact columns of every ``results/reported/<paper>.csv``; the first seven identify one reported number.
COLUMNS = ["paper", "table", "dataset", "split", "setting", "method", "metric", "value", "scale", "note"]
KEY_COLUMNS = COLUMNS[:7]
#: A reported value's scale: the factor a reproduced 0-1 value is multiplied by to compare with it.
SCALES = {"0-1": 1.0, "0-100": 100.0, "raw": 1.0}

#: Environment variable that overrides where the reported CSVs are read from.
ENV_VAR = "EFFICIENT_RANKERS_REPORTED"

#: ir_datasets ids -> the ``dataset`` of the reported CSVs; an id under one (``.../judged``) is the same dataset.
IRDS_DATASETS = {
    "msmarco-document/trec-dl-2019": "trec-dl-2019-doc", "msmarco-document/trec-dl-2020": "trec-dl-2020-doc",
    "msmarco-document/dev": "msmarco-doc-dev", "msmarco-passage/trec-dl-2019": "trec-dl-2019-passage",
    "msmarco-passage/dev/small": "msmarco-passage-dev",
}

# Binary measures: what they count relevant depends on trec_eval's -l (NDCG, NCG and ERR use the grades).
_BINARY = re.compile(r"^(map|mrr|recip_rank|recall|p_|p@|precision|success|rprec|bpref|num_rel)", re.IGNORECASE)

#: (paper, dataset) -> the lowest label the paper's binary measures counted relevant there, where known. EARL Table
#: 2's TREC DL 2019: -l 1 (results/earl/README.md, "Relevance level of Table 2's TREC DL numbers").
REPORTED_RELEVANCE_LEVELS = {("earl", "trec-dl-2019-passage"): 1}
#: Datasets whose qrels label every judged document 1 (MS MARCO's sparse dev judgements): level 1 is the only one.
BINARY_DATASETS = frozenset({"msmarco-passage-dev", "msmarco-doc-dev"})

#: The file beside ``metrics.json`` that names the task the metrics were measured on.
TASK_FILE = "task.json"

# reproduced values and diffs rounded (float noise: 0.347 * 100 - 34.7 = -7e-15; reported values have <= 5 decimals)
_DECIMALS = 10


class ReportError(Exception):
    """Bad input: a missing or malformed file, an unknown paper, a selection with no rows."""


def reported_dir(root: str | os.PathLike | None = None) -> Path:
    """The folder of the reported CSVs: `root`, else ``$EFFICIENT_RANKERS_REPORTED``, else ``common/reported``."""
    given = root if root is not None else os.environ.get(ENV_VAR)
    path = Path(given) if given else Path(str(files("common") / "reported")).resolve()
    if not path.is_dir():
        raise FileNotFoundError(f"reported results not found at {path}: load_reported reads the papers' CSVs there "
                                f"(results/reported/*.csv of the repository); pass root=..., or set {ENV_VAR}")
    return path


def _as_list(value: Any) -> list[str] | None:
    if value is None:
        return None
    return [str(value)] if isinstance(value, (str, int, float)) else [str(v) for v in value]


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
    unknown = sorted(set(df["scale"]) - set(SCALES))
    if unknown:
        raise ReportError(f"{path}: scale {unknown[0]!r} is none of {', '.join(SCALES)}")
    df["value"] = df["value"].astype(float)
    return df


def load_reported(paper: str | None = None, table: Any = None, dataset: Any = None, split: Any = None,
                  setting: Any = None, method: Any = None, metric: Any = None,
                  root: str | os.PathLike | None = None) -> pd.DataFrame:
    """Reported numbers as a DataFrame with `COLUMNS` (``value`` float). Each filter takes a value or a list and
    matches exactly, but ``table=3`` also selects ``3a`` and ``3b``."""
    folder = reported_dir(root)
    papers = sorted(p.stem for p in folder.glob("*.csv"))
    if paper is not None and paper not in papers:
        raise ReportError(f"unknown paper {paper!r}; known papers: {', '.join(papers)}")
    frames = [_read_csv(folder / f"{p}.csv") for p in ([paper] if paper is not None else papers)]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)
    tables = _as_list(table)
    if tables is not None:
        wanted, lowered = {t.strip().lower() for t in tables}, df["table"].str.lower()
        df = df[lowered.isin(wanted) | lowered.str.extract(r"^(\d+)", expand=False).isin(wanted)]
    filters = {"dataset": dataset, "split": split, "setting": setting, "method": method, "metric": metric}
    for col, val in filters.items():
        if val is not None:
            df = df[df[col].isin(_as_list(val))]
    return df.reset_index(drop=True)


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
        return _validate_metrics(json.loads(text))
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
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
        for name, val in measures.items():
            if isinstance(val, bool) or not isinstance(val, (int, float)):
                raise ReportError(f"{shape}; {run!r}/{name!r} is not a number: {val!r}")
        out[str(run)] = {str(name): float(val) for name, val in measures.items()}
    return out


def _levels(rec: Mapping[str, Any], relevance_level: int | None) -> dict[str, str]:
    """The relevance levels of a reported row and of its reproduced number: for a binary measure, the lowest label
    counted relevant (``not stated``, ``not given`` where unknown); else ``graded``, or ``-`` for a raw number."""
    if rec["scale"] == "raw" or not _BINARY.match(rec["metric"]):
        kind = "-" if rec["scale"] == "raw" else "graded"
        return {"reported_level": kind, "reproduced_level": kind}
    reported = REPORTED_RELEVANCE_LEVELS.get((rec["paper"], rec["dataset"]), 1 if rec["dataset"] in BINARY_DATASETS
                                             else None)
    return {"reported_level": "not stated" if reported is None else str(reported),
            "reproduced_level": "not given" if relevance_level is None else str(int(relevance_level))}


def level_note(frame: pd.DataFrame) -> str | None:
    """The ``note:`` line for a `compare` frame's rows whose two relevance levels are known and differ, or None."""
    known = frame["reported_level"].str.isdigit() & frame["reproduced_level"].str.isdigit()
    differ = frame[known & (frame["reported_level"] != frame["reproduced_level"])]
    if differ.empty:
        return None
    groups = [f"{', '.join(dict.fromkeys(rows['metric']))} on {dataset} reported at relevance level {reported} "
              f"(labels >= {reported} relevant), reproduced at level {reproduced}"
              for (dataset, reported, reproduced), rows
              in differ.groupby(["dataset", "reported_level", "reproduced_level"], sort=False)]
    return (f"note: {'; '.join(groups)}: different measures, so their diff is no reproduction gap (python -m "
            f"common.evaluate QRELS RUN -l LEVEL measures the run at the paper's level)")


def read_relevance_level(metrics_path: str | os.PathLike) -> int | None:
    """``data.relevance_level`` of the ``config.yaml`` beside `metrics_path` (a train command's), or None."""
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


def compare(reproduced: Mapping[str, Mapping[str, float]] | str | os.PathLike, paper: str, tables: Any = None,
            dataset: Any = None, method_map: Mapping[str, str] | None = None,
            metric_map: Mapping[str, str] | None = None, include_missing: bool = False,
            root: str | os.PathLike | None = None, relevance_level: int | None = None) -> pd.DataFrame:
    """`reproduced` (``{run: {measure: 0-1 value}}`` or a ``metrics.json``) beside the paper's reported rows, runs
    matched by `method_map` (else by their name), measures by `metric_map`: one row per match, ``reproduced`` and
    ``diff`` in the row's scale; with `include_missing`, the matched methods' rows the run lacks too (NaN)."""
    is_path = isinstance(reproduced, (str, os.PathLike))
    reproduced = load_metrics(reproduced) if is_path else _validate_metrics(reproduced)
    method_map, metric_map = dict(method_map or {}), dict(metric_map or {})
    reported = load_reported(paper, table=tables, dataset=dataset, root=root)
    if reported.empty:
        everything = load_reported(paper, root=root)
        raise ReportError(f"no reported rows for paper {paper}"
                          f"{' table ' + ','.join(_as_list(tables)) if tables is not None else ''}"
                          f"{' dataset ' + ','.join(_as_list(dataset)) if dataset is not None else ''}; "
                          f"tables: {', '.join(dict.fromkeys(everything['table']))}; "
                          f"datasets: {', '.join(dict.fromkeys(everything['dataset']))}")
    out_cols = [*KEY_COLUMNS, "run", "reported", "reproduced", "diff", "scale", "reported_level", "reproduced_level",
                "note"]
    rows: list[dict[str, Any]] = []
    for run, measures in reproduced.items():
        renamed = {metric_map.get(k, k): v for k, v in measures.items()}
        for rec in reported[reported["method"] == method_map.get(run, run)].to_dict("records"):
            val = renamed.get(rec["metric"])
            if val is None and not include_missing:
                continue
            repro = float("nan") if val is None else round(val * SCALES[rec["scale"]], _DECIMALS)
            rows.append({**rec, "run": run, "reported": rec["value"], "reproduced": repro,
                         "diff": round(repro - rec["value"], _DECIMALS), **_levels(rec, relevance_level)})
    return pd.DataFrame(rows, columns=out_cols)


def paper_dataset(paper: str, task: Any, root: str | os.PathLike | None = None) -> str | None:
    """The reported ``dataset`` that task spec `task` is: an ``irds:`` task in `IRDS_DATASETS` (or under one of its
    ids) whose dataset the paper reports, else None (the built-in collection and files are none of the papers')."""
    if not isinstance(task, str) or not task.startswith("irds:"):
        return None
    ident = task[len("irds:"):]
    dataset = next((d for prefix, d in IRDS_DATASETS.items() if ident == prefix or ident.startswith(prefix + "/")),
                   None)
    return dataset if dataset is not None and dataset in set(load_reported(paper, root=root)["dataset"]) else None


def task_label(task: Any) -> str:
    """A task spec as messages name it: the spec itself, or for files the topics (or rank_llm) file and the part of
    its judged queries where it is cut to one (`common.data.query_split`)."""
    if isinstance(task, Mapping):
        part = PART_NAMES.get(task.get("queries", "all"))
        return f"the task from files {task.get('topics_path') or task.get('rank_llm_path')}" + (
            f", its {part} queries" if part else "")
    return str(task)


def write_task_info(output_dir: str | os.PathLike, task: Any, dataset: str | None, *, overwrite: bool = False) -> Path:
    """Write ``task.json`` (``{"test": task, "dataset": dataset}``) into `output_dir`; its path."""
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
    """The ``note:`` line above a comparison whose rows are on `datasets` (docs/report.md), or None."""
    if not datasets or (info is None and dataset_given):
        return None
    if info is None:
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


def _cell(value: Any) -> str:
    """A markdown cell: n/a for NaN, None and NA; floats as integers where whole, else to 6 significant digits."""
    if isinstance(value, bool):
        return str(value)
    if pd.api.types.is_scalar(value) and pd.isna(value):  # NaN, None, pd.NA, NaT
        return "n/a"
    if isinstance(value, float):
        return str(int(value)) if math.isfinite(value) and value == int(value) and abs(value) < 1e15 else f"{value:.6g}"
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def to_markdown(df: pd.DataFrame) -> str:
    """Render ``df`` as a GitHub-flavoured markdown table (numeric columns right-aligned)."""
    cols = list(df.columns)
    header = [_cell(str(c)) for c in cols]
    body = [[_cell(v) for v in rec] for rec in df.itertuples(index=False, name=None)]
    numeric = [pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c]) for c in cols]
    widths = [max([3, len(h)] + [len(r[i]) for r in body]) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric)) + " |"

    sep = "| " + " | ".join(("-" * (w - 1) + ":") if num else "-" * w for w, num in zip(widths, numeric)) + " |"
    return "\n".join([line(header), sep] + [line(r) for r in body]) + "\n"


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
        description="Compare reproduced metrics (metrics.json: run -> measure -> value, 0-1 scale, measure names as "
                    "common.evaluate prints them) with the numbers reported in a paper's tables "
                    "(results/reported/<paper>.csv) and print a markdown table with diff = reproduced - reported in "
                    "the paper's scale.",
        epilog="example: python -m common.report outputs/metrics.json --paper qds --table 2 --dataset "
               "trec-dl-2019-doc --map qds=QDS-Transformer --output outputs/report.md\nRuns without --map are "
               "matched to the paper's method of exactly their name. A note above the table says when the task.json "
               "beside the metrics file names another dataset than a compared row's, or when there is no task.json "
               "(and no --dataset), and when a row's reported and reproduced relevance levels (columns "
               "reported_level, reproduced_level) differ. Exit status: 0 ok, 1 nothing matched, 2 bad input.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("metrics_json", metavar="METRICS_JSON", type=existing_file, help="reproduced metrics file")
    add("--paper", required=True, help="paper id: qds, conformer_kernel, earl or mva")
    add("--table", action="append", metavar="TABLE", help="restrict to a table (repeatable); 3 also selects 3a/3b")
    add("--dataset", action="append", metavar="DATASET",
        help="restrict to a dataset id, e.g. trec-dl-2019-doc (repeatable)")
    add("--map", action="append", default=[], metavar="RUN=METHOD",
        help="map a run name to the paper's method name (repeatable)")
    add("--metric_map", action="append", default=[], metavar="MEASURE=METRIC",
        help="map a reproduced measure name to a reported metric name (repeatable)")
    add("--relevance_level", type=int, metavar="LEVEL",
        help="the lowest label the reproduced MAP, MRR, ... counted relevant (trec_eval -l; default: "
             "data.relevance_level of the config.yaml beside METRICS_JSON, else not given)")
    add("--include_missing", action="store_true", help="also list reported rows of matched methods that the run lacks")
    add("--output", metavar="FILE.md", help="also write the markdown table here (atomically)")
    add("--overwrite", action="store_true", help="allow --output to replace an existing file")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    try:
        problem = args.output and output_file_problem(Path(args.output), args.overwrite)
        if problem:  # refused before comparing anything
            raise ReportError(f"--output: {problem}")
        metrics = load_metrics(args.metrics_json)
        method_map, metric_map = _parse_map(args.map), _parse_map(args.metric_map)
        level = read_relevance_level(args.metrics_json) if args.relevance_level is None else args.relevance_level
        df = compare(metrics, args.paper, tables=args.table, dataset=args.dataset, method_map=method_map,
                     metric_map=metric_map, include_missing=args.include_missing, relevance_level=level)
        if df.empty:
            known = load_reported(args.paper, table=args.table, dataset=args.dataset)
            print(f"error: {args.metrics_json}: no run/measure matched the reported rows of {args.paper}"
                  f"{' table ' + ','.join(args.table) if args.table else ''}; runs: {', '.join(metrics) or '(none)'}; "
                  f"reported methods: {', '.join(dict.fromkeys(known['method'])) or '(none)'}; use --map RUN=METHOD",
                  file=sys.stderr)
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
    # printed once --output is written: a failed write prints nothing but its error
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
