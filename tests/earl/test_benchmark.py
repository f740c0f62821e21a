"""earl.benchmark (EARL Table 3): the rows it writes, FLOP counts against Table 1's cost (`earl.costs`), the scores
its timed path computes from the stores of random documents (`earl.store.random_stores`) against `EARL.forward`, and
the store reads it times (candidates drawn afresh over the store each query, read cold, exactly the rows written), on
tiny settings. No timing is asserted. The shared helpers of those reads (`common.benchmarks.store_reads.draw_candidates`,
`noise_documents`, `evict_from_page_cache`, `cached_fraction`, `median_query`) are tested here too."""

import csv
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from common.benchmarks.bert_inputs import bert_documents, bert_pairs, bert_query
from common.benchmarks.store_reads import (
    cached_fraction, candidate_ids, draw_candidates, evict_from_page_cache, median_query, noise_documents,
)
from common.benchmarks.timing import count_flops
from earl import benchmark
from earl.costs import Size
from earl.store import ROW_TYPES, document_words, random_stores
from tests.benchmark_runs import assert_refuses_to_overwrite, run_main

pytestmark = pytest.mark.usefixtures("one_thread")
slow = pytest.mark.slow  # the second tier (README, "Tests"); the tests without it are the quick tier's

CLI = ["--size", "small", "--lengths", "32", "--candidates", "8", "--ranker_candidates", "4", "--repeats", "2",
       "--earl_batch_size", "3", "--batch_size", "2", "--threads", "1", "--store_documents", "2000"]
KEYS = {"bench", "impl", "n", "pass", "ms", "candidates", "size", "measured_candidates", "extrapolated", "read_ms",
        "flops", "gflops_per_s", "analytic_ratio", "table1_ratio", "flop_ratio", "speedup", "cpu", "threads",
        "store_bytes_per_document", "cpu_ms", "query_ms", "judge_ms", "compute_ms", "warm_ms", "warm_read_ms",
        "warm_compute_ms", "compute_speedup", "warm_speedup", "store_documents", "candidate_shards", "store_cached",
        "batch_size", "ranker_tokens"}
TINY = Size(layers=3, hidden=32, heads=2, intermediate=96, blocks=2, query_layers=1)  # FFN 3h: t = 10, j_q = 12


FIELDS = ["bench", "impl", "size", "n", "pass", "ms", "read_ms", "compute_ms", "warm_ms", "warm_read_ms",
          "warm_compute_ms", "candidates", "measured_candidates", "extrapolated", "speedup", "compute_speedup",
          "warm_speedup", "cpu_ms", "cpu_speedup",
          "analytic_ratio", "table1_ratio", "flop_ratio", "affordable_candidates", "query_ms", "keys_values_ms",
          "judge_ms", "flops", "analytic_macs", "gflops_per_s", "compute_gflops_per_s", "store_dtype",
          "store_bytes_per_document", "store_documents", "store_gb", "shard_size", "candidate_shards", "store_cached",
          "documents", "batch_size", "query_length", "ranker_tokens", "num_layers", "hidden_size", "num_heads",
          "intermediate_size", "judge_blocks", "query_layers", "repeats", "threads", "cpu",
          "load_1min"]  # the columns of speed.csv


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One in-process run at the small size, n = 32, 8 candidates (the BERT ranker timed on 4) drawn over stores of
    2,000 fp16 documents (2 shards), 2 timed queries, with --json."""
    out = tmp_path_factory.mktemp("earl_bench")
    code, stdout = run_main(benchmark.main, [*CLI, "--json", "--output_dir", str(out)])
    return code, out, stdout


def records(out):
    return [json.loads(line) for line in (out / "speed.jsonl").read_text().splitlines()]


@slow
def test_rows_have_the_required_keys_and_values(run):
    code, out, stdout = run
    assert code == 0
    printed = [json.loads(line) for line in stdout.splitlines()]  # --json: nothing else on stdout
    assert printed == records(out)
    assert [r["impl"] for r in printed] == list(benchmark.IMPLS)
    threads = torch.get_num_threads()
    for row in printed:
        assert KEYS <= set(row)
        assert (row["n"], row["candidates"], row["size"], row["pass"]) == (32, 8, "small", "infer")
        assert row["ms"] > 0 and row["flops"] > 0 and row["cpu"] and row["threads"] == threads == 1
        assert row["gflops_per_s"] == pytest.approx(row["flops"] / row["ms"] / 1e6, rel=1e-2)
    ranker, s1, s2 = printed
    assert (ranker["measured_candidates"], ranker["extrapolated"], ranker["read_ms"]) == (4, True, None)
    assert ranker["speedup"] == ranker["flop_ratio"] == ranker["analytic_ratio"] == 1.0
    for row in (s1, s2):
        assert (row["measured_candidates"], row["extrapolated"]) == (8, False)
        assert row["read_ms"] >= 0 and row["query_ms"] > 0 and row["judge_ms"] > 0
        assert row["speedup"] == pytest.approx(ranker["ms"] / row["ms"], rel=1e-2)
        assert row["flop_ratio"] == pytest.approx(ranker["flops"] / row["flops"], rel=1e-2)
        assert row["affordable_candidates"] == math.floor(8 * row["ms"] / ranker["ms"])
    assert s1["keys_values_ms"] >= 0 and s2["keys_values_ms"] is None
    # the batches each ran (--batch_size 2 for the ranker's 4 timed pairs, --earl_batch_size 3 for EARL's 8)
    assert (ranker["batch_size"], s1["batch_size"], s2["batch_size"]) == (2, 3, 3)
    assert {row["ranker_tokens"] for row in printed} == {16 + 31 + 1}  # n = 32: no cut
    # S2 stores D' (2 K h columns) where S1 stores D (h): 2K = 4 times the bytes (fp16 by default)
    assert s1["store_bytes_per_document"] == 32 * 256 * 2
    assert s2["store_bytes_per_document"] == 2 * 2 * s1["store_bytes_per_document"]
    # S2 does less work than S1, by Table 1, with constants and as counted
    assert s2["analytic_ratio"] > s1["analytic_ratio"] and s2["flop_ratio"] > s1["flop_ratio"]


def test_the_total_is_the_store_read_plus_the_compute(run):
    """Each EARL row's ms is its median query's read_ms + compute_ms, and warm_ms (the queries again, held in memory)
    its warm_read_ms + warm_compute_ms; the speed-ups on the total, on the compute alone and held in memory; the
    store's documents, shards and cache share; the BERT ranker reads no store."""
    code, out, _ = run
    assert code == 0
    ranker, s1, s2 = records(out)
    assert (ranker["read_ms"], ranker["warm_read_ms"], ranker["compute_ms"]) == (None, None, ranker["ms"])
    assert (ranker["warm_ms"], ranker["warm_speedup"]) == (None, None)
    assert ranker["compute_speedup"] == 1.0 and ranker["store_documents"] is None
    for row in (s1, s2):
        assert row["ms"] == pytest.approx(row["read_ms"] + row["compute_ms"], abs=2e-3)
        assert row["read_ms"] > 0 and row["compute_ms"] > 0 and row["warm_read_ms"] > 0
        assert row["warm_ms"] == pytest.approx(row["warm_read_ms"] + row["warm_compute_ms"], abs=2e-3)
        assert row["warm_compute_ms"] > 0
        assert row["warm_speedup"] == pytest.approx(ranker["ms"] / row["warm_ms"], rel=1e-2)
        assert row["query_ms"] + (row["keys_values_ms"] or 0) + row["judge_ms"] <= row["compute_ms"] + 2e-3
        assert row["compute_speedup"] == pytest.approx(ranker["ms"] / row["compute_ms"], rel=1e-2)
        assert row["compute_gflops_per_s"] == pytest.approx(row["flops"] / row["compute_ms"] / 1e6, rel=1e-2)
        assert (row["store_documents"], row["shard_size"], row["store_dtype"], row["documents"]) == (
            2000, 1000, "fp16", "random")
        assert 1 <= row["candidate_shards"] <= 2 and row["store_gb"] > 0
        assert row["store_cached"] is None or 0 <= row["store_cached"] <= 1
    with open(out / "speed.csv", newline="") as f:
        assert {"read_ms", "compute_ms", "warm_ms", "warm_read_ms", "compute_speedup", "warm_speedup"} <= set(
            next(csv.DictReader(f)))


@slow
def test_outputs_are_written_and_refused_without_overwrite(run):
    _, out, _ = run
    with open(out / "speed.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == FIELDS and len(rows) == 3
    assert (out / "speed.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert_refuses_to_overwrite(benchmark.main, [*CLI, "--output_dir", str(out)], out)


def build_stores(root, model, impls, n, count, dtype="fp32", documents="encoded") -> dict:
    """`random_stores` of `impls` (``earl_s1``, ``earl_s2``) as the benchmark builds them, by implementation."""
    stores = random_stores(root, model, name="tiny", checkpoint="random weights, seed 0, size tiny",
                           strategies=[benchmark.STRATEGY[impl] for impl in impls], n=n, count=count, dtype=dtype,
                           documents=documents, seed=0, shard_size=2, batch_size=2)
    return {impl: stores[benchmark.STRATEGY[impl]] for impl in impls}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny EARL and BERT ranker, and S1 and S2 stores of 5 encoded documents of 12 tokens."""
    n, count = 12, 5
    model, ranker = benchmark.build_models(TINY, seed=0)
    stores = build_stores(tmp_path_factory.mktemp("stores"), model, ["earl_s1", "earl_s2"], n, count)
    return model, ranker, stores, n, count


def forward_scores(model, n, count):
    """EARL.forward, end to end, on the benchmark's query and documents."""
    tokens, mask = bert_query(benchmark.QUERY_LENGTH, 0)
    docs = bert_documents(document_words(n, count, 0))
    batch = {"query_tokens": tokens, "query_mask": mask, "doc_tokens": docs, "doc_mask": torch.ones_like(docs),
             "query_index": torch.zeros(count, dtype=torch.long)}
    with torch.inference_mode():
        return model(batch)


@slow
@pytest.mark.parametrize("impl", ["earl_s1", "earl_s2"])
def test_the_timed_path_scores_what_earl_forward_scores(tiny, impl):
    """Batches of 2 over 5 candidates (the last one short), from the memory-mapped store, as timed."""
    model, _, stores, n, count = tiny
    tokens, mask = bert_query(benchmark.QUERY_LENGTH, 0)
    scorer = benchmark.EarlScorer(model, stores[impl], n, batch_size=2)
    assert stores[impl].doc_ids == [f"d{i}" for i in range(count)]
    with torch.inference_mode():
        scores = scorer(tokens, mask, stores[impl].doc_ids)
    expected = forward_scores(model, n, count)
    assert scores.shape == (count,) and expected.std() > 0
    torch.testing.assert_close(scores, expected, atol=1e-5, rtol=0)
    assert set(scorer.parts.ms) == {"query_ms", "read_ms", "keys_values_ms", "judge_ms"}
    assert scorer.parts.ms["query_ms"] > 0 and scorer.parts.ms["judge_ms"] > 0


@slow
@pytest.mark.parametrize("impl", ["earl_s1", "earl_s2"])
def test_the_timed_path_is_earl_evaluates(tiny, impl, monkeypatch):
    """`EarlScorer` runs `earl.query_scorer.QueryScorer`'s own calls, the ones ``earl.evaluate`` makes (T_qry once, then
    per batch ``stored_rows``, `EARL.document_keys_values` for S1 alone, and ``score``), and scores what
    QueryScorer's own loop scores from the same store (its padded read)."""
    from earl.model import EARL
    from earl.query_scorer import QueryScorer

    model, _, stores, n, count = tiny
    calls = []

    def spy(owner, name):
        original = getattr(owner, name)
        monkeypatch.setattr(owner, name, lambda *a, **k: calls.append(name) or original(*a, **k))

    for owner, name in [(QueryScorer, "encode_query"), (QueryScorer, "stored_rows"), (QueryScorer, "score"),
                        (EARL, "document_keys_values")]:
        spy(owner, name)
    tokens, mask = bert_query(benchmark.QUERY_LENGTH, 0)
    scorer = benchmark.EarlScorer(model, stores[impl], n, batch_size=2)
    with torch.inference_mode():
        scores = scorer(tokens, mask, stores[impl].doc_ids)
    per_batch = ["stored_rows", *(["document_keys_values"] if impl == "earl_s1" else []), "score"]
    assert calls == ["encode_query", *per_batch * 3]  # 5 candidates in batches of 2
    encoder = type("Encoder", (), {"queries": lambda self, texts: {"query_tokens": tokens, "query_mask": mask}})()
    evaluated = QueryScorer(model, encoder, batch_size=2, store=stores[impl])("a query", stores[impl].doc_ids)
    torch.testing.assert_close(scores.double(), evaluated, atol=1e-6, rtol=0)


def test_the_ranker_reads_at_most_512_tokens():
    """[CLS] query [SEP] words [SEP]: 16 + (n - 1) + 1 tokens up to n = 496, the words cut to 495 beyond; the
    ranker's BERT has 512 positions, and its Table 1 cost is at the tokens it reads."""
    assert benchmark.QUERY_LENGTH == bert_query(benchmark.QUERY_LENGTH, 0)[0].shape[1] == 16
    assert [benchmark.ranker_tokens(n) for n in (2, 128, 256, 496, 497, 512)] == [18, 144, 272, 512, 512, 512]
    assert benchmark.ranker_words(512) == benchmark.RANKER_WORDS == 495
    # Table 1 in multiply-adds at base size (L = 12, n = 768, FFN 3072, l = 10, K = 2; a = 2, t = 4 + 2 * 3072 / 768
    # = 12, j_q = 6 + 8 = 14, j_d = 2), q = 16, 10 candidates, worked by hand:
    size = benchmark.SIZES["base"]
    # n = 512: the ranker reads 512 tokens, T = q + d = 16 + 496; per layer a n T^2 + t n^2 T
    # = 2 * 768 * 512^2 + 12 * 768^2 * 512 = 402,653,184 + 3,623,878,656 = 4,026,531,840; x 12 layers x 10
    assert benchmark.analytic_cost(size, "bert_ranker", 512, 10) == 483_183_820_800
    # n = 128: T = 16 + 127 words + [SEP] = 144; 2 * 768 * 144^2 + 12 * 768^2 * 144 = 31,850,496 + 1,019,215,872
    # = 1,051,066,368 per layer; x 12 x 10
    assert benchmark.analytic_cost(size, "bert_ranker", 128, 10) == 126_127_964_160
    # EARL S1 at d = 512: T_qry l (a n q^2 + t n^2 q) = 10 * (2 * 768 * 256 + 12 * 768^2 * 16) = 1,136,394,240 once;
    # a judge block a n (q d + q^2) + j_q n^2 q + j_d n^2 d = 12,976,128 + 132,120,576 + 603,979,776 = 749,076,480,
    # x K = 2 blocks x 10 candidates = 14,981,529,600
    assert benchmark.analytic_cost(size, "earl_s1", 512, 10) == 16_117_923_840


@slow
def test_the_ranker_is_timed_on_512_tokens_at_n_512(tiny):
    """At n = 512 the ranker's pairs are 512 tokens (the words cut to 495) through BERT's 512 positions."""
    model, ranker = tiny[0], tiny[1]
    assert ranker.bert.config.max_position_embeddings == 512 == model.doc_encoder.config.max_position_embeddings
    args = benchmark.parse_args(["--size", "small", "--lengths", "512", "--candidates", "3", "--ranker_candidates",
                                 "2", "--repeats", "1", "--batch_size", "2", "--store_documents", "3"])
    result = benchmark.measure_ranker(ranker, 512, args, timed=True)
    assert (result["measured_candidates"], result["batch_size"]) == (2, 2) and result["ms"] > 0
    tokens, mask = bert_query(benchmark.QUERY_LENGTH, 0)
    pair = bert_pairs(tokens, document_words(512, 1, 0)[:, :495])
    with torch.inference_mode():
        assert result["flops"] == 3 * count_flops(lambda: ranker(pair))


def test_the_batch_policy_is_earl_evaluates():
    """One batch size for both by default, earl.evaluate's --batch_size default (candidates per judge batch);
    --earl_batch_size sets EARL's alone."""
    from earl.evaluate import build_parser

    assert benchmark.BATCH_SIZE == build_parser().get_default("batch_size") == 128
    args = benchmark.parse_args(["--size", "small"])
    assert (args.batch_size, benchmark.earl_batch_size(args)) == (128, 128)
    args = benchmark.parse_args(["--size", "small", "--earl_batch_size", "7"])
    assert (args.batch_size, benchmark.earl_batch_size(args)) == (128, 7)
    with pytest.raises(SystemExit) as refused:
        benchmark.parse_args(["--size", "small", "--lengths", "513"])
    assert refused.value.code == 2


@slow
def test_s2_store_holds_2k_times_s1s_bytes_and_is_reused(tiny, tmp_path):
    model, _, stores, n, count = tiny
    s1, s2 = stores["earl_s1"], stores["earl_s2"]
    assert (s1.width, s2.width) == (TINY.hidden, 2 * TINY.blocks * TINY.hidden)
    assert s1.bytes_per_document == n * TINY.hidden * 4
    assert s2.bytes_per_document == 2 * TINY.blocks * s1.bytes_per_document
    again = build_stores(s1.folder.parent, model, ["earl_s2"], n, count)
    assert again["earl_s2"].folder == s2.folder  # opened, not rebuilt
    half = build_stores(tmp_path, model, ["earl_s1", "earl_s2"], n, count, dtype="fp16", documents="random")
    assert half["earl_s2"].bytes_per_document == s2.bytes_per_document / 2


@slow
def test_fp16_rows_are_converted_and_score_close_to_fp32(tiny, tmp_path):
    model, _, _, n, count = tiny
    half = build_stores(tmp_path, model, ["earl_s2"], n, count, dtype="fp16")["earl_s2"]
    tokens, mask = bert_query(benchmark.QUERY_LENGTH, 0)
    with torch.inference_mode():
        scores = benchmark.EarlScorer(model, half, n, batch_size=2)(tokens, mask, half.doc_ids)
    assert scores.dtype == torch.float32
    torch.testing.assert_close(scores, forward_scores(model, n, count), atol=2e-2, rtol=0)


@slow
def test_flop_counts_agree_with_the_counted_analytic_cost(tiny):
    """FlopCounterMode's FLOPs are 2 per multiply-add of `COUNTED`'s cost, but for what Table 1 leaves out: the score
    head (2 h per candidate), the first block's query projection, done once per batch, not per candidate, and, with
    ClsPool, the last block's work at the q - 1 positions after [CLS] (`EARL.judge`): per candidate, the
    self-attention's query and output projections (2 h^2 a position), its scores and weighted sum (2 q h) and the
    FFN (2 i h)."""
    model, ranker, stores, n, count = tiny
    h, q = TINY.hidden, benchmark.QUERY_LENGTH
    tokens, mask = bert_query(q, 0)
    one = bert_pairs(tokens, document_words(n, 1, 0))
    with torch.inference_mode():
        ranker_flops = count_flops(lambda: ranker(one))
    assert ranker_flops == 2 * TINY.cost("bert_ranker", q, n, 1) + 2 * h
    candidates, batch = 7, 2
    calls = math.ceil(candidates / batch)
    for impl in ("earl_s1", "earl_s2"):
        scorer = benchmark.EarlScorer(model, stores[impl], n, batch_size=batch)
        with torch.inference_mode():
            flops = benchmark.earl_flops(scorer, tokens, mask, stores[impl].doc_ids, candidates)
        skipped = (q - 1) * (2 * h * h + 2 * q * h + 2 * TINY.intermediate * h)  # ClsPool's last block
        macs = TINY.cost(impl, q, n, candidates) - (candidates - calls) * h * h * q - candidates * skipped
        assert model.pool == "cls" and flops == 2 * macs + candidates * 2 * h


@slow
def test_the_dtype_choices_are_the_stores_row_types():
    """The benchmark names them without importing earl.store (which loads torch)."""
    assert benchmark.DTYPES == tuple(ROW_TYPES)


@slow
def test_help_is_fast_and_lists_the_options():
    import subprocess

    done = subprocess.run([sys.executable, "-m", "earl.benchmark", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stderr == ""
    for option in ("--size", "--lengths", "--candidates", "--ranker_candidates", "--batch_size", "--earl_batch_size",
                   "--dtype", "--repeats", "--output_dir", "--json", "--overwrite", "--store_dir", "--store_documents",
                   "--store_gb"):
        assert option in done.stdout


# --- the store reads: the quick tier -----------------------------------------------------------------------------


def test_candidates_are_drawn_afresh_each_repeat_and_scatter_over_the_shards():
    """A BM25 top 1,000 over a store of 100,000 documents in shards of 1,000: distinct, in no store order, nearly
    every shard touched, another draw each repeat (and the same one for the same seed and repeat)."""
    draws = [draw_candidates(100_000, 1000, seed=0, repeat=repeat) for repeat in range(4)]
    for positions in draws:
        assert positions.shape == (1000,) and len(set(positions.tolist())) == 1000
        assert positions.min() >= 0 and positions.max() < 100_000
        assert not (np.diff(positions) > 0).all()  # not sorted: no run of neighbours read in store order
        assert len(np.unique(positions // 1000)) >= 95  # about min(N, shards) = 100 shards
    for first, second in zip(draws, draws[1:]):
        assert len(set(first.tolist()) & set(second.tolist())) < 50  # ~10 expected by chance: not the same rows
    np.testing.assert_array_equal(draw_candidates(100_000, 1000, seed=0, repeat=2), draws[2])
    assert not np.array_equal(draw_candidates(100_000, 1000, seed=1, repeat=2), draws[2])
    assert sorted(draw_candidates(5, 5, seed=0, repeat=0).tolist()) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="cannot draw 6 distinct candidates from 5 documents"):
        draw_candidates(5, 6, seed=0, repeat=0)


def test_noise_documents_depend_on_the_position_only():
    shard = noise_documents(7, first=1000, count=5, rows=3, width=4, dtype="float16")
    assert shard.shape == (5, 3, 4) and shard.dtype == np.float16
    np.testing.assert_array_equal(noise_documents(7, first=1003, count=1, rows=3, width=4, dtype="float16")[0],
                                  shard[3])
    assert len({document.tobytes() for document in shard}) == 5  # every document its own bytes
    assert not np.array_equal(noise_documents(8, first=1000, count=5, rows=3, width=4, dtype="float16"), shard)
    assert abs(float(noise_documents(0, 0, 200, 64, 64).std()) - 1) < 0.05  # standard normal noise


def test_the_median_query_keeps_its_parts():
    odd = [{"ms": 5.0, "read_ms": 4.0}, {"ms": 1.0, "read_ms": 0.5}, {"ms": 3.0, "read_ms": 1.0}]
    assert median_query(odd) == {"ms": 3.0, "read_ms": 1.0}
    even = [*odd, {"ms": 4.0, "read_ms": 3.0}]  # the middle two: 3.0 and 4.0
    assert median_query(even) == {"ms": 3.5, "read_ms": 2.0}


def in_memory(path: Path) -> bool:
    """Whether `path` lies on a file system kept in memory (tmpfs, ramfs), whose pages cannot be dropped."""
    mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    path = str(path.resolve())
    mount = max((m for m in mounts if path == m[1] or path.startswith(m[1].rstrip("/") + "/")),
                key=lambda m: len(m[1]))
    return mount[2] in ("tmpfs", "ramfs")


@pytest.mark.skipif(not Path("/proc/mounts").exists(), reason="Linux only: posix_fadvise and mincore")
def test_evicted_files_are_read_from_disk(tmp_path):
    if in_memory(tmp_path):
        pytest.skip(f"{tmp_path} is on a file system kept in memory: its pages cannot be dropped")
    path = tmp_path / "rows.bin"
    noise_documents(0, 0, 64, 256, 256).tofile(path)  # 16 MiB, in the page cache once written
    assert cached_fraction([path]) > 0.9
    assert evict_from_page_cache([path]) is True
    assert cached_fraction([path]) == 0.0
    rows = np.memmap(path, dtype=np.float32, mode="r", shape=(64, 256, 256))
    np.testing.assert_array_equal(rows[5], noise_documents(0, 5, 1, 256, 256)[0])  # read back from disk
    assert 0 < cached_fraction([path]) < 1  # that document's pages (and the kernel's read-ahead), not all
    del rows


@pytest.mark.parametrize("dtype", ["fp16", "fp32", "int8"])
def test_the_timed_reads_are_exactly_the_rows_written(tiny, tmp_path, dtype):
    """Candidates drawn over stores of 2,500 noise documents in shards of 1,000, read as the benchmark times them
    (looked up at once, copied into the batch tensor, fp16 converted to fp32): the very rows written; int8's within
    half a row's scale (max|x| / 127) of the float32 noise written, in a store of width + 4 bytes a row."""
    model, n, count = tiny[0], 12, 2500
    stores = random_stores(tmp_path, model, name="tiny", checkpoint="random weights, seed 3, size tiny",
                           strategies=["s1", "s2"], n=n, count=count, dtype=dtype, documents="random", seed=3,
                           shard_size=benchmark.SHARD_SIZE, batch_size=2)
    for impl in ("earl_s1", "earl_s2"):
        store = stores[benchmark.STRATEGY[impl]]
        assert (len(store), store.manifest["shard_size"], len(store.manifest["shards"])) == (count, 1000, 3)
        positions = draw_candidates(count, 7, seed=3, repeat=0)
        scorer = benchmark.EarlScorer(model, store, n, batch_size=7)
        rows = scorer.read(candidate_ids(positions))
        noise = "float32" if dtype == "int8" else ROW_TYPES[dtype]
        written = np.stack([noise_documents(3 * 1_000_003 + n, p, 1, n, store.width, noise)[0]
                            for p in positions.tolist()])
        assert rows.dtype == torch.float32 and rows.shape == (7, n, store.width)
        if dtype != "int8":
            np.testing.assert_array_equal(rows.numpy(), written.astype(np.float32))
            continue
        assert store.bytes_per_document == n * (store.width + 4) == benchmark.store_bytes_per_document(
            TINY, benchmark.STRATEGY[impl], n, "int8")
        half_scale = np.abs(written).max(axis=2, keepdims=True) / 127 / 2  # (7, n, 1)
        error = np.abs(rows.numpy() - written)
        assert (error <= half_scale * (1 + 1e-4)).all() and error.max() > 0.3 * half_scale.min()
