"""`MVACLI`: the LightningCLI of ``python -m mva.train`` (`common.commands.cli.RankerCLI` with MVA's classes and
``--compare_with``).

Apart from `mva.train` so that the command's front door (`common.commands.help`) answers ``--help`` and bad options
without importing Lightning.
"""

from __future__ import annotations

from common.commands.cli import RankerCLI
from common.encoders.tokenizers import resolved_tokenizer_task
from mva import train
from mva.data import ARCHITECTURES, MVADataModule
from mva.ranker import MVARanker, run_name

#: Logged dev measure that selects the checkpoint (the measure of every table of the paper).
MONITOR = "dev/mrr@10"


def _run_name(config) -> str:
    """``mva-<architecture>``: the default output folder is ``outputs/mva-<architecture>-<time>``."""
    return "mva-" + run_name(config.model.architecture)


class MVACLI(RankerCLI):
    """`common.commands.cli.RankerCLI` for MVA: the data module gets the model's architecture, the model its tokenizer."""

    def __init__(self, args=None, **kwargs):
        super().__init__(
            MVARanker, MVADataModule, command=train.COMMAND, default_config=train.DEFAULT_CONFIG,
            run_name=_run_name, monitor=MONITOR, check=train.check_settings, args=args, **kwargs,
        )  # fmt: skip

    def add_arguments_to_parser(self, parser) -> None:
        super().add_arguments_to_parser(parser)
        parser.add_argument("--compare_with", type=list[str], default=[],
                            help="baselines trained the same way after the model, each into OUTPUT_DIR/<name> "
                                 f"and printed beside it: any of {', '.join(a for a in ARCHITECTURES if a != 'mva')}")
        parser.link_arguments("model.architecture", "data.architecture")
        parser.link_arguments("data.tokenizer", "model.tokenizer")
        parser.link_arguments(("data.tokenizer", "data.tokenizer_task", "data.train"), "model.tokenizer_task",
                              compute_fn=resolved_tokenizer_task)
