"""`RankerCLI`: the LightningCLI of every ``python -m <package>.train`` (README, "Conventions every package follows"):
the default config without ``--config``, seed 0, a new or empty output folder (``config.yaml``, ``provenance.json``,
``checkpoints/`` best on dev and ``last.ckpt``, ``logs/metrics.csv``), ``--ckpt_path last`` resuming with the run's own
settings, global rank zero alone writing. Bad input ends in one line, exit status 2, before anything is written: parser
errors (`CommandParser`), a `common.refusals.SettingError`, Lightning's ``MisconfigurationException``.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import time
import warnings
from collections.abc import Callable
from importlib import import_module
from pathlib import Path

import yaml
from jsonargparse import DefaultHelpFormatter, Namespace
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from lightning.pytorch.utilities import rank_zero_info

from common.data.formats import DataFormatError
from common.data.irds import DatasetUnavailableError
from common.data.irds_files import refuse_missing_files
from common.data.query_split import SplitError
from common.data.specs import TaskSpecError, check_spec
from common.io import atomic_write
from common.commands.progress import progress_callback
from common.commands.provenance import write_provenance
from common.training.global_batch import resumable_here, split_global_batch
from common.training.resume import (AtomicCheckpointIO, LastCheckpoint, RunLogger, checkpoint_contents,
                                    checkpoint_step, discard_unfinished_writes)
from common.commands.run_folder import (CONFIG, LAST, launched_as_global_zero, restarts_in_place, resumed_run,
                                         slurm_restarts)
from common.training.tasks import MissingDocumentsError, RerankingDataModule
from common.refusals import SettingError, input_errors, usage_error

#: Settings a resumed run may change: where it is and how it was started.
_RUN_KEYS = {"output_dir", "ckpt_path", "config"}
_ABSENT = object()

#: Bad data or task input, answered in one line.
INPUT_ERRORS = (TaskSpecError, MissingDocumentsError, DataFormatError, FileNotFoundError, DatasetUnavailableError,
                SplitError)


def _flat(tree, key: str = "") -> dict:
    """A config's nested mappings as ``{"a.b.c": value}``."""
    if not isinstance(tree, dict):
        return {key: tree}
    flat = {}
    for name, value in tree.items():
        flat.update(_flat(value, f"{key}.{name}" if key else str(name)))
    return flat


def _shown(value) -> str:
    if value is _ABSENT:
        return "absent"
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def one_line(message: str) -> str:
    """jsonargparse's error (``Parser key "model.window":``, then indented reasons) as one line naming the option."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    key = re.match(r'Parser key "([^"]+)":\s*', lines[0]) if lines else None
    if key is not None:
        lines = [lines[0][key.end():], *lines[1:]]
    reasons = [line for line in lines if line and not line.startswith(("Errors:", "- ", "Given value type:"))]
    text = re.sub(r"<class '(?:[\w.]+\.)?(\w+)'>", r"\1", "; ".join(reasons)).replace("typing.", "")
    text = text[:1].lower() + text[1:]
    return f"--{key.group(1)}: {text}" if key is not None else text


class CommandHelpFormatter(DefaultHelpFormatter):
    """``--help``'s description keeps its docstring's paragraphs, without reST quotes."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        fill = super()._fill_text
        return "\n\n".join(fill(paragraph, width, indent) for paragraph in re.split(r"\n\s*\n", text.replace("`", "")))


class CommandParser(LightningArgumentParser):
    """A training command's parser: an error is one line naming the option, exit status 2, without the usage."""

    def error(self, message: str, ex: Exception | None = None):
        if not self.exit_on_error:
            return super().error(message, ex)
        usage_error(one_line(message))


@contextlib.contextmanager
def refused_settings():
    """A `SettingError` or Lightning's ``MisconfigurationException`` inside the block ends the command in one line."""
    try:
        yield
    except SettingError as error:
        usage_error(f"--{error.option}: {error.message}")
    except MisconfigurationException as error:
        usage_error(" ".join(str(error).split()))


def _command_text(command: str | None) -> dict:
    """The parser's program name, short usage and description (the module's docstring) for ``python -m command``."""
    if command is None:
        return {}
    return {"prog": f"python -m {command}", "description": import_module(command).__doc__,
            "usage": "%(prog)s [-h] [-c CONFIG] [--print_config[=flags]] [--OPTION VALUE ...]"}


class RankerCLI(LightningCLI):
    """LightningCLI built, not run (`fit_and_test` runs it): `arguments(parser)` adds options and links,
    `run_name(config)` names the default output folder, `monitor` selects the best checkpoint."""

    def __init__(self, model_class, datamodule_class, *, default_config: Path, run_name: Callable[[Namespace], str],
                 monitor: str, command: str | None = None,
                 arguments: Callable[[LightningArgumentParser], None] | None = None, args=None, **kwargs):
        self.run_name, self.monitor, self.arguments = run_name, monitor, arguments
        given = sys.argv[1:] if args is None else args
        self.command, self.given = command, given
        # --config's files replace the command's default config.
        explicit = any(arg == "--config" or arg.startswith("--config=") for arg in given)
        self.resumed_dir = resumed_run(given) if isinstance(given, list) else None
        if self.resumed_dir is not None:
            default_config = self.resumed_dir / CONFIG
        # No abbreviations (jsonargparse 5 drops them): --model.p would silently be --model.pattern.
        parser_kwargs = {"default_config_files": [] if explicit else [str(default_config)], "allow_abbrev": False,
                         "formatter_class": CommandHelpFormatter, **_command_text(command)}
        parser_kwargs.update(kwargs.pop("parser_kwargs", None) or {})
        with refused_settings():
            super().__init__(model_class, datamodule_class, args=args, run=False, save_config_callback=None,
                             seed_everything_default=0, parser_kwargs=parser_kwargs, parser_class=CommandParser,
                             **kwargs)

    def add_core_arguments_to_parser(self, parser) -> None:
        """The model's and data module's options, then the trainer's: ``--help`` lists the package's own first."""
        parser.add_lightning_class_args(self._model_class, "model", subclass_mode=self.subclass_mode_model)
        parser.add_lightning_class_args(self._datamodule_class, "data", subclass_mode=self.subclass_mode_data)
        parser.add_lightning_class_args(self.trainer_class, "trainer")
        parser.set_defaults({f"trainer.{k}": v for k, v in self.trainer_defaults.items() if k != "callbacks"})

    def parse_arguments(self, parser, args) -> None:
        """Parse; restricted types' values (``PositiveInt``...) become plain numbers for ``weights_only`` loads."""
        super().parse_arguments(parser, args)
        for key, value in list(self.config.items()):
            if isinstance(value, (int, float)) and type(value) not in (int, float, bool):
                self.config[key] = int(value) if isinstance(value, int) else float(value)

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--output_dir", type=str | None, default=None,
                            help="folder for config, checkpoints, run and metrics (default: new outputs/<run>-<time>)")
        parser.add_argument("--ckpt_path", type=str | None, default=None,
                            help="'last' resumes the run in --output_dir; or a checkpoint file to start from")
        parser.add_argument("--save_every_n_steps", type=int, default=100,
                            help="write checkpoints/last.ckpt every this many training steps (for --ckpt_path last)")
        if self.arguments is not None:
            self.arguments(parser)

    def _set_seed(self) -> None:
        # Lightning's "Seed set to N" would precede a refusal's one line; the seed is in config.yaml.
        announcer = logging.getLogger("lightning.fabric.utilities.seed")
        level = announcer.level
        announcer.setLevel(logging.WARNING)
        try:
            super()._set_seed()
        finally:
            announcer.setLevel(level)

    def before_instantiate_classes(self) -> None:
        """Refuse bad tasks (form, an ir_datasets task's missing files) and output folder before anything is built."""
        config = self.config
        specs, options = [], []
        for split in ("train", "dev", "test"):
            spec = config.data.get(split)
            if spec is not None:
                spec = spec.as_dict() if isinstance(spec, Namespace) else spec
                with input_errors(TaskSpecError):
                    check_spec(spec, f"data.{split}")
                specs.append(spec)
                options.append(f"--data.{split}")
        data_class = self.datamodule_class
        reads = data_class.split_parts(config.data) if issubclass(data_class, RerankingDataModule) else {}
        parts = [reads.get(option.removeprefix("--data.")) for option in options]
        for name, read in getattr(self.datamodule_class, "other_tasks", {}).items():
            specs.append(config.data.get(name))
            options.append(f"--data.{name}")
            parts.append(read)
        refuse_missing_files(specs, options, parts, quiet=not launched_as_global_zero())
        self.output_dir = Path(config.output_dir or f"outputs/{self.run_name(config)}-{time.strftime('%Y%m%d-%H%M%S')}")
        self.resume_from = None
        self.resuming, self.restarting = config.ckpt_path == "last", False
        if self.resuming:
            if self.resumed_dir is None:
                usage_error("--ckpt_path last resumes a run: give it and the run's --output_dir on the command line")
            self.resume_from = self.output_dir / "checkpoints" / LAST
            self._check_same_settings()
            self._say_requeued("resuming it from its last checkpoint")
        else:
            self.restarting = restarts_in_place(self.output_dir)
            if self.restarting:
                self._check_same_settings()
                self._say_requeued("it wrote no checkpoint: starting it again")
            elif launched_as_global_zero() and self.output_dir.exists() and any(self.output_dir.iterdir()):
                usage_error(f"{self.output_dir} is not empty: choose a new --output_dir, or pass --ckpt_path last "
                            "to resume the run in it")
            self.resume_from = config.ckpt_path

    def _say_requeued(self, what: str) -> None:
        if slurm_restarts() and launched_as_global_zero():
            print(f"SLURM ran this job again (restart {slurm_restarts()}) on the run in {self.output_dir}: {what}",
                  flush=True)

    def _check_same_settings(self) -> None:
        """A resumed run keeps the settings in its ``config.yaml``: flags given again that change one are refused."""
        saved = _flat(yaml.safe_load((self.output_dir / CONFIG).read_text()))
        now = _flat(yaml.safe_load(self.parser.dump(self.config, skip_unset=False)))
        changed = [k for k in sorted(saved.keys() | now.keys())
                   if k not in _RUN_KEYS and saved.get(k, _ABSENT) != now.get(k, _ABSENT)]
        if changed:
            said = "; ".join(f"{k}: {_shown(saved.get(k, _ABSENT))} there, {_shown(now.get(k, _ABSENT))} here"
                             for k in changed[:3])
            more = f" (and {len(changed) - 3} more)" if len(changed) > 3 else ""
            usage_error(f"--ckpt_path last resumes {self.output_dir} with its {CONFIG}; other settings given: "
                        f"{said}{more}")

    def instantiate_classes(self) -> None:
        """Open and check the data module's tasks, then build the classes; the checked data module is trained on."""
        checked = None
        if issubclass(self.datamodule_class, RerankingDataModule):
            with input_errors(*INPUT_ERRORS):
                checked = self.datamodule_class(**self.config.data.as_dict())
                checked.check_tasks()
        super().instantiate_classes()
        if checked is not None:
            self.datamodule = checked
        if self.config.get("compare_with") and self.trainer.world_size > 1:
            self._refuse(f"--compare_with: baselines are trained on one process, this run has {self.trainer.world_size}"
                         ": give --compare_with [] and train each baseline as its own run (--model.architecture NAME)")
        if isinstance(self.datamodule, RerankingDataModule):
            split_global_batch(self.datamodule, self.trainer)
        if self.resume_from is not None:
            problem = resumable_here(checkpoint_contents(self.resume_from), self.trainer.world_size,
                                     self.trainer.accumulate_grad_batches)
            if problem:
                self._refuse(f"--ckpt_path {self.config.ckpt_path}: {problem}")
        if self.trainer.is_global_zero:
            self.output_dir.mkdir(parents=True, exist_ok=True)
        rank_zero_info(f"output folder: {self.output_dir}")

    def _refuse(self, problem: str) -> None:
        """Stop every process with exit status 2; global rank zero says why in one line."""
        if self.trainer.is_global_zero:
            usage_error(problem)
        raise SystemExit(2)

    def instantiate_trainer(self, **kwargs):
        folder = self.output_dir / "checkpoints"
        # The best on dev (a resumed run rewrites the same file, hence no versions), and last.ckpt to resume from.
        self.checkpoint = ModelCheckpoint(dirpath=folder, filename="best-{step}", monitor=self.monitor, mode="max",
                                          enable_version_counter=False)
        last = LastCheckpoint(folder, self.config.save_every_n_steps)
        configured = self.config_init.trainer.get("callbacks") or []
        resume_step = checkpoint_step(self.resume_from) if self.resuming else 0 if self.restarting else None
        kwargs.update(
            default_root_dir=str(self.output_dir),
            logger=[RunLogger(self.output_dir, resume_step), *self._configured_loggers()],
            callbacks=[*configured, *self._progress(configured), self.checkpoint, last],
            plugins=[*(self.config_init.trainer.get("plugins") or []), AtomicCheckpointIO()],
        )
        return super().instantiate_trainer(**kwargs)

    def _configured_loggers(self) -> list:
        """The loggers ``--trainer.logger`` names, put after the run's own `RunLogger` (resuming needs it)."""
        configured = self.config_init.trainer.get("logger")
        if isinstance(configured, bool) or configured is None:
            return []
        return list(configured) if isinstance(configured, (list, tuple)) else [configured]

    def _progress(self, configured: list) -> list:
        """The progress callback (`common.commands.progress`), unless off or one is configured."""
        wanted = self.config_init.trainer.get("enable_progress_bar") is not False
        if not wanted or any(isinstance(c, ProgressBar) for c in configured):
            return []
        return [progress_callback(self.monitor)]

    def write_config(self) -> Path:
        """Write the resolved config to ``output_dir/config.yaml`` (global rank zero, atomically, if absent)."""
        path = self.output_dir / CONFIG
        if self.trainer.is_global_zero and not path.exists():
            with atomic_write(path) as f:
                f.write(self.parser.dump(self.config, skip_unset=False))
        return path

    def write_provenance(self) -> None:
        if self.trainer.is_global_zero and self.command is not None and isinstance(self.given, list):
            write_provenance(self.output_dir, self.command, self.given)

    def fit_and_test(self) -> bool:
        """Write config and provenance, fit, then test the best checkpoint on dev (else the last, else the weights as
        they are: `tested_checkpoint`); returns whether this process writes test outputs (rank zero, a test split)."""
        trainer, model, data = self.trainer, self.model, self.datamodule
        self.write_config()
        self.write_provenance()
        with warnings.catch_warnings():
            if self.resuming or self.restarting:  # Lightning warns of a checkpoint folder in use: a resumed run's is
                warnings.filterwarnings("ignore", "Checkpoint directory .* exists and is not empty")
                if trainer.is_global_zero and (self.output_dir / "checkpoints").is_dir():
                    discard_unfinished_writes(self.output_dir / "checkpoints")
            trainer.fit(model, datamodule=data, ckpt_path=self.resume_from)
        self.tested_checkpoint = None
        if not data.has_split("test"):
            return False
        self.tested_checkpoint = self.checkpoint.best_model_path or self.checkpoint.last_model_path or None
        trainer.test(model, datamodule=data, ckpt_path=self.tested_checkpoint)
        return trainer.is_global_zero
