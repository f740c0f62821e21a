"""What an evaluate or index command line names, checked before anything is built (refused in one line naming the
option): its task, checkpoint, processes (one device: `check_one_device`), precision, loader workers, output folder.

``--precision`` is one of `PRECISIONS` (scores stay float32); without it a command takes the precision the checkpoint's
run trained with (`trained_precision`), else, or where that needs a GPU this machine lacks, ``32-true``. Imports only
the standard library until torch is needed.
"""

from __future__ import annotations

import argparse
import contextlib
import pickle
import re
import time
from pathlib import Path

from common.data.specs import SourceSpec, TaskSpecError, check_spec
from common.commands.run_folder import CONFIG, launched_as_global_zero
from common.refusals import nonnegative_int, output_folder_problem, positive_int, usage_error

#: ``--precision``'s choices (module docstring).
PRECISIONS = ("32-true", "bf16-mixed", "16-mixed")
#: The older names Lightning still reads.
PRECISION_ALIASES = {"32": "32-true", "bf16": "bf16-mixed", "16": "16-mixed"}
ONE_DEVICE_ACCELERATORS = ("auto", "cpu", "gpu", "cuda")
MATMUL_PRECISIONS = ("high", "highest")
#: The key of a gradient scaler's state (``16-mixed``) in a Lightning checkpoint.
SCALER_STATE = "MixedPrecision"

#: The files of a task given on an evaluate command line, and the `FileSource` field each fills.
TASK_FILES = {"topics": "topics_path", "qrels": "qrels_path", "run": "candidates_path", "collection": "collection_path"}


def add_task_arguments(parser: argparse.ArgumentParser, help_text: str = "builtin:<split> or irds:<ir_datasets id>"):
    """``--task TASK`` or, "or a task from files", ``--topics --qrels --run --collection`` or ``--rank_llm``."""
    parser.add_argument("--task", help=help_text)
    files = parser.add_argument_group("or a task from files")
    for name, what in (("topics", "qid<TAB>text"),
                       ("qrels", "qid iter docid label; without it the run is written and no metrics computed"),
                       ("run", "the candidates to re-rank: qid Q0 docid rank score tag"),
                       ("collection", "docid<TAB>[title<TAB>]text TSV or JSONL, .gz ok")):
        files.add_argument(f"--{name}", metavar="FILE", help=what)
    files.add_argument("--rank_llm", metavar="FILE",
                       help="a rank_llm candidate file (queries, first-stage hits and their text, e.g. ../shared/data/"
                            "trec_dl/candidates_with_text/rank_llm.BM25.retrieve_results_dl19.json), with --qrels "
                            "to measure it, in place of --topics, --run and --collection")


def task_spec_from_args(args: argparse.Namespace) -> SourceSpec:
    """The checked task spec of `add_task_arguments`' options (the qrels optional: without them no metrics)."""
    if args.task:
        spec, where = args.task, "--task"
    elif args.rank_llm:
        spec, where = {"rank_llm_path": args.rank_llm, "qrels_path": args.qrels}, "task"
    else:
        if not all(getattr(args, name) for name in TASK_FILES if name != "qrels"):
            usage_error("give --task TASK, or --topics, --run and --collection (and --qrels to compute metrics), "
                        "or --rank_llm (and --qrels)")
        spec, where = {field: getattr(args, name) for name, field in TASK_FILES.items()}, "task"
    spec = {key: value for key, value in spec.items() if value is not None} if isinstance(spec, dict) else spec
    try:
        check_spec(spec, where)
    except TaskSpecError as error:
        message = str(error)
        for name, field in {**TASK_FILES, "rank_llm": "rank_llm_path"}.items():  # in this command's flags
            message = message.replace(f"task.{field}", f"--{name}")
        usage_error(message)
    return spec


def resolve_depth(depth: int | None, data_settings: dict, default: int = 100) -> tuple[int, str]:
    """The re-ranking depth and its origin: ``--depth``, else the checkpoint's ``data.depth``, else `default`."""
    if depth is not None:
        return depth, "--depth"
    if data_settings.get("depth") is not None:
        return int(data_settings["depth"]), "the checkpoint's data.depth, as in training"
    return default, f"the checkpoint has no data.depth; the paper's top {default}"


def lightning_devices(text: str) -> str:
    """An argparse type: Lightning's ``devices``: ``auto``, a number (``-1``: all) or indices (``0,1``; ``0,``)."""
    indices = text.rstrip(",").split(",")
    if text == "auto" or re.fullmatch(r"-1|[1-9]\d*", text) or ("," in text and all(i.isdigit() for i in indices)):
        return text
    raise argparse.ArgumentTypeError(f"must be auto, a number of devices (-1: all) or device indices such as 0,1; "
                                     f"got {text}")


def add_process_arguments(parser: argparse.ArgumentParser, devices_help: str = "Lightning devices") -> None:
    """Lightning's ``--accelerator``, ``--devices`` and ``--num_nodes`` (read back by `trainer_options`)."""
    parser.add_argument("--accelerator", default="auto", help="Lightning accelerator (default auto)")
    parser.add_argument("--devices", type=lightning_devices, default="auto", help=f"{devices_help} (default auto)")
    parser.add_argument("--num_nodes", type=positive_int, default=1, help="Lightning nodes (default 1)")


def check_one_device(args: argparse.Namespace, command: str, why: str) -> None:
    """Refuse process options naming more than one device, where `command` computes in one process (`why`: how)."""
    one = f"{command} computes in one process ({why})"
    if args.accelerator not in ONE_DEVICE_ACCELERATORS:
        usage_error(f"--accelerator: {command} computes on {', '.join(ONE_DEVICE_ACCELERATORS)}; got "
                    f"{args.accelerator}")
    if args.num_nodes != 1:
        usage_error(f"--num_nodes: {one}; give 1")
    if args.devices not in ("auto", "1") and not re.fullmatch(r"\d+,", args.devices):
        usage_error(f"--devices: {one}: give one device (auto, 1, or an index such as 0,); got {args.devices}")
    if args.accelerator == "cpu" and args.devices.endswith(","):
        usage_error(f"--devices: an index names a GPU; --accelerator cpu takes auto or 1, got {args.devices}")


def one_device(args: argparse.Namespace):
    """The torch device `check_one_device`'s options name (auto: a GPU where there is one); a missing GPU refused."""
    import torch

    index = int(args.devices.rstrip(",")) if args.devices.endswith(",") else 0
    if args.accelerator == "cpu" or (args.accelerator == "auto" and not torch.cuda.is_available()
                                     and not args.devices.endswith(",")):
        return torch.device("cpu")
    if index >= torch.cuda.device_count():
        option = "--devices" if args.devices.endswith(",") else "--accelerator"
        usage_error(f"{option}: cuda:{index} is not available on this machine")
    return torch.device(f"cuda:{index}")


def trainer_options(args: argparse.Namespace) -> dict:
    """The ``lightning.Trainer`` options of the process and precision options, with a progress callback."""
    from common.commands.progress import progress_callback

    options = {"accelerator": args.accelerator, "devices": args.devices, "num_nodes": args.num_nodes,
               "callbacks": [progress_callback()]}
    if getattr(args, "precision", None) is not None:
        options["precision"] = args.precision
    return options


def add_precision_arguments(parser: argparse.ArgumentParser) -> None:
    """``--precision`` and ``--matmul_precision`` (read back by `resolve_precision`)."""
    parser.add_argument("--precision", choices=PRECISIONS, default=None,
                        help="Lightning precision; scores stay float32 (default: the one the checkpoint's run trained "
                             "with, from its config.yaml, else 32-true)")
    parser.add_argument("--matmul_precision", choices=MATMUL_PRECISIONS, default="high",
                        help="torch's float32 matmul precision: high (TF32 on GPUs, as training) or highest "
                             "(default high)")


def add_workers_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """``--num_workers``: loader processes that do `what` (``read and tokenise the documents``) beside the model."""
    parser.add_argument("--num_workers", type=nonnegative_int, default=0,
                        help=f"loader worker processes that {what} (default 0: the main process)")


def trained_precision(checkpoint: str | Path, state: dict) -> str | None:
    """`checkpoint`'s run's ``trainer.precision``, else ``16-mixed`` where `state` holds a scaler's, else None."""
    import yaml

    folder = Path(checkpoint).resolve().parent
    config = folder.parent / CONFIG
    if folder.name == "checkpoints" and config.is_file():
        settings = None
        with contextlib.suppress(yaml.YAMLError):
            settings = yaml.safe_load(config.read_text())
        trainer = settings.get("trainer") if isinstance(settings, dict) else None
        if isinstance(trainer, dict) and trainer.get("precision") is not None:
            value = str(trainer["precision"])
            return PRECISION_ALIASES.get(value, value)
    return "16-mixed" if SCALER_STATE in state else None


def runs_on_cuda(accelerator: str) -> bool:
    """Whether Lightning accelerator (or ``--device``) `accelerator` computes on a CUDA GPU."""
    import torch

    if accelerator == "auto":
        return torch.cuda.is_available()
    return accelerator in ("gpu", "cuda") or accelerator.startswith("cuda:")


def resolve_precision(args: argparse.Namespace, checkpoint: str | Path, state: dict, cuda: bool) -> str:
    """Set ``args.precision`` (module docstring) and torch's matmul precision; returns the line saying both and why."""
    import torch

    if args.precision is not None:
        if args.precision == "16-mixed" and not cuda:
            usage_error("--precision: 16-mixed needs a CUDA GPU (float16 autocast runs on none here); bf16-mixed "
                        "runs on CPUs")
        why = "--precision"
    else:
        trained = trained_precision(checkpoint, state)
        if trained is None:
            args.precision, why = "32-true", "the checkpoint does not say what its run trained with"
        elif trained not in PRECISIONS:
            args.precision, why = "32-true", f"its run trained in {trained}, not one of {', '.join(PRECISIONS)}"
        elif trained == "16-mixed" and not cuda:
            args.precision, why = "32-true", "its run trained in 16-mixed, which needs a CUDA GPU"
        else:
            args.precision, why = trained, "as the checkpoint's run trained"
    torch.set_float32_matmul_precision(args.matmul_precision)
    return f"precision {args.precision} ({why}); float32 matmuls: {args.matmul_precision}"


def autocast(precision: str, device_type: str):
    """The autocast context of Lightning's `precision` on `device_type`, as its ``MixedPrecision`` plugin enters it."""
    import torch

    if precision == "32-true":
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=torch.bfloat16 if precision == "bf16-mixed" else torch.float16)


def fresh_output_dir(path: str | Path | None, default_prefix: str) -> Path:
    """``--output_dir`` (default ``outputs/<default_prefix>-<time>``), checked (by global rank zero), not created."""
    out = Path(path or f"outputs/{default_prefix}-{time.strftime('%Y%m%d-%H%M%S')}")
    if not launched_as_global_zero():
        return out
    problem = output_folder_problem(out)
    if problem:
        usage_error(f"--output_dir: {problem}")
    if out.exists() and any(out.iterdir()):
        usage_error(f"--output_dir: {out} is not empty: choose a new one")
    return out


def read_checkpoint(path: str | Path, what: str, fits, option: str = "--checkpoint") -> dict:
    """The contents of checkpoint `path` on the CPU, refused where `fits(contents)` says it is not `what`."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError) as error:
        usage_error(f"{option}: {path} is not a checkpoint torch can read ({type(error).__name__})")
    if not isinstance(state, dict) or not fits(state):
        usage_error(f"{option}: {path} is not {what}")
    return state

