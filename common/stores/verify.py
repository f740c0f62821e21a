"""``python -m common.stores.verify STORE [STORE ...]``: check every byte of finished representation stores against
their manifests (`common.stores.representations.verify_store`), which opening a store does not (sizes only).

Prints ``ok: STORE (...)`` per sound store; a damaged one exits 1, a folder holding no finished store exits 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common.refusals import ArgumentParser


def store_folder(text: str) -> Path:
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
