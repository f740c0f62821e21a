"""``python -m earl.index --checkpoint CKPT --strategy s1|s2 --collection TASK --output_dir DIR``: precompute the
document representations of a trained EARL (Gao, Dai, Callan: "EARL: Speedup Transformer-based Rankers with
Pre-computed Representation", 2020), so that ``python -m earl.evaluate --store DIR`` ranks without T_doc.

Sec. 3.3: T_doc never sees the query, so its output over a document can be computed offline. Strategy S1 (document
representation reuse) stores D = T_doc(doc), h numbers per token; S2 (transformed document representation reuse)
stores D' of Eq. 25, each judge block's keys and values of D (D W_Y, D W_Z), 2·K·h numbers per token, which
also saves the judge's document projections at query time (Table 1's n^2 d term). A document's rows are its real
tokens, [CLS] and [SEP] included and padding left out, the passage cut and tokenised exactly as in training (the
checkpoint's tokenizer and passage length). The command prints the bytes per document of the store it built and
what the other strategy would cost (S2 = 2·K x S1). Before building it prints the store's estimated size (the
collection's size times the mean rows of a sample of 1,000 of its documents, tokenised but not encoded, plus the
store's other files; `common.stores.size`) beside the space free where ``--output_dir`` goes.

``CKPT`` is an `earl.train` checkpoint of EARL (the BERT ranker and BERT-Siamese have nothing to precompute).
``--collection`` names the documents: ``builtin:<split>``, ``irds:<ir_datasets id>`` (``msmarco-passage`` for
the paper's 8.8M passages) or a collection FILE (docid<TAB>[title<TAB>]text TSV or JSONL, .gz ok); every
document is stored, in the collection's order.

Output: a representation store (`common.stores.representations`) in a new ``--output_dir`` folder: ``plan.json``, shards
of ``--shard_size`` documents (``shard-*.bin`` rows and ``shard-*.index.json``), ``manifest.json`` written last.
Its identity is the checkpoint file's sha256 and the strategy, and ``earl.evaluate`` refuses a store of another
checkpoint; ``extra`` records the judge blocks, hidden size, heads, passage length and tokenizer. ``--dtype
fp16`` halves the bytes (rows rounded to half precision; ``earl.evaluate --compare_end_to_end`` measures what it
costs). The shards are computed by Lightning ``predict``, split among ``--devices`` and ``--num_nodes``, and
written as soon as each is done, so a killed build loses the shards in flight only: ``--resume`` finishes it
(with the same checkpoint, strategy, dtype, collection and shard size, else it is refused).

Speed: ``--precision`` (default: the one the checkpoint's run trained with, where its run folder says so, else
32-true), float32 matmuls at ``--matmul_precision high`` (TF32 on GPUs) as in training, and ``--num_workers`` loader
processes that read and tokenise the documents while the model encodes them (`common.stores.writer`).

Bad input ends in one line naming the option or the file, with exit status 2, before anything is written
(`common.refusals`): the options, the collection's name and the output folder at once, before torch and Lightning
are imported; an ``irds:`` collection's files that are neither present nor downloadable, one line each
(`common.data.irds_files`); a checkpoint that is not EARL's once read; a collection file that cannot be read once it
is opened; a filesystem whose free space (``shutil.disk_usage``) cannot hold the estimated store, once it is
estimated (with ``--resume``, what is left of it to write).
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
    """The contents of `path`, an `earl.train` checkpoint of EARL; any other file, a BERT ranker's or
    BERT-Siamese's checkpoint included, ends the command in one line naming it. Imports torch."""
    why = ": only EARL's document side is computed without the query, so only EARL has representations to store"
    return read_trained_checkpoint(path, "earl.train", RANKER_KEYS, ("earl",), names="EARL",
                                   why=dict.fromkeys(("bert_ranker", "bert_siamese"), why))  # fmt: skip


def main(argv=None):
    """Build the store the command line names; returns it (a `common.stores.representations.RepresentationStore`) on
    global rank zero, else None."""
    args = build_parser().parse_args(argv)
    check_index_args(args)
    state = read_trained(args.checkpoint)  # torch alone: a foreign checkpoint is refused before Lightning loads
    from earl import store

    return build_index(args, state, store, f"the {args.strategy.upper()} store", strategy=args.strategy)


if __name__ == "__main__":
    main()
