"""``python -m mva.index --checkpoint CKPT --collection TASK --output_dir DIR``: precompute the document representations
of a trained MVA or dual encoder (Zhou and Devlin: "Multi-Vector Attention Models for Deep Re-ranking", 2021), so
that ``python -m mva.evaluate --store DIR`` re-ranks without encoding a document at query time.

MVA's score reads each candidate only through D_K = Y W_DK and D_V = Y W_DV of its pooled timesteps Y (Sec. 2.1),
which never see the query: the store keeps them, [D_K | D_V] per timestep, 2·H·p floats (Table 5 counts both:
70 x 128 x 2 = 17,920 floats per document for MVA¹). A dual encoder's store keeps its [CLS] vector, h floats. A
document's rows are the timesteps its pooling keeps (`mva.store`), the passage cut and tokenised exactly as in
training (the checkpoint's tokenizer and passage length). The command prints the bytes per document it stored;
before building, the store's estimated size (the collection's size times the mean timesteps kept of a sample of
1,000 of its documents, tokenised but not encoded, plus the store's other files; `common.stores.size`) beside the
space free where ``--output_dir`` goes.

``CKPT`` is an `mva.train` checkpoint of MVA or DE (CA reads query and document together: nothing to store).
``--collection`` names the documents: ``builtin:<split>``, ``irds:<ir_datasets id>`` (``msmarco-passage`` for
the paper's 8.8M passages) or a collection FILE (docid<TAB>[title<TAB>]text TSV or JSONL, .gz ok); every
document is stored, in the collection's order.

Output: a representation store (`common.stores.representations`) in a new ``--output_dir`` folder: ``plan.json``, shards
of ``--shard_size`` documents, ``manifest.json`` written last. Its identity is the checkpoint file's sha256 and
the architecture; ``mva.evaluate`` refuses a store of another checkpoint. ``--dtype fp16`` halves the bytes. The
shards are computed by Lightning ``predict``, split among ``--devices`` and ``--num_nodes``, each written as soon
as it is done; ``--resume`` finishes a killed build (with the same checkpoint, dtype, collection and shard size).

Speed: ``--precision`` (default: the one the checkpoint's run trained with, where its run folder says so, else
32-true), float32 matmuls at ``--matmul_precision high`` (TF32 on GPUs) as in training, and ``--num_workers`` loader
processes that read and tokenise the documents while the model encodes them (`common.stores.writer`).

Bad input ends in one line naming the option or the file, with exit status 2, before anything is written
(`common.refusals`): the options, the collection's name and the output folder before torch and Lightning are
imported; an ``irds:`` collection's files that are neither present nor downloadable, one line each
(`common.data.irds_files`); a checkpoint that is not MVA's or DE's once read; a collection file that cannot be read
once opened; a filesystem whose free space (``shutil.disk_usage``) cannot hold the estimated store, once it is
estimated (with ``--resume``, what is left of it to write).
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
