"""``python -m qds.prepare``: build every cache that ``python -m qds.train`` reads with the same config and options
(document stores, ir_datasets' too, the training table, the tokenizer, learnt first with ``--data.tokenizer train``
or ``builtin``, and the pretrained encoder of ``--model.encoder`` through ``from_pretrained``), on a CPU node,
without a GPU and without training, and print each, built or found built. ``python -m qds.train`` with those options
then builds none of them.

It takes every option of ``python -m qds.train`` (below) and refuses what train refuses, in one line; the options of
training itself (steps, devices, nodes) change nothing here. What it builds, and what it leaves to the training job:
`common.commands.prepare`.
"""

from common.commands.prepare import run_prepare
from qds.train import COMMAND

#: The options naming a model or tokenizer that ``from_pretrained`` loads (into Hugging Face's cache).
PRETRAINED = ("model.encoder", "data.tokenizer")


def main(args: list[str] | None = None) -> list:
    """Prepare the caches of ``python -m qds.train`` on command line `args` (None: ``sys.argv[1:]``)."""
    return run_prepare(COMMAND, "qds.prepare", args, PRETRAINED)


if __name__ == "__main__":
    main()
