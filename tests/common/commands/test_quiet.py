"""`common.commands.quiet`: a tiny fit and test shows Lightning's tips and the two deprecation warnings, and none of them after
`quiet_lightning`; the same deprecations warned from elsewhere, other warnings and Lightning's other messages still
show."""

import logging
import warnings

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

from common.commands.quiet import LIGHTNING_MESSAGES, quiet_lightning

pytestmark = pytest.mark.usefixtures("one_thread")

SILENCED = ("💡 Tip:", "'set_vital' is deprecated", "`isinstance(treespec, LeafSpec)` is deprecated")


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def test_step(self, batch, batch_idx):
        self.log("test/loss", self.layer(batch[0]).pow(2).mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.fixture
def shown(tmp_path, capfd, caplog, monkeypatch):
    """Run ``before()``, then fit and test a tiny model as the commands do (torchdata's loader, Lightning's own
    checkpoint callback), in a fresh Trainer each; return all it printed, logged and warned, as one text."""
    messages = logging.getLogger(LIGHTNING_MESSAGES)
    # Lightning's handler writes to the stream of when it was set up: catch the records where they are made.
    monkeypatch.setattr(messages, "handlers", [*messages.handlers, caplog.handler])
    # As in a fresh process, whatever ran before in this one (a command calls quiet_lightning); restored after.
    monkeypatch.setattr(messages, "filters", [])

    def run(before=lambda: None) -> str:
        rows = TensorDataset(torch.randn(8, 4))
        with warnings.catch_warnings(record=True) as caught:
            warnings.resetwarnings()  # as in a fresh process: no filter of a command run before in this one
            warnings.simplefilter("always")
            before()
            for stage in ("fit", "test"):
                trainer = L.Trainer(max_steps=2, default_root_dir=tmp_path, logger=False, enable_model_summary=False,
                                    enable_progress_bar=False, accelerator="cpu")  # fmt: skip
                getattr(trainer, stage)(Tiny(), StatefulDataLoader(rows, batch_size=4))
        printed = capfd.readouterr()
        return "\n".join([printed.out, printed.err, caplog.text, *(str(w.message) for w in caught)])

    return run


def test_without_it_fit_and_test_show_them(shown):
    text = shown()
    for message in SILENCED:
        assert message in text


def test_quiet_lightning_silences_them_and_nothing_else(shown):
    messages, installed = logging.getLogger(LIGHTNING_MESSAGES), []

    def quiet_then_warn_elsewhere():
        before = len(warnings.filters), len(messages.filters)
        quiet_lightning()
        quiet_lightning()
        installed.append((len(warnings.filters) - before[0], len(messages.filters) - before[1]))
        warnings.warn("'set_vital' is deprecated, please do not call")  # the same text, from this module
        warnings.warn("an unrelated warning")
        messages.info("a message of Lightning's that is no tip")

    text = shown(quiet_then_warn_elsewhere)

    assert installed == [(2, 1)]  # two warning filters and a logging one, however often it is called
    tip, set_vital, leaf_spec = SILENCED
    assert tip not in text and leaf_spec not in text
    assert text.count(set_vital) == 1  # this module's
    assert "an unrelated warning" in text
    assert "a message of Lightning's that is no tip" in text
    assert "`Trainer.fit` stopped: `max_steps=2` reached." in text  # Lightning's own messages still show
