"""A ranking task as a config names it (`SourceSpec`): checked before anything is built, and opened as the
`common.data.source.RankingSource` it names (built-in split, ir_datasets id, TREC files or a rank_llm file, either
mapping cut to the training or held-out part of its judged queries by `SPLIT_KEYS`, `common.data.query_split`);
apart from `common.data.source` because it dispatches to every kind of source, each of which builds on that module.
"""

from __future__ import annotations

from pathlib import Path

from common.data.query_split import HELDOUT_ONE_IN, QUERIES, SPLIT_SEED, QuerySubset
from common.data.source import FileSource, RankingSource
from common.io import file_digest

#: A task as a config value: ``"builtin:<split>"``, ``"irds:<id>"``, or a mapping of file or rank_llm fields.
SourceSpec = str | dict

#: The keys of a task from TREC files; topics_path is required.
FILE_TASK_KEYS = ("topics_path", "qrels_path", "candidates_path", "collection_path", "name")
#: The keys of a task from a rank_llm candidate file; rank_llm_path is required.
RANK_LLM_KEYS = ("rank_llm_path", "qrels_path", "name")
#: The keys either mapping also takes: which of its queries (`common.data.query_split.QUERIES`) and the split's
#: parameters, given only with ``queries`` train or heldout.
SPLIT_KEYS = ("queries", "split_seed", "heldout_one_in")

#: How a task is written, for ``--help`` texts and error messages.
TASK_FORMS = ("builtin:<split> (train, dev, test of the built-in collection); irds:<ir_datasets id>; "
              "TREC files as nested keys topics_path (qid<TAB>text), qrels_path, candidates_path (a run to re-rank), "
              "collection_path (TSV or JSONL), name, e.g. --data.train.topics_path T --data.train.qrels_path Q; "
              "or a rank_llm candidate file: rank_llm_path (JSON of queries, hits and their text), qrels_path, name; "
              "either mapping cut to the training or held-out part of its judged queries by queries (all, train, "
              "heldout), split_seed, heldout_one_in")


class TaskSpecError(ValueError):
    """A task spec that names no task: the message is one line naming the option and what it accepts."""


def check_spec(spec: SourceSpec, option: str = "task") -> None:
    if isinstance(spec, dict):
        keys = RANK_LLM_KEYS if "rank_llm_path" in spec else FILE_TASK_KEYS
        unknown = sorted(set(spec) - set(keys) - set(SPLIT_KEYS))
        if unknown:
            bad = ", ".join(f"{option}.{key}" for key in unknown)
            raise TaskSpecError(f"{bad}: unknown key; a task from files takes {', '.join(FILE_TASK_KEYS)} (topics_path "
                                f"required), one from a rank_llm file takes {', '.join(RANK_LLM_KEYS)} (rank_llm_path "
                                f"required), either {', '.join(SPLIT_KEYS)}")
        required = keys[0]
        if spec.get(required) is None:
            raise TaskSpecError(f"{option}.{required}: missing; a task from files needs topics_path "
                                f"(and takes {', '.join(FILE_TASK_KEYS[1:])}), or give rank_llm_path")
        _check_split(spec, option)
        for key in keys:
            if key.endswith("_path") and spec.get(key) is not None and not Path(spec[key]).is_file():
                raise TaskSpecError(f"{option}.{key}: no such file: {spec[key]}")
        return
    kind, _, value = str(spec).partition(":")
    if kind == "builtin":
        from common.data.builtin import SPLITS

        if (value or "test") not in SPLITS:
            raise TaskSpecError(f"{option}: unknown built-in split {value!r} in {spec!r}; expected one of "
                                f"{', '.join(f'builtin:{s}' for s in SPLITS)}")
        return
    if kind == "irds" and value:
        from common.data.irds import load_dataset

        try:
            load_dataset(value)
        except ValueError as error:
            raise TaskSpecError(f"{option}: {error}") from None
        return
    raise TaskSpecError(f"{option}: cannot read the task {spec!r}; expected {TASK_FORMS}")


def _check_split(spec: dict, option: str) -> None:
    """A mapping's `SPLIT_KEYS`: ``queries`` one of `QUERIES`, the split's parameters integers and only with a part."""
    queries = spec.get("queries", "all")
    if queries not in QUERIES:
        raise TaskSpecError(f"{option}.queries: expected one of {', '.join(QUERIES)}; got {queries!r}")
    for key, least in (("split_seed", None), ("heldout_one_in", 2)):
        if key not in spec:
            continue
        if queries == "all":
            raise TaskSpecError(f"{option}.{key}: a parameter of the split of the judged queries; give "
                                f"{option}.queries train or heldout")
        value = spec[key]
        if not isinstance(value, int) or isinstance(value, bool) or (least is not None and value < least):
            what = "an integer" if least is None else f"an integer of at least {least}"
            raise TaskSpecError(f"{option}.{key}: expected {what}; got {value!r}")
    if queries != "all" and spec.get("qrels_path") is None:
        raise TaskSpecError(f"{option}.queries: {queries} is a part of the task's judged queries; give its qrels_path")


def source_from_spec(spec: SourceSpec) -> RankingSource:
    """The `RankingSource` a config names (see `SourceSpec`); a malformed spec raises `TaskSpecError` saying why."""
    check_spec(spec)
    if isinstance(spec, dict):
        task = {key: value for key, value in spec.items() if key not in SPLIT_KEYS}
        if "rank_llm_path" in spec:
            from common.data.rank_llm import RankLLMSource

            source = RankLLMSource(**task)
        else:
            source = FileSource(**task)
        part = spec.get("queries", "all")
        if part == "all":
            return source
        return QuerySubset(source, part, seed=spec.get("split_seed", SPLIT_SEED),
                           one_in=spec.get("heldout_one_in", HELDOUT_ONE_IN), name=spec.get("name") or "")
    kind, _, value = str(spec).partition(":")
    if kind == "builtin":
        from common.data.builtin import builtin_source

        return builtin_source(value or "test")
    from common.data.irds import IrDatasetsSource

    return IrDatasetsSource(value)


def source_fingerprint(spec: SourceSpec, source: RankingSource) -> dict:
    """What identifies a task's data in a cache key (a learnt tokenizer's, the Conformer-Kernel's vocabulary)."""
    files = {}
    for name in (*FILE_TASK_KEYS, *RANK_LLM_KEYS):
        path = getattr(source, name, None) if name.endswith("_path") else None
        if path is not None and Path(path).is_file():
            files[name] = file_digest(path)
    form = {k: v for k, v in spec.items() if not k.endswith("_path")} if isinstance(spec, dict) else spec
    return {"spec": form, "files": files}
