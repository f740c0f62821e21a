"""``python -m common.export --checkpoint CKPT --output_dir DIR``: a trained ranker of any package as a folder to share.

Writes, into the new folder ``DIR`` at once (`common.portable.write_folder`), Hugging Face's layout: ``config.json``
(the package, the format, the version and the scoring config), ``model.safetensors`` (the model's weights alone: no
optimizer state, no pickle), the tokenizer's or vocabulary's files, and a ``README.md`` model card (the paper, the
config, the training data, the metrics of the run's ``metrics.json`` and the command of its ``provenance.json``; the
run folder is the one holding ``CKPT``'s ``checkpoints/``, or ``--run_dir``). `common.api.load` reads it back, without
Lightning. An existing ``DIR`` is refused, as is a file that is no ranker's checkpoint, in one line with exit status 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common.refusals import ArgumentParser, checkpoint_file, input_errors, output_folder, usage_error


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m common.export", description=__doc__.split("\n\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
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
