"""`quiet_lightning`: silences, by exact text, category and origin, messages printed at every fit and test that say
nothing about the run or something untrue of it: Lightning 2.6's ``💡 Tip:`` advertisements, torchdata's call of the
no-op ``torch.set_vital``, torch's ``LeafSpec`` deprecation warned from Lightning's ``_tree_flatten``, and the
``sync_dist`` advice for ``dev/*`` and ``test/*``, which `common.metrics.ranking_metric.RankingMetrics` gathers.
"""

from __future__ import annotations

import logging
import re
import warnings

from lightning.fabric.utilities.warnings import PossibleUserWarning

#: The logger Lightning's ``rank_zero_info`` messages go to, its tips among them.
LIGHTNING_MESSAGES = "lightning.pytorch.utilities.rank_zero"
#: How each of Lightning's advertisements begins.
TIP = "💡 Tip:"

#: (message pattern, category, module warned from) of each warning silenced.
_WARNINGS = (
    (re.escape("'set_vital' is deprecated, please do not call"), UserWarning,
     "torchdata.stateful_dataloader.stateful_dataloader"),
    (re.escape("`isinstance(treespec, LeafSpec)` is deprecated"), FutureWarning, "lightning.pytorch.utilities._pytree"),
    (re.escape("It is recommended to use `self.log('") + "(dev|test)/", PossibleUserWarning,
     "lightning.pytorch.trainer.connectors.logger_connector.result"),
)


def _not_a_tip(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith(TIP)


def quiet_lightning() -> None:
    """Silence Lightning's tips and the three warnings of the module docstring; commands call it first."""
    logging.getLogger(LIGHTNING_MESSAGES).addFilter(_not_a_tip)
    for pattern, category, module in _WARNINGS:
        warnings.filterwarnings("ignore", pattern, category, rf"{re.escape(module)}\Z")
