"""`quiet_lightning`: silences the messages Lightning and its dependencies print at every fit and test that say
nothing about the run, or something untrue of it, so that what a command prints is about the run. Each is silenced where it comes from,
by its exact text, and nothing else is.

- ``💡 Tip: For seamless cloud logging and experiment tracking, try installing [litlogger]...`` and
  ``💡 Tip: For seamless cloud uploads and versioning, try installing [litmodels]...``: advertisements that
  Lightning 2.6 logs whenever a ``Trainer`` is built (``LoggerConnector.configure_logger``,
  ``lightning/pytorch/trainer/connectors/logger_connector/logger_connector.py``, unless a ``LitLogger`` logs)
  and at the first fit or test of one Lightning adds its own ``ModelCheckpoint`` to (``_maybe_show_litmodels_tip``,
  ``lightning/pytorch/trainer/connectors/callback_connector.py``). Both go through ``rank_zero_info``, at INFO,
  to the logger ``lightning.pytorch.utilities.rank_zero`` (``lightning/pytorch/utilities/rank_zero.py`` routes
  every ``rank_zero_*`` message there). Lightning has no setting or variable that turns them off, and that
  logger's level cannot be raised: it carries every message Lightning has for the user (``Restoring states
  from the checkpoint...``, this repository's ``output folder: ...``). A filter on that logger drops the records
  that begin with ``💡 Tip:``.
- ``UserWarning: 'set_vital' is deprecated, please do not call``: warned by ``torch.__getattr__``
  (``torch/__init__.py``) when torchdata 0.11's ``StatefulDataLoader.__init__``
  (``torchdata/stateful_dataloader/stateful_dataloader.py``) calls ``torch.set_vital``, which torch 2.13 has
  made a no-op; this repository's data modules build one for each split (`common.training.tasks`), so it shows at fit
  and again at test. The call is torchdata's, nothing here can change it, and it does nothing.
- ``FutureWarning: `isinstance(treespec, LeafSpec)` is deprecated, use `isinstance(treespec, TreeSpec) and
  treespec.is_leaf()` instead.``: warned by the class ``torch.utils._pytree.LeafSpec``, which torch (2.13
  here) deprecates, when Lightning's ``_tree_flatten`` (``lightning/pytorch/utilities/_pytree.py``) builds one:
  its ``CombinedLoader`` does, wrapping the data loaders of every fit and test. The code to change is Lightning's.
- ``PossibleUserWarning: It is recommended to use `self.log('test/map', ..., sync_dist=True)` when logging on epoch
  level in distributed setting to accumulate the metric across devices.``: warned by Lightning's result
  collection (``lightning/pytorch/trainer/connectors/logger_connector/result.py``), once per measure, in every
  process of a distributed run, of every value logged per epoch without ``sync_dist``. The dev and test measures
  (``dev/*``, ``test/*``) are already the whole split's in every process: `common.metrics.ranking_metric.RankingMetrics`
  gathers every process's scores before it evaluates. Averaging them again would change nothing, and the warning
  says the opposite of what is true, so it is silenced for those names alone.

The warnings are filtered by their text, category and the module warned from (the code making the deprecated
call, or Lightning's), so the same deprecation from any other code, this repository's included, still shows, as
does the ``sync_dist`` advice for any other name. Calling `quiet_lightning` again changes nothing.
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
    logging.getLogger(LIGHTNING_MESSAGES).addFilter(_not_a_tip)  # the same filter is added once
    for pattern, category, module in _WARNINGS:
        # An identical filter replaces the one there (`warnings.filterwarnings`): installed once.
        warnings.filterwarnings("ignore", pattern, category, rf"{re.escape(module)}\Z")
