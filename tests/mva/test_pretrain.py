"""`python -m mva.pretrain`: MLM (+ NSP) pre-training of a BERT on a collection's passages, whose output folder
``mva.train --model.encoder`` starts from. Tiny models, a few steps, on the built-in collection."""

import itertools
import json
import random

import pytest
import torch
import yaml
from safetensors.torch import load_file
from transformers import (BertConfig, BertForMaskedLM, BertForPreTraining, BertModel, BertTokenizer,
                          DataCollatorForLanguageModeling)

from tests.bad_input.refusal import refused, write_inputs
from common.encoders.tokenizers import load_tokenizer
from mva import pretrain, train

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

#: A tiny BERT from scratch, short examples, small batches.
TINY = ["--collection", "builtin:train", "--num_layers", "1", "--hidden_size", "32", "--num_heads", "2",
        "--intermediate_size", "64", "--max_length", "32", "--batch_size", "8", "--steps", "20", "--lr", "2e-3",
        "--accelerator", "cpu"]
#: mva.train on the built-in collection, two steps, no baselines (test_mva_train's TINY without the model sizes,
#: which a pretrained --model.encoder has of its own).
TRAIN = ["--model.projection", "8", "--data.passage_length", "32", "--data.depth", "10", "--data.dev_queries", "3",
         "--data.dev_depth", "5", "--data.test_queries", "4", "--data.batch_size", "2", "--data.eval_batch_size", "16",
         "--trainer.max_steps", "2", "--trainer.val_check_interval", "2", "--trainer.enable_progress_bar", "false",
         "--save_every_n_steps", "2", "--compare_with", "[]"]


@pytest.fixture(scope="module")
def builtin_tokenizer():
    return load_tokenizer("builtin")


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """One run from scratch (seed 0): its output folder and record."""
    out = tmp_path_factory.mktemp("pretrain") / "out"
    return out, pretrain.main([*TINY, "--output_dir", str(out)])


def weights(folder) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


# --- the examples and their masking ---------------------------------------------------------------------------------


def test_masking_is_the_hugging_face_collators(documents, builtin_tokenizer):
    """Labels are the original ids at the masked positions and -100 elsewhere; special tokens and padding are never
    masked; about 15% of the other tokens are, 80% of those replaced by the mask token; the rest is unchanged."""
    tok = builtin_tokenizer
    masking = DataCollatorForLanguageModeling(tok, mlm=True, mlm_probability=0.15, seed=1)  # as mva.pretrain's
    examples = pretrain.PretrainingExamples(documents, tok, max_length=64, nsp=False)
    ids = list(documents)[:128]
    plain = examples.examples(ids, random.Random(0))
    assert all(e["input_ids"][0] == tok.cls_token_id and e["input_ids"][-1] == tok.sep_token_id for e in plain)
    assert max(len(e["input_ids"]) for e in plain) == 64
    original = tok.pad(plain, return_tensors="pt")["input_ids"]
    batch = masking(examples.examples(ids, random.Random(0)))
    labels, inputs = batch["labels"], batch["input_ids"]
    masked = labels != -100
    assert torch.equal(labels[masked], original[masked])
    special = torch.isin(original, torch.tensor([tok.cls_token_id, tok.sep_token_id, tok.pad_token_id]))
    assert not (masked & special).any()
    share = masked.sum() / (~special).sum()
    assert 0.12 < share < 0.18
    replaced = (inputs[masked] == tok.mask_token_id).float().mean()
    assert 0.7 < replaced < 0.9
    assert torch.equal(inputs[~masked], original[~masked])


def test_nsp_pairs_are_a_passages_halves_or_a_random_second_half(documents, builtin_tokenizer):
    tok = builtin_tokenizer
    examples = pretrain.PretrainingExamples(documents, tok, max_length=40, nsp=True)
    ids = list(documents)[:200]
    words = dict(zip(ids, examples.words(ids)))
    seconds = {tuple(w[(len(w) + 1) // 2 :]) for w in words.values()}
    pairs = examples.examples(ids, random.Random(0))
    labels = [p["next_sentence_label"] for p in pairs]
    assert 70 < labels.count(pretrain.IS_NEXT) < 130
    for doc_id, pair in zip(ids, pairs):
        tokens, types = pair["input_ids"], pair["token_type_ids"]
        assert len(tokens) <= 40 and tokens[0] == tok.cls_token_id and tokens[-1] == tok.sep_token_id
        middle = types.index(1) - 1
        assert tokens[middle] == tok.sep_token_id
        assert set(types[: middle + 1]) == {0} and set(types[middle + 1 :]) == {1}
        first, second = tokens[1:middle], tokens[middle + 1 : -1]
        own = words[doc_id]
        assert first == own[: (len(own) + 1) // 2]
        assert pair["special_tokens_mask"] == [int(i in (0, middle, len(tokens) - 1)) for i in range(len(tokens))]
        if pair["next_sentence_label"] == pretrain.IS_NEXT:
            assert first + second == own  # the passage's window, cut in two
        else:
            assert second != own[len(first) :] and tuple(second) in seconds


# --- training ---------------------------------------------------------------------------------------------------------


def test_the_mlm_loss_of_a_fixed_batch_decreases(documents, builtin_tokenizer):
    torch.manual_seed(0)
    model = pretrain.scratch_model(builtin_tokenizer, nsp=True, num_layers=1, hidden_size=32, num_heads=2,
                                   intermediate_size=64, dropout=0.1)
    examples = pretrain.PretrainingExamples(documents, builtin_tokenizer, max_length=32, nsp=True)
    masking = DataCollatorForLanguageModeling(builtin_tokenizer, mlm=True, mlm_probability=0.15, seed=0)
    batch = masking(examples.examples(list(documents)[:8], random.Random(0)))
    before = pretrain.probe_losses(model, batch)
    losses = pretrain.train(model, itertools.repeat(batch), steps=10, lr=3e-3, warmup_steps=0, device="cpu")
    after = pretrain.probe_losses(model, batch)
    assert set(before) == {"mlm", "nsp"} and len(losses) == 10
    assert after["mlm"] < before["mlm"] - 0.5
    assert model.training  # probe_losses restores the mode


def test_the_command_reports_the_probe_loss_falling(pretrained):
    """A held-out batch (left out of training), masked once: its MLM loss falls in 20 steps from scratch."""
    out, record = pretrained
    assert json.loads((out / pretrain.RECORD).read_text()) == record
    probe = record["probe_loss"]
    assert probe["after"]["mlm"] < probe["before"]["mlm"] - 0.3
    assert record["nsp"] is True and record["objectives"] == "mlm+nsp" and record["steps"] == 20
    assert record["passages"] == 3000 - 8 and record["probe_passages"] == 8


def test_the_same_seed_writes_the_same_weights(pretrained, tmp_path):
    out, _ = pretrained
    pretrain.main([*TINY, "--output_dir", str(tmp_path / "again")])
    pretrain.main([*TINY, "--output_dir", str(tmp_path / "other"), "--seed", "1"])
    mine, again, other = weights(out), weights(tmp_path / "again"), weights(tmp_path / "other")
    assert mine.keys() == again.keys() and all(torch.equal(mine[k], again[k]) for k in mine)
    assert not all(torch.equal(mine[k], other[k]) for k in mine)


def test_progress_lines_where_there_is_no_terminal(capsys):
    progress = pretrain.LoopProgress(4, "step", desc="pretrain", terminal=False, every=0.0)
    progress.update(1, loss=2.5)
    progress.update(4, loss=1.25)
    progress.close(loss=1.25)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("step 1/4 · loss 2.5 · ") and lines[0].endswith("left")
    assert lines[1].startswith("step 4/4 · loss 1.25 · ") and lines[1].endswith("~0s left")
    assert lines[2].startswith("step 4/4 · loss 1.25 · ") and lines[2].endswith("done")


# --- the output -------------------------------------------------------------------------------------------------------


def test_the_output_is_a_hugging_face_bert_and_its_tokenizer(pretrained, builtin_tokenizer):
    out, _ = pretrained
    saved = weights(out)
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertForPreTraining"]
    assert any(k.startswith("cls.seq_relationship.") for k in saved)
    bert = BertModel.from_pretrained(out, add_pooling_layer=False)
    assert bert.config.num_hidden_layers == 1 and bert.config.hidden_size == 32
    mine = bert.state_dict()
    assert mine.keys() == {k.removeprefix("bert.") for k in saved if k.startswith("bert.") and "pooler" not in k}
    assert all(torch.equal(v, saved["bert." + k]) for k, v in mine.items())
    tokenizer = load_tokenizer(str(out))  # as mva.train loads --model.encoder's and --data.tokenizer's
    assert tokenizer.get_vocab() == builtin_tokenizer.get_vocab()
    assert tokenizer.cls_token_id == builtin_tokenizer.cls_token_id and tokenizer.mask_token == "<mask>"
    assert not list(out.parent.glob(".out.*"))  # no temporary folder left beside it


def test_mva_train_starts_from_the_output(pretrained, tmp_path):
    """``mva.train --model.encoder OUT``: MVA's encoder starts with the pretrained weights (``--model.lr 0``
    keeps them through two steps, so the checkpoint shows them)."""
    out, _ = pretrained
    run = tmp_path / "run"
    metrics = train.main([*TRAIN, "--model.encoder", str(out), "--data.tokenizer", str(out), "--model.lr", "0",
                          "--output_dir", str(run)])
    assert "mva" in metrics
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["model"]["encoder"] == str(out) and config["data"]["tokenizer"] == str(out)
    state = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
    encoder = {k.removeprefix("model.bert."): v for k, v in state.items() if k.startswith("model.bert.")}
    saved = {k.removeprefix("bert."): v for k, v in weights(out).items() if k.startswith("bert.") and "pooler" not in k}
    assert encoder.keys() == saved.keys() and all(torch.equal(encoder[k], saved[k]) for k in saved)


def test_write_atomically_leaves_nothing_where_writing_fails(tmp_path):
    def fails(folder):
        (folder / "part").write_text("x")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        pretrain.write_atomically(tmp_path / "out", fails)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "empty").mkdir()
    pretrain.write_atomically(tmp_path / "empty", lambda folder: (folder / "done").write_text("y"))
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["done", "empty"]


# --- continuing an encoder ----------------------------------------------------------------------------------------


def wordpiece(folder):
    """A tiny WordPiece tokenizer (BERT's special tokens, letters), saved in `folder`."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "the", *letters, *("##" + c for c in letters)]
    tokenizer = BertTokenizer(vocab={token: i for i, token in enumerate(vocab)}, do_lower_case=True)
    tokenizer.save_pretrained(folder)
    return tokenizer


@pytest.mark.parametrize("layout, nsp, expect, fresh", [
    ("BertForPreTraining", "auto", "BertForPreTraining", ""),  # the NSP head is there: MLM + NSP
    ("BertModel", "auto", "BertForMaskedLM", " (its MLM head starts fresh)"),  # no heads (MiniLM's layout): MLM
    ("BertModel", "on", "BertForPreTraining", " (its MLM and NSP heads start fresh)"),  # NSP asked for
])
def test_an_encoder_folder_is_continued(tmp_path, builtin_tokenizer, layout, nsp, expect, fresh, capsys):
    """``--encoder`` loads a Hugging Face folder (weights and tokenizer); with ``--lr 0`` its weights come out as
    they went in."""
    folder = tmp_path / "encoder"
    tokenizer = wordpiece(folder) if layout == "BertModel" else builtin_tokenizer
    tokenizer.save_pretrained(folder)
    vocab = len(load_tokenizer(str(folder)))
    config = BertConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64)
    torch.manual_seed(3)
    (BertForPreTraining if layout == "BertForPreTraining" else BertModel)(config).save_pretrained(folder)
    out = tmp_path / "out"
    record = pretrain.main(["--collection", "builtin:train", "--encoder", str(folder), "--output_dir", str(out),
                            "--nsp", nsp, "--steps", "2", "--batch_size", "4", "--max_length", "32", "--lr", "0",
                            "--accelerator", "cpu"])
    assert record["nsp"] == (expect == "BertForPreTraining") and record["encoder"] == str(folder)
    assert json.loads((out / "config.json").read_text())["architectures"] == [expect]
    before, after = weights(folder), weights(out)
    prefix = "" if layout == "BertModel" else "bert."
    backbone = {k: v for k, v in before.items() if "pooler" not in k or expect == "BertForPreTraining"}
    assert all(torch.equal(after["bert." + k.removeprefix(prefix)], v) for k, v in backbone.items()
               if k.startswith(prefix))
    if layout == "BertForPreTraining":
        assert all(torch.equal(after[k], v) for k, v in before.items())  # its heads too
    assert f"pre-training {folder}{fresh} with " in capsys.readouterr().out  # says which heads start fresh
    assert load_tokenizer(str(out)).get_vocab() == tokenizer.get_vocab()
    model = (BertForPreTraining if expect == "BertForPreTraining" else BertForMaskedLM).from_pretrained(out)
    assert model.config.hidden_size == 16


# --- bad input ------------------------------------------------------------------------------------------------------

#: Refused before torch is imported.
CASES = [
    (["--collection", "{in}/nosuch.tsv"], "--collection: {in}/nosuch.tsv is neither builtin:<split>"),
    (["--collection", "{in}"], "--collection: {in} is a folder, not a collection file"),
    (["--output_dir", "{in}/used"], "--output_dir: {in}/used is not empty: choose a new one"),
    (["--output_dir", "{in}/docs.tsv"], "--output_dir: {in}/docs.tsv is a file, not a folder"),
    (["--steps", "0"], "argument --steps: must be a positive integer, got 0"),
    (["--mlm_probability", "0"], "argument --mlm_probability: must be a number > 0 and <= 1, got 0"),
    (["--max_length", "4"], "--max_length: must leave room for [CLS], two halves and two [SEP] (at least 5), got 4"),
    (["--max_length", "513"], "--max_length: a BERT from scratch reads at most 512 tokens, got 513"),
    (["--num_heads", "3"], "--num_heads: must divide --hidden_size (64), got 3"),
    (["--encoder", "{in}/nosuch"], "--encoder: no such folder: {in}/nosuch"),
    (["--encoder", "{in}/used"], "--encoder: {in}/used holds no config.json: not a Hugging Face model folder"),
    (["--encoder", "{in}/hf", "--num_layers", "2"], "--num_layers: sizes a BERT from scratch"),
    (["--tokenizer", "train", "--collection", "{in}/docs.tsv"], "--tokenizer: train learns a BPE on a task's"),
    (["--tokenizer", "{in}/nosuch"], "--tokenizer: no such folder: {in}/nosuch"),
    (["--accelerator", "tpu"], "--accelerator: mva.pretrain computes on auto, cpu, gpu, cuda; got tpu"),
    (["--devices", "0,1"], "--devices: mva.pretrain computes in one process (its own training loop, without "
                           "Lightning): give one device (auto, 1, or an index such as 0,); got 0,1"),
    (["--architecture", "mva", "--init", "{in}/used"], "--init: {in}/used holds no readable pretrain.json: not an "
                                                       "mva.pretrain output"),
]


@pytest.fixture
def inputs(tmp_path):
    return write_inputs(tmp_path / "inputs", {"docs.tsv": "d1\tthe cat sat\n", "used/notes.txt": "mine\n",
                                              "hf/config.json": "{}\n"})


@pytest.mark.parametrize("args, expect", CASES)
def test_bad_input_is_refused_in_one_line(tmp_path, inputs, args, expect):
    given = dict(zip(args[::2], args[1::2]))
    base = {"--collection": "builtin:train", "--output_dir": "out"}
    line = [*itertools.chain.from_iterable((base | given).items())]
    refused("mva.pretrain", line, tmp_path, expect, inputs=inputs, timeout=60)


def test_an_encoder_that_does_not_load_is_refused_once_read(tmp_path, inputs):
    """A folder with a config.json but no weights: refused once transformers has read it, nothing written."""
    refused("mva.pretrain", ["--collection", "{in}/docs.tsv", "--encoder", "{in}/hf", "--output_dir", "out"], tmp_path,
            "--encoder: {in}/hf does not load as a Hugging Face BERT and tokenizer: ", inputs=inputs)


def test_help_explains_the_command(capsys):
    with pytest.raises(SystemExit) as done:
        pretrain.main(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for needle in ("--collection", "--encoder", "--nsp", "--mlm_probability", "--num_layers", "DataCollatorForLanguage",
                   "mva.train --model.encoder DIR"):
        assert needle in text, needle
