"""One ``main`` for the four ``python -m <package>.train``, each declared as a `TrainCommand` (``COMMAND``).

`common.commands.cli.RankerCLI` parses the options, trains and tests the checkpoint best on dev; then the test runs are
written (``run.trec``, or ``run.<mode>.trec`` for each of ``--test_modes``), each ``--compare_with`` baseline is trained
the same way into ``<output_dir>/<baseline>/`` (one process only), and ``task.json`` and, last, ``metrics.json`` are
written and printed beside BM25's, the baselines' and the paper's.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from pkgutil import resolve_name
from typing import Any, Literal

from common.commands.run_folder import CONFIG, FINISHED, requeued


@dataclass(frozen=True)
class TestModes:
    """``--test_modes``: ``runs(cli, modes) -> {mode: run}`` after `RankerCLI.fit_and_test`, each run (and BM25's)
    cut to ``depth`` documents per query."""

    choices: tuple[str, ...]
    help: str
    runs: Callable[[Any, list[str]], dict]
    depth: int


@dataclass(frozen=True)
class TrainCommand:
    """A training command: `name` (``qds.train``, whose docstring is ``--help``'s), `model` and `data` classes by
    import path, the dev measure to `monitor` (higher is better), `run_name` (of ``outputs/<run_name(config)>-<time>``),
    the `paper`'s id in ``results/reported``, its parser `links`, the `baselines` ``--compare_with`` may list."""

    name: str
    default_config: Path
    model: str
    data: str
    monitor: str
    run_name: Callable[[Any], str]
    paper: str
    paper_tables: Callable[[dict, Any, str | None, Any], str]
    tested_name: Callable[[Any], str] = attrgetter("name")
    links: Callable[[Any], None] | None = None
    baselines: tuple[str, ...] = ()
    test_modes: TestModes | None = None
    labels: dict[str, str] | None = None

    def add_arguments(self, parser) -> None:
        """The command's own options (``--compare_with``, ``--test_modes``), then its `links`."""
        if self.baselines:
            parser.add_argument("--compare_with", type=list[Literal[self.baselines]], default=[],
                                help="baselines trained the same way after the model, each into OUTPUT_DIR/<name> "
                                     f"and printed beside it: any of {', '.join(self.baselines)}")
        if self.test_modes is not None:
            modes = self.test_modes.choices
            parser.add_argument("--test_modes", type=list[Literal[modes]], default=list(modes),
                                help=self.test_modes.help)
        if self.links is not None:
            self.links(parser)

    def main(self, args: list[str] | None = None) -> dict | None:
        """Run the command line `args` (None: ``sys.argv[1:]``); returns the test metrics (`run_command`)."""
        return run_command(self, args)

    def cli(self, args: list[str] | None, cli_class=None, command: str | None = None):
        """The command's `common.commands.cli.RankerCLI` (or `cli_class`) for `args`, ``--help`` naming `command`."""
        from common.commands.cli import RankerCLI

        return (cli_class or RankerCLI)(resolve_name(self.model), resolve_name(self.data), command=command or self.name,
                                        default_config=self.default_config, run_name=self.run_name,
                                        monitor=self.monitor, arguments=self.add_arguments, args=args)


def run_command(command: TrainCommand, args: list[str] | None = None) -> dict | None:
    """Run `command` on `args` (None: ``sys.argv[1:]``): the test metrics (None without a test split, or off rank 0)."""
    if args is not None:
        args = requeued(args)  # a SLURM job run again resumes its run
    else:  # Lightning's launcher runs the process's own command line again in its other processes
        sys.argv[1:] = requeued(sys.argv[1:])
    import torch

    from common.commands.quiet import quiet_lightning
    from common.training.processes import leave_process_group_at_exit

    quiet_lightning()
    leave_process_group_at_exit()

    from common.commands.outputs import NO_QRELS, RUN, metrics_table, mode_run, write_mode_results, write_results
    from common.data.rerank import reranked_run
    from common.report import paper_dataset

    torch.set_float32_matmul_precision("high")
    cli = command.cli(args)
    model, data, out = cli.model, cli.datamodule, cli.output_dir
    if not cli.fit_and_test():  # else `model` holds the tested weights
        return None
    name, source, candidates = command.tested_name(model), data.source("test").name, data.source("test").candidates()
    if command.test_modes is None:
        run = reranked_run(data.test_pairs(), model.test_scores, candidates)
        title = f"Test queries of {source} ({len(run)}), re-ranking the top {data.hparams.depth} BM25 candidates"
    else:
        runs = command.test_modes.runs(cli, cli.config.test_modes)
        title = f"Test queries of {source} ({len(data.eval_queries('test'))})"
    others = {}
    for baseline in cli.config.get("compare_with") or []:
        measured = train_baseline(command, out, baseline) or {}
        others.update({k: v for k, v in measured.items() if k != "bm25"})
    task = data.specs["test"]
    dataset = paper_dataset(command.paper, task)
    settings = {"measures": model.measures, "task": task, "dataset": dataset, "others": others,
                "overwrite": cli.resuming}
    judged = (data.source("test").qrels(), candidates, data.tasks.relevance_level)
    if command.test_modes is None:
        metrics, files = write_results(out, name, run, *judged, **settings), [out / RUN]
    else:
        metrics = write_mode_results(out, name, runs, *judged, depth=command.test_modes.depth, **settings)
        files = [out / mode_run(mode) for mode in runs]
    print()
    if metrics is None:
        print(f"{title}\n\n{NO_QRELS}")
    else:
        print(metrics_table(metrics, title, model.measures, command.labels))
        print()
        print(command.paper_tables(metrics, task, dataset, data))
        files.append(out / "metrics.json")
    files += [out / "task.json", out / CONFIG]
    print(f"\nwritten: {', '.join(map(str, files))}, {cli.tested_checkpoint or 'the weights after the last step'}")
    return metrics


def train_baseline(command: TrainCommand, output_dir: Path, architecture: str) -> dict | None:
    """The test metrics of baseline `architecture` trained with ``output_dir/config.yaml`` into its own subfolder (read
    where finished, resumed where started)."""
    folder = output_dir / architecture
    if (folder / FINISHED).is_file():
        return json.loads((folder / FINISHED).read_text())
    if (folder / CONFIG).is_file():
        args = ["--ckpt_path", "last", "--output_dir", str(folder)]
    else:
        args = ["--config", str(output_dir / CONFIG), "--model.architecture", architecture, "--compare_with", "[]",
                "--output_dir", str(folder)]
    print(f"\ntraining the {architecture} baseline the same way into {folder}")
    return run_command(command, args)


def link_tokenizer(parser) -> None:
    """The model's tokenizer (and the task a ``train`` tokenizer is learnt on) is the data module's."""
    from common.encoders.tokenizers import resolved_tokenizer_task

    parser.link_arguments("data.tokenizer", "model.tokenizer")
    parser.link_arguments(("data.tokenizer", "data.tokenizer_task", "data.train"), "model.tokenizer_task",
                          compute_fn=resolved_tokenizer_task)


def link_bert_inputs(parser) -> None:
    """EARL's and MVA's: the data module gets the model's architecture, the model the data module's tokenizer."""
    parser.link_arguments("model.architecture", "data.architecture")
    link_tokenizer(parser)
