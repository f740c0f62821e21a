"""`RankerCLI`: the LightningCLI of every ``python -m <package>.train``, with the repository's conventions.

Conventions (README, "Conventions every package follows"):

- With no ``--config`` the package's embedded default config runs; ``--config FILE`` replaces it.
  Every option is a LightningCLI flag; the seed defaults to 0 (a seed fixes everything).
- ``--output_dir DIR`` (default: a new ``outputs/<run name>-<time>``, printed at the start)
  receives ``config.yaml`` (resolved, `RankerCLI.write_config`), ``checkpoints/`` and
  ``logs/metrics.csv``; a folder that is not empty is refused, so a run never writes over another.
- ``checkpoints/`` holds the best checkpoint on the monitored dev measure (``best-step=N.ckpt``,
  mode max; `RankerCLI.checkpoint`) and ``last.ckpt``, written every ``--save_every_n_steps``
  training steps. ``--ckpt_path last --output_dir DIR`` resumes the run in DIR at its
  ``last.ckpt`` (mid-epoch included); ``--ckpt_path FILE`` starts a fresh run from a checkpoint.

A package subclasses it, passes its classes, default config, run name and monitored measure, and
adds its argument links in ``add_arguments_to_parser`` after calling ``super()``'s. The CLI only
builds (``run=False``): the package's ``main`` calls `RankerCLI.fit_and_test` (`write_config`,
``trainer.fit``, then ``trainer.test`` of the best checkpoint) and writes its test outputs.

Evaluate commands (``python -m <package>.evaluate``) take their output folder from
`fresh_output_dir` (``--output_dir`` or a new ``outputs/<prefix>-<time>``; never a used one).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

from jsonargparse import Namespace
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities import rank_zero_info

from common.data.formats import DataFormatError
from common.data.source import TaskSpecError, check_spec
from common.io import atomic_write
from common.tasks import MissingDocumentsError, TaskSplits
from common.usage import usage_error

#: Bad data or task input, answered in one line with exit status 2 (`common.usage.usage_error`).
INPUT_ERRORS = (TaskSpecError, MissingDocumentsError, DataFormatError, FileNotFoundError)


def fresh_output_dir(path: str | Path | None, default_prefix: str) -> Path:
    """An evaluate command's output folder: `path`, or ``outputs/<default_prefix>-<time>`` where None.

    SystemExit where it exists and is not empty (a run never writes over another). It is not created
    here: the command creates it once its inputs have loaded.
    """
    out = Path(path or f"outputs/{default_prefix}-{time.strftime('%Y%m%d-%H%M%S')}")
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out} is not empty: choose a new --output_dir")
    return out


class RankerCLI(LightningCLI):
    """LightningCLI with the output-folder, resume and checkpoint conventions (see the module docstring).

    Args:
        model_class, datamodule_class: the package's LightningModule and LightningDataModule.
        default_config: the config file used when no ``--config`` is given.
        run_name: the name of a run from its parsed config (``qds-<pattern>``), the default
            output folder being ``outputs/<run_name(config)>-<time>``.
        monitor: the logged dev measure that selects the best checkpoint (higher is better).
        args: the command line (default: ``sys.argv[1:]``).
        kwargs: further `LightningCLI` arguments.

    After construction: `output_dir` (created), `resume_from` (None, a checkpoint file, or
    ``output_dir/checkpoints/last.ckpt`` with ``--ckpt_path last``), `checkpoint` (the best-on-dev
    `ModelCheckpoint`), and LightningCLI's `config`, `model`, `datamodule`, `trainer`; after
    `fit_and_test`, `tested_checkpoint`.
    """

    def __init__(
        self,
        model_class,
        datamodule_class,
        *,
        default_config: Path,
        run_name: Callable[[Namespace], str],
        monitor: str,
        args=None,
        **kwargs,
    ):
        self.run_name, self.monitor = run_name, monitor
        given = sys.argv[1:] if args is None else args
        explicit = any(a == "--config" or a.startswith("--config=") for a in given)
        parser_kwargs = {"default_config_files": [] if explicit else [str(default_config)]}
        parser_kwargs.update(kwargs.pop("parser_kwargs", None) or {})
        super().__init__(
            model_class, datamodule_class, args=args, run=False, save_config_callback=None,
            seed_everything_default=0, parser_kwargs=parser_kwargs, **kwargs,
        )  # fmt: skip

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--output_dir", type=str | None, default=None,
                            help="folder for config, checkpoints, run and metrics (default: new outputs/<run>-<time>)")
        parser.add_argument("--ckpt_path", type=str | None, default=None,
                            help="'last' resumes the run in --output_dir; or a checkpoint file to start from")
        parser.add_argument("--save_every_n_steps", type=int, default=100,
                            help="write checkpoints/last.ckpt every this many training steps (for --ckpt_path last)")

    def _set_seed(self) -> None:
        # Lightning announces "Seed set to N" before the classes are built, so a bad input would not end in the one
        # line it should; the seed is in config.yaml.
        announcer = logging.getLogger("lightning.fabric.utilities.seed")
        level = announcer.level
        announcer.setLevel(logging.WARNING)
        try:
            super()._set_seed()
        finally:
            announcer.setLevel(level)

    def before_instantiate_classes(self) -> None:
        config = self.config
        for split in ("train", "dev", "test"):
            spec = config.data.get(split)
            if spec is not None:
                try:
                    check_spec(spec.as_dict() if isinstance(spec, Namespace) else spec, f"data.{split}")
                except TaskSpecError as error:
                    usage_error(str(error))
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.output_dir = Path(config.output_dir or f"outputs/{self.run_name(config)}-{stamp}")
        self.resume_from = None
        if config.ckpt_path == "last":
            if config.output_dir is None:
                raise SystemExit("--ckpt_path last resumes a run: give its --output_dir")
            self.resume_from = self.output_dir / "checkpoints" / "last.ckpt"
            if not self.resume_from.is_file():
                raise SystemExit(f"nothing to resume: {self.resume_from} does not exist")
        else:
            if self.output_dir.exists() and any(self.output_dir.iterdir()):
                raise SystemExit(
                    f"{self.output_dir} is not empty: choose a new --output_dir, or pass --ckpt_path last to resume"
                )
            self.resume_from = config.ckpt_path

    def instantiate_classes(self) -> None:
        """Open and check the data module's tasks first (`common.tasks.TaskSplits.check_tasks`), then build the
        classes: a task's bad file or missing documents end in one line, before anything is built or written.

        The checked data module is the one trained on (the parser's own, built from the same config, is dropped).
        """
        checked = None
        if issubclass(self.datamodule_class, TaskSplits):
            try:
                checked = self.datamodule_class(**self.config.data.as_dict())
                checked.check_tasks()
            except INPUT_ERRORS as error:
                usage_error(str(error).strip("'\""))
        super().instantiate_classes()
        if checked is not None:
            self.datamodule = checked
        self.output_dir.mkdir(parents=True, exist_ok=True)
        rank_zero_info(f"output folder: {self.output_dir}")

    def instantiate_trainer(self, **kwargs):
        folder = self.output_dir / "checkpoints"
        # The best on dev, saved when validation ends; and last.ckpt every few steps, to resume from.
        self.checkpoint = ModelCheckpoint(dirpath=folder, filename="best-{step}", monitor=self.monitor, mode="max")
        last = ModelCheckpoint(dirpath=folder, save_top_k=0, save_last=True,
                               every_n_train_steps=self.config.save_every_n_steps)
        configured = self.config_init.trainer.get("callbacks") or []
        kwargs.update(
            default_root_dir=str(self.output_dir),
            logger=CSVLogger(self.output_dir, name="logs", version=""),
            callbacks=[*configured, self.checkpoint, last],
        )
        return super().instantiate_trainer(**kwargs)

    def write_config(self) -> Path:
        """Write the resolved config to ``output_dir/config.yaml`` (global rank zero, atomically, if absent)."""
        path = self.output_dir / "config.yaml"
        if self.trainer.is_global_zero and not path.exists():
            with atomic_write(path) as f:
                f.write(self.parser.dump(self.config))
        return path

    def fit_and_test(self) -> bool:
        """Every training command's sequence: `write_config`, fit (resuming from `resume_from`), then test.

        The test runs where the data module has a test split (``datamodule.has_split("test")``,
        `common.tasks.TaskSplits`), on the checkpoint best on dev, else the last one, else the weights
        as they are; its path is `tested_checkpoint` (None where there was none or no test), and the
        model holds its weights afterwards. Returns whether this process goes on to write the test
        outputs: False without a test split and in every process but global rank zero.
        """
        trainer, model, data = self.trainer, self.model, self.datamodule
        self.write_config()
        trainer.fit(model, datamodule=data, ckpt_path=self.resume_from)
        self.tested_checkpoint = None
        if not data.has_split("test"):
            return False
        self.tested_checkpoint = self.checkpoint.best_model_path or self.checkpoint.last_model_path or None
        trainer.test(model, datamodule=data, ckpt_path=self.tested_checkpoint)
        return trainer.is_global_zero
