"""``python -m common.stores.verify STORE [STORE ...]``: check every byte of finished representation stores
(`common.stores.representations`, built by ``earl.index`` or ``mva.index``) against their manifests.

Opening a store, and resuming a build, check only the files' sizes: re-reading every shard against its sha256 costs
what the store weighs (terabytes for EARL's S2 store of MS MARCO), so it is done here, on request. For each store,
in turn: every shard's size and sha256, its index, and the id table (``ids.npy``, ``locations.npy``) against the
plan's doc ids and the shards' rows (`common.stores.representations.verify_store`), with a progress bar over the
shards.

Prints ``ok: STORE (documents, shards, bytes)`` for each sound store. A damaged store ends the command with
``error: <what is damaged>`` and exit status 1; a folder that holds no finished store, with status 2 (bad input,
`common.refusals`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common.refusals import ArgumentParser


def store_folder(text: str) -> Path:
    """An argparse type: a folder holding a finished store (its manifest)."""
    from common.stores.representations import MANIFEST

    folder = Path(text)
    if not (folder / MANIFEST).is_file():
        raise argparse.ArgumentTypeError(f"{text} holds no finished store (no {MANIFEST})")
    return folder


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m common.stores.verify", description=__doc__.split("\n\n")[0],
                            epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stores", nargs="+", type=store_folder, metavar="STORE", help="a finished store's folder")
    return parser


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    from tqdm.auto import tqdm

    from common.stores.representations import CorruptStoreError, verify_store

    for folder in args.stores:
        try:
            manifest = verify_store(folder, lambda shards: tqdm(shards, desc=f"verifying {folder}", unit=" shards"))
        except (CorruptStoreError, ValueError, OSError) as error:
            print(f"error: {error}", file=sys.stderr)
            raise SystemExit(1) from None
        print(f"ok: {folder} ({manifest['documents']:,} documents, {len(manifest['shards']):,} shards, "
              f"{manifest['bytes']:,} bytes)")


if __name__ == "__main__":
    main()
