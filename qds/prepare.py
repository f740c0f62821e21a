"""``python -m qds.prepare``: build every cache ``python -m qds.train`` reads with the same options (below), on a CPU
node, without training (`common.commands.prepare`)."""

from common.commands.prepare import run_prepare
from qds.train import COMMAND

#: The options naming a model or tokenizer that ``from_pretrained`` loads (into Hugging Face's cache).
PRETRAINED = ("model.encoder", "data.tokenizer")


def main(args: list[str] | None = None) -> list:
    """Prepare the caches of ``python -m qds.train`` on command line `args` (None: ``sys.argv[1:]``)."""
    return run_prepare(COMMAND, "qds.prepare", args, PRETRAINED)


if __name__ == "__main__":
    main()
