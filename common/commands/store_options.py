"""Command-line pieces of ``earl``'s and ``mva``'s ``index`` and ``evaluate`` (`common.commands.store_commands`): the
parser and checkpoint, an index command's options and collection, an evaluate command's options and ``--store`` (a
finished store built from this very checkpoint). Refusals are one line naming the option; torch is imported lazily.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common.commands.task_options import (add_precision_arguments, add_process_arguments, add_task_arguments,
                                          add_workers_argument, read_checkpoint)
from common.commands.run_folder import launched_as_global_zero
from common.data.specs import TaskSpecError, check_spec
from common.refusals import ArgumentParser, checkpoint_file, input_errors, positive_int, usage_error

#: ``--dtype`` -> how a store holds its rows (`common.stores.rows`).
DTYPES = {"fp32": "float32", "fp16": "float16", "int8": "int8"}



def command_parser(prog: str, doc: str) -> ArgumentParser:
    """The parser of `prog`: `doc`'s first paragraph as its description, the rest as its epilog."""
    return ArgumentParser(prog=prog, description=doc.split("\n\n")[0], epilog=doc.split("\n\n", 1)[1],
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def read_trained_checkpoint(path: str | Path, train_command: str, keys: tuple[str, ...], architectures: tuple[str, ...],
                            *, names: str | None = None, why: dict[str, str] | None = None,
                            option: str = "--checkpoint") -> dict:
    """`path`, a `train_command` checkpoint (hyper-parameters holding `keys`) of one of `architectures`, else refused
    (`why`: why an architecture cannot serve)."""

    def fits(state: dict) -> bool:
        hyper_parameters = state.get("hyper_parameters")
        return "state_dict" in state and isinstance(hyper_parameters, dict) and all(k in hyper_parameters for k in keys)

    state = read_checkpoint(path, f"an {train_command} checkpoint", fits, option)
    architecture = state["hyper_parameters"]["architecture"]
    if architecture not in architectures:
        usage_error(f"{option}: {path} is an {train_command} checkpoint of {architecture}, not of "
                    f"{names or ' or '.join(architectures)}{(why or {}).get(architecture, '')}")
    return state




def add_index_arguments(parser: argparse.ArgumentParser) -> None:
    """An index command's options after its ``--checkpoint``."""
    parser.add_argument("--dtype", choices=DTYPES, default="fp32",
                        help="how rows are stored: fp32, fp16 (half the bytes) or int8 (a float32 scale and width "
                             "int8 codes a row: about a quarter of fp32's bytes, read back as codes x scale; "
                             "common.stores.rows) (default fp32)")
    parser.add_argument("--collection", required=True,
                        help="the documents: builtin:<split>, irds:<ir_datasets id>, a collection FILE "
                             "(docid<TAB>[title<TAB>]text TSV or JSONL) or a rank_llm candidate file (.json: "
                             "the text of its hits)")
    parser.add_argument("--output_dir", required=True,
                        help="a new folder for the store (or an unfinished one with --resume)")
    parser.add_argument("--resume", action="store_true", help="finish an interrupted build in --output_dir")
    parser.add_argument("--verify", action="store_true",
                        help="with --resume: also re-read every shard already written against its checksum (by "
                             "default their sizes are checked; python -m common.stores.verify checks a store)")
    parser.add_argument("--shard_size", type=positive_int, default=1000,
                        help="documents per written shard (default 1000)")
    parser.add_argument("--batch_size", type=positive_int, default=128,
                        help="documents per forward pass of the document encoder (default 128)")
    add_process_arguments(parser, "Lightning devices; the shards are split among them")
    add_precision_arguments(parser)
    add_workers_argument(parser, "read and tokenise the documents")


def check_index_args(args: argparse.Namespace) -> None:
    """What the option types do not check: the collection's files and the store's output folder."""
    from common.data.irds_files import refuse_missing_files
    from common.stores.representations import store_output_problem

    if args.verify and not args.resume:
        usage_error("--verify: checks the shards that --resume keeps; give --resume (python -m "
                    "common.stores.verify checks a finished store)")
    check_collection(args.collection)
    refuse_missing_files([args.collection], ["--collection"], [("docs",)], quiet=not launched_as_global_zero())
    problem = store_output_problem(Path(args.output_dir), args.resume)
    if problem:
        hint = " (pass --resume to finish it)" if "unfinished" in problem else ""
        usage_error(f"--output_dir: {problem}{hint}")


def read_collection(args: argparse.Namespace):
    """The documents of ``--collection`` and their ids, in its order."""
    from common.commands.cli import INPUT_ERRORS
    from common.data.formats import DataFormatError

    with input_errors(*INPUT_ERRORS, DataFormatError):
        documents = open_collection(args.collection)
        doc_ids = list(documents)
    if not doc_ids:
        usage_error(f"--collection: {args.collection} holds no documents")
    return documents, doc_ids


def add_evaluate_arguments(parser: argparse.ArgumentParser, index_command: str, checkpoint_help: str,
                           store_help: str) -> None:
    """``--checkpoint``, the task, ``--store`` (built by `index_command`) and ``--compare_end_to_end``."""
    parser.add_argument("--checkpoint", required=True, type=checkpoint_file, help=checkpoint_help)
    add_task_arguments(parser, "task to re-rank: builtin:<split> or irds:<ir_datasets id>")
    parser.add_argument("--store", type=existing_store(index_command), default=None, help=store_help)
    parser.add_argument("--compare_end_to_end", action="store_true",
                        help="with --store: also score the same pairs end to end and report the differences")


def add_rerank_arguments(parser: argparse.ArgumentParser, package: str, batch: str, datasets: tuple[str, ...],
                         compared_with: str) -> None:
    """An evaluate command's output folder, depth, queries, batch size, dataset, relevance level, device, precision."""
    parser.add_argument("--output_dir", help=f"default: a new outputs/{package}-evaluate-<time>")
    parser.add_argument("--depth", type=positive_int, default=None,
                        help="candidates re-ranked per query (default: the checkpoint's data.depth, else 1000)")
    parser.add_argument("--test_queries", type=positive_int, default=None,
                        help="evaluate a sample of this many queries (seed 0, as data.test_queries; default all)")
    parser.add_argument("--batch_size", type=positive_int, default=128, help=f"candidates per {batch} (default 128)")
    parser.add_argument("--dataset", default=None, choices=datasets,
                        help=f"the paper's dataset the task is, to compare with {compared_with} (default: an irds: "
                             "task's own; files and builtin: none)")
    parser.add_argument("--relevance_level", type=int, default=None,
                        help="lowest relevant label for MAP/MRR (default: the checkpoint's data setting, else 1)")
    add_process_arguments(parser, "one device, where to score: auto (a GPU if there is one), 1, or a GPU's index "
                                  "such as 0,")
    add_precision_arguments(parser)




def is_collection_task(text: str) -> bool:
    """Whether ``--collection`` names a task (``builtin:`` or ``irds:``) rather than a collection file."""
    return text.startswith(("builtin:", "irds:"))


def check_collection(text: str) -> None:
    """Refuse a ``--collection`` that is neither a known task nor an existing file."""
    if is_collection_task(text):
        with input_errors(TaskSpecError):
            check_spec(text, "--collection")
    elif Path(text).is_dir():
        usage_error(f"--collection: {text} is a folder, not a collection file")
    elif not Path(text).is_file():
        usage_error(f"--collection: {text} is neither builtin:<split>, irds:<ir_datasets id> nor a collection "
                    "file: no such file")


def open_collection(text: str):
    """The documents ``--collection`` names (a `common.data.source.DocumentLookup`, iterable over its ids)."""
    if is_collection_task(text):
        from common.data.specs import source_from_spec

        return source_from_spec(text).documents()
    if text.endswith(".json"):  # a rank_llm candidate file (a JSON array; a JSONL collection is .jsonl)
        from common.data.rank_llm import RankLLMSource

        return RankLLMSource(text).documents()
    from common.data.docstore import DocumentStore

    return DocumentStore.for_collection(text)




def existing_store(index_command: str):
    """An argparse type: the folder of a finished store that `index_command` builds."""

    def store_folder(text: str) -> Path:
        from common.stores.representations import MANIFEST, PLAN

        folder = Path(text)
        if not folder.is_dir():
            raise argparse.ArgumentTypeError(f"no such folder: {text}")
        if not (folder / MANIFEST).is_file():
            unfinished = (f" (an unfinished one: finish it with {index_command} --resume)"
                          if (folder / PLAN).is_file() else "")
            raise argparse.ArgumentTypeError(f"{text} holds no finished {index_command} store (no {MANIFEST})"
                                             f"{unfinished}")
        return folder

    return store_folder


def open_store(folder: Path, checkpoint: Path, index_command: str, strategies: tuple[str, ...]):
    """The store in `folder`, refused unless built from `checkpoint` with one of `strategies`."""
    from common.stores.representations import (CorruptStoreError, RepresentationStore, StoreMismatchError,
                                                checkpoint_hash)

    try:
        store = RepresentationStore.open(folder, expect={"checkpoint": checkpoint_hash(checkpoint)})
    except StoreMismatchError as error:
        usage_error(f"--store: {error} (--checkpoint {checkpoint}); build one with {index_command} --checkpoint "
                    f"{checkpoint}")
    except (CorruptStoreError, ValueError) as error:
        usage_error(f"--store: {error}")
    if store.identity.get("strategy") not in strategies:
        usage_error(f"--store: {folder} holds representations of strategy {store.identity.get('strategy')}, not "
                    f"{' or '.join(strategies)}")
    return store


def check_candidates(store, pairs: list[tuple[str, str]], index_command: str) -> None:
    """Every re-ranked candidate has rows in `store`; else one line naming the first missing one."""
    missing = [(qid, doc_id) for qid, doc_id in pairs if doc_id not in store]
    if missing:
        qid, doc_id = missing[0]
        more = len({d for _, d in missing}) - 1
        others = f" (and {more:,} other candidates)" if more else ""
        usage_error(f"--store: {store.folder} has no representation of document {doc_id!r}, a candidate of query "
                    f"{qid!r}{others}: it was built from another collection; build one with {index_command} "
                    "--collection holding this task's documents")
