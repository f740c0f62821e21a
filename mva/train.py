"""``python -m mva.train``: train MVA (Zhou and Devlin: "Multi-Vector Attention Models for Deep Re-ranking", 2021)
or a baseline (DE, CA), pick the checkpoint on dev MRR@10, re-rank the test candidates, write the run and
metrics, and print them next to BM25's.

With no ``--config`` the embedded default (`mva/configs/builtin.yaml`) runs: a small MVA trained from scratch on
the built-in collection, then a dual encoder and a cross-attention model of the same size trained the same way
(``--compare_with [de, ca]``), in a few CPU minutes. Every option is a LightningCLI flag (``--model.projection
32``, ``--model.doc_pooling cls --model.doc_timesteps 24``, ``--trainer.devices 8``; ``--help``).

Outputs (``--output_dir``, default a new ``outputs/mva-<architecture>-<time>``; `common.commands.cli.RankerCLI`):
``config.yaml`` (resolved), ``checkpoints/`` (``last.ckpt`` and the best on dev), ``logs/metrics.csv``,
``run.trec``, ``metrics.json`` (with BM25's and each ``--compare_with`` baseline's, trained in
``<output_dir>/<baseline>/``) and ``task.json`` (`common.commands.outputs`). ``--ckpt_path last`` resumes the run in
``--output_dir`` (its baselines too).
"""

from __future__ import annotations

import json
from pathlib import Path

from common.commands.help import is_int
from common.commands.train import TrainCommand, check_bert_lengths, link_bert_inputs

#: The paper's id in results/reported.
PAPER = "mva"
#: The paper's dataset (every table).
DATASETS = ("msmarco-passage-dev",)
#: Run names -> Table 5's method names.
PAPER_METHODS = {"ca": "CA (Ours)", "de": "DE (Ours)"}


def check_settings(config: dict) -> str | None:
    """What no single option's type rules out, in the resolved `config` (a ``config.yaml`` as a dict): one line
    naming the option, or None. Checked before anything is built: each would otherwise fail inside the model.
    (``--compare_with``'s names: `common.commands.train.TrainCommand.check_settings`.)"""
    model = config.get("model") or {}
    heads, hidden = model.get("num_heads"), model.get("hidden_size")
    if model.get("encoder") is None and is_int(heads) and is_int(hidden) and heads > 0 and hidden % heads:
        return f"--model.num_heads: must divide --model.hidden_size ({hidden}), got {heads}"
    if model.get("architecture", "mva") == "mva":
        for side in ("query", "doc"):
            pooling = model.get(f"{side}_pooling", "all")
            if pooling in ("first_k", "cls") and model.get(f"{side}_timesteps") is None:
                return f"--model.{side}_timesteps: {pooling} pooling keeps K timesteps: give K"
            if pooling == "temporal" and model.get(f"{side}_factor") is None:
                return f"--model.{side}_factor: temporal pooling needs its factor rho"
    return pretraining_mismatch(model) or check_bert_lengths(config)


def pretraining_mismatch(model: dict) -> str | None:
    """Where ``--model.init_checkpoint`` is an ``mva.pretrain`` output (its ``pretrain.json`` beside it), the option
    whose value differs from the pooling, projection or heads the head was pre-trained with, in one line; else None.
    Strict loading refuses most such runs by a shape, but not all: first-K and all tokens have the same parameters,
    as do two K of first-K, so the head would fine-tune on timesteps it was not pre-trained for without a word."""
    checkpoint = model.get("init_checkpoint")
    record = Path(checkpoint).parent / "pretrain.json" if checkpoint else None  # mva.pretrain.RECORD, not imported:
    # mva.pretrain imports this module
    if record is None or not record.is_file():
        return None
    try:
        pretrained = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return f"--model.init_checkpoint: {record} is not readable JSON ({error})"
    architecture = model.get("architecture", "mva")
    if pretrained.get("architecture") != architecture:
        return (f"--model.architecture: {checkpoint} was pre-trained as {pretrained.get('architecture')} "
                f"({record}), got {architecture}")
    settings = pretrained.get("model") or {}
    keys = ["projection", "heads"]
    for side in ("query", "doc"):
        pooling = settings.get(f"{side}_pooling", "all")
        keys += [f"{side}_pooling", *([f"{side}_timesteps"] if pooling in ("first_k", "cls") else []),
                 *([f"{side}_factor"] if pooling == "temporal" else [])]
    for key in keys:
        if key in settings and settings[key] != model.get(key):
            return (f"--model.{key}: {checkpoint} was pre-trained with {key} {settings[key]} ({record}), "
                    f"got {model.get(key)}")
    return None


def folder_name(config) -> str:
    """``mva-<architecture>``: the default output folder is ``outputs/mva-<architecture>-<time>``."""
    from mva.ranker import run_name

    return "mva-" + run_name(config.model.architecture)


def paper_tables(metrics: dict, task, dataset: str | None, data=None) -> str:
    """Reproduced vs reported on MS MARCO passage dev (Table 5's DE and CA, MRR@10), else a line saying there is
    nothing to compare with. (`data`, the data module tested, changes nothing here.)"""
    from common.commands.outputs import nothing_to_compare, reproduced_vs_reported
    from common.report import compare

    if dataset is None:
        return nothing_to_compare(task, f"is none of its datasets ({', '.join(DATASETS)})")
    method_map = {run: PAPER_METHODS[run] for run in metrics if run in PAPER_METHODS}
    frame = compare(metrics, PAPER, tables=5, dataset=dataset, method_map=method_map)
    return reproduced_vs_reported(frame[frame["metric"] == "mrr@10"] if not frame.empty else frame, metrics, dataset)


#: This command (`common.commands.train`).
COMMAND = TrainCommand(
    name="mva.train", default_config=Path(__file__).parent / "configs" / "builtin.yaml",
    model="mva.ranker.MVARanker", data="mva.data.MVADataModule",
    monitor="dev/mrr@10",  # the measure of every table of the paper
    run_name=folder_name, paper=PAPER, paper_tables=paper_tables, check=check_settings, links=link_bert_inputs,
    baselines=("de", "ca"),
)  # fmt: skip

#: Runs the command line (`common.commands.train.TrainCommand.main`).
main = COMMAND.main


if __name__ == "__main__":
    main()
