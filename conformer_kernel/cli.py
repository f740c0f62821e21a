"""`ConformerKernelCLI`: the LightningCLI of ``python -m conformer_kernel.train`` (`common.commands.cli.RankerCLI` with
the Conformer-Kernel's classes and ``--test_modes``).

Apart from `conformer_kernel.train` so that the command's front door (`common.commands.help`) answers ``--help`` and
bad options without importing Lightning.
"""

from __future__ import annotations

from typing import Literal

from common.commands.cli import RankerCLI
from conformer_kernel import train
from conformer_kernel.data import ConformerKernelData
from conformer_kernel.ranker import ConformerKernel

MONITOR = "dev/ndcg_cut_10"


class ConformerKernelCLI(RankerCLI):
    """`common.commands.cli.RankerCLI` for the Conformer-Kernel: ``--test_modes``, and the model's sizes from the data
    module's (hidden = 2 x word2vec dim, its document limit, its vocabulary)."""

    def __init__(self, args=None, **kwargs):
        super().__init__(ConformerKernel, ConformerKernelData, command=train.COMMAND,
                         default_config=train.DEFAULT_CONFIG, run_name=lambda config: f"ck-{config.model.model}",
                         monitor=MONITOR, check=train.check_settings, args=args, **kwargs)

    def add_arguments_to_parser(self, parser) -> None:
        super().add_arguments_to_parser(parser)
        parser.add_argument("--test_modes", type=list[Literal[train.MODES]], default=list(train.MODES),
                            help="evaluate the best checkpoint by re-ranking the test candidates and/or by full "
                                 "retrieval from a precomputed impact index (default: both)")
        parser.link_arguments("data.max_doc_terms", "model.max_doc_terms")
        # The embedding layer starts from word2vec's IN ‖ OUT vectors: hidden = 2 x word2vec dim.
        parser.link_arguments("data.embedding_dim", "model.hidden", compute_fn=lambda dim: 2 * dim)
        parser.link_arguments("data", "model.vocab_size", apply_on="instantiate", compute_fn=lambda d: d.vocab_size)
