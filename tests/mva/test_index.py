"""``python -m mva.index`` and ``python -m mva.evaluate``: stores of MVA's [D_K | D_V] and DE's [CLS] vector score
as end-to-end scoring does, cost what `mva.costs` says, and multi-pass re-ranking (Table 6) keeps the first pass's
order below K.

- fp32 stores of the built-in test collection give the end-to-end scores within 1e-5 on the same pairs, and the
  same ranking (a property: a store scores as end to end); and the scores read from a store are the paper's
  (Sec. 2.1; DE's [CLS] dot product) written out by hand from the checkpoint's weights (`tests.mva.by_hand`);
- a store's bytes per document are `mva.costs.mva_storage` (MVA with K [CLS] timesteps: every document has K rows)
  and h floats for DE; each document's rows are its pooled timesteps projected, written out by hand from the
  checkpoint's weights (temporal pooling: the groups holding a real token, the last one filled with zeros);
- costs.json's joint compute is Table 5's count worked by hand at the evaluated queries' real lengths;
- multi-pass: the top K are the first pass's top K in CA's order (CA's scores, computed apart), the rest in the
  first pass's order; K = 1 is the first pass; K = depth is CA alone;
- refusals, one line with exit status 2 and nothing written.

The models are tiny (one layer, h = 16) with random weights drawn with a large spread, so that scores spread; the
collection is `builtin:test`, evaluated on 5 queries at depth 10, on the CPU with one thread (tests/conftest.py).
"""

import json
from pathlib import Path

import lightning as L
import pytest
import torch

from tests.bad_input.refusal import refused_in_process
from tests.unjudged import assert_reranked_without_metrics, unjudged_task
from common.commands.outputs import NO_QRELS
from common.data.formats import Document, ranked, read_run, write_collection, write_qrels, write_run, write_topics
from common.data.specs import source_from_spec
from common.stores.representations import RepresentationStore, checkpoint_hash
from mva import evaluate, index
from mva.costs import mva_storage
from mva.data import MVADataModule
from mva.ranker import MVARanker
from mva.query_scorer import QueryScorer
from mva.store import CrossScorer, data_encoder, load_ranker
from tests.mva import by_hand

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]  # tests/conftest.py

HIDDEN, PROJECTION, CLS_STEPS = 16, 8, 6
DATA = {"train": "builtin:train", "dev": None, "test": "builtin:test", "tokenizer": "builtin", "tokenizer_task": None,
        "query_length": 12, "passage_length": 76, "depth": 10, "relevance_level": 1, "seed": 0}
QUERIES, DEPTH = 5, 10
CPU = ["--accelerator", "cpu", "--devices", "1"]
POOLINGS = {"cls": {"doc_pooling": "cls", "doc_timesteps": CLS_STEPS},
            "temporal": {"doc_pooling": "temporal", "doc_factor": 3}}


def save_checkpoint(path: Path, architecture: str = "mva", seed: int = 0, **settings) -> Path:
    """What `mva.train`'s checkpoints hold, as far as the commands read them: a tiny ranker's weights (every matrix
    redrawn with a large spread), its hyper-parameters and the data settings."""
    torch.manual_seed(seed)
    ranker = MVARanker(architecture=architecture, num_layers=1, hidden_size=HIDDEN, num_heads=2, intermediate_size=32,
                       projection=PROJECTION, heads=2, **settings)
    with torch.no_grad():
        for parameter in ranker.parameters():
            if parameter.ndim > 1:
                parameter.normal_(0, 0.3)
    torch.save({"state_dict": ranker.state_dict(), "hyper_parameters": dict(ranker.hparams),
                "datamodule_hyper_parameters": DATA | {"architecture": architecture},
                "pytorch-lightning_version": L.__version__}, path)
    return path


def build(checkpoint: Path, output: Path, *extra: str) -> RepresentationStore:
    return index.main(["--checkpoint", str(checkpoint), "--collection", "builtin:test", "--output_dir", str(output),
                       "--shard_size", "1000", "--batch_size", "256", *extra, *CPU])


def run_evaluate(checkpoint: Path, output: Path, *extra: str) -> dict:
    return evaluate.main(["--checkpoint", str(checkpoint), "--task", "builtin:test", "--test_queries", str(QUERIES),
                          "--depth", str(DEPTH), "--accelerator", "cpu", "--output_dir", str(output), *extra])


@pytest.fixture(scope="module")
def built(tmp_path_factory, one_thread):
    """Checkpoints of MVA (cls and temporal document pooling), DE and CA, and fp32 stores of builtin:test."""
    root = tmp_path_factory.mktemp("mva")
    checkpoints = {f"mva_{name}": save_checkpoint(root / f"mva_{name}.ckpt", **settings)
                   for name, settings in POOLINGS.items()}
    checkpoints |= {a: save_checkpoint(root / f"{a}.ckpt", a, seed=1) for a in ("de", "ca")}
    stores = {name: build(checkpoints[name], root / f"store_{name}") for name in ("mva_cls", "mva_temporal", "de")}
    pairs = MVADataModule(**{**DATA, "train": None, "test_queries": QUERIES}).eval_pairs("test")
    return {"root": root, "checkpoints": checkpoints, "stores": stores, "pairs": pairs}


def rankings(path: Path) -> dict[str, list[str]]:
    return {qid: [doc_id for doc_id, _ in ranked(scores)] for qid, scores in read_run(path).items()}


# --- the store ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mva_cls", "mva_temporal", "de"])
def test_fp32_stores_score_as_end_to_end(built, name, tmp_path):
    out = tmp_path / "stored"
    metrics = run_evaluate(built["checkpoints"][name], out, "--store", str(built["root"] / f"store_{name}"),
                           "--compare_end_to_end")
    report = json.loads((out / "exactness.json").read_text())
    assert report["pairs"] == QUERIES * DEPTH and report["max_abs_score_difference"] <= 1e-5
    assert report["queries_reordered"] == 0
    run_name = name.split("_")[0]
    assert metrics[run_name] == metrics[f"{run_name}_end_to_end"]
    spread = [s for qid, scores in read_run(out / "run.trec").items() for s in list(scores.values())[:DEPTH]]
    assert max(spread) - min(spread) > 1e-2  # the scores differ: exactness is not that of constants


@pytest.mark.parametrize("name", ["mva_cls", "mva_temporal", "de"])
def test_store_scores_are_the_formula_written_out(built, name):
    """Each query's candidates scored from the fp32 store (`mva.query_scorer.QueryScorer`, as ``mva.evaluate --store``)
    against the score written out on each (query, document) pair, the checkpoint's weights in float64: MVA's Sec.
    2.1 over the side's pooling with the BertModel as the encoder (`tests.mva.by_hand.model_score`), DE's dot
    product of the two [CLS] outputs. Within fp32 rounding: 1e-5 of the largest score."""
    state = torch.load(built["checkpoints"][name], weights_only=True)
    scorer = QueryScorer(load_ranker(state).model, data_encoder(DATA), batch_size=4, store=built["stores"][name])
    model = load_ranker(state).model.double()
    encoder, topics = data_encoder(DATA), source_from_spec("builtin:test").topics()
    documents = source_from_spec("builtin:test").documents()
    by_query = {}
    for qid, doc_id in built["pairs"]:
        by_query.setdefault(qid, []).append(doc_id)
    got, expected = [], []
    for qid, doc_ids in by_query.items():
        got += scorer(topics[qid], doc_ids).tolist()
        query = encoder.queries([topics[qid]])["query_tokens"][0]  # one row: no padding
        for document in documents.get_many(doc_ids):
            doc = encoder.documents([document])["doc_tokens"][0]
            if name == "de":
                expected.append(float(by_hand.encoder_outputs(model.bert, query)[0]
                                      @ by_hand.encoder_outputs(model.bert, doc)[0]))
            else:
                expected.append(by_hand.model_score(model, query, doc))
    scale = max(abs(x) for x in expected)
    assert len(got) == QUERIES * DEPTH and max(expected) - min(expected) > 1e-2 * scale
    assert got == pytest.approx(expected, abs=1e-5 * scale, rel=0)


def test_a_stores_bytes_per_document_are_the_storage_formula(built):
    """Table 5's storage: 2 d H p floats for MVA (K [CLS] timesteps for every document), h for DE, 4 bytes each."""
    assert built["stores"]["mva_cls"].bytes_per_document == 4 * mva_storage(CLS_STEPS, PROJECTION, heads=2) == 768
    assert built["stores"]["mva_cls"].manifest["rows"] == CLS_STEPS * len(built["stores"]["mva_cls"])
    assert built["stores"]["de"].bytes_per_document == 4 * HIDDEN


def test_a_documents_rows_are_its_pooled_projected_timesteps(built):
    """Temporal pooling by 3 over [CLS] and the words ([SEP] and padding dropped): a document of n real tokens but
    [SEP] has ceil(n / 3) rows, each [D_K | D_V] = [Y W_DK | Y W_DV] of its group Y of 3 consecutive encoder outputs
    concatenated, the last group's missing outputs zero vectors; written out from the checkpoint's weights in float64
    (`tests.mva.by_hand`: the BertModel on the document alone, the groups and the products by hand). The documents
    are 75, 70, 74 and 72 such tokens long: every remainder mod 3, and padding beside the longest in a batch."""
    store = built["stores"]["mva_temporal"]
    model = load_ranker(torch.load(built["checkpoints"]["mva_temporal"], weights_only=True)).model.double()
    encoder = data_encoder(DATA)
    documents = source_from_spec("builtin:test").documents()
    doc_ids = ["D0000", "D2565", "D1067", "D0363"]
    lengths = []
    for document in documents.get_many(doc_ids):
        tokens = encoder.documents([document])["doc_tokens"][0]  # one row: no padding
        grouped = by_hand.temporal(model.bert, tokens, 3)  # (ceil(n / 3), 3 h)
        expected = torch.cat(by_hand.doc_projections(model.head, grouped), -1)  # (ceil(n / 3), 2 H p)
        stored = torch.from_numpy(store.get(document.doc_id).copy()).double()
        lengths.append(len(tokens) - 1)  # [CLS] and the words
        assert stored.shape == (-(-lengths[-1] // 3), 2 * 2 * PROJECTION) == expected.shape
        scale = expected.abs().max().item()
        torch.testing.assert_close(stored, expected, rtol=0, atol=1e-5 * scale)
    assert lengths == [75, 70, 74, 72]


def test_joint_compute_is_the_cost_formula_at_the_real_lengths(built, tmp_path):
    """MVA: per query, the sum over its candidates of H (2 q d p + q p) with q its real timesteps ([CLS] and its
    words) and d = K: here H = 2, d = 6, p = 8, so 2 * (2 * q * 6 * 8 + q * 8) = 208 q MACs a candidate (worked by
    hand); DE: h = 16 per candidate; M MACs per query, averaged over the queries."""
    out = tmp_path / "cls"
    run_evaluate(built["checkpoints"]["mva_cls"], out, "--store", str(built["root"] / "store_mva_cls"))
    source = source_from_spec("builtin:test")
    topics, qids = source.topics(), sorted(read_run(out / "run.trec"))
    query_steps = [int(data_encoder(DATA).queries([topics[q]])["query_mask"].sum()) - 1 for q in qids]
    assert len(qids) == QUERIES and len(set(query_steps)) > 1  # the real lengths differ: a fixed q would show
    expected = sum(DEPTH * 208 * q for q in query_steps) / len(qids) / 1e6
    costs = json.loads((out / "costs.json").read_text())
    assert costs["mva"]["joint_mmacs"] == pytest.approx(expected, rel=1e-12)
    assert costs["mva"]["bytes_per_document"] == 768
    out = tmp_path / "de"
    run_evaluate(built["checkpoints"]["de"], out, "--store", str(built["root"] / "store_de"))
    costs = json.loads((out / "costs.json").read_text())
    assert costs["de"]["joint_mmacs"] == pytest.approx(DEPTH * 16 / 1e6, rel=1e-12)  # 160 MACs a query


# --- multi-pass (Table 6) -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def multi_pass(built, tmp_path_factory):
    out = tmp_path_factory.mktemp("multi") / "out"
    metrics = run_evaluate(built["checkpoints"]["mva_cls"], out, "--store", str(built["root"] / "store_mva_cls"),
                           "--rescore", str(built["checkpoints"]["ca"]), "--rescore_top", "1", "4", str(DEPTH))
    return out, metrics


def test_multi_pass_orders_the_top_k_by_ca_and_keeps_the_first_pass_below(built, multi_pass):
    out, metrics = multi_pass
    first, multi = rankings(out / "run.trec"), rankings(out / "run.mva+ca@4.trec")
    state = torch.load(built["checkpoints"]["ca"], weights_only=True)
    source = source_from_spec("builtin:test")
    ca = CrossScorer(load_ranker(state), data_encoder(DATA, pairs=True), source.documents(), batch_size=16)
    topics = source.topics()
    for qid, order in first.items():
        top = order[:4]
        scores = ca(topics[qid], top).tolist()
        by_ca = [doc_id for _, doc_id in sorted(zip(scores, top), key=lambda x: (-x[0], x[1]))]
        assert multi[qid][:4] == by_ca
        assert multi[qid][4:] == order[4:]
    assert any(rankings(out / "run.mva+ca@4.trec")[q][:4] != first[q][:4] for q in first)  # CA changed something
    assert rankings(out / "run.mva+ca@1.trec") == first
    assert set(metrics) == {"mva", "bm25", "mva+ca@1", "mva+ca@4", f"mva+ca@{DEPTH}"}


def test_multi_pass_at_the_depth_is_ca_alone(built, multi_pass, tmp_path):
    out, metrics = multi_pass
    ca = run_evaluate(built["checkpoints"]["ca"], tmp_path / "ca")
    assert rankings(out / f"run.mva+ca@{DEPTH}.trec") == rankings(tmp_path / "ca" / "run.trec")
    assert metrics[f"mva+ca@{DEPTH}"] == ca["ca"]
    costs = json.loads((out / "costs.json").read_text())
    assert costs[f"mva+ca@{DEPTH}"]["first_pass"] == "N/A"
    assert costs[f"mva+ca@{DEPTH}"]["joint_mmacs"] == pytest.approx(json.loads(
        (tmp_path / "ca" / "costs.json").read_text())["ca"]["joint_mmacs"])
    assert costs["mva+ca@1"]["joint_mmacs"] == costs["mva"]["joint_mmacs"]  # K = 1 re-scores nothing (mva.costs)


# --- a rank_llm candidate file -------------------------------------------------------------------------------------


def test_a_rank_llm_file_is_indexed_and_evaluated_as_the_files_it_stands_for(built, tmp_path):
    """``mva.index --collection FILE.json`` and ``mva.evaluate --rank_llm FILE.json --qrels FILE`` (how the TREC DL
    candidate files in ../shared/data are read) give the run and metrics of the same task as TREC files."""
    source = source_from_spec("builtin:test")
    topics, candidates, documents = source.topics(), source.candidates(), source.documents()
    qids = sorted(candidates)[:QUERIES]
    top = {qid: [doc_id for doc_id, _ in ranked(candidates[qid])[:DEPTH]] for qid in qids}
    entries = [{"query": topics[qid], "hits": [
        {"qid": qid, "docid": doc_id, "rank": rank, "score": candidates[qid][doc_id],
         "content": documents[doc_id].text} for rank, doc_id in enumerate(top[qid], 1)]} for qid in qids]
    rank_llm = tmp_path / "rank_llm.json"
    rank_llm.write_text(json.dumps(entries))
    files = {"topics": tmp_path / "topics.tsv", "qrels": tmp_path / "qrels.txt", "run": tmp_path / "run.trec",
             "collection": tmp_path / "docs.tsv"}
    write_topics(files["topics"], {qid: topics[qid] for qid in qids})
    write_qrels(files["qrels"], source.qrels())
    write_run(files["run"], {qid: {doc_id: candidates[qid][doc_id] for doc_id in top[qid]} for qid in qids})
    hit = dict.fromkeys(doc_id for qid in qids for doc_id in top[qid])
    write_collection(files["collection"], [Document(doc_id, documents[doc_id].text) for doc_id in hit])
    checkpoint = built["checkpoints"]["mva_cls"]
    index.main(["--checkpoint", str(checkpoint), "--collection", str(rank_llm), "--output_dir", str(tmp_path / "store"),
                *CPU])
    common = ["--checkpoint", str(checkpoint), "--depth", str(DEPTH), "--accelerator", "cpu"]
    from_rank_llm = evaluate.main([*common, "--rank_llm", str(rank_llm), "--qrels", str(files["qrels"]),
                                   "--store", str(tmp_path / "store"), "--output_dir", str(tmp_path / "a")])
    from_files = evaluate.main([*common, *(f for name, path in files.items() for f in (f"--{name}", str(path))),
                                "--output_dir", str(tmp_path / "b")])
    assert from_rank_llm == from_files and set(from_files) == {"mva", "bm25"}
    assert rankings(tmp_path / "a" / "run.trec") == rankings(tmp_path / "b" / "run.trec")
    assert sorted(rankings(tmp_path / "a" / "run.trec")) == qids
    # without --qrels: the same run, and nothing measured
    assert evaluate.main([*common, "--rank_llm", str(rank_llm), "--store", str(tmp_path / "store"),
                          "--output_dir", str(tmp_path / "c")]) is None
    assert rankings(tmp_path / "c" / "run.trec") == rankings(tmp_path / "a" / "run.trec")
    assert not (tmp_path / "c" / "metrics.json").exists()


def test_without_qrels_every_query_is_reranked_and_rescored_and_nothing_measured(built, tmp_path, capsys):
    """--topics --run --collection and no --qrels, with CA re-scoring the top 2: every query re-ranked (one that no
    qrels judge among them), every candidate in run.trec and run.mva+ca@2.trec, costs.json and task.json, no
    metrics.json."""
    flags, candidates = unjudged_task(tmp_path)
    out = tmp_path / "out"
    assert evaluate.main(["--checkpoint", str(built["checkpoints"]["mva_cls"]), *flags, "--depth", "3",
                          "--rescore", str(built["checkpoints"]["ca"]), "--rescore_top", "2", "--accelerator", "cpu",
                          "--output_dir", str(out)]) is None
    assert NO_QRELS in capsys.readouterr().out
    assert_reranked_without_metrics(out, candidates)
    assert_reranked_without_metrics(out, candidates, "run.mva+ca@2.trec")
    assert set(json.loads((out / "costs.json").read_text())) == {"mva", "mva+ca@2"}


# --- refusals -----------------------------------------------------------------------------------------------------


def test_index_refusals(built, tmp_path, capsys):
    ca, fresh = built["checkpoints"]["ca"], tmp_path / "store"
    refused_in_process(index.main, ["--checkpoint", str(ca), "--collection", "builtin:test", "--output_dir", str(fresh)],
                       capsys, f"--checkpoint: {ca} is an mva.train checkpoint of ca, not of mva or de: CA reads the "
                               "query and the document together")
    assert not fresh.exists()


def test_evaluate_refusals(built, tmp_path, capsys):
    checkpoints, output = built["checkpoints"], tmp_path / "o"
    base = ["--checkpoint", str(checkpoints["mva_cls"]), "--task", "builtin:test", "--output_dir", str(output)]
    refused_in_process(evaluate.main, [*base, "--compare_end_to_end"], capsys,
                       "--compare_end_to_end: compares a store's scores with end-to-end ones; give --store")
    refused_in_process(evaluate.main, [*base, "--store", str(tmp_path)], capsys,
                       f"argument --store: {tmp_path} holds no finished mva.index store (no manifest.json)")
    refused_in_process(evaluate.main, [*base, "--rescore", str(checkpoints["de"])], capsys,
                       f"--rescore: {checkpoints['de']} is an mva.train checkpoint of de, not of ca")
    refused_in_process(evaluate.main, [*base, "--rescore", str(checkpoints["ca"]), "--rescore_top", "4", "4"],
                       capsys, "--rescore_top: each K once, got 4 4")
    de_store = built["root"] / "store_de"
    refused_in_process(evaluate.main, [*base, "--store", str(de_store)], capsys,
                       f"--store: {de_store} was built from checkpoint {checkpoint_hash(checkpoints['de'])[:12]}…")
    ca_base = ["--checkpoint", str(checkpoints["ca"]), *base[2:]]
    refused_in_process(evaluate.main, [*ca_base, "--store", str(de_store)], capsys,
                       f"--store: {checkpoints['ca']} is CA's, which stores nothing")
    assert not output.exists()
