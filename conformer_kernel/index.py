"""``python -m conformer_kernel.index --checkpoint CKPT --collection TASK --query_tasks TASK --output_dir DIR``:
precompute the impact index of a trained NDRM (Mitra et al., "Improving Transformer-Kernel Ranking Model Using
Conformer and Query Term Independence"; s_td for every term and document, `conformer_kernel.impact_index`) for full
retrieval (``python -m conformer_kernel.evaluate --index DIR``).

The terms: every analysed term of the ``--query_tasks``' topics (the first 20 of each, as the official code), and
with ``--vocabulary`` the whole vocabulary. Shards of ``--shard_size`` documents are written as they are scored
(``--resume`` finishes an interrupted build), split among ``--devices``, and merged out of core. The index's estimated
size and its build's peak are printed first, beside the space free; bad input ends in one line, exit status 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common.data.irds_files import refuse_missing_files
from common.data.specs import TaskSpecError, check_spec, source_from_spec
from common.commands.task_options import (add_precision_arguments, add_process_arguments, add_workers_argument,
                                          read_checkpoint, resolve_precision, runs_on_cuda, trainer_options)
from common.commands.run_folder import launched_as_global_zero
from common.commands.store_options import command_parser
from common.refusals import checkpoint_file, input_errors, positive_int, usage_error
from conformer_kernel.index_folder import INDEX_FILES, output_problem
from conformer_kernel.orcas import ORCAS_PARTS


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("python -m conformer_kernel.index", __doc__)
    add = parser.add_argument
    add("--checkpoint", required=True, type=checkpoint_file, help="a conformer_kernel.train checkpoint")
    add("--collection", required=True, help="task whose documents are indexed: builtin:<split>, irds:<ir_datasets id>")
    add("--query_tasks", nargs="+", default=[], metavar="TASK",
        help="tasks whose queries' terms are indexed (builtin:test, irds:msmarco-document/trec-dl-2020)")
    add("--vocabulary", action="store_true", help="also index every term of the model's vocabulary")
    add("--output_dir", required=True, help="a new folder for the index (or an unfinished one with --resume)")
    add("--resume", action="store_true", help="finish an interrupted index in --output_dir")
    add("--orcas", type=orcas_task, default=None,
        help="ORCAS field as in training (irds:msmarco-document/orcas; default: the checkpoint's)")
    add("--shard_size", type=positive_int, default=256, help="documents per written shard (default 256)")
    add("--batch_size", type=positive_int, default=8, help="documents per forward pass (default 8)")
    add("--term_chunk", type=positive_int, default=64, help="terms per kernel-pooling pass (default 64)")
    add_process_arguments(parser, "Lightning devices; shards are split among them")
    add_precision_arguments(parser)
    add_workers_argument(parser, "read and featurise the documents")
    return parser


def orcas_task(text: str) -> str:
    """An argparse type: an ORCAS field named on a command line, ``irds:<ir_datasets id>`` (queries and qrels)."""
    kind, _, dataset_id = text.partition(":")
    if kind != "irds" or not dataset_id:
        raise argparse.ArgumentTypeError(f"must be irds:<ir_datasets id> (e.g. irds:msmarco-document/orcas), "
                                         f"got {text}")
    from common.data.irds import load_dataset

    try:
        load_dataset(dataset_id)  # the registry's, nothing downloaded
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def existing_index(text: str) -> Path:
    """An argparse type: the folder of a finished index (`conformer_kernel.index_folder.INDEX_FILES`)."""
    folder = Path(text)
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"no such folder: {text}")
    missing = [name for name in INDEX_FILES if not (folder / name).is_file()]
    if missing:
        raise argparse.ArgumentTypeError(f"{text} holds no finished conformer_kernel.index index "
                                         f"(no {', '.join(missing)})")
    return folder


def read_trained(checkpoint: str | Path) -> dict:
    """The contents of `checkpoint`, a `conformer_kernel.train` checkpoint, else one line naming the file."""
    return read_checkpoint(checkpoint, "a conformer_kernel.train checkpoint (one with its vocabulary)",
                           lambda state: "state_dict" in state and "resources" in state)


def check_args(args: argparse.Namespace) -> None:
    """What the option types do not check, before anything is imported or read."""
    if not args.query_tasks and not args.vocabulary:
        usage_error("nothing to index: give --query_tasks TASK [TASK ...] and/or --vocabulary")
    with input_errors(TaskSpecError):
        check_spec(args.collection, "--collection")
        for spec in args.query_tasks:
            check_spec(spec, "--query_tasks")
    zero = launched_as_global_zero()
    problem = output_problem(Path(args.output_dir), args.resume) if zero else None
    if problem:
        usage_error(f"--output_dir: {problem}")
    orcas = [args.orcas] if args.orcas else []  # the checkpoint's own field is checked once it is read
    refuse_missing_files([args.collection, *args.query_tasks, *orcas],
                         ["--collection", *["--query_tasks"] * len(args.query_tasks), *["--orcas"] * len(orcas)],
                         [("docs",), *[("queries",)] * len(args.query_tasks), *[ORCAS_PARTS] * len(orcas)],
                         quiet=not zero)


def check_room(args: argparse.Namespace, estimate) -> str:
    """The estimated size and peak beside the free space, as a line; one line naming ``--output_dir`` if no room."""
    from common.stores.size import format_bytes, free_space, written_bytes

    written = written_bytes(args.output_dir) if args.resume else 0
    folder, free = free_space(args.output_dir)
    more = f" more ({format_bytes(estimate.peak_bytes)} in all, {format_bytes(written)} written)" if written else ""
    if free < estimate.peak_bytes - written:
        usage_error(f"--output_dir: no room for the index in {args.output_dir}: its build needs an estimated "
                    f"{format_bytes(estimate.peak_bytes - written)}{more} at its peak (the index and its shards) and "
                    f"{folder} has {format_bytes(free)} free")
    left = f"; {format_bytes(written)} of it written" if written else ""
    return f"estimated index size: {estimate.describe()}{left}; free on {folder}: {format_bytes(free)}"


def main(argv=None):
    """Build the index the command line names; it on global rank zero, else None."""
    args = build_parser().parse_args(argv)
    check_args(args)
    from common.commands.quiet import quiet_lightning
    from common.training.processes import leave_process_group_at_exit

    quiet_lightning()
    leave_process_group_at_exit()

    from common.commands.cli import INPUT_ERRORS
    from conformer_kernel.impact_index import (UnfinishedIndexError, build_index, estimate_index, index_terms,
                                               load_for_inference)

    state = read_trained(args.checkpoint)
    data_settings = state.get("datamodule_hyper_parameters", {})
    precision = resolve_precision(args, args.checkpoint, state, runs_on_cuda(args.accelerator))
    with input_errors(*INPUT_ERRORS):  # the tasks' files and the ORCAS field's, read before the model is built
        topic_sets = [source_from_spec(spec).topics() for spec in args.query_tasks]
        documents = source_from_spec(args.collection).documents()
        doc_ids = list(documents)
        model, featurizer = load_for_inference(args.checkpoint, args.orcas, data_settings)
    terms = index_terms(topic_sets, featurizer, args.vocabulary)
    room = None
    if launched_as_global_zero():  # whose folder it is (check_args): a refusal there ends the launch
        room = check_room(args, estimate_index(model, featurizer, documents, doc_ids, terms, args.shard_size))
    print(f"indexing {len(terms)} terms x {len(doc_ids)} documents into {args.output_dir}; {precision}")
    if room:
        print(room)
    try:
        index = build_index(model, featurizer, documents, doc_ids, terms, args.output_dir, shard_size=args.shard_size,
                            batch_size=args.batch_size, term_chunk=args.term_chunk, resume=args.resume,
                            trainer_options=trainer_options(args), num_workers=args.num_workers)
    except UnfinishedIndexError as error:  # known once the terms are: after the model is built
        usage_error(f"--output_dir: {error}")
    if index is not None:
        print(f"written: {args.output_dir} ({index.matrix.nnz} postings)")
    return index


if __name__ == "__main__":
    main()
