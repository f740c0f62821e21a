"""``python -m mva.index --checkpoint CKPT --collection TASK --output_dir DIR``: store the document representations of
a trained MVA (Zhou and Devlin 2021, "Multi-Vector Attention Models for Deep Re-ranking"; [D_K | D_V] of each kept
timestep, 2·H·p floats, Sec. 2.1 and Table 5) or dual encoder ([CLS], h floats) for ``mva.evaluate --store DIR``.

Every document of ``--collection`` is stored in order, tokenised as in training, in shards of ``--shard_size``
computed by Lightning ``predict`` (``--resume`` finishes a killed build); the estimated size is checked against the
free space first. ``--dtype fp16`` halves the bytes; ``--dtype int8`` (a float32 scale and a byte a column per row,
`common.stores.rows`) takes about a quarter of them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common.commands.store_commands import build_index
from common.commands.store_options import add_index_arguments, check_index_args, command_parser, read_trained_checkpoint
from common.refusals import checkpoint_file
from mva import RANKER_KEYS, STORED


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("python -m mva.index", __doc__)
    parser.add_argument("--checkpoint", required=True, type=checkpoint_file,
                        help="an mva.train checkpoint of MVA or DE")
    add_index_arguments(parser)
    return parser


def read_trained(path: str | Path, architectures: tuple[str, ...] = STORED, option: str = "--checkpoint") -> dict:
    """The contents of `path`, an `mva.train` checkpoint of one of `architectures`, else one line naming `option`."""
    why = {"ca": ": CA reads the query and the document together, so it has no document representation to store"}
    return read_trained_checkpoint(path, "mva.train", RANKER_KEYS, architectures, why=why, option=option)


def main(argv=None):
    """Build the store the command line names; returns it on global rank zero, else None."""
    args = build_parser().parse_args(argv)
    check_index_args(args)
    state = read_trained(args.checkpoint)  # torch alone: a foreign checkpoint is refused before Lightning loads
    from mva import store

    return build_index(args, state, store, "the store")


if __name__ == "__main__":
    main()
