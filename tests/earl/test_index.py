"""``python -m earl.index`` and ``python -m earl.evaluate`` (EARL, Sec. 3.3): stores of S1 (D) and S2 (D', Eq. 25)
score as end-to-end EARL does, and cost what they should.

- fp32 S1 and S2 stores of the built-in test collection give the end-to-end scores within 1e-5 on the same
  (qid, docid) pairs, and their run files rank the same; and those scores, end to end and from either store, are
  EARL written out from the paper (`tests.earl.by_hand`) within 1e-5, so that the agreement is not that of two
  paths sharing one wrong formula; an fp16 store takes exactly half the bytes and moves the scores by little (the
  difference is printed);
- S2's bytes per document are exactly 2·K times S1's (the manifests);
- a build killed by SIGKILL mid-way and finished with ``--resume`` is the uninterrupted store, byte for byte;
- ``--precision bf16-mixed`` scores near the fp32 run and keeps fp32 scores, and builds a store near the fp32 one;
  ``--num_workers 2`` builds the same bytes;
- refusals, one line with exit status 2 and nothing written: a store of another checkpoint, ``--strategy s3``, a
  used ``--output_dir``, a BERT ranker's checkpoint to index, a candidate missing from the store.

The model is a tiny EARL (T_doc and T_qry of one layer, h = 8, K = 2 judge blocks) with random weights, scaled up so
that the candidates' scores spread; the collection is `builtin:test` (3,000 passages), evaluated on 5 queries at
depth 10. Scoring runs on the CPU with one thread (tests/conftest.py).
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from tests.bad_input.refusal import refused_in_process
from tests.unjudged import assert_reranked_without_metrics, unjudged_task

from common.commands.outputs import NO_QRELS
from common.data.docstore import DocumentStore
from common.data.formats import read_run, write_collection
from common.data.specs import source_from_spec
from common.stores.representations import RepresentationStore, checkpoint_hash
from earl import evaluate, index
from earl.data import EARLDataModule
from earl.ranker import EARLRanker

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]  # tests/conftest.py

HIDDEN, BLOCKS = 8, 2
DATA = {"train": "builtin:train", "dev": None, "test": "builtin:test", "architecture": "earl", "tokenizer": "builtin",
        "tokenizer_task": None, "query_length": 12, "passage_length": 96, "depth": 10, "relevance_level": 1,
        "seed": 0}
QUERIES, DEPTH = 5, 10
CPU = ["--accelerator", "cpu", "--devices", "1"]


def save_checkpoint(path: Path, architecture: str = "earl", seed: int = 0) -> Path:
    """What `earl.train`'s checkpoints hold, as far as the commands read them: a tiny ranker's weights (every
    matrix and every bias redrawn with a large spread, so that a bias left out shows), its hyper-parameters and the
    data settings."""
    torch.manual_seed(seed)
    ranker = EARLRanker(architecture=architecture, num_layers=1, hidden_size=HIDDEN, num_heads=2, intermediate_size=16,
                        num_blocks=BLOCKS, query_layers=1)
    with torch.no_grad():
        for name, parameter in ranker.named_parameters():
            if parameter.ndim > 1 or name.endswith(".bias"):
                parameter.normal_(0, 0.3)
    torch.save({"state_dict": ranker.state_dict(), "hyper_parameters": dict(ranker.hparams),
                "datamodule_hyper_parameters": DATA, "pytorch-lightning_version": L.__version__}, path)
    return path


def build(checkpoint: Path, strategy: str, output: Path, collection: str, *extra: str):
    return index.main(["--checkpoint", str(checkpoint), "--strategy", strategy, "--collection", collection,
                       "--output_dir", str(output), *extra, *CPU])


def run_evaluate(checkpoint: Path, output: Path, *extra: str) -> dict:
    return evaluate.main(["--checkpoint", str(checkpoint), "--task", "builtin:test", "--test_queries", str(QUERIES),
                          "--depth", str(DEPTH), "--accelerator", "cpu", "--output_dir", str(output), *extra])


@pytest.fixture(scope="module")
def built(tmp_path_factory, one_thread):
    """The checkpoint, fp32 S1 and S2 stores of builtin:test, the evaluated pairs, and a collection file of just
    their documents with its fp32 and fp16 S1 stores (shards of 8); the collection's cached document store is
    removed afterwards."""
    root = tmp_path_factory.mktemp("earl")
    checkpoint = save_checkpoint(root / "earl.ckpt")
    stores = {s: build(checkpoint, s, root / s, "builtin:test", "--shard_size", "1000", "--batch_size", "256")
              for s in ("s1", "s2")}
    data = EARLDataModule(**{**DATA, "train": None, "test_queries": QUERIES})
    pairs = data.eval_pairs("test")
    documents = source_from_spec("builtin:test").documents()
    subset = root / "subset.jsonl"
    write_collection(subset, documents.get_many(sorted({d for _, d in pairs})))
    for dtype in ("fp32", "fp16"):
        stores[f"subset_{dtype}"] = build(checkpoint, "s1", root / f"subset_{dtype}", str(subset), "--dtype", dtype,
                                          "--shard_size", "8", "--batch_size", "3")
    yield {"root": root, "checkpoint": checkpoint, "stores": stores, "pairs": pairs, "subset": subset}
    DocumentStore.for_collection(subset).path.unlink()  # the collection file's cached document store


def reranked_scores(folder: Path, pairs) -> dict[tuple[str, str], float]:
    """The scores run.trec in `folder` gives the re-ranked pairs."""
    run = read_run(folder / "run.trec")
    return {(qid, doc_id): run[qid][doc_id] for qid, doc_id in pairs}


def rankings(folder: Path) -> dict[str, list[str]]:
    ranked = {}
    with open(folder / "run.trec") as f:
        for line in f:
            qid, _, doc_id, *_ = line.split()
            ranked.setdefault(qid, []).append(doc_id)
    return ranked


# --- exactness ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def end_to_end(built):
    folder = built["root"] / "end_to_end"
    metrics = run_evaluate(built["checkpoint"], folder)
    return folder, metrics


def test_the_evaluation_records_its_command_line(built, end_to_end):
    """provenance.json (`common.commands.provenance`) names earl.evaluate and the arguments it was given."""
    import json

    folder, _ = end_to_end
    record = json.loads((folder / "provenance.json").read_text())
    assert record["command"] == (f"python -m earl.evaluate --checkpoint {built['checkpoint']} --task builtin:test "
                                 f"--test_queries {QUERIES} --depth {DEPTH} --accelerator cpu --output_dir {folder}")


@pytest.mark.parametrize("strategy", ["s1", "s2"])
def test_fp32_stores_score_as_end_to_end(built, end_to_end, strategy, capsys):
    folder, metrics = end_to_end
    stored = built["root"] / f"evaluate_{strategy}"
    store_metrics = run_evaluate(built["checkpoint"], stored, "--store", str(built["root"] / strategy),
                                 "--compare_end_to_end")
    printed = capsys.readouterr().out
    assert f"{strategy.upper()} store (float32) vs end to end, 50 pairs of 5 queries: largest |score difference|" in printed
    pairs = built["pairs"]
    assert len(pairs) == QUERIES * DEPTH
    mine, reference = reranked_scores(stored, pairs), reranked_scores(folder, pairs)
    assert max(abs(mine[p] - reference[p]) for p in pairs) < 1e-5
    assert len({round(s, 3) for s in reference.values()}) > 40  # scores that spread: the ranking means something
    assert rankings(stored) == rankings(folder)
    name = "earl_cls"
    assert store_metrics[name] == pytest.approx(metrics[name], abs=1e-9)
    assert store_metrics[f"{name}_end_to_end"] == metrics[name]  # the same pairs, scored the same way
    report = json.loads((stored / "exactness.json").read_text())
    assert report["strategy"] == strategy and report["dtype"] == "float32" and report["pairs"] == 50
    assert report["max_abs_score_difference"] < 1e-5 and report["queries_reordered"] == 0
    assert report["ndcg_cut_10_change"] == pytest.approx(0, abs=1e-12)
    assert sorted(p.name for p in stored.iterdir()) == ["exactness.json", "metrics.json", "provenance.json", "run.trec",
                                                        "task.json"]


def test_the_run_files_scores_are_earl_written_out(built, end_to_end):
    """The property above (a store scores as end to end does) holds for a wrong formula too, both paths sharing
    `EARL.judge`; so the scores ``earl.evaluate`` writes, end to end and from the S1 and S2 stores, are also held
    against EARL written out from the paper (`tests.earl.by_hand.model_score`: T_qry and T_doc on the unpadded
    query and passage, each judge block with explicit heads, w^T H_K[CLS]) in float64 on the checkpoint's weights,
    each (query, passage) pair of the 50 encoded as in training. The commands compute in float32: within 1e-5."""
    from earl.index import read_trained
    from earl.store import data_encoder, load_ranker
    from tests.earl.by_hand import model_score

    state = read_trained(built["checkpoint"])
    model, encoder = load_ranker(state).model.double().eval(), data_encoder(state["datamodule_hyper_parameters"])
    assert model.pool == "cls" and model.num_blocks == BLOCKS
    source = source_from_spec("builtin:test")
    topics, documents = source.topics(), source.documents()
    runs = {"end to end": reranked_scores(end_to_end[0], built["pairs"])}
    for strategy in ("s1", "s2"):
        folder = built["root"] / f"by_hand_{strategy}"
        run_evaluate(built["checkpoint"], folder, "--store", str(built["root"] / strategy))
        runs[strategy] = reranked_scores(folder, built["pairs"])
    for qid, doc_id in built["pairs"]:
        query = encoder.queries([topics[qid]])
        passage = encoder.documents(documents.get_many([doc_id]))
        expected = model_score(model, query["query_tokens"][0][query["query_mask"][0].bool()],
                               passage["doc_tokens"][0][passage["doc_mask"][0].bool()], "cls")
        for name, run in runs.items():
            assert run[(qid, doc_id)] == pytest.approx(expected, abs=1e-5), (name, qid, doc_id)


def test_an_fp16_store_takes_half_the_bytes_and_moves_scores_little(built, capsys):
    fp32, fp16 = built["stores"]["subset_fp32"], built["stores"]["subset_fp16"]
    assert fp16.dtype == "float16" and fp16.manifest["rows"] == fp32.manifest["rows"]
    assert 2 * fp16.manifest["bytes"] == fp32.manifest["bytes"]
    assert 2 * fp16.bytes_per_document == fp32.bytes_per_document
    folder = built["root"] / "evaluate_fp16"
    run_evaluate(built["checkpoint"], folder, "--store", str(fp16.folder), "--compare_end_to_end")
    assert "S1 store (float16) vs end to end" in capsys.readouterr().out
    report = json.loads((folder / "exactness.json").read_text())
    assert 0 < report["max_abs_score_difference"] < 1e-2
    with capsys.disabled():
        print(f"\nfp16 S1 store vs end to end: largest |score difference| {report['max_abs_score_difference']:.2e}, "
              f"NDCG@10 change {report['ndcg_cut_10_change']:+.2e}, {report['queries_reordered']} of 5 queries "
              "reordered")


def test_s2_costs_2k_times_s1(built, capsys):
    s1, s2 = built["stores"]["s1"], built["stores"]["s2"]
    assert s1.width == HIDDEN and s2.width == 2 * BLOCKS * HIDDEN
    assert s1.manifest["rows"] == s2.manifest["rows"] and len(s1) == len(s2) == 3000
    assert s2.manifest["bytes"] == 2 * BLOCKS * s1.manifest["bytes"]
    assert s2.bytes_per_document == pytest.approx(2 * BLOCKS * s1.bytes_per_document, rel=1e-12)
    # a document's rows are its real tokens: [CLS] ... [SEP], at most passage_length, never padding
    assert s1.manifest["rows"] < 3000 * DATA["passage_length"]
    assert s1.identity == {"checkpoint": checkpoint_hash(built["checkpoint"]), "strategy": "s1"}
    assert s1.manifest["extra"] == {"model": "earl_cls", "num_blocks": BLOCKS, "hidden_size": HIDDEN, "heads": 2,
                                    "passage_length": 96, "tokenizer": "builtin"}
    from earl.store import storage_report

    per_document = s1.bytes_per_document
    assert storage_report(s1).startswith(f"S1: {per_document:,.0f} bytes/document (float32; 3,000 documents")
    assert f"S2 would be 4 x that ({4 * per_document:,.0f} bytes/document" in storage_report(s1)
    assert f"S1 would be 1/4 of that ({per_document:,.0f} bytes/document" in storage_report(s2)


def test_a_documents_rows_are_d_and_d_prime_over_its_real_tokens(built):
    """S1's rows are T_doc's output at [CLS], the words and [SEP] (no padding), S2's each block's keys and values of
    them (Eq. 25: D W_Y + b and D W_Z + b, block after block), the passage encoded as in training; written out from
    the checkpoint's weights in float64: T_doc, the ``BertModel``, on the passage alone (`tests.earl.by_hand.encode`),
    the products by hand (`tests.earl.by_hand.linear`). The stores hold float32: within 1e-5 of the largest value."""
    from earl.index import read_trained
    from earl.store import data_encoder, load_ranker
    from tests.earl.by_hand import encode, linear

    state = read_trained(built["checkpoint"])
    model, encoder = load_ranker(state).model.double().eval(), data_encoder(state["datamodule_hyper_parameters"])
    assert model.num_blocks == BLOCKS
    documents = source_from_spec("builtin:test").documents()
    ids = ["D0000", "D2565", "D2999"]  # D2565 (71 tokens) is shorter than passage_length
    s1, s2 = built["stores"]["s1"], built["stores"]["s2"]
    lengths = []
    for document in documents.get_many(ids):
        tokens = encoder.documents([document])["doc_tokens"][0]  # one row: no padding
        lengths.append(len(tokens))
        d = encode(model.doc_encoder, tokens)  # (n, h)
        d_prime = torch.cat([linear(d, layer) for block in model.blocks
                             for layer in (block.cross.key, block.cross.value)], -1)  # (n, 2 K h)
        assert s1.get(document.doc_id).shape == (len(tokens), HIDDEN)
        assert s2.get(document.doc_id).shape == (len(tokens), 2 * BLOCKS * HIDDEN)
        for store, expected in ((s1, d), (s2, d_prime)):
            torch.testing.assert_close(torch.from_numpy(store.get(document.doc_id).copy()).double(), expected,
                                       rtol=0, atol=1e-5 * expected.abs().max().item())
    assert lengths == [DATA["passage_length"], 71, DATA["passage_length"]]


# --- resuming ----------------------------------------------------------------------------------------------


def test_a_killed_build_resumes_to_the_uninterrupted_store(built, tmp_path, capsys):
    folder = tmp_path / "killed"
    args = ["--checkpoint", str(built["checkpoint"]), "--strategy", "s1", "--collection", str(built["subset"]),
            "--output_dir", str(folder), "--shard_size", "8", "--batch_size", "3", *CPU]
    code = ("import os, signal, torch; torch.set_num_threads(1)\n"
            "from common.stores import writer\n"
            "from earl import index\n"
            "step = writer.DocumentIndexer.predict_step\n"
            "def dying(self, batch, batch_idx=0):\n"
            "    if batch[0] == 2: os.kill(os.getpid(), signal.SIGKILL)\n"
            "    return step(self, batch, batch_idx)\n"
            f"writer.DocumentIndexer.predict_step = dying\nindex.main({args!r})\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    killed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                            cwd=Path(__file__).resolve().parents[2])
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert sorted(os.listdir(folder)) == ["plan.json", "shard-00000.bin", "shard-00000.index.json",
                                          "shard-00001.bin", "shard-00001.index.json"]

    with pytest.raises(SystemExit) as exit_info:  # without --resume, refused
        index.main(args)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (f"error: --output_dir: {folder} holds an unfinished store; resume it, or choose a "
                                       "new folder (pass --resume to finish it)\n")
    with pytest.raises(SystemExit) as exit_info:  # resumed with another dtype: refused before anything is computed
        index.main([*args, "--resume", "--dtype", "fp16"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: --output_dir: {folder} holds an unfinished store planned with dtype float32; this build has dtype "
        "float16 (resume with the same settings, or choose a new folder)")

    resumed = index.main([*args, "--resume"])
    assert "resuming the S1 store" in capsys.readouterr().out
    whole = built["stores"]["subset_fp32"]
    assert resumed.manifest == whole.manifest and len(resumed.manifest["shards"]) == 7
    assert [s["sha256"] for s in resumed.manifest["shards"]] == [s["sha256"] for s in whole.manifest["shards"]]
    RepresentationStore.open(folder, verify=True)


# --- refusals ------------------------------------------------------------------------------------------------


def test_a_store_of_another_checkpoint_is_refused_in_process(built, tmp_path, capsys):
    other = save_checkpoint(tmp_path / "other.ckpt", seed=1)
    output = tmp_path / "out"
    line = refused_in_process(evaluate.main, ["--checkpoint", str(other), "--task", "builtin:test", "--store",
                                   str(built["root"] / "s1"), "--output_dir", str(output)], capsys,
                   f"--store: {built['root'] / 's1'} was built from checkpoint "
                   f"{checkpoint_hash(built['checkpoint'])[:12]}…; this needs checkpoint "
                   f"{checkpoint_hash(other)[:12]}… (--checkpoint {other})")
    assert line.startswith("error: --store:")
    assert not output.exists()


def test_without_qrels_every_query_is_reranked_from_the_store_and_nothing_measured(built, tmp_path, capsys):
    """--topics --run --collection and no --qrels, from an S1 store with --compare_end_to_end: every query re-ranked
    (one that no qrels judge among them), every candidate in run.trec, the scores compared (exactness.json without
    NDCG), task.json, no metrics.json."""
    flags, candidates = unjudged_task(tmp_path)
    out = tmp_path / "out"
    assert evaluate.main(["--checkpoint", str(built["checkpoint"]), *flags, "--depth", "3", "--store",
                          str(built["root"] / "s1"), "--compare_end_to_end", "--accelerator", "cpu",
                          "--output_dir", str(out)]) is None
    printed = capsys.readouterr().out
    assert NO_QRELS in printed and "S1 store (float32) vs end to end, 9 pairs of 3 queries" in printed
    assert "NDCG@10" not in printed and "Nothing in the paper" not in printed
    assert_reranked_without_metrics(out, candidates)
    report = json.loads((out / "exactness.json").read_text())
    assert report["pairs"] == 9 and report["max_abs_score_difference"] < 1e-5 and "ndcg_cut_10" not in report


def test_a_candidate_missing_from_the_store_is_refused_in_process(built, tmp_path, capsys):
    output = tmp_path / "out"
    refused_in_process(evaluate.main, ["--checkpoint", str(built["checkpoint"]), "--task", "builtin:test", "--test_queries",
                            str(QUERIES), "--depth", str(2 * DEPTH), "--store", str(built["root"] / "subset_fp32"),
                            "--output_dir", str(output)], capsys,
            f"--store: {built['root'] / 'subset_fp32'} has no representation of document ")
    assert not output.exists()


def test_index_refusals(built, tmp_path, capsys):
    checkpoint, output = str(built["checkpoint"]), tmp_path / "store"
    base = ["--checkpoint", checkpoint, "--collection", "builtin:test", "--output_dir", str(output)]
    refused_in_process(index.main, [*base, "--strategy", "s3"], capsys,
            "argument --strategy: invalid choice: 's3' (choose from 's1', 's2')")
    output.mkdir()
    (output / "notes.txt").write_text("mine\n")
    refused_in_process(index.main, [*base, "--strategy", "s1"], capsys, f"--output_dir: {output} is not empty; choose a new folder")
    assert os.listdir(output) == ["notes.txt"]
    ranker = save_checkpoint(tmp_path / "bert_ranker.ckpt", architecture="bert_ranker")
    fresh = tmp_path / "fresh"
    refused_in_process(index.main, ["--checkpoint", str(ranker), "--strategy", "s1", "--collection", "builtin:test", "--output_dir",
                         str(fresh)], capsys,
            f"--checkpoint: {ranker} is an earl.train checkpoint of bert_ranker, not of EARL")
    assert not fresh.exists()
    refused_in_process(index.main, [*base[:-1], str(fresh), "--strategy", "s1", "--collection", str(tmp_path / "none.tsv")],
            capsys, f"--collection: {tmp_path / 'none.tsv'} is neither builtin:<split>, irds:<ir_datasets id> nor "
                    "a collection file")


def test_evaluate_refusals_before_anything_is_read(built, tmp_path, capsys):
    base = ["--checkpoint", str(built["checkpoint"]), "--task", "builtin:test", "--output_dir", str(tmp_path / "o")]
    refused_in_process(evaluate.main, [*base, "--compare_end_to_end"], capsys,
            "--compare_end_to_end: compares a store's scores with end-to-end ones; give --store")
    refused_in_process(evaluate.main, [*base, "--store", str(tmp_path)], capsys,
            f"argument --store: {tmp_path} holds no finished earl.index store (no manifest.json)")
    refused_in_process(evaluate.main, [*base, "--accelerator", "tpu"], capsys,
            "--accelerator: earl.evaluate computes on auto, cpu, gpu, cuda; got tpu")
    assert not (tmp_path / "o").exists()


def test_dataset_choices_are_table_2s_ms_marco_datasets():
    from common.report import load_reported

    datasets = set(load_reported("earl", table=2)["dataset"]) - {"clueweb09b"}  # not in ir_datasets' free part
    assert set(evaluate.DATASETS) == datasets
    assert f"--dataset {{{','.join(evaluate.DATASETS)}}}" in evaluate.build_parser().format_usage()


# --- precision and loader workers ------------------------------------------------------------------------------

#: How far bf16-mixed may move a score from fp32's: bfloat16 keeps 8 significant bits (a relative rounding of 2^-9
#: a product) through T_qry, T_doc and two judge blocks. The scores here lie between about 0.8 and 1.3, and move by
#: 0.006 at most on a Zen 4: five times that.
BF16_SCORE_TOLERANCE = 0.03


def test_a_bf16_mixed_evaluation_scores_near_fp32_and_keeps_fp32_scores(built, end_to_end, capsys):
    """``--precision bf16-mixed`` end to end, against the fp32 run (`end_to_end`): every pair's score within
    `BF16_SCORE_TOLERANCE`, yet not the same (bf16 ran), and the scores are not rounded to bfloat16 (the score
    layer stays fp32, `common.encoders.precision`)."""
    folder = built["root"] / "end_to_end_bf16"
    run_evaluate(built["checkpoint"], folder, "--precision", "bf16-mixed")
    assert "precision bf16-mixed (--precision); float32 matmuls: high" in capsys.readouterr().out
    pairs = built["pairs"]
    mine, reference = reranked_scores(folder, pairs), reranked_scores(end_to_end[0], pairs)
    difference = max(abs(mine[p] - reference[p]) for p in pairs)
    assert 0 < difference < BF16_SCORE_TOLERANCE
    on_the_bf16_grid = [s for s in mine.values() if float(torch.tensor(s).bfloat16()) == s]
    assert len(on_the_bf16_grid) < len(pairs) / 2
    with capsys.disabled():
        print(f"\nbf16-mixed vs fp32 end to end: largest |score difference| {difference:.3g} "
              f"(scores from {min(reference.values()):.3g} to {max(reference.values()):.3g})")


def test_a_store_built_in_bf16_mixed_holds_rows_near_fp32s(built, tmp_path):
    """``earl.index --precision bf16-mixed`` of the subset against the fp32 store of it: every row within 5% of the
    largest magnitude in the fp32 store (bfloat16's rounding through one T_doc layer: 1% at most on a Zen 4), yet
    not the same."""
    fp32 = built["stores"]["subset_fp32"]
    bf16 = build(built["checkpoint"], "s1", tmp_path / "bf16", str(built["subset"]), "--shard_size", "8",
                 "--batch_size", "3", "--precision", "bf16-mixed")
    assert bf16.dtype == "float32" and bf16.manifest["rows"] == fp32.manifest["rows"]
    scale = max(float(abs(fp32.get(doc_id)).max()) for doc_id in fp32.doc_ids)
    difference = max(float(abs(bf16.get(doc_id) - fp32.get(doc_id)).max()) for doc_id in fp32.doc_ids)
    assert 0 < difference < 0.05 * scale


def test_loader_workers_build_the_same_store(built, tmp_path):
    """``--num_workers 2``: the documents read and tokenised in two worker processes; the shards are the same bytes
    as the store built in the main process (`built`'s)."""
    build(built["checkpoint"], "s1", tmp_path / "workers", str(built["subset"]), "--shard_size", "8",
          "--batch_size", "3", "--num_workers", "2")
    reference = built["stores"]["subset_fp32"].folder
    shards = sorted(p.name for p in reference.iterdir() if p.name.startswith("shard-"))
    assert len(shards) > 4
    assert sorted(p.name for p in (tmp_path / "workers").iterdir()) == sorted(p.name for p in reference.iterdir())
    for name in [*shards, "manifest.json"]:
        assert (tmp_path / "workers" / name).read_bytes() == (reference / name).read_bytes(), name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU: pinned batches and host copies run on one")
def test_on_a_gpu_a_store_built_from_pinned_batches_is_the_cpu_ones(built, tmp_path):
    """``--accelerator gpu`` with two loader workers (batches pinned, copied to the device without blocking, rows
    copied back once a shard) and strict fp32 matmuls: every row within 1e-4 of the CPU store's."""
    fp32 = built["stores"]["subset_fp32"]
    gpu = index.main(["--checkpoint", str(built["checkpoint"]), "--strategy", "s1", "--collection",
                      str(built["subset"]), "--output_dir", str(tmp_path / "gpu"), "--shard_size", "8", "--batch_size",
                      "3", "--num_workers", "2", "--matmul_precision", "highest", "--accelerator", "gpu",
                      "--devices", "1"])
    assert gpu.manifest["rows"] == fp32.manifest["rows"]
    for doc_id in fp32.doc_ids:
        assert abs(gpu.get(doc_id) - fp32.get(doc_id)).max() < 1e-4, doc_id
