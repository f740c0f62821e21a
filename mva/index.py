"""``python -m mva.index --checkpoint CKPT --collection TASK --output_dir DIR``: store the document representations of
a trained MVA (Zhou and Devlin 2021, "Multi-Vector Attention Models for Deep Re-ranking") ([D_K | D_V] of each kept timestep, 2·H·p floats, Sec. 2.1 and Table 5) or dual encoder ([CLS], h
floats), so that ``python -m mva.evaluate --store DIR`` re-ranks without encoding a document at query time.

Every document of ``--collection`` is stored in its order, tokenised as in training, in shards of ``--shard_size``
computed by Lightning ``predict`` (``--devices``, ``--num_nodes``; ``--resume`` finishes a killed build); the
estimated size is checked against the free space first (`common.stores.size`). ``--dtype fp16`` halves the bytes.
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
    """The contents of `path`, an `mva.train` checkpoint of one of `architectures`; any other file ends the command
    in one line naming `option` and the file. Imports torch."""
    why = {"ca": ": CA reads the query and the document together, so it has no document representation to store"}
    return read_trained_checkpoint(path, "mva.train", RANKER_KEYS, architectures, why=why, option=option)


def main(argv=None):
    """Build the store the command line names; returns it (a `common.stores.representations.RepresentationStore`) on
    global rank zero, else None."""
    args = build_parser().parse_args(argv)
    check_index_args(args)
    state = read_trained(args.checkpoint)  # torch alone: a foreign checkpoint is refused before Lightning loads
    from mva import store

    return build_index(args, state, store, "the store")


if __name__ == "__main__":
    main()
