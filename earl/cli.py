"""`EARLCLI`: the LightningCLI of ``python -m earl.train`` (`common.commands.cli.RankerCLI` with EARL's classes and
``--compare_with``).

Apart from `earl.train` so that the command's front door (`common.commands.help`) answers ``--help`` and bad options
without importing Lightning.
"""

from __future__ import annotations

from common.commands.cli import RankerCLI
from common.encoders.tokenizers import resolved_tokenizer_task
from earl import train
from earl.data import ARCHITECTURES, EARLDataModule
from earl.ranker import EARLRanker, run_name

#: Logged dev measure that selects the checkpoint (MS MARCO's official measure; the paper does not say).
MONITOR = "dev/mrr@10"


def _run_name(config) -> str:
    """``earl-<variant>``: the default output folder is ``outputs/earl-<variant>-<time>``."""
    model = config.model
    return "earl-" + run_name(model.architecture, model.pool, model.tied).removeprefix("earl_")


class EARLCLI(RankerCLI):
    """`common.commands.cli.RankerCLI` for EARL: the data module gets the model's architecture, the model its tokenizer."""

    def __init__(self, args=None, **kwargs):
        super().__init__(
            EARLRanker, EARLDataModule, command=train.COMMAND, default_config=train.DEFAULT_CONFIG,
            run_name=_run_name, monitor=MONITOR, check=train.check_settings, args=args, **kwargs,
        )  # fmt: skip

    def add_arguments_to_parser(self, parser) -> None:
        super().add_arguments_to_parser(parser)
        parser.add_argument("--compare_with", type=list[str], default=[],
                            help="baselines trained the same way after the model, each into OUTPUT_DIR/<name> "
                                 f"and printed beside it: any of {', '.join(a for a in ARCHITECTURES if a != 'earl')}")
        parser.link_arguments("model.architecture", "data.architecture")
        parser.link_arguments("data.tokenizer", "model.tokenizer")
        parser.link_arguments(("data.tokenizer", "data.tokenizer_task", "data.train"), "model.tokenizer_task",
                              compute_fn=resolved_tokenizer_task)
