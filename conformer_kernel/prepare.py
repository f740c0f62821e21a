"""``python -m conformer_kernel.prepare``: build every cache ``python -m conformer_kernel.train`` reads with the same
options (below), on a CPU node, without training (`common.commands.prepare`)."""

from common.commands.prepare import run_prepare
from conformer_kernel.train import COMMAND


def main(args: list[str] | None = None) -> list:
    """Prepare the caches of ``python -m conformer_kernel.train`` on command line `args` (None: ``sys.argv[1:]``)."""
    return run_prepare(COMMAND, "conformer_kernel.prepare", args)


if __name__ == "__main__":
    main()
