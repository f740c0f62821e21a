"""``python -m mva.prepare``: build every cache ``python -m mva.train`` reads with the same options (below), on a CPU
node, without training (`common.commands.prepare`)."""

from common.commands.prepare import run_prepare
from mva.train import COMMAND

#: The options naming a model or tokenizer that ``from_pretrained`` loads (into Hugging Face's cache).
PRETRAINED = ("model.encoder", "data.tokenizer")


def main(args: list[str] | None = None) -> list:
    """Prepare the caches of ``python -m mva.train`` on command line `args` (None: ``sys.argv[1:]``)."""
    return run_prepare(COMMAND, "mva.prepare", args, PRETRAINED)


if __name__ == "__main__":
    main()
