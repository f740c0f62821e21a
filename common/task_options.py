"""The task an evaluate command names, and how deep it re-ranks: ``--<option> TASK`` or the task's files.

An evaluate command adds ``--<option> TASK`` (``builtin:<split>``, ``irds:<ir_datasets id>``) and, in a group of
its own, ``--topics/--qrels/--run/--collection`` (`add_task_arguments`), reads the task back as a
`common.data.source.SourceSpec` and checks it (`task_spec_from_args`), before anything is built: a missing file or
an unknown split or id is one line naming the option (`common.usage`). Only the standard library and
`common.data.source` are imported, so that ``--help`` and these errors answer at once.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from common.data.source import SourceSpec, TaskSpecError, check_spec
from common.usage import usage_error

#: The files of a task given on an evaluate command line, and the `FileSource` field each fills.
TASK_FILES = {"topics": "topics_path", "qrels": "qrels_path", "run": "candidates_path", "collection": "collection_path"}


def add_task_arguments(parser: argparse.ArgumentParser, option: str = "task",
                       help_text: str = "builtin:<split> or irds:<ir_datasets id>") -> None:
    """Add ``--<option> TASK`` (`help_text`) and, in a group "or a task from files", ``--topics --qrels --run
    --collection`` (read back by `task_spec_from_args`)."""
    parser.add_argument(f"--{option}", help=help_text)
    files = parser.add_argument_group("or a task from files")
    for name, what in (("topics", "qid<TAB>text"), ("qrels", "qid iter docid label"),
                       ("run", "the candidates to re-rank: qid Q0 docid rank score tag"),
                       ("collection", "docid<TAB>[title<TAB>]text TSV or JSONL, .gz ok")):  # fmt: skip
        files.add_argument(f"--{name}", metavar="FILE", help=what)


def task_spec_from_args(args: argparse.Namespace, option: str = "task",
                        required: Sequence[str] = ("topics", "run")) -> SourceSpec:
    """The task of an evaluate command line (`add_task_arguments`): ``args.<option>`` where given, else the
    `FileSource` mapping of ``--topics/--qrels/--run/--collection`` (an absent file: None).

    `required` names the files that must be given without ``--<option>``. A missing one, a file that does not exist,
    an unknown split or ir_datasets id end the command in one line naming the option (`common.usage.usage_error`).
    """
    named = getattr(args, option)
    if named:
        spec, where = named, f"--{option}"
    else:
        if not all(getattr(args, name) for name in required):
            optional = [name for name in TASK_FILES if name not in required]
            also = f" (and optionally {_flags(optional)})" if optional else ""
            usage_error(f"give --{option} TASK, or {_flags(required)}{also}")
        spec, where = {field: getattr(args, name) for name, field in TASK_FILES.items()}, "task"
    try:
        check_spec(spec, where)
    except TaskSpecError as error:
        usage_error(_as_flags(str(error)))
    return spec


def resolve_depth(depth: int | None, data_settings: dict, default: int = 100) -> tuple[int, str]:
    """An evaluate command's re-ranking depth and where it comes from: `depth` (``--depth``), else the checkpoint's
    data setting ``depth`` (how deep it was trained and evaluated), else `default` (the paper's top 100)."""
    if depth is not None:
        return depth, "--depth"
    if data_settings.get("depth") is not None:
        return int(data_settings["depth"]), "the checkpoint's data.depth, as in training"
    return default, f"the checkpoint has no data.depth; the paper's top {default}"


def _as_flags(message: str) -> str:
    """`check_spec`'s message about a task from files (``task.topics_path: no such file``) in this command's flags."""
    for name, field in TASK_FILES.items():
        message = message.replace(f"task.{field}", f"--{name}")
    return message


def _flags(names: Sequence[str]) -> str:
    flags = [f"--{name}" for name in names]
    return flags[0] if len(flags) == 1 else f"{', '.join(flags[:-1])} and {flags[-1]}"
