"""`QDSCLI`: the LightningCLI of ``python -m qds.train`` (`common.commands.cli.RankerCLI` with QDS-Transformer's classes).

Apart from `qds.train` so that the command's front door (`common.commands.help`) answers ``--help`` and bad
options without importing Lightning.
"""

from __future__ import annotations

from common.commands.cli import RankerCLI
from common.encoders.tokenizers import resolved_tokenizer_task
from qds import train
from qds.data import QDSDataModule
from qds.model import QDSTransformer

#: Logged dev measure that selects the checkpoint (the paper's model selection, Sec. 5).
MONITOR = "dev/mrr@10"


def _run_name(config) -> str:
    """``qds-<pattern>``: the default output folder is ``outputs/qds-<pattern>-<time>``."""
    return f"qds-{config.model.pattern}"


class QDSCLI(RankerCLI):
    """`common.commands.cli.RankerCLI` for QDS-Transformer: the data module gets the model's pattern, the model its inputs'."""

    def __init__(self, args=None, **kwargs):
        super().__init__(
            QDSTransformer, QDSDataModule, command=train.COMMAND, default_config=train.DEFAULT_CONFIG,
            run_name=_run_name, monitor=MONITOR, check=train.check_settings, args=args, **kwargs,
        )  # fmt: skip

    def add_arguments_to_parser(self, parser) -> None:
        super().add_arguments_to_parser(parser)
        parser.link_arguments("model.pattern", "data.pattern")
        parser.link_arguments("data.tokenizer", "model.tokenizer")
        parser.link_arguments(("data.tokenizer", "data.tokenizer_task", "data.train"), "model.tokenizer_task",
                              compute_fn=resolved_tokenizer_task)
        parser.link_arguments("data.max_length", "model.max_length")
        parser.link_arguments("data.negatives", "model.negatives")
