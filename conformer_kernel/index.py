"""``python -m conformer_kernel.index --checkpoint CKPT --collection TASK --query_tasks TASK --output_dir DIR``:
precompute the impact index of a trained NDRM, the Conformer-Kernel with query term independence (Mitra et al.:
"Improving Transformer-Kernel Ranking Model Using Conformer and Query Term Independence", TREC 2020 Deep Learning
track), for full retrieval (``python -m conformer_kernel.evaluate --index DIR``).

Query term independence: every NDRM scores a query as the sum of its terms' scores, s_qd = Σ_{t∈q} s_td,
and s_td depends on the term and the document only. So s_td is computed offline for a set of terms over
the whole collection (``--collection``) and stored as an impact index, each term's postings a row; full
retrieval sums a query's rows and keeps the top 100, the paper's single-stage "fullrank" setting
(`conformer_kernel.impact_index`). Which terms: as in the official code, every term of the queries to be
run (the first 20 analysed terms of each topic of the ``--query_tasks``), optionally the whole model vocabulary
(``--vocabulary``).

Output: the postings' CSR arrays (``data.npy``, ``indices.npy``, ``indptr.npy``), ``terms.txt``, ``doc_ids.txt``
and ``meta.json`` (written last) in a new ``--output_dir`` folder. Shards of ``--shard_size`` documents are written as
soon as they are scored, so an interrupted run resumes where it stopped (``--resume``), and merged into the arrays
out of core, with the memory of one shard; with several ``--devices`` (or under ``torchrun`` or ``srun``) the
shards are split among them, and global rank zero alone checks the folder, writes its plan and merges the shards
(`common.commands.task_options.launched_as_global_zero`): the same index as one process builds. Before computing,
the command prints the index's estimated size and its build's peak, the shards beside the merged arrays
(`conformer_kernel.impact_index.estimate_index`: NDRM1's and NDRM3's postings are dense, NDRM2's counted in a
sample of 1,000 documents), beside the space free where ``--output_dir`` goes.

Speed: ``--precision`` (default: the precision the checkpoint's run trained with, where its run folder says so, else
32-true; the scores stay float32), float32 matmuls at ``--matmul_precision high`` (TF32 on GPUs) as in training
(`common.commands.task_options.resolve_precision`), and ``--num_workers`` loader processes that read and featurise
the documents while the model scores them (`conformer_kernel.impact_index.DocumentShards`).

Bad input ends in one line naming the option or the file (and line), with exit status 2, before anything is
written (`common.refusals`): the options, the tasks' names and the output folder at once, before torch and
Lightning are imported; an ``irds:`` task's files that are neither present nor downloadable, one line each
(`common.data.irds_files`); a checkpoint that is not conformer_kernel.train's once read, and a malformed task file
once the task is opened; a filesystem whose free space (``shutil.disk_usage``) cannot hold the build's estimated
peak, once it is estimated (with ``--resume``, less what the folder holds).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common.data.irds_files import refuse_missing_files
from common.data.specs import TaskSpecError, check_spec, source_from_spec
from common.commands.task_options import (add_precision_arguments, add_process_arguments, add_workers_argument,
                                          read_checkpoint, resolve_precision, runs_on_cuda, trainer_options)
from common.commands.run_folder import launched_as_global_zero
from common.refusals import ArgumentParser, checkpoint_file, input_errors, positive_int, usage_error
from conformer_kernel.index_folder import INDEX_FILES, output_problem
from conformer_kernel.orcas import ORCAS_PARTS


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m conformer_kernel.index", description=__doc__.split("\n\n")[0],
                            epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, type=checkpoint_file,
                        help="a conformer_kernel.train checkpoint")
    parser.add_argument("--collection", required=True,
                        help="task whose documents are indexed: builtin:<split>, irds:<ir_datasets id>")
    parser.add_argument("--query_tasks", nargs="+", default=[], metavar="TASK",
                        help="tasks whose queries' terms are indexed (builtin:test, "
                             "irds:msmarco-document/trec-dl-2020)")
    parser.add_argument("--vocabulary", action="store_true", help="also index every term of the model's vocabulary")
    parser.add_argument("--output_dir", required=True,
                        help="a new folder for the index (or an unfinished one with --resume)")
    parser.add_argument("--resume", action="store_true", help="finish an interrupted index in --output_dir")
    parser.add_argument("--orcas", type=orcas_task, default=None,
                        help="ORCAS field as in training (irds:msmarco-document/orcas; default: the checkpoint's)")
    parser.add_argument("--shard_size", type=positive_int, default=256,
                        help="documents per written shard (default 256)")
    parser.add_argument("--batch_size", type=positive_int, default=8, help="documents per forward pass (default 8)")
    parser.add_argument("--term_chunk", type=positive_int, default=64,
                        help="terms per kernel-pooling pass (default 64)")
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
    """The contents of `checkpoint`, a `conformer_kernel.train` checkpoint (its vocabulary with it), else one line
    naming the file. Imports torch."""
    return read_checkpoint(checkpoint, "a conformer_kernel.train checkpoint (one with its vocabulary)",
                           lambda state: "state_dict" in state and "resources" in state)


def check_args(args: argparse.Namespace) -> None:
    """What the option types do not check, before anything is imported or read: something to index, the tasks'
    names, and (on global rank zero, whose folder it is) an output folder to write the index into."""
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
    """The index's estimated size and its build's peak (a `conformer_kernel.impact_index.IndexEstimate`) beside the
    space free where ``--output_dir`` is, as a line to print; where that space cannot hold the peak (with ``--resume``,
    less what the folder already holds), one line naming ``--output_dir``, before anything is written."""
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
    """Build the index the command line names; returns it (a `conformer_kernel.impact_index.ImpactIndex`) on
    global rank zero, else None."""
    args = build_parser().parse_args(argv)
    check_args(args)
    from common.commands.quiet import quiet_lightning
    from common.training.processes import leave_process_group_at_exit

    quiet_lightning()  # Lightning's advertisements and two deprecation warnings of its own making
    leave_process_group_at_exit()  # a gloo group left standing can abort the process at exit

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
