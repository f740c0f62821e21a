"""``python -m earl.index --checkpoint CKPT --strategy s1|s2 --collection TASK --output_dir DIR``: precompute the
document representations of a trained EARL (Gao, Dai, Callan 2020, "EARL: Speedup Transformer-based Rankers with
Pre-computed Representation", Sec. 3.3) for ``python -m earl.evaluate --store``.

A document's rows are its real tokens ([CLS] and [SEP] included), tokenised as in training; every document of
``--collection`` is stored in order, identified by the checkpoint file's sha256 and the strategy (``--dtype fp16``
halves it; ``--dtype int8`` keeps a scale and a byte a column per row, about a quarter: `common.stores.rows`). Shards are computed by Lightning ``predict`` (``--resume`` finishes a killed build); the estimated size
is printed first, beside the space free.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common.commands.store_commands import build_index
from common.commands.store_options import add_index_arguments, check_index_args, command_parser, read_trained_checkpoint
from common.refusals import checkpoint_file
from earl import RANKER_KEYS, STRATEGIES


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("python -m earl.index", __doc__)
    parser.add_argument("--checkpoint", required=True, type=checkpoint_file, help="an earl.train checkpoint of EARL")
    parser.add_argument("--strategy", required=True, choices=STRATEGIES,
                        help="s1: store D = T_doc(doc) (h per token); s2: store D' = each judge block's keys and "
                             "values of D (2·K·h per token, Eq. 25)")
    add_index_arguments(parser)
    return parser


def read_trained(path: str | Path) -> dict:
    """The contents of `path`, an `earl.train` checkpoint of EARL, else one line naming it."""
    why = ": only EARL's document side is computed without the query, so only EARL has representations to store"
    return read_trained_checkpoint(path, "earl.train", RANKER_KEYS, ("earl",), names="EARL",
                                   why=dict.fromkeys(("bert_ranker", "bert_siamese"), why))


def main(argv=None):
    """Build the store the command line names; returns it on global rank zero, else None."""
    args = build_parser().parse_args(argv)
    check_index_args(args)
    state = read_trained(args.checkpoint)  # torch alone: a foreign checkpoint is refused before Lightning loads
    from earl import store

    return build_index(args, state, store, f"the {args.strategy.upper()} store", strategy=args.strategy)


if __name__ == "__main__":
    main()
