"""`common.commands.quiet`: a tiny fit and test shows Lightning's tips and the two deprecation warnings, and none of them after
`quiet_lightning`; the same deprecations warned from elsewhere, other warnings and Lightning's other messages still
show. In a process group, the ``sync_dist`` advice is silenced for the dev and test measures alone."""

import logging
import socket
import warnings

import lightning as L
import pytest
import torch
from lightning.pytorch.trainer.connectors.logger_connector import result
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

    def run(before=lambda: None, module=Tiny) -> str:
        rows = TensorDataset(torch.randn(8, 4))
        with warnings.catch_warnings(record=True) as caught:
            warnings.resetwarnings()  # as in a fresh process: no filter of a command run before in this one
            result.warning_cache.clear()  # nor Lightning's record of the advice it has given once
            warnings.simplefilter("always")
            before()
            for stage in ("fit", "test"):
                trainer = L.Trainer(max_steps=2, default_root_dir=tmp_path, logger=False, enable_model_summary=False,
                                    enable_progress_bar=False, accelerator="cpu")
                getattr(trainer, stage)(module(), StatefulDataLoader(rows, batch_size=4))
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

    assert installed == [(3, 1)]  # three warning filters and a logging one, however often it is called
    tip, set_vital, leaf_spec = SILENCED
    assert tip not in text and leaf_spec not in text
    assert text.count(set_vital) == 1  # this module's
    assert "an unrelated warning" in text
    assert "a message of Lightning's that is no tip" in text
    assert "`Trainer.fit` stopped: `max_steps=2` reached." in text  # Lightning's own messages still show


class LogsMeasures(Tiny):
    """Logs a test measure and another value per epoch, as a process of a distributed run."""

    def test_step(self, batch, batch_idx):
        loss = self.layer(batch[0]).pow(2).mean()
        self.log("test/ndcg_cut_10", loss)
        self.log("other/loss", loss)


@pytest.fixture
def process_group():
    """A gloo process group of this process alone: Lightning then gives its advice for distributed runs."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    torch.distributed.destroy_process_group()


def test_the_sync_dist_advice_is_silenced_for_measures_alone(shown, process_group):
    advice = "It is recommended to use `self.log('{}', ..., sync_dist=True)`"
    text = shown(module=LogsMeasures)
    assert advice.format("test/ndcg_cut_10") in text and advice.format("other/loss") in text
    text = shown(quiet_lightning, module=LogsMeasures)
    assert advice.format("test/ndcg_cut_10") not in text and advice.format("other/loss") in text
