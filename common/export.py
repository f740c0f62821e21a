"""``python -m common.export --checkpoint CKPT --output_dir DIR``: a trained ranker of any package as a folder to share
(`common.portable.write_folder`: ``config.json``, ``model.safetensors``, tokenizer files, a ``README.md`` model card
from the run folder's ``metrics.json`` and ``provenance.json``), read back by `common.api.load` without Lightning.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common.refusals import ArgumentParser, checkpoint_file, input_errors, output_folder, usage_error


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m common.export", description=__doc__.split("\n\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, type=checkpoint_file,
                        help="a checkpoint of any train command (checkpoints/best-*.ckpt or last.ckpt)")
    parser.add_argument("--output_dir", required=True, type=output_folder, help="the new folder to write")
    parser.add_argument("--run_dir", type=Path, default=None,
                        help="the run folder whose metrics.json and provenance.json the model card reads (default: "
                             "the one holding the checkpoint's checkpoints/)")
    return parser


def main(argv=None) -> Path:
    args = build_parser().parse_args(argv)
    if args.output_dir.exists():
        usage_error(f"--output_dir: {args.output_dir} already exists; export into a new folder")
    from common.api import load
    from common.portable import PortableError

    with input_errors(PortableError):
        ranker = load(args.checkpoint)
    folder = ranker.export(args.output_dir, run_dir=args.run_dir)
    print(f"written: {folder} ({ranker.package} ranker; load it with common.api.load({str(folder)!r}))")
    return folder


if __name__ == "__main__":
    main()
