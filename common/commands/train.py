"""One ``main`` for the four training commands, ``python -m <package>.train``.

A package's ``train.py`` declares what its paper needs as a `TrainCommand` (its classes, default config, option
links, checks of settings, monitored measure, names and paper tables), ``COMMAND``, and its ``main`` is
``COMMAND.main`` (`run_command`), which:

1. answers ``--help`` and refuses bad options from the committed help and schema before torch or Lightning is
   imported (`common.commands.help.check_command_line`), the command's own checks and ``--compare_with``'s
   included (`TrainCommand.check_settings`);
2. builds the command's `common.commands.cli.RankerCLI` (output folder, resume, checkpoints), trains, and tests the
   checkpoint best on dev (`RankerCLI.fit_and_test`);
3. makes the test runs: the re-ranked test candidates (``run.trec``), or, for a command with `TestModes`, the run of
   each of ``--test_modes`` (``run.<mode>.trec``);
4. trains each ``--compare_with`` baseline with the run's settings into ``<output_dir>/<baseline>/``
   (`train_baseline`), on one process: a run on several processes (``--trainer.devices``, ``--trainer.num_nodes``,
   torchrun, srun) with a baseline to train is refused in one line before anything is written or launched
   (`common.commands.cli.RankerCLI.instantiate_classes`). Its rank zero alone would train the baselines, while the
   other processes, done, leave the process group (a hang or a closed connection): on several processes train each
   baseline as its own run (``--model.architecture NAME --compare_with []``; the paper configs' ``compare_with`` is
   empty);
5. writes ``task.json`` and, last, ``metrics.json`` (`common.commands.outputs`), and prints the metrics beside
   BM25's and the baselines', then beside the paper's (`TrainCommand.paper_tables`).

`link_tokenizer`, `link_bert_inputs` and `check_bert_lengths` are links and checks that several commands declare.

Importing it imports only the standard library and the front door: the classes are named by import path and
imported once the command line has passed it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from operator import attrgetter
from pathlib import Path
from typing import Any, Literal

from common.commands.help import check_command_line, is_int
from common.commands.run_folder import CONFIG, FINISHED, requeued


@dataclass(frozen=True)
class TestModes:
    """Several ways to test the best checkpoint, chosen by ``--test_modes`` (default: all, in this order).

    Attributes:
        choices: the modes (``rerank``, ``fullrank``).
        help: ``--test_modes``'s help.
        runs: ``runs(cli, modes) -> {mode: run}``: the test run of each of `modes`, from the `RankerCLI` after
            `RankerCLI.fit_and_test` (its model holds the tested weights).
        depth: each run, and BM25's, is cut to this many documents per query.
    """

    choices: tuple[str, ...]
    help: str
    runs: Callable[[Any, list[str]], dict]
    depth: int


@dataclass(frozen=True)
class TrainCommand:
    """What a package's training command is (see the module docstring).

    Attributes:
        name: the command as ``python -m`` runs it (``qds.train``): its module docstring is ``--help``'s description,
            its committed help and schema lie beside it (`common.commands.help`), and its ``COMMAND`` is this.
        default_config: the config that runs without ``--config``.
        model, data: the LightningModule (with its ``measures``, `common.training.reranking.RerankingEvaluation`)
            and the LightningDataModule, by import path (``qds.ranker.QDSRanker``).
        monitor: the logged dev measure that selects the checkpoint (higher is better).
        run_name: the default output folder's name from the parsed config (``qds-<pattern>``:
            ``outputs/qds-<pattern>-<time>``).
        paper: the paper's id in ``results/reported`` (`common.report`).
        paper_tables: ``paper_tables(metrics, task, dataset, data) -> str``: the paper's numbers beside `metrics`,
            measured on test task spec `task`, which is the paper's `dataset` (or None), with data module `data`.
        tested_name: the trained model's name in ``metrics.json`` and its run's tag, from the model (default: its
            ``name``).
        check: what no single option's type rules out, on the resolved config as a dict (a ``config.yaml``): a
            one-line problem naming the option, or None.
        links: ``links(parser)`` links the model's options to the data module's (`RankerCLI`'s parser).
        baselines: what ``--compare_with`` may list, each the model with that ``--model.architecture``, trained the
            same way (none: the command has no ``--compare_with``).
        test_modes: several ways to test (None: the re-ranked test candidates alone).
        labels: the measures' column names in the printed table (None: `common.commands.outputs.MEASURE_LABELS`).
    """

    name: str
    default_config: Path
    model: str
    data: str
    monitor: str
    run_name: Callable[[Any], str]
    paper: str
    paper_tables: Callable[[dict, Any, str | None, Any], str]
    tested_name: Callable[[Any], str] = attrgetter("name")
    check: Callable[[dict], str | None] | None = None
    links: Callable[[Any], None] | None = None
    baselines: tuple[str, ...] = ()
    test_modes: TestModes | None = None
    labels: dict[str, str] | None = None

    def check_settings(self, config: dict) -> str | None:
        """`check`, then ``--compare_with``'s names: the one-line problem with the resolved `config`, or None."""
        problem = self.check(config) if self.check else None
        if problem or not self.baselines:
            return problem
        for name in config.get("compare_with") or []:
            if name not in self.baselines:
                *first, last = self.baselines
                either = f"{', '.join(first)} and/or {last}" if first else last
                return f"--compare_with: must list {either}, got {name}"
        return None

    def add_arguments(self, parser) -> None:
        """The command's own options (``--compare_with``, ``--test_modes``), then its `links`."""
        if self.baselines:
            parser.add_argument("--compare_with", type=list[str], default=[],
                                help="baselines trained the same way after the model, each into OUTPUT_DIR/<name> "
                                     f"and printed beside it: any of {', '.join(self.baselines)}")  # fmt: skip
        if self.test_modes is not None:
            modes = self.test_modes.choices
            parser.add_argument("--test_modes", type=list[Literal[modes]], default=list(modes),
                                help=self.test_modes.help)
        if self.links is not None:
            self.links(parser)

    def main(self, args: list[str] | None = None) -> dict | None:
        """Run the command line `args` (None: ``sys.argv[1:]``): `run_command`. Returns the test metrics (None
        without a test split).

        ``--help`` and a bad option are answered before Lightning is imported (`common.commands.help`)."""
        return run_command(self, args)

    def cli(self, args: list[str] | None, cli_class=None, command: str | None = None):
        """The command's `common.commands.cli.RankerCLI` (or `cli_class`, a subclass) for command line `args`, its
        ``--help`` naming `command` (default: `name`; ``qds.prepare`` parses train's command line,
        `common.commands.prepare`)."""
        from common.commands.cli import RankerCLI

        return (cli_class or RankerCLI)(
            _imported(self.model), _imported(self.data), command=command or self.name,
            default_config=self.default_config, run_name=self.run_name, monitor=self.monitor,
            check=self.check_settings, arguments=self.add_arguments, args=args,
        )  # fmt: skip

    def parser(self):
        """The parser the command's `RankerCLI` builds, before it parses anything (`common.commands.help` writes
        the committed help and schema from it)."""
        from common.commands.cli import RankerCLI

        class Built(Exception):
            pass

        class ParserOnly(RankerCLI):
            def parse_arguments(self, parser, args) -> None:
                raise Built(parser)

        try:
            self.cli([], ParserOnly)
        except Built as built:
            return built.args[0]


def _imported(path: str):
    """The object named by import path `path` (``qds.ranker.QDSRanker``)."""
    module, name = path.rsplit(".", 1)
    return getattr(import_module(module), name)


def run_command(command: TrainCommand, args: list[str] | None = None) -> dict | None:
    """Run `command` on command line `args` (None: ``sys.argv[1:]``; see the module docstring); returns the test
    metrics (None without a test split, and in every process but global rank zero)."""
    if args is not None:
        args = requeued(args)  # a SLURM job run again resumes its run
    else:  # the process's own command line, which Lightning's launcher runs again in its other processes
        sys.argv[1:] = requeued(sys.argv[1:])
    check_command_line(command.name, args, command.default_config, command.check_settings)
    import torch

    from common.commands.quiet import quiet_lightning
    from common.training.processes import leave_process_group_at_exit

    quiet_lightning()  # Lightning's advertisements and two deprecation warnings of its own making
    leave_process_group_at_exit()  # a gloo group left standing can abort the process at exit

    from common.commands.outputs import NO_QRELS, RUN, metrics_table, mode_run, write_mode_results, write_results
    from common.data.rerank import reranked_run
    from common.report import paper_dataset

    torch.set_float32_matmul_precision("high")
    cli = command.cli(args)
    model, data, out = cli.model, cli.datamodule, cli.output_dir
    if not cli.fit_and_test():  # no test split, or not global rank zero; else `model` holds the tested weights
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
        measured = train_baseline(command, out, baseline) or {}  # None: a test task without qrels
        others.update({k: v for k, v in measured.items() if k != "bm25"})
    task = data.specs["test"]
    dataset = paper_dataset(command.paper, task)
    settings = {"measures": model.measures, "task": task, "dataset": dataset, "others": others,
                "overwrite": cli.resuming}  # fmt: skip
    if command.test_modes is None:
        metrics = write_results(out, name, run, data.source("test").qrels(), candidates, data.tasks.relevance_level,
                                **settings)
        files = [out / RUN]
    else:
        metrics = write_mode_results(out, name, runs, data.source("test").qrels(), candidates,
                                     data.tasks.relevance_level, depth=command.test_modes.depth, **settings)  # fmt: skip
        files = [out / mode_run(mode) for mode in runs]
    print()
    if metrics is None:  # a test task without judgments
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
    """The test metrics of `command`'s model with ``--model.architecture`` `architecture`, trained with the settings
    of ``output_dir/config.yaml`` into ``output_dir/<architecture>/``: read when that run finished, resumed when it
    started, else trained; None where the test task has no qrels."""
    folder = output_dir / architecture
    if (folder / FINISHED).is_file():
        return json.loads((folder / FINISHED).read_text())
    if (folder / CONFIG).is_file():
        args = ["--ckpt_path", "last", "--output_dir", str(folder)]
    else:
        args = ["--config", str(output_dir / CONFIG), "--model.architecture", architecture, "--compare_with", "[]",
                "--output_dir", str(folder)]  # fmt: skip
    print(f"\ntraining the {architecture} baseline the same way into {folder}")
    return run_command(command, args)


# --- links and checks several commands declare ----------------------------------------------------------------


def link_tokenizer(parser) -> None:
    """Give the model the data module's tokenizer and the task a ``train`` tokenizer is learnt on
    (`common.encoders.tokenizers.resolved_tokenizer_task`): the model's vocabulary is the inputs'."""
    from common.encoders.tokenizers import resolved_tokenizer_task

    parser.link_arguments("data.tokenizer", "model.tokenizer")
    parser.link_arguments(("data.tokenizer", "data.tokenizer_task", "data.train"), "model.tokenizer_task",
                          compute_fn=resolved_tokenizer_task)  # fmt: skip


def link_bert_inputs(parser) -> None:
    """A BERT-family model with baselines (EARL's, MVA's): the data module gets the model's architecture (whether it
    encodes query and document apart or as one pair), the model the data module's tokenizer."""
    parser.link_arguments("model.architecture", "data.architecture")
    link_tokenizer(parser)


def check_bert_lengths(config: dict) -> str | None:
    """A BERT-family model's query and passage lengths (in the resolved `config`) leave room for [CLS], a token and
    [SEP]: the one-line problem, or None."""
    data = config.get("data") or {}
    for option in ("query_length", "passage_length"):
        if is_int(data.get(option)) and data[option] < 3:
            return f"--data.{option}: must leave room for [CLS], a token and [SEP] (at least 3), got {data[option]}"
    return None
