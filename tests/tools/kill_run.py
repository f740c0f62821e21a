"""``python kill_run.py COMMAND POINT ARGS...``: run ``python -m COMMAND ARGS...`` (a training command) and kill it
with SIGKILL at POINT.

POINT is ``<moment>:<global step>`` (the last three have no step):

- ``train-batch:N``: as training step N ends (between checkpoints, where N is not a multiple of
  ``--save_every_n_steps``);
- ``validation-start:N``: after training step N, before its dev evaluation starts;
- ``validation-batch:N``: during step N's dev evaluation, after its first batch;
- ``writing-last:N``: halfway through writing ``last.ckpt`` at step N;
- ``train-batch-start:N``: right after step N's ``last.ckpt`` was written, as step N + 1 starts;
- ``test-batch``: during the test, after its first batch;
- ``index-shard``: during ``conformer_kernel``'s full-ranking index build, after its first shard was written;
- ``writing-outputs``: after the first test output file was written, before ``metrics.json``.

The kill is the real one (no exception, no cleanup); the callback is added to the trainer, not to the
command line, so the run's ``config.yaml`` is the one a run without it writes.
"""

import importlib
import os
import signal
import sys

from lightning.pytorch.callbacks import Callback

import common.commands.cli
import common.io
import common.training.resume


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class KillAt(Callback):
    def __init__(self, point: str):
        self.moment, _, step = point.partition(":")
        self.step = int(step) if step else None

    def _at(self, moment: str, trainer) -> bool:
        return moment == self.moment and trainer.global_step == self.step

    def on_train_batch_end(self, trainer, *args):
        if self._at("train-batch", trainer):
            die()

    def on_validation_start(self, trainer, *args):
        if self._at("validation-start", trainer) and not trainer.sanity_checking:
            die()

    def on_validation_batch_end(self, trainer, *args):
        if self._at("validation-batch", trainer):
            die()

    def on_train_batch_start(self, trainer, *args):
        if self._at("train-batch-start", trainer):
            die()

    def on_test_batch_end(self, trainer, *args):
        if self.moment == "test-batch":
            die()


def _patch(owner, name: str, wrapper) -> None:
    setattr(owner, name, wrapper(getattr(owner, name)))


def main(command: str, point: str, args: list[str]) -> None:
    kill = KillAt(point)

    def instantiate_trainer(make):
        def made(cli, **kwargs):
            trainer = make(cli, **kwargs)
            trainer.callbacks.append(kill)
            return trainer

        return made

    def save_checkpoint(save):
        def saving(io, checkpoint, path, storage_options=None):
            if kill.moment == "writing-last" and str(path).endswith("last.ckpt") and checkpoint["global_step"] == kill.step:
                with common.io.atomic_write(path, "wb", overwrite=True) as f:
                    f.write(b"PK\x03\x04 half a checkpoint")
                    f.flush()
                    die()
            save(io, checkpoint, path, storage_options)

        return saving

    written = []  # test outputs, by every module's writer

    def atomic_write(write):
        def writing(path, *a, **kw):
            if kill.moment == "writing-outputs" and str(path).endswith("metrics.json") and written:
                die()
            if kill.moment == "writing-outputs" and str(path).endswith((".trec", "task.json")):
                written.append(path)
            return write(path, *a, **kw)

        return writing

    _patch(common.commands.cli.RankerCLI, "instantiate_trainer", instantiate_trainer)
    _patch(common.training.resume.AtomicCheckpointIO, "save_checkpoint", save_checkpoint)
    for module in ("common.data.formats", "common.report", "common.commands.outputs"):
        _patch(importlib.import_module(module), "atomic_write", atomic_write)
    if kill.moment == "index-shard":
        from conformer_kernel.impact_index import ShardWriter

        def write_shard(write):
            def writing(writer, *a, **kw):
                write(writer, *a, **kw)
                die()

            return writing

        _patch(ShardWriter, "write_on_batch_end", write_shard)
    importlib.import_module(command).main(args)


if __name__ == "__main__":
    command, point, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    sys.argv = sys.argv[:1]  # the command line is `args`
    main(command, point, args)
