"""`python -m mva.pretrain --architecture de|mva`: the paper's pre-training chain (Sec. 3), the DE pre-trained on MLM
and NSP with the two segments encoded apart, then MVA from it. The losses against Hugging Face's own heads and a
hand computation from the encoder's outputs, the NSP logit against the fine-tuning model's forward, the outputs as
`mva.train` loads them, the settings as a fine-tuning config gives them, the refusals, and the paper's commands in
the configs' headers. Tiny models from scratch on the built-in collection, one thread."""

import inspect
import itertools
import json
import random
import shlex
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from torch.nn.functional import cross_entropy, logsigmoid
from transformers import BertForMaskedLM, BertModel, DataCollatorForLanguageModeling

from common.encoders.bert_rankers import BertSiamese
from common.encoders.tokenizers import load_tokenizer
from mva import model as mva_model
from mva import portable, pretrain, train
from mva.ranker import MVARanker
from tests.bad_input.refusal import refused_in_process
from tests.mva import paper
from tests.printed_config import printed_config

pytestmark = pytest.mark.usefixtures("one_thread")

#: A tiny BERT from scratch (as tests/mva/test_pretrain.py's), short inputs, small batches.
SIZES = {"num_layers": 1, "hidden_size": 32, "num_heads": 2, "intermediate_size": 64}
TINY = ["--collection", "builtin:train", *itertools.chain.from_iterable((f"--{k}", str(v)) for k, v in SIZES.items()),
        "--max_length", "32", "--batch_size", "8", "--lr", "2e-3", "--accelerator", "cpu"]
#: MVA's settings of the chain's tests: K [CLS] embeddings on both sides (the shifted MLM positions).
MVA_FLAGS = {"projection": 8, "query_pooling": "cls", "query_timesteps": 3, "doc_pooling": "cls", "doc_timesteps": 4}
CONFIGS = Path(train.__file__).parent / "configs"


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("builtin")


def settings(architecture: str, **given) -> dict:
    """The DE's or MVA's settings at `MVARanker`'s defaults, then `given`."""
    keys = portable.DE_KEYS if architecture == "de" else portable.MVA_KEYS
    return {key: inspect.signature(MVARanker).parameters[key].default for key in keys} | given


def tiny_model(tokenizer, architecture: str, seed: int = 0, **given):
    """`pretrain.scored_model` over a tiny BERT from scratch, in eval mode (no dropout: the hand computations
    match). Its MLM head's output bias is drawn wide: an untrained head predicts every word about as likely, so
    that every token's loss, and any mean of them, would be about log V."""
    torch.manual_seed(seed)
    masked_lm = pretrain.scratch_model(tokenizer, nsp=False, dropout=0.1, **SIZES)
    torch.nn.init.normal_(masked_lm.cls.predictions.bias, std=3.0)
    return pretrain.scored_model(masked_lm, tokenizer, architecture, settings(architecture, **given)).eval()


def batch_of(documents, tokenizer, n: int = 16, max_length: int = 24, seed: int = 0) -> dict:
    examples = pretrain.PretrainingExamples(documents, tokenizer, max_length, nsp=True, apart=True)
    masking = DataCollatorForLanguageModeling(tokenizer, mlm=True, mlm_probability=0.15, seed=seed)
    return pretrain.mask_apart(masking, examples.examples(list(documents)[:n], random.Random(seed)))


def bce_by_hand(logits: torch.Tensor, is_next: torch.Tensor) -> torch.Tensor:
    """-[y log sigmoid(s) + (1 - y) log sigmoid(-s)], the mean over pairs."""
    return -(is_next * logsigmoid(logits) + (1 - is_next) * logsigmoid(-logits)).mean()


def mean_of_sides(per_side: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """One mean over both sides' masked tokens, from each side's (mean loss, number of masked tokens); the sides'
    numbers differ (else the mean of the two means would be the same)."""
    assert per_side[0][1] != per_side[1][1]
    return sum(loss * count for loss, count in per_side) / sum(count for _, count in per_side)


# --- the examples -----------------------------------------------------------------------------------------------------


def test_pairs_read_apart_are_each_an_input_of_its_own(documents, tokenizer):
    """``[CLS] A [SEP]`` and ``[CLS] B' [SEP]``, each at most --max_length: A the first half of the passage's first
    2 (max_length - 2) tokens, B' its second half (is next) or another passage's (random, about half)."""
    tok, length = tokenizer, 20
    examples = pretrain.PretrainingExamples(documents, tok, length, nsp=True, apart=True)
    ids = list(documents)[:200]
    words = {doc_id: tok(f"{d.title} {d.text}".strip(), add_special_tokens=False)["input_ids"][: 2 * (length - 2)]
             for doc_id, d in zip(ids, documents.get_many(ids))}
    seconds = {tuple(w[(len(w) + 1) // 2 :]) for w in words.values()}
    pairs = examples.examples(ids, random.Random(0))
    assert 70 < sum(p["next_sentence_label"] == pretrain.IS_NEXT for p in pairs) < 130
    for doc_id, pair in zip(ids, pairs):
        query, doc = pair["query"]["input_ids"], pair["doc"]["input_ids"]
        for side in (query, doc):
            assert 2 <= len(side) <= length and side[0] == tok.cls_token_id and side[-1] == tok.sep_token_id
            assert tok.sep_token_id not in side[1:-1]
        for side in ("query", "doc"):
            ids_ = pair[side]["input_ids"]
            assert pair[side]["special_tokens_mask"] == [int(i in (0, len(ids_) - 1)) for i in range(len(ids_))]
            assert "token_type_ids" not in pair[side]  # type 0, as mva.train reads a single text
        own = words[doc_id]
        assert query[1:-1] == own[: (len(own) + 1) // 2]
        if pair["next_sentence_label"] == pretrain.IS_NEXT:
            assert query[1:-1] + doc[1:-1] == own
        else:
            assert tuple(doc[1:-1]) in seconds and doc[1:-1] != own[len(query) - 2 :]
    assert max(len(p["doc"]["input_ids"]) for p in pairs) == length  # the room of one input, used


def test_each_side_is_masked_by_the_hugging_face_collator(documents, tokenizer):
    batch = batch_of(documents, tokenizer, n=64)
    for side in ("query", "doc"):
        tokens, labels, mask = batch[f"{side}_tokens"], batch[f"{side}_labels"], batch[f"{side}_mask"]
        masked = labels != -100
        assert masked.any() and not masked[:, 0].any()  # never [CLS]
        assert (labels[masked] != tokenizer.pad_token_id).all() and (mask[masked] == 1).all()
        assert (tokens[masked] == tokenizer.mask_token_id).float().mean() > 0.5
    assert torch.equal(batch["query_index"], torch.arange(64))


# --- the losses -------------------------------------------------------------------------------------------------------


def test_the_de_losses_are_bert_outputs_by_hand(documents, tokenizer):
    """NSP: binary cross-entropy of the dot product of the two [CLS] vectors that ``BertModel`` gives for A and B'
    read apart; MLM: ``BertForMaskedLM``'s own loss of each side, one mean over both sides' masked tokens."""
    model = tiny_model(tokenizer, "de")
    batch = batch_of(documents, tokenizer)
    losses = pretrain.apart_losses(model, batch)
    masked_lm = model["masked_lm"]
    assert isinstance(masked_lm, BertForMaskedLM)
    bert = BertModel(masked_lm.config, add_pooling_layer=False).eval()
    bert.load_state_dict(masked_lm.bert.state_dict())  # a BertModel of its own with the encoder's weights
    with torch.no_grad():
        query = bert(input_ids=batch["query_tokens"], attention_mask=batch["query_mask"]).last_hidden_state[:, 0]
        doc = bert(input_ids=batch["doc_tokens"], attention_mask=batch["doc_mask"]).last_hidden_state[:, 0]
        is_next = (batch["next_sentence_label"] == 0).float()
        nsp = bce_by_hand((query * doc).sum(-1), is_next)
        mlm = mean_of_sides([(masked_lm(input_ids=batch[f"{side}_tokens"], attention_mask=batch[f"{side}_mask"],
                                        labels=batch[f"{side}_labels"]).loss,
                              (batch[f"{side}_labels"] != -100).sum()) for side in ("query", "doc")])
    assert torch.allclose(losses["nsp"], nsp, rtol=1e-5) and torch.allclose(losses["mlm"], mlm, rtol=1e-5)
    assert 0 < is_next.mean() < 1  # both labels


@pytest.mark.parametrize("given", [
    MVA_FLAGS,  # K learned [CLS] embeddings on both sides: the words sit K - 1 positions later
    {"projection": 8, "query_pooling": "all", "doc_pooling": "cls", "doc_timesteps": 5},
    {"projection": 8, "heads": 2, "query_pooling": "first_k", "query_timesteps": 4, "doc_pooling": "temporal",
     "doc_factor": 3},
])
def test_the_mva_losses_are_its_score_and_its_encoder_outputs_by_hand(documents, tokenizer, given):
    """NSP's logit is ``MVA.forward``'s score of (A as the query, B' as the document), as mva.train scores a batch;
    MLM reads the encoder over each side's input as `mva.model.SidePooling` makes it, built here by hand (K
    learned embeddings in the place of [CLS]), at the masked words' positions."""
    model = tiny_model(tokenizer, "mva", **given)
    batch = batch_of(documents, tokenizer)
    losses = pretrain.apart_losses(model, batch)
    masked_lm, mva = model["masked_lm"], model["scorer"]
    assert isinstance(mva, mva_model.MVA) and mva.bert is masked_lm.bert
    with torch.no_grad():
        scores = mva({k: batch[k] for k in ("query_tokens", "query_mask", "query_index", "doc_tokens", "doc_mask")})
        nsp = bce_by_hand(scores, (batch["next_sentence_label"] == 0).float())
        per_side = []
        for side in ("query", "doc"):
            tokens, mask, labels = (batch[f"{side}_{part}"] for part in ("tokens", "mask", "labels"))
            pooling = getattr(mva, f"{side}_pooling")
            if pooling.kind == "cls":
                k = pooling.timesteps
                embeds = torch.cat([pooling.cls.expand(len(tokens), -1, -1),
                                    masked_lm.bert.embeddings.word_embeddings(tokens[:, 1:])], 1)
                attention = torch.cat([torch.ones(len(tokens), k, dtype=mask.dtype), mask[:, 1:]], 1)
                hidden = masked_lm.bert(inputs_embeds=embeds, attention_mask=attention).last_hidden_state
                hidden = hidden[:, k - 1 :]  # position K - 1 + j holds the input's token j (j >= 1)
            else:
                hidden = masked_lm.bert(input_ids=tokens, attention_mask=mask).last_hidden_state
            masked = labels != -100
            per_side.append((cross_entropy(masked_lm.cls(hidden)[masked], labels[masked]), masked.sum()))
        mlm = mean_of_sides(per_side)
    assert torch.allclose(losses["nsp"], nsp, rtol=1e-5) and torch.allclose(losses["mlm"], mlm, rtol=1e-5)


def test_the_step_loss_is_the_sum_and_a_fixed_batch_learns_both(documents, tokenizer):
    """MLM + NSP is what a step minimises; ten steps on one batch lower both probe losses of the DE and of MVA."""
    batch = batch_of(documents, tokenizer, n=16, max_length=32)
    for architecture, given in (("de", {}), ("mva", {"projection": 8, "tied_init": True}), ("mva", MVA_FLAGS)):
        model = tiny_model(tokenizer, architecture, **given)
        torch.manual_seed(1)  # the same dropout draws in both forward passes
        losses = pretrain.apart_losses(model.train(), batch)
        torch.manual_seed(1)
        first = pretrain.train(model, itertools.repeat(batch), steps=1, lr=0.0, warmup_steps=0, device="cpu")
        assert first[0] == pytest.approx((losses["mlm"] + losses["nsp"]).item(), abs=1e-6)
        before = pretrain.probe_losses(model, batch)
        pretrain.train(model, itertools.repeat(batch), steps=10, lr=3e-3, warmup_steps=0, device="cpu")
        after = pretrain.probe_losses(model, batch)
        assert after["mlm"] < before["mlm"] - 0.5, (architecture, given, before, after)
        assert after["nsp"] < before["nsp"], (architecture, given, before, after)


# --- the command and its outputs --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """The DE pre-trained from scratch (20 steps), then MVA from it (5 steps); each output folder, record and trained
    pre-training model (`pretrain.scored_model`'s, kept as the command built it)."""
    built = []
    real = pretrain.scored_model
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pretrain, "scored_model", lambda *a, **k: built.append(real(*a, **k)) or built[-1])
        folder = tmp_path_factory.mktemp("chain")
        de = pretrain.main([*TINY, "--architecture", "de", "--steps", "20", "--output_dir", str(folder / "de")])
        flags = itertools.chain.from_iterable((f"--model.{k}", str(v)) for k, v in MVA_FLAGS.items())
        mva = pretrain.main([*TINY[:2], *TINY[-8:], "--architecture", "mva", "--init", str(folder / "de"), *flags,
                             "--steps", "5", "--output_dir", str(folder / "mva")])
    return {"de": (folder / "de", de, built[0]), "mva": (folder / "mva", mva, built[1])}


def test_the_de_output_is_a_hugging_face_bert_that_mva_train_starts_a_de_from(chain, documents):
    """``MVARanker(architecture="de", encoder=OUT)`` (``mva.train --model.encoder OUT``) holds the saved encoder and
    scores as the pre-trained DE did; the record says what ran and the probe losses fell."""
    out, record, trained = chain["de"]
    assert json.loads((out / pretrain.RECORD).read_text()) == record
    assert (record["architecture"], record["objectives"], record["model"]) == ("de", "mlm+nsp", settings("de"))
    probe = record["probe_loss"]
    assert probe["after"]["mlm"] < probe["before"]["mlm"] - 0.3 and probe["after"]["nsp"] < probe["before"]["nsp"]
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertForMaskedLM"]
    saved = load_file(out / "model.safetensors")
    ranker = MVARanker(architecture="de", encoder=str(out), tokenizer=str(out)).eval()
    encoder = ranker.model.bert.state_dict()
    assert encoder.keys() == {k.removeprefix("bert.") for k in saved if k.startswith("bert.")}
    assert all(torch.equal(v, saved["bert." + k]) for k, v in encoder.items())
    assert isinstance(ranker.model, BertSiamese) and not (out / pretrain.CHECKPOINT).exists()
    batch = batch_of(documents, load_tokenizer(str(out)))
    with torch.no_grad():
        assert torch.equal(ranker(batch), trained.eval()["scorer"](batch))


def test_the_mva_output_loads_strictly_and_scores_as_pretrained(chain, documents):
    """``MVARanker(init_checkpoint=OUT/mva.ckpt)`` with the same settings (``mva.train --model.init_checkpoint``)
    loads the whole MVA strictly (encoder, head, [CLS] embeddings) and scores as the pre-trained MVA did; its encoder
    started from the DE's and trained on."""
    out, record, trained = chain["mva"]
    de_out = chain["de"][0]
    assert record["architecture"] == "mva" and record["init"] == str(de_out)
    assert record["model"] == settings("mva", **MVA_FLAGS)
    ranker = MVARanker(architecture="mva", encoder=str(out), tokenizer=str(out), **MVA_FLAGS,
                       init_checkpoint=str(out / pretrain.CHECKPOINT)).eval()
    state = torch.load(out / pretrain.CHECKPOINT, map_location="cpu", weights_only=True)["state_dict"]
    assert state.keys() == ranker.state_dict().keys()  # the strict load's keys: the whole model, under model.
    assert {"model.query_pooling.cls", "model.doc_pooling.cls", "model.head.doc_key.weight"} <= state.keys()
    trained.eval()
    assert all(torch.equal(v, state["model." + k]) for k, v in trained["scorer"].state_dict().items())
    batch = batch_of(documents, load_tokenizer(str(out)))
    with torch.no_grad():
        assert torch.equal(ranker(batch), trained["scorer"](batch))
    de = load_file(de_out / "model.safetensors")
    word = "bert.embeddings.word_embeddings.weight"
    assert not torch.equal(state["model." + word], de[word])  # pre-trained on from the DE's
    assert torch.equal(load_file(out / "model.safetensors")[word], state["model." + word])


@pytest.mark.parametrize("flags, expect", [
    ({"doc_pooling": "all"}, "--model.doc_pooling: {ckpt} was pre-trained with doc_pooling cls ({record}), got all"),
    ({"query_timesteps": 2}, "--model.query_timesteps: {ckpt} was pre-trained with query_timesteps 3 ({record}), got 2"),
    ({"projection": 16}, "--model.projection: {ckpt} was pre-trained with projection 8 ({record}), got 16"),
    ({"architecture": "de"}, "--model.architecture: {ckpt} was pre-trained as mva ({record}), got de"),
])
def test_fine_tuning_with_other_settings_than_the_pretrained_head_is_refused(chain, flags, expect, tmp_path, capsys):
    """``mva.train --model.init_checkpoint OUT/mva.ckpt`` reads OUT/pretrain.json: another pooling, K, projection or
    architecture than the head was pre-trained with is named before anything is built."""
    out = chain["mva"][0]
    ckpt, record = out / pretrain.CHECKPOINT, out / pretrain.RECORD
    given = {**MVA_FLAGS, **flags}
    line = ["--model.encoder", str(out), "--data.tokenizer", str(out), "--model.init_checkpoint", str(ckpt),
            *itertools.chain.from_iterable((f"--model.{k}", str(v)) for k, v in given.items()),
            "--output_dir", str(tmp_path / "run")]
    refused_in_process(train.main, line, capsys, expect.format(ckpt=ckpt, record=record))
    assert not (tmp_path / "run").exists()


def test_first_k_and_all_tokens_have_the_same_weights_so_the_record_tells_them_apart(tmp_path):
    """The case strict loading cannot catch: a head pre-trained on the first K document timesteps (or another K)
    loads into one of all tokens without a shape error; `mva.ranker.refuse_pretraining_mismatch` reads the record."""
    from common.refusals import SettingError
    from mva.ranker import refuse_pretraining_mismatch

    (tmp_path / pretrain.RECORD).write_text(json.dumps({"architecture": "mva", "model": settings(
        "mva", projection=8, doc_pooling="first_k", doc_timesteps=16)}))
    model = {"architecture": "mva", "init_checkpoint": str(tmp_path / pretrain.CHECKPOINT), "projection": 8,
             "heads": 1, "query_pooling": "all", "doc_pooling": "first_k", "doc_timesteps": 16}
    refuse_pretraining_mismatch(model)
    with pytest.raises(SettingError) as refused:
        refuse_pretraining_mismatch({**model, "doc_pooling": "all"})
    assert refused.value.option == "model.doc_pooling"
    with pytest.raises(SettingError, match=f"{tmp_path / pretrain.CHECKPOINT} was pre-trained with doc_timesteps 16"):
        refuse_pretraining_mismatch({**model, "doc_timesteps": 32})
    (tmp_path / pretrain.RECORD).write_text("{not json")
    with pytest.raises(SettingError, match="is not readable JSON"):
        refuse_pretraining_mismatch(model)


def test_the_command_names_the_fine_tuning_that_starts_from_it(tmp_path, capsys):
    args = parsed_args("--architecture", "mva", "--model.doc_pooling", "cls", "--model.doc_timesteps", "24",
                       "--model.tied_init", "true")
    args.output_dir = str(tmp_path / "o")
    line = pretrain.fine_tuning(args)
    parsed = printed_config(train.main, "mva.train", *shlex.split(line)[3:])
    assert parsed["model"]["init_checkpoint"] == str(tmp_path / "o" / pretrain.CHECKPOINT)
    assert {k: parsed["model"][k] for k in args.model} == args.model


# --- the settings -----------------------------------------------------------------------------------------------------


def parsed_args(*line: str):
    args, flags = pretrain.build_parser().parse_known_args(["--collection", "builtin:train", "--output_dir",
                                                            "unused", *line])
    pretrain.check_args(args, flags)
    return args


def test_a_fine_tuning_config_gives_the_settings_and_flags_override_them():
    """A row's settings are its base's model section updated by the row's ``model.*`` keys, as mva.train resolves
    them."""
    name = CONFIGS / "msmarco/mva-cls24-p64-qcls8.yaml"
    model = paper.config("msmarco/mva-cls24-p64-qcls8.yaml")["model"]
    args = parsed_args("--architecture", "mva", "--config", str(name))
    assert args.model == {key: model.get(key, default) for key, default in settings("mva").items()}
    assert (args.model["doc_timesteps"], args.model["projection"], args.model["query_timesteps"]) == (24, 64, 8)
    args = parsed_args("--architecture", "mva", "--config", str(name), "--model.projection", "32",
                       "--model.query_pooling", "all", "--model.query_timesteps", "null")
    assert (args.model["projection"], args.model["query_pooling"], args.model["query_timesteps"]) == (32, "all", None)
    minilm = CONFIGS / "trec-dl-passages-minilm.yaml"
    assert parsed_args("--architecture", "mva", "--config", str(minilm)).model["tied_init"] is True
    de = parsed_args("--architecture", "de", "--config", str(minilm), "--model.architecture", "de",
                     "--model.de_pooling", "mean", "--model.de_cosine_scale", "20")  # mva.train's DE row's flags
    assert de.model == {"de_pooling": "mean", "de_cosine_scale": 20}
    assert parsed_args().model is None  # ca: none


#: Refused in one line naming the option, before anything is written (in this process: the quick tier).
REFUSALS = [
    (["--init", "{de}"], "--init: starts MVA from the DE's pre-training (--architecture mva), got --architecture ca"),
    (["--architecture", "de", "--init", "{de}"], "--init: starts MVA from the DE's pre-training"),
    (["--architecture", "mva", "--init", "{ca}"],
     "--init: {ca} is the output of mva.pretrain --architecture ca, not of the DE's (--architecture de)"),
    (["--architecture", "mva", "--init", "{nosuch}"], "--init: no such folder: {nosuch}"),
    (["--architecture", "mva", "--init", "{empty}"], "--init: {empty} holds no readable pretrain.json"),
    (["--architecture", "mva", "--init", "{de}", "--encoder", "{de}"], "--encoder: --init names the backbone"),
    (["--architecture", "mva", "--init", "{de}", "--num_layers", "2"], "--num_layers: sizes a BERT from scratch; "
                                                                       "the --init model has its own"),
    (["--architecture", "de", "--nsp", "off"], "--nsp: off is --architecture ca's"),
    (["--model.projection", "8"], "--model.projection: gives the DE's or MVA's score; --architecture ca has none"),
    (["--config", "{config}"], "--config: gives the DE's or MVA's score; --architecture ca has none to set"),
    (["--architecture", "de", "--model.projection", "8"], "--model.projection: is not a setting of the DE"),
    (["--architecture", "mva", "--model.projection", "0"], "--model.projection: not of type PositiveInt: 0"),
    (["--architecture", "mva", "--model.doc_pooling", "max"], "--model.doc_pooling: expected a Literal['all', "
                                                              "'first_k', 'cls', 'temporal']. Got value: max"),
    (["--architecture", "mva", "--model.tied_init", "maybe"], "--model.tied_init: expected a bool. Got value: maybe"),
    (["--architecture", "mva", "--model.nosuch", "1"], "unrecognized arguments: --model.nosuch 1"),
    (["--nosuch", "1"], "unrecognized arguments: --nosuch 1"),
    (["--architecture", "mva", "--model.doc_pooling", "cls"],
     "--model.doc_timesteps: cls pooling keeps K timesteps: give K"),
    (["--architecture", "mva", "--model.query_pooling", "temporal"],
     "--model.query_factor: temporal pooling needs its factor rho"),
    (["--architecture", "mva", "--model.doc_pooling", "temporal", "--model.doc_factor", "2", "--model.tied_init",
      "true"], "--model.tied_init: copies the query's projections to the document's: their widths must agree"),
    (["--architecture", "mva", "--model.doc_pooling", "cls", "--model.doc_timesteps", "500"],
     "--max_length: a BERT from scratch reads at most 512 tokens, got 128 + 499 (--model.doc_timesteps 500: K"),
    (["--architecture", "de", "--model.de_cosine_scale", "-1"],
     "--model.de_cosine_scale: does not validate against any of the Union subtypes"),
    (["--architecture", "mva", "--model.architecture", "de"], "--model.architecture: de is not --architecture mva"),
    (["--architecture", "mva", "--config", "{config}"], "--config: {config} is a config of the DE, not of the MVA"),
    (["--architecture", "mva", "--config", "{nosuch}"], "--config: {nosuch} cannot be read"),
    (["--architecture", "de", "--config", "{bad}"], "--config: {bad}: model.de_cosine_scale: does not validate "),
    (["--architecture", "de", "--max_length", "2"], "--max_length: must leave room for [CLS], a half and [SEP] on "
                                                    "each side (at least 3), got 2"),
]


@pytest.fixture(scope="module")
def fakes(tmp_path_factory):
    """Folders an option names: a DE's and a CA's output (their pretrain.json and config.json), an empty folder,
    a DE config and a bad one."""
    folder = tmp_path_factory.mktemp("fakes")
    for name, architecture in (("de", "de"), ("ca", None)):
        (folder / name).mkdir()
        (folder / name / "config.json").write_text("{}\n")
        record = {"command": "mva.pretrain"} | ({"architecture": architecture} if architecture else {})
        (folder / name / pretrain.RECORD).write_text(json.dumps(record))
    (folder / "empty").mkdir()
    (folder / "config.yaml").write_text(yaml.safe_dump({"model": {"architecture": "de", "de_pooling": "mean"}}))
    (folder / "bad.yaml").write_text(yaml.safe_dump({"model": {"architecture": "de", "de_cosine_scale": "x"}}))
    return {"de": folder / "de", "ca": folder / "ca", "empty": folder / "empty", "nosuch": folder / "nosuch",
            "config": folder / "config.yaml", "bad": folder / "bad.yaml"}


@pytest.mark.parametrize("line, expect", REFUSALS)
def test_bad_input_is_refused_in_one_line(line, expect, fakes, tmp_path, capsys):
    line, expect = [arg.format(**fakes) for arg in line], expect.format(**fakes)
    out = tmp_path / "out"
    refused_in_process(pretrain.main, ["--collection", "builtin:train", "--output_dir", str(out), *line], capsys, expect)
    assert not out.exists() and list(tmp_path.iterdir()) == []


# --- the paper's chain (results/mva/README.md) ------------------------------------------------------------------------


def c4_chain(name: str, architecture: str) -> dict[str, list[str]]:
    """The paper's C4 chain for config `name`, by command, as results/mva/README.md writes it: the DE (or CA)
    pre-trained from scratch with BERT-base's sizes, MVA from the DE's output, then the fine-tuning from it."""
    output, config = f"{architecture.upper()}_C4", f"mva/configs/{name}"
    c4 = ["--collection", "irds:c4/en-noclean-tr", "--batch_size", "8192", "--lr", "3e-4", "--max_length", "128",
          "--output_dir", output]
    if architecture == "mva":
        return {"mva.pretrain": ["--architecture", "mva", "--init", "DE_C4", "--config", config, *c4, "--steps",
                                 "20000", "--warmup_steps", "2000"],
                "mva.train": ["--config", config, "--model.encoder", output, "--data.tokenizer", output,
                              "--model.init_checkpoint", f"{output}/mva.ckpt"]}
    return {"mva.pretrain": ["--architecture", architecture, "--tokenizer", "bert-base-uncased", "--num_layers", "12",
                             "--hidden_size", "768", "--num_heads", "12", "--intermediate_size", "3072", *c4,
                             "--steps", "100000", "--warmup_steps", "10000"],
            "mva.train": ["--config", config, "--model.encoder", output, "--data.tokenizer", output]}


@pytest.mark.parametrize("name", paper.msmarco_configs())
def test_each_config_names_the_papers_pre_training_and_its_fine_tuning_from_it(name, fakes, tmp_path,
                                                                               monkeypatch):
    """Sec. 3: CA and DE pre-trained on C4 for 100,000 steps of 8,192 with Adam at 3e-4, BERT-base's sizes (the DE
    "pre-trained directly", from scratch); MVA from the DE's output for 20,000 steps, with this config's settings
    (its resolved model section). Each command parses as the command reads it, and the fine-tuning starts from its
    output."""
    monkeypatch.chdir(paper.REPO)  # the commands are run from the repository root
    model = paper.config(name)["model"]
    commands = c4_chain(name, model["architecture"])
    output = {"de": "DE_C4", "ca": "CA_C4", "mva": "MVA_C4"}[model["architecture"]]
    line = [{"DE_C4": str(fakes["de"]), output: str(tmp_path / output)}.get(arg, arg)
            for arg in commands["mva.pretrain"]]
    args, flags = pretrain.build_parser().parse_known_args(line)
    pretrain.check_args(args, flags)
    batch_size, lr = paper.quoted(r"with batch size ([\d,]+) and Adam with learning rate (\S+)\.")
    (c4_steps,) = paper.quoted(r"on C4 for ([\d,]+) iterations")
    (mva_steps,) = paper.quoted(r"pre-train on the same MLM and NSP tasks for ([\d,]+) iterations")
    assert (args.batch_size, args.lr) == (int(batch_size.replace(",", "")), float(lr))
    assert args.architecture == model["architecture"] and args.collection == "irds:c4/en-noclean-tr"
    assert args.output_dir == str(tmp_path / output)
    if args.architecture == "mva":
        assert args.steps == int(mva_steps.replace(",", "")) and args.init == str(fakes["de"])
        assert args.config == f"mva/configs/{name}"
        assert args.model == {key: model.get(key, default) for key, default in settings("mva").items()}
    else:
        assert args.steps == int(c4_steps.replace(",", "")) and args.init is None and args.encoder is None
        assert (args.num_layers, args.hidden_size, args.tokenizer) == (12, paper.hidden_size(), "bert-base-uncased")
    fine_tuning = printed_config(train.main, "mva.train", *commands["mva.train"])
    assert fine_tuning["model"]["encoder"] == output and fine_tuning["data"]["tokenizer"] == output
    checkpoint = f"{output}/{pretrain.CHECKPOINT}" if args.architecture == "mva" else None
    assert fine_tuning["model"]["init_checkpoint"] == checkpoint
