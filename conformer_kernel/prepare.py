"""``python -m conformer_kernel.prepare``: build every cache that ``python -m conformer_kernel.train`` reads with the
same config and options (document stores, ir_datasets' too, the training table, the collection's ids the sampler
draws random documents from, the vocabulary, IDFs and word2vec embeddings, learnt on one thread as a seed fixes them,
`conformer_kernel.vocab`, and the ORCAS field of ``--data.orcas``), on a CPU node, without a GPU and without
training, and print each, built or found built. ``python -m conformer_kernel.train`` with those options then builds
none of them.

It takes every option of ``python -m conformer_kernel.train`` (below) and refuses what train refuses, in one line;
the options of training itself (steps, devices, nodes) change nothing here. What it builds, and what it leaves to the
training job: `common.commands.prepare`.
"""

from common.commands.prepare import run_prepare
from conformer_kernel.train import COMMAND


def main(args: list[str] | None = None) -> list:
    """Prepare the caches of ``python -m conformer_kernel.train`` on command line `args` (None: ``sys.argv[1:]``)."""
    return run_prepare(COMMAND, "conformer_kernel.prepare", args)


if __name__ == "__main__":
    main()
