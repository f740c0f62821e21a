"""``python -m mva.pretrain``: MLM and NSP pre-training on a collection's passages, the start of MVA's and its
baselines' fine-tuning (Zhou and Devlin 2021, Sec. 2.3 and 3: "standard BERT objectives, ... MLM as well as NSP").

``ca``: ``BertForPreTraining`` over ``[CLS] A [SEP] B' [SEP]``; ``de``/``mva``: the fine-tuning model encodes A and B'
apart, its score is the NSP logit (binary cross-entropy) and an MLM head reads each side. Loss: MLM + NSP, each a mean.
Settings are parsed as ``mva.train`` parses them. Choices the paper leaves open (NSP from the score, no head; passage
halves, not sentences; any collection for C4): docs/mva.md.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import random
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from common.commands.progress import LoopProgress
from common.commands.store_options import check_collection, is_collection_task, open_collection
from common.commands.task_options import add_process_arguments, check_one_device, one_device
from common.data.formats import DataFormatError
from common.data.specs import TaskSpecError
from common.refusals import (ArgumentParser, SettingError, input_errors, nonnegative_int, number_in,
                             output_folder_problem, positive_int, usage_error)

ARCHITECTURES = ("ca", "de", "mva")
#: The from-scratch BERT of mva/configs/builtin.yaml's model, and its positions.
SCRATCH = {"num_layers": 2, "hidden_size": 64, "num_heads": 2, "intermediate_size": 256}
SCRATCH_POSITIONS = 512
RECORD = "pretrain.json"
#: The whole MVA of ``--architecture mva``, as an ``mva.train`` checkpoint (``--model.init_checkpoint``) reads it.
CHECKPOINT = "mva.ckpt"
#: NSP labels (Hugging Face's convention: 1 is random).
IS_NEXT, RANDOM_NEXT = 0, 1
HEADS = {"predictions": "MLM", "seq_relationship": "NSP"}
INPUT_ERRORS = (TaskSpecError, DataFormatError, FileNotFoundError)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m mva.pretrain", description=__doc__.split("\n\n")[0], epilog="fine-tune "
                            "from DIR: python -m mva.train --model.encoder DIR --data.tokenizer DIR (printed in full)")
    add = parser.add_argument
    add("--collection", required=True, help="builtin:<split>, irds:<id> (C4: irds:c4/en-noclean-tr) or a FILE")
    add("--output_dir", required=True, help="a new folder: the model, tokenizer, pretrain.json (and mva.ckpt)")
    add("--architecture", choices=ARCHITECTURES, default="ca")
    add("--init", default=None, help="--architecture mva: a --architecture de output to start from")
    add("--encoder", default=None, help="a Hugging Face BERT folder or name (default: a BERT from scratch)")
    add("--nsp", choices=("auto", "on", "off"), default="auto", help="ca: NSP beside MLM (auto: where there's a head)")
    add("--steps", type=positive_int, default=1000, help="paper: 100,000 (CA, DE), 20,000 (MVA)")
    add("--batch_size", type=positive_int, default=32, help="passages per step (paper: 8,192)")
    add("--lr", type=number_in(0), default=3e-4, help="Adam's learning rate (paper: 3e-4)")
    add("--warmup_steps", type=nonnegative_int, default=0, help="linear warm-up, then linear decay to zero")
    add("--max_length", type=positive_int, default=128, help="tokens per encoder input (ca: the pair)")
    add("--mlm_probability", type=number_in(0, 1, above_low=True), default=0.15,
        help="DataCollatorForLanguageModeling's share of masked tokens")
    add("--seed", type=int, default=0)
    add("--config", default=None, help="de, mva: mva.train's config whose model: section, then mva.train's "
                                       "--model.* flags, give the score's settings")
    add_process_arguments(parser, "one device: auto, 1, or a GPU's index such as 0,")
    scratch = parser.add_argument_group("a BERT from scratch (without --encoder or --init)")
    scratch.add_argument("--tokenizer", default=None, help="builtin (default), train, or a Hugging Face name or path")
    for name, default in SCRATCH.items():
        scratch.add_argument(f"--{name}", type=positive_int, default=None, help=f"default {default}")
    scratch.add_argument("--dropout", type=number_in(0, 1), default=0.1)
    return parser


def check_args(args: argparse.Namespace, model_flags: list[str] = ()) -> None:
    """What the option types do not check, before anything is read; sets the defaults and ``args.model``."""
    check_one_device(args, "mva.pretrain", "its own training loop, without Lightning")
    check_collection(args.collection)
    output = Path(args.output_dir)
    if problem := output_folder_problem(output):
        usage_error(f"--output_dir: {problem}")
    if output.is_dir() and any(output.iterdir()):
        usage_error(f"--output_dir: {output} is not empty: choose a new one")
    if args.architecture != "ca" and args.nsp == "off":
        usage_error(f"--nsp: off is --architecture ca's: the {args.architecture.upper()} pre-training scores NSP "
                    "with its own score, always trained")
    args.model = model_settings(args, list(model_flags))
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
        for name, default in {**SCRATCH, "tokenizer": "builtin"}.items():
            setattr(args, name, getattr(args, name) or default)
        if args.hidden_size % args.num_heads:
            usage_error(f"--num_heads: must divide --hidden_size ({args.hidden_size}), got {args.num_heads}")
        if not Path(args.tokenizer).expanduser().exists() and looks_like_path(args.tokenizer):
            usage_error(f"--tokenizer: no such folder: {args.tokenizer}")
        if args.tokenizer == "train" and not is_collection_task(args.collection):
            usage_error("--tokenizer: train learns a BPE on a task's documents and queries: give --collection as "
                        "builtin:<split> or irds:<id>, or another tokenizer")
        check_positions(args, "a BERT from scratch", SCRATCH_POSITIONS)
    least, room = ((3, "a half and [SEP] on each side") if args.architecture != "ca" else
                   (5, "two halves and two [SEP]") if args.nsp != "off" else (3, "a token and [SEP]"))
    if args.max_length < least:
        usage_error(f"--max_length: must leave room for [CLS], {room} (at least {least}), got {args.max_length}")


def backbone_option(args: argparse.Namespace) -> tuple[str, str | None]:
    """``--init`` or ``--encoder`` and its value (None: from scratch)."""
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
    made = record.get("architecture", "ca") if isinstance(record, dict) else None
    if made != "de":
        usage_error(f"--init: {args.init} is the output of mva.pretrain --architecture {made}, not of the DE's "
                    "(--architecture de)")


def model_settings(args: argparse.Namespace, flags: list[str]) -> dict | None:
    """The DE's or MVA's settings (None for ``ca``): ``--config``'s ``model:`` (default mva.train's), then `flags`."""
    given = list(dict.fromkeys(flag[len("--model."):].split("=")[0] for flag in flags if flag.startswith("--model.")))
    if args.architecture == "ca":
        for option in (["--config"] if args.config is not None else []) + [f"--model.{key}" for key in given]:
            usage_error(f"{option}: gives the DE's or MVA's score; --architecture ca has none to set")
        return None
    from argparse import ArgumentError

    import yaml

    from common.commands.cli import CommandParser, one_line
    from mva.portable import DE_KEYS, MVA_KEYS
    from mva.ranker import MVARanker
    from mva.train import COMMAND

    path = args.config or str(COMMAND.default_config)
    try:
        model = config_model(Path(path))
    except (OSError, yaml.YAMLError, AttributeError) as error:
        usage_error(f"--config: {path} cannot be read as YAML: {first_line(error)}")
    if not isinstance(model, dict):
        usage_error(f"--config: {path} has no model: section (a fine-tuning config of mva.train)")
    if args.config is None:
        model["architecture"] = args.architecture
    parser = CommandParser(prog="python -m mva.pretrain", exit_on_error=False)
    parser.add_class_arguments(MVARanker, "model", fail_untyped=False)
    try:
        resolved = parser.parse_object({"model": model})
    except ArgumentError as error:
        usage_error(f"--config: {path}: {one_line(str(error)).removeprefix('--')}")
    try:
        resolved = vars(parser.parse_args(flags, namespace=resolved).model)  # flags over the config
    except ArgumentError as error:
        usage_error(one_line(str(error)))
    if resolved["architecture"] != args.architecture:
        if "architecture" in given:
            usage_error(f"--model.architecture: {resolved['architecture']} is not --architecture {args.architecture}")
        usage_error(f"--config: {path} is a config of the {resolved['architecture'].upper()}, not of the "
                    f"{args.architecture.upper()} (--architecture {args.architecture})")
    keys = DE_KEYS if args.architecture == "de" else MVA_KEYS
    for key in given:
        if key not in (*keys, "architecture"):
            usage_error(f"--model.{key}: is not a setting of the {args.architecture.upper()} (its: {', '.join(keys)})")
    args.model_flags = [key for key in given if key != "architecture"]
    return {key: resolved[key] for key in keys}


def config_model(path: Path) -> dict | None:
    """`path`'s ``model:`` section; a row's (``config: <base>``) is its base's updated by its ``model.*`` keys."""
    import yaml

    config = yaml.safe_load(path.read_text()) or {}
    if isinstance(config.get("config"), str):
        base = config_model(path.parent / config["config"]) or {}
        return {**base, **{key[len("model."):]: value for key, value in config.items() if key.startswith("model.")}}
    return config.get("model")


def check_positions(args: argparse.Namespace, what: str, positions: int) -> None:
    """``--max_length`` (plus K - 1 with MVA's ``cls`` pooling) fits `what`'s `positions`."""
    extra, side = max([((args.model[f"{side}_timesteps"] or 1) - 1, side) for side in ("query", "doc")
                       if (args.model or {}).get(f"{side}_pooling") == "cls"], default=(0, None))
    if args.max_length + extra > positions:
        got = str(args.max_length)
        if extra:
            got += f" + {extra} (--model.{side}_timesteps {extra + 1}: K [CLS] embeddings in the place of one)"
        usage_error(f"--max_length: {what} reads at most {positions} tokens, got {got}")


def looks_like_path(text: str) -> bool:
    """Whether `text` can only be a local folder (a Hugging Face name is ``name`` or ``org/name``)."""
    return text.startswith((".", "/", "~")) or text.count("/") > 1 or os.sep != "/" and os.sep in text


@contextlib.contextmanager
def quiet_transformers():
    """Hugging Face's load reports and progress bars off inside the block."""
    from transformers.utils import logging

    verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()


def scratch_model(tokenizer, *, nsp: bool, **sizes):
    """A from-scratch ``BertForPreTraining`` (with `nsp`) or ``BertForMaskedLM`` of `sizes`."""
    from transformers import BertForMaskedLM, BertForPreTraining

    from common.encoders.pretrained import bert_config

    config = bert_config(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **sizes,
                         max_length=SCRATCH_POSITIONS)
    return (BertForPreTraining if nsp else BertForMaskedLM)(config)


def pretrained_model(name_or_path: str, nsp: str):
    """``(model, uses_nsp, fresh)``: the encoder with pre-training heads, and the weights it lacked."""
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


def scratch_sizes(args: argparse.Namespace) -> dict:
    return {name: getattr(args, name) for name in (*SCRATCH, "dropout")}


def load_backbone(args: argparse.Namespace):
    """``(model, tokenizer, uses_nsp, note)`` the options name, torch seeded first."""
    import torch

    from common.encoders.tokenizers import load_tokenizer

    torch.manual_seed(args.seed)
    nsp = args.nsp if args.architecture == "ca" else "off"  # de, mva: NSP from their score, no head
    with quiet_transformers():
        if args.encoder is None and args.init is None:
            try:
                tokenizer = load_tokenizer(args.tokenizer, task=args.collection if args.tokenizer == "train" else None)
            except (OSError, ValueError, ImportError, TaskSpecError, DataFormatError) as error:
                usage_error(f"--tokenizer: {args.tokenizer} does not load: {first_line(error)}")
            if tokenizer.mask_token is None:
                usage_error(f"--tokenizer: {args.tokenizer} has no mask token: MLM cannot mask with it")
            uses_nsp = nsp != "off"
            model = scratch_model(tokenizer, nsp=uses_nsp, **scratch_sizes(args))
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
    return model, tokenizer, args.architecture != "ca" or uses_nsp, note


def scored_model(masked_lm, tokenizer, architecture: str, settings: dict):
    """``ModuleDict(masked_lm=masked_lm, scorer=...)``, the scorer built by `mva.portable.model_of`."""
    from torch import nn

    from mva.portable import model_of

    scorer = model_of(masked_lm.bert, {"architecture": architecture, **settings}, cls_token_id=tokenizer.cls_token_id)
    return nn.ModuleDict({"masked_lm": masked_lm, "scorer": scorer})


def first_line(error: BaseException) -> str:
    """The first line of `error`'s message, or its type's name."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class PretrainingExamples:
    """Unmasked examples of passages: ``[CLS] passage [SEP]``; with `nsp` ``[CLS] A [SEP] B' [SEP]``, A and B the
    halves, B' = B or (probability 1/2) another's second half; with `apart` ``{"query": [CLS] A [SEP], "doc": [CLS] B'
    [SEP]}``; each NSP example has its ``next_sentence_label``. `max_length` counts the special tokens."""

    def __init__(self, documents, tokenizer, max_length: int, nsp: bool, apart: bool = False):
        self.documents, self.tokenizer, self.max_length = documents, tokenizer, max_length
        self.nsp, self.apart = nsp or apart, apart
        # room for the passage's words: in one input, or in two ([CLS] A [SEP] and [CLS] B' [SEP])
        self.budget = 2 * (max_length - 2) if apart else max_length - (3 if nsp else 2)

    def words(self, doc_ids: list[str]) -> list[list[int]]:
        """Each passage's ``title text`` token ids, without special tokens, cut to the room an example leaves."""
        texts = [f"{d.title} {d.text}".strip() for d in self.documents.get_many(doc_ids)]
        encoded = self.tokenizer(texts, add_special_tokens=False, truncation=True, max_length=self.budget)
        return [ids[: self.budget] for ids in encoded["input_ids"]]

    def examples(self, doc_ids: list[str], rng: random.Random, partners: list[str] | None = None) -> list[dict]:
        """The examples of `doc_ids`; whether B' is random and whose it is are drawn with `rng` from `partners`."""
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
        drawn = [self._partner(doc_id, partners, rng) if label == RANDOM_NEXT else None
                 for doc_id, _, _, label in pairs]
        others = dict(zip([p for p in drawn if p is not None], self.words([p for p in drawn if p is not None])))
        examples = []
        for (_, first, second, label), partner in zip(pairs, drawn):
            if label == RANDOM_NEXT:
                theirs = others[partner]
                second = theirs[(len(theirs) + 1) // 2:]
            if self.apart:
                second = second[: self.max_length - 2]
                examples.append({"query": self._side([cls, *first, sep]), "doc": self._side([cls, *second, sep]),
                                 "next_sentence_label": label})
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
                "special_tokens_mask": special}

    @staticmethod
    def _side(ids: list[int]) -> dict:
        return {"input_ids": ids, "attention_mask": [1] * len(ids),
                "special_tokens_mask": [1] + [0] * (len(ids) - 2) + [1]}


def mask_apart(masking, examples: list[dict]) -> dict:
    """A batch of pairs read apart, each side padded and masked by `masking`: ``query_tokens``/``_mask``/``_labels``
    (B, q), ``doc_*`` (B, d), ``query_index`` (B,) and ``next_sentence_label`` (B,)."""
    import torch

    batch = {}
    for side in ("query", "doc"):
        masked = masking([example[side] for example in examples])
        batch |= {f"{side}_tokens": masked["input_ids"], f"{side}_mask": masked["attention_mask"],
                  f"{side}_labels": masked["labels"]}
    return batch | {"query_index": torch.arange(len(examples)),
                    "next_sentence_label": torch.tensor([example["next_sentence_label"] for example in examples])}


def batches(examples: PretrainingExamples, pool: list[str], batch_size: int, masking,
            rng: random.Random) -> Iterator[dict]:
    """Masked batches of `batch_size` passages of `pool`, a new order each pass, endlessly."""
    while True:
        order = list(pool)
        rng.shuffle(order)
        for start in range(0, len(order), batch_size):
            yield masking(examples.examples(order[start : start + batch_size], rng, partners=pool))


def apart_losses(model, batch: dict) -> dict:
    """The MLM and NSP losses of a batch read apart (`mask_apart`): NSP is the binary cross-entropy of the scorer's
    score of (A, B'); MLM the head over each side's encoder output (a forward hook), one mean over both sides."""
    import torch
    from torch.nn.functional import binary_cross_entropy_with_logits, cross_entropy, pad

    from mva.model import truncated_input

    masked_lm, scorer = model["masked_lm"], model["scorer"]
    outputs = []  # (B, n', h) of each of the scorer's encoder calls: A's, then B''s
    hook = masked_lm.bert.register_forward_hook(lambda bert, inputs, output: outputs.append(output.last_hidden_state))
    try:
        scores = scorer(batch)  # (B,)
    finally:
        hook.remove()
    hidden, labels = [], []
    for side, output in zip(("query", "doc"), outputs, strict=True):
        pooling = getattr(scorer, f"{side}_pooling", None)  # MVA's cls pooling: K embeddings in [CLS]'s place
        extra = pooling.timesteps - 1 if pooling is not None and pooling.kind == "cls" else 0
        side_labels = pad(batch[f"{side}_labels"], (extra, 0), value=-100)  # (B, n')
        if pooling is not None and pooling.truncates_input:  # First-K of the input: the words it reads, its [SEP]
            side_labels = truncated_input(side_labels, batch[f"{side}_mask"], pooling.timesteps)[0]
        masked = side_labels != -100
        hidden.append(output[masked])  # (M_side, h)
        labels.append(side_labels[masked])
    logits = masked_lm.cls(torch.cat(hidden))  # (M, V)
    targets = (batch["next_sentence_label"] == IS_NEXT).to(scores.dtype)
    return {"mlm": cross_entropy(logits.float(), torch.cat(labels)),
            "nsp": binary_cross_entropy_with_logits(scores, targets)}


def probe_losses(model, batch: dict) -> dict[str, float]:
    """The MLM (and NSP) loss of `batch` in eval mode, without gradients; the model's mode is restored."""
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


def train(model, stream: Iterator[dict], *, steps: int, lr: float, warmup_steps: int, device,
          progress: LoopProgress | None = None) -> list[float]:
    """`steps` Adam steps (gradients clipped to norm 1, linear warm-up and decay); returns each step's loss."""
    import torch

    from common.training.schedules import warmup_linear_decay

    model.to(device)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = warmup_linear_decay(optimizer, warmup_steps, steps)
    losses = []
    for step in range(1, steps + 1):
        batch = {k: v.to(device) for k, v in next(stream).items()}
        # MLM + NSP, each a mean (as BertForPreTraining's), or MLM alone (BertForMaskedLM)
        loss = sum(apart_losses(model, batch).values()) if "query_tokens" in batch else model(**batch).loss
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


def write_atomically(output: Path, write) -> None:
    """``write(folder)`` into a temporary sibling renamed to `output` (an empty one replaced) once done."""
    from common.io import umask

    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=output.parent, prefix=f".{output.name}.", ignore_cleanup_errors=True) as tmp:
        os.chmod(tmp, 0o777 & ~umask())  # mkdtemp's is private
        write(Path(tmp))
        if output.is_dir() and not any(output.iterdir()):
            output.rmdir()
        os.rename(tmp, output)  # nothing left to clean up


def main(argv=None) -> dict:
    """Pre-train as the command line says; returns what ``pretrain.json`` records."""
    parser = build_parser()
    args, model_flags = parser.parse_known_args(argv)
    if model_flags and not model_flags[0].startswith("--model."):
        parser.error(f"unrecognized arguments: {' '.join(model_flags)}")
    check_args(args, model_flags)
    started = time.monotonic()

    from transformers import DataCollatorForLanguageModeling

    model, tokenizer, uses_nsp, note = load_backbone(args)
    apart = args.architecture != "ca"
    if apart:
        try:
            model = scored_model(model, tokenizer, args.architecture, args.model)
        except SettingError as error:
            usage_error(f"--{error}")
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

    def masking(seed: int):  # Hugging Face's MLM masking (BERT's 80/10/10), its own generator seeded with `seed`
        masked = DataCollatorForLanguageModeling(tokenizer, mlm=True, mlm_probability=args.mlm_probability, seed=seed)
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
                       progress=LoopProgress(args.steps, "step", desc="pretrain"))
    after = probe_losses(model, probe)
    seconds = time.monotonic() - started

    record = {
        "command": "mva.pretrain", "architecture": args.architecture, "collection": args.collection,
        "encoder": args.encoder, "init": args.init, "config": args.config, "model": args.model,
        "from_scratch": None if args.encoder or args.init else scratch_sizes(args),
        "tokenizer": args.tokenizer or args.init or args.encoder, "objectives": objectives.lower().replace(" ", ""),
        "nsp": uses_nsp, "steps": args.steps, "batch_size": args.batch_size, "lr": args.lr,
        "warmup_steps": args.warmup_steps, "max_length": args.max_length, "mlm_probability": args.mlm_probability,
        "seed": args.seed, "passages": len(pool), "probe_passages": len(probe_ids),
        "probe_loss": {"before": before, "after": after}, "last_train_loss": losses[-1], "seconds": round(seconds, 1),
    }

    def write(folder: Path) -> None:
        model.to("cpu")
        with quiet_transformers():
            (model["masked_lm"] if apart else model).save_pretrained(folder)
            tokenizer.save_pretrained(folder)
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
    """The ``mva.train`` command line that starts from the output, with the DE's or MVA's settings."""
    parts = ["python -m mva.train", *([f"--config {args.config}"] if args.config else []),
             f"--model.encoder {args.output_dir}", f"--data.tokenizer {args.output_dir}"]
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
