"""mva.benchmark (MVA Tables 5-6, measured): the rows it writes, its MACs and bytes against Table 5's counts worked by
hand and its printed numbers, each timed MVA step against Table 5's operating point, `torch.utils.flop_counter` and
the score written out, CA's linear scaling, the store reads beside the compute (candidates drawn afresh over stores of
2,000 documents, read cold, exactly the rows written), the files and its refusals, on a fast setting (small size, 20
candidates, CA timed on 2). No timing is asserted.
"""

import csv
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from common.benchmarks.store_reads import StoreReads, candidate_ids, draw_candidates, noise_documents
from mva import benchmark
from mva.costs import TABLE5_NAMES
from mva.model import MultiVectorAttention
from tests.benchmark_runs import assert_refuses_to_overwrite, run_main
from tests.mva import by_hand, paper

pytestmark = pytest.mark.usefixtures("one_thread")
slow = pytest.mark.slow  # the second tier (README, "Tests"); the tests without it are the quick tier's

N, CA_TIMED, DOCUMENTS = 20, 2, 2000
CLI = ["--size", "small", "--candidates", str(N), "--ca_candidates", str(CA_TIMED), "--repeats", "2",
       "--ca_repeats", "1", "--batch_size", "2", "--threads", "1", "--store_documents", str(DOCUMENTS)]
#: The columns of results/mva/speed.csv, in order.
FIELDS = ["bench", "impl", "size", "candidates", "timed_candidates", "extrapolated", "ms", "read_ms", "compute_ms",
          "warm_read_ms", "timed_ms", "macs", "mflops", "gflops_per_s", "compute_gflops_per_s", "matmul_shape",
          "matmul_gflops_per_s", "square_matmul_gflops_per_s", "compute_matmul_ratio", "ca_time_ratio",
          "ca_compute_ratio", "ca_macs_ratio", "storage_floats", "bytes_per_document", "store_documents", "shard_size",
          "candidate_shards", "store_cached", "setting", "query_timesteps", "doc_timesteps",
          "projection", "heads", "hidden_size", "num_layers", "intermediate_size", "pair_tokens", "batch_size",
          "repeats", "device", "gpu", "cpu", "threads", "load_1min"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One in-process run with --json, its stdout captured."""
    out = tmp_path_factory.mktemp("mva_bench")
    code, stdout = run_main(benchmark.main, [*CLI, "--json", "--output_dir", str(out)])
    return code, out, [json.loads(line) for line in stdout.splitlines()]


@slow
def test_rows_have_every_impl_and_column(run):
    code, _, rows = run
    assert code == 0
    assert [r["impl"] for r in rows] == ["de", "mva1", "mva2", "mva3", "ca"]
    for row in rows:
        assert list(row) == FIELDS
        assert (row["candidates"], row["size"], row["device"], row["threads"]) == (N, "small", "cpu", 1)
        assert row["ms"] > 0 and row["cpu"]
        assert row["gflops_per_s"] == pytest.approx(2 * row["macs"] / row["ms"] / 1e6, rel=1e-12)
    ca = rows[-1]
    for row in rows:
        assert row["ca_time_ratio"] == pytest.approx(ca["ms"] / row["ms"], rel=1e-12)
        assert row["ca_macs_ratio"] == pytest.approx(ca["macs"] / row["macs"], rel=1e-12)
    assert ca["ca_time_ratio"] == ca["ca_macs_ratio"] == 1.0


def test_the_total_is_the_store_read_plus_the_compute(run):
    """DE's and MVA's ms is their median query's read_ms + compute_ms over a store of 2,000 documents (2 shards); CA
    reads no store; the ratios to CA on the total and on the compute alone."""
    code, out, rows = run
    assert code == 0
    ca = rows[-1]
    for row in rows[:-1]:
        assert row["ms"] == pytest.approx(row["read_ms"] + row["compute_ms"], rel=1e-9)
        assert row["read_ms"] > 0 and row["compute_ms"] > 0 and row["warm_read_ms"] > 0
        assert (row["store_documents"], row["shard_size"]) == (DOCUMENTS, 1000) and 1 <= row["candidate_shards"] <= 2
        assert row["store_cached"] is None or 0 <= row["store_cached"] <= 1
        assert row["compute_gflops_per_s"] == pytest.approx(2 * row["macs"] / row["compute_ms"] / 1e6, rel=1e-12)
        assert row["ca_compute_ratio"] == pytest.approx(ca["ms"] / row["compute_ms"], rel=1e-12)
        assert row["ca_compute_ratio"] > row["ca_time_ratio"]
        m, k, n = benchmark.matmul_shape(row["impl"], benchmark.SIZES["small"], N)
        assert row["matmul_shape"] == f"{m} x {k} by {k} x {n}"
        assert row["matmul_gflops_per_s"] > 0 and row["square_matmul_gflops_per_s"] > 0
        assert row["compute_matmul_ratio"] == pytest.approx(row["compute_gflops_per_s"] / row["matmul_gflops_per_s"],
                                                            rel=1e-12)
    assert len({row["matmul_gflops_per_s"] for row in rows[:-1]}) == len(rows) - 1  # each its own timing
    assert (ca["read_ms"], ca["warm_read_ms"], ca["store_documents"], ca["compute_ms"]) == (None, None, None, ca["ms"])
    assert ca["matmul_shape"] is ca["matmul_gflops_per_s"] is ca["compute_matmul_ratio"] is None
    with open(out / "speed.csv", newline="") as f:
        assert list(next(csv.DictReader(f))) == FIELDS


@pytest.mark.parametrize("impl", ["de", "mva1", "mva2", "mva3"])
def test_the_timed_reads_are_exactly_the_rows_written(tmp_path, impl):
    """Candidates drawn over a store of 2,500 noise documents in shards of 1,000, read as timed (looked up at once,
    copied into the batch tensor): the very rows written, of the method's shape, which its head scores."""
    rows, width = benchmark.store_shape(impl, benchmark.SIZES["small"])
    store = benchmark.noise_store(tmp_path, impl, rows, width, 2500, seed=3)
    assert (len(store), store.width, store.dtype, len(store.manifest["shards"])) == (2500, width, "float32", 3)
    assert store.bytes_per_document == benchmark.FLOAT_BYTES * benchmark.cost(impl, benchmark.SIZES["small"])[1]
    positions = draw_candidates(2500, 6, seed=3, repeat=1)
    documents = StoreReads(store, 6, rows)(candidate_ids(positions))
    written = np.stack([noise_documents(3 * 1_000_003 + rows, p, 1, rows, width)[0] for p in positions.tolist()])
    assert documents.shape == (6, rows, width)
    np.testing.assert_array_equal(documents.numpy(), written)
    point = benchmark.POINTS.get(impl)
    with torch.inference_mode():
        score = benchmark.mva_head(point, 6, "cpu", 0) if point else benchmark.de_head(width, "cpu", 0)
        scores = score(documents)
    assert scores.shape == (6,) and torch.isfinite(scores).all()
    assert benchmark.noise_store(tmp_path, impl, rows, width, 2500, seed=3).folder == store.folder  # reopened


@pytest.mark.parametrize("impl", ["mva1", "mva2", "mva3"])
def test_each_timed_mva_step_is_table5s_head_doing_the_reported_work(impl, monkeypatch):
    """The operating point of each timed MVA step is Table 5's row as its config and printed footnote give it
    (`tests.mva.paper.operating_point`). Timed over 3 candidates, the step runs
    `MultiVectorAttention.score_candidates` once, on every candidate, whose matrix products `FlopCounterMode` counts
    at 2 q d H p multiply-adds a candidate (2 FLOPs each); with the q H p dot products with Q_V that is the MACs the
    benchmark reports (`benchmark.cost`), and a candidate's rows are the floats it reports stored. Each score it
    returns is Sec. 2.1's score of the Q_K, Q_V and [D_K | D_V] it was given, written out (`tests.mva.by_hand`; fp32
    against Python floats), and within 1e-5 of the reference `MultiVectorAttention.score` of the query spread over
    the candidates."""
    point = benchmark.POINTS[impl]
    q, d, p, heads = paper.operating_point(TABLE5_NAMES[benchmark.LABELS[impl]])
    assert tuple(point) == (q, d, p, heads)
    calls, score = [], MultiVectorAttention.score_candidates

    def spy(head, *arguments):
        calls.append((head, arguments))
        return score(head, *arguments)

    monkeypatch.setattr(MultiVectorAttention, "score_candidates", spy)
    step = benchmark.mva_head(point, 3, "cpu", seed=0)
    documents = torch.randn(3, d, 2 * heads * p, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        scores = step(documents)
    products = sum(n for op, n in counter.get_flop_counts()["Global"].items()
                   if op in (torch.ops.aten.mm, torch.ops.aten.bmm))
    assert products == counter.get_total_flops() == 3 * 2 * (2 * q * d * heads * p)
    macs, floats, _ = benchmark.cost(impl, benchmark.SIZES["base"])
    assert macs == products // 2 // 3 + q * heads * p and floats == documents[0].numel()
    ((head, (keys, values, keep, rows, doc_keep)),) = calls
    assert rows is documents and keep.all() and doc_keep.all() and keys.shape == values.shape == (q, heads * p)
    for c in range(3):
        expected = by_hand.score_projected(keys, values, *rows[c].split(heads * p, -1), p, heads)
        assert scores[c].item() == pytest.approx(expected, rel=1e-5, abs=1e-5)
    assert len(set(scores.tolist())) == 3
    with torch.inference_mode():
        reference = head.score(keys.expand(3, -1, -1), values.expand(3, -1, -1), keep.expand(3, -1), rows, doc_keep)
    torch.testing.assert_close(scores, reference, atol=1e-5, rtol=0)


@pytest.mark.parametrize("impl", ["de", "mva1", "mva2", "mva3"])
def test_the_yardstick_is_one_matmul_of_the_heads_flops_over_the_rows_it_reads(impl, tmp_path, monkeypatch):
    """The yardstick of a head's compute: one fp32 ``torch.matmul`` of a seeded (m, k) matrix and the rows the head
    reads, MVA's (q, 2 H p) x [D_K | D_V]^T (2 H p, d C), whose FLOPs are the MACs `mva.costs` counts less the q H p
    dot products with Q_V, twice; DE's (1, h) x (h, C), its MACs exactly. Each timed query copies its candidates' rows
    in, scores them, copies the same rows in again and runs the yardstick on them: the product is checked against a
    float64 ``a @ rows^T`` of the rows written to the store, and ``matmul_ms`` is the median of the queries'."""
    size, candidates = benchmark.SIZES["small"], 3
    m, k, n = benchmark.matmul_shape(impl, size, candidates)
    macs, _, _ = benchmark.cost(impl, size)
    point = benchmark.POINTS.get(impl)
    assert m * k * n == candidates * (macs - (point.query * point.heads * point.projection if point else 0))
    rows, width = benchmark.store_shape(impl, size)
    assert (k, n) == (width, rows * candidates)  # the store's rows, as they are read
    store = benchmark.noise_store(tmp_path, impl, rows, width, 10, seed=4)
    products, matmul, order = [], torch.matmul, []

    def spy(a, b):
        products.append((a, b.clone(), matmul(a, b)))
        return products[-1][2]

    monkeypatch.setattr(torch, "matmul", spy)
    args = type("Args", (), {"device": "cpu", "candidates": candidates, "repeats": 3, "seed": 0})
    result = benchmark.time_store_queries(store, lambda documents: order.append("head"),
                                          benchmark.yardstick((m, k, n), "cpu", seed=0), args)
    assert len(products) == 1 + 3 + 3  # the warm-up's, then each cold and each warm query's
    for repeat, (a, b, out) in enumerate(products[1:4]):
        ids = candidate_ids(draw_candidates(10, candidates, seed=0, repeat=repeat))
        written = torch.from_numpy(np.stack(store.get_many(ids))).view(n, k)  # the store's rows, no reader's copy
        assert a.shape == (m, k) and a.dtype == torch.float32 and b.shape == (k, n)
        torch.testing.assert_close(b, written.T, atol=0, rtol=0)
        torch.testing.assert_close(out, a.double().matmul(written.T.double()).float(), atol=1e-4, rtol=1e-5)
    assert order == ["head"] * 7
    assert result["matmul_ms"] > 0 and result["compute_ms"] > 0


#: MACs per candidate and floats stored per document, worked by hand from Sec. 2.1 at Table 5's operating points:
#: MVA scores with H (2 q d p + q p) MACs (Q_K D_K^T and softmax(.) D_V, then q dot products with Q_V) and stores
#: 2 d H p floats (D_K and D_V); DE a dot product of h; CA a BERT of L layers, width h, FFN i over n = 128 tokens,
#: L (n (4 h^2 + 2 h i) + 2 n^2 h). H = 1 throughout.
BY_HAND = {
    "base": {
        "mva1": (126_336, 17_920),  # q 7, d 70, p 128: 2*7*70*128 + 7*128 = 125,440 + 896; 2*70*128
        "mva2": (25_088, 3_072),  # q 8, d 24, p 64: 2*8*24*64 + 8*64 = 24,576 + 512; 2*24*64
        "mva3": (8_448, 1_024),  # q 8, d 16, p 32: 2*8*16*32 + 8*32 = 8,192 + 256; 2*16*32
        "de": (768, 768),
        # 12 * (128 * (4*768^2 + 2*768*3072) + 2*128^2*768) = 12 * (905,969,664 + 25,165,824)
        "ca": (11_173_625_856, 0),
    },
    "small": {  # the MVA points do not depend on the size; DE's h and CA's BERT are the MiniLM's (L 6, h 384, i 1536)
        "mva1": (126_336, 17_920), "mva2": (25_088, 3_072), "mva3": (8_448, 1_024),
        "de": (384, 384),
        # 6 * (128 * (4*384^2 + 2*384*1536) + 2*128^2*384) = 6 * (226,492,416 + 12,582,912)
        "ca": (1_434_451_968, 0),
    },
}


@slow
def test_macs_and_bytes_are_table5s_worked_by_hand(run):
    """The rows written carry the MACs over N candidates and the bytes per document worked by hand (`BY_HAND`) at
    Table 5's operating points (q, d, p, H from the configs and the printed footnotes,
    `tests.mva.paper.operating_point`) and at the small size's BERT."""
    rows = {r["impl"]: r for r in run[2]}
    assert rows.keys() == BY_HAND["small"].keys()
    for impl, (macs, floats) in BY_HAND["small"].items():
        assert (rows[impl]["macs"], rows[impl]["bytes_per_document"]) == (N * macs, 4 * floats), impl
        assert rows[impl]["storage_floats"] == floats
    for impl in ("mva1", "mva2", "mva3"):
        q, d, p, heads = paper.operating_point(TABLE5_NAMES[benchmark.LABELS[impl]])
        assert heads == 1
        assert (rows[impl]["query_timesteps"], rows[impl]["doc_timesteps"], rows[impl]["projection"]) == (q, d, p)


@slow
def test_base_size_is_table_5():
    """At base size, each row's MACs per candidate and floats per document are those worked by hand (`BY_HAND`);
    the floats are Table 5's printed storage, and the MACs over 1,000 candidates its printed joint compute within
    one unit of its last digit (CA: 11,173,625.856 M against a printed 11,000,000)."""
    last_digit = {"DE (Ours)": 0.1, "MVA¹": 10, "MVA²": 1, "MVA³": 1, "CA (Ours)": 1_000_000}
    for impl, (macs, floats) in BY_HAND["base"].items():
        assert benchmark.cost(impl, benchmark.SIZES["base"])[:2] == (macs, floats), impl
        name = TABLE5_NAMES[benchmark.LABELS[impl]] if impl.startswith("mva") else f"{benchmark.LABELS[impl]} (Ours)"
        assert floats == paper.printed("5", name, "storage_floats_per_doc")
        assert abs(macs * 1000 / 1e6 - paper.printed("5", name, "joint_compute_mflops")) <= last_digit[name], impl


@slow
def test_ca_is_timed_on_fewer_and_scaled_linearly(run):
    rows = run[2]
    ca = rows[-1]
    assert (ca["timed_candidates"], ca["extrapolated"]) == (CA_TIMED, True)
    assert ca["ms"] == pytest.approx(ca["timed_ms"] * ca["candidates"] / ca["timed_candidates"], rel=1e-12)
    for row in rows[:-1]:
        assert (row["timed_candidates"], row["extrapolated"], row["ms"]) == (N, False, row["timed_ms"])


@slow
def test_files_hold_the_same_rows_and_are_not_overwritten(run):
    _, out, rows = run
    assert [json.loads(line) for line in (out / "speed.jsonl").read_text().splitlines()] == rows
    with open(out / "speed.csv", newline="") as f:
        written = list(csv.DictReader(f))
    assert list(written[0]) == FIELDS
    assert [(w["impl"], int(w["macs"]), float(w["ms"])) for w in written] == [(r["impl"], r["macs"], r["ms"])
                                                                              for r in rows]
    assert (out / "speed.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert_refuses_to_overwrite(benchmark.main, [*CLI, "--output_dir", str(out)], out)


@slow
def test_the_timed_de_step_scores_every_candidate():
    """DE's timed call gives each candidate's dot product with the query's vector. (MVA's timed step, against the
    score written out: `test_each_timed_mva_step_is_table5s_head_doing_the_reported_work`.)"""
    with torch.inference_mode():
        documents = torch.randn(5, 1, 16)
        torch.testing.assert_close(benchmark.de_head(16, "cpu", seed=0)(documents),
                                   documents[:, 0] @ torch.randn(16, generator=torch.Generator().manual_seed(0)))


@slow
@pytest.mark.parametrize("args, message", [
    (["--candidates", "0"], "error: argument --candidates: must be a positive integer, got 0"),
    (["--ca_candidates", "-1"], "error: argument --ca_candidates: must be a positive integer, got -1"),
    (["--repeats", "0"], "error: argument --repeats: must be a positive integer, got 0"),
    (["--size", "huge"], "error: argument --size: invalid choice: 'huge' (choose from 'base', 'small')"),
    (["--size", "small", "small"], "error: argument --size: small is given twice"),
    (["--candidates", "20", "--store_documents", "19"], "error: argument --store_documents: a query draws "
                                                        "--candidates 20 distinct documents; got 19"),
])
def test_bad_options_exit_2_in_one_line_without_torch(tmp_path, args, message):
    code = (f"import sys\nfrom mva.benchmark import main\ntry:\n    main({[*args, '--output_dir', str(tmp_path)]!r})\n"
            "except SystemExit as e:\n    print(e.code, 'torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stderr.splitlines() == [message]
    assert done.stdout.split() == ["2", "False"]
    assert not any(tmp_path.iterdir())


@slow
def test_help_lists_the_options():
    done = subprocess.run([sys.executable, "-m", "mva.benchmark", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith("usage: python -m mva.benchmark ")
    for option in ("--size", "--candidates", "--ca_candidates", "--device", "--repeats", "--output_dir", "--json",
                   "--overwrite", "--store_documents", "--store_dir"):
        assert option in done.stdout
