"""``python -m earl.benchmark``: time to rank one query's candidates with EARL S1, EARL S2 and the BERT ranker
(EARL paper Table 3, Sec. 5.2), beside Table 1's analytic cost and counted FLOPs.

EARL (Gao, Dai, Callan 2020), Sec. 5.2 "Ranking Speed": average time to evaluate one query (16 tokens) against
1,000 candidate documents of 128, 256 or 512 tokens, for EARL with the document representation reuse strategy
(S1: the store holds D, T_doc's output) and the transformed one (S2: the store holds D' = (D W_Y, D W_Z) of every
judge block, Eq. 25), against the BERT ranker; on CPU the paper reports 19.9x / 28.2x / 34.9x (S1) and 35.7x /
67.6x / 123.9x (S2) at d = 128 / 256 / 512. This command measures the same three on `earl.model`:

- ``bert_ranker``: `BertRanker` over ``[CLS] query [SEP] document [SEP]``: the query's 16 tokens ([CLS] and [SEP]
  included) and the document's n - 1 words and a [SEP], q + n tokens; pairs in batches of ``--batch_size``.
- ``earl_s1``: timed, per query: T_qry on the query (once), then per batch of ``--earl_batch_size`` candidates:
  their rows of D read from the memory-mapped store (`common.stores.representations`) into a preallocated tensor,
  the keys and values of D (the n^2 d term S2 saves) and `EARL.judge` (K judge blocks and the score). The keys
  and values are `EARL.document_keys_values` (``--keys_values model``: 2K products of width h, then their
  concatenation) or, by default, the same product with the 2K weights stacked once (``fused``,
  `fused_keys_values`: one product of width 2Kh, no concatenation; equal values, tested): at base size and d = 512
  the model's call ran at about half the FLOP rate of the fused one here, which alone kept S1 under 30x.
- ``earl_s2``: the same with the store holding D' (width 2·K·h): no keys and values at query time.

Both EARL paths are the model's own calls, with the query at batch 1 and ``query_index`` zeros (`EARL.judge`
projects the first block's cross-attention queries once per call, so once per batch, not once per candidate);
`EarlScorer` is what is timed and what the tests compare with `EARL.forward`.

Sizes (``--size``, several at once into one set of files): ``base`` = BERT-base (L = 12, h = 768, 12 heads, FFN
3072) with EARL's K = 2 judge blocks and l = 10 query layers (the paper's setting, Sec. 4.3); ``small`` = L = 4, h =
256, 4 heads, FFN 1024, K = 2, l = 2. Weights are random (`common.encoders.pretrained.bert_config`, seeded; T_qry and the blocks
are built by `build_earl` from that BERT, as Sec. 3.4): timing does not depend on them. The position table holds
q + max(--lengths) tokens (528 at d = 512, past BERT's 512: random weights, so nothing is lost). Everything runs in
``torch.inference_mode``, eval mode, fp32; ``--dtype fp16`` stores the rows in half precision (converted to fp32
after reading, inside ``read_ms``).

Stores: built before timing, in a temporary folder (removed after each length) or ``--store_dir`` (kept and
reused when its identity matches), one shard per ``--earl_batch_size`` documents, S1 and S2 from the same D.
``--documents encoded``: D is T_doc's output on random token ids ([CLS] and n - 1 words, the ranker's words);
``random``: D is seeded standard normal noise of the same shape, for sizes where encoding N documents offline
would take as long as the BERT ranker's whole measurement (the judge's cost does not depend on D's values). The
candidates are N distinct documents; their pages are read once, untimed, so the timed reads come from the page
cache, as for a store that fits in memory.

Timing (`common.benchmarking.median_ms`, ``--repeats`` timed queries after one untimed warm-up batch): ``ms`` is
the median wall-clock time per query; ``cpu_ms`` the median process CPU time of the same calls (``cpu_speedup``
their ratio). On a machine shared with other jobs, ``--threads 1`` with ``cpu_ms`` is the steadier measure: CPU
time does not count the time slices other processes take, and with two threads every parallel region waits for
both, so a core taken by another job stalls each small operation (T_qry's 16-token layers took ~0.9 s instead of
~0.09 s that way); ``load_1min`` records the load average at each measurement. EARL's parts are timed inside the same calls: ``query_ms`` (T_qry), ``read_ms``
(copying the candidates' rows out of the memory map, and fp16 -> fp32), ``keys_values_ms`` (S1) and ``judge_ms``;
each is the median over the repeats. The BERT ranker at base size costs about a second per candidate here, so it
is timed on ``--ranker_candidates`` candidates and scaled linearly to N (each candidate is independent work of
the same size): ``measured_candidates`` says how many were timed, ``extrapolated`` whether it was scaled.

Analytic cost (`analytic_cost`): Table 1, online, N documents, per layer, times the layer counts (L for the BERT
ranker, l for query understanding, K for the judge):

- BERT ranker: ``(a n (d+q)^2 + t n^2 (d+q)) N`` per layer, L layers;
- query understanding: ``a n q^2 + t n^2 q`` per layer, l layers, once;
- judge, S1: ``(a n (qd + q^2) + (j_q q + j_d d) n^2) N`` per block, K blocks; S2: without the ``j_d d n^2`` term.

Table 1 writes every constant as 1 (``TABLE1``, reported as ``table1_ratio``). Counted in multiply-adds of a
BERT layer (``COUNTED``, reported as ``analytic_ratio`` and ``analytic_macs``): a = 2 per attention pair and
hidden unit (Q K^T and the weighted sum of V), t = 12 n^2 per token (4 for the Q, K, V, output projections and 8
for the FFN's h -> 4h -> h); a judge block spends j_q = 14 n^2 per query token (the cross-attention's query and
output projections, 2; the self-attention's 4; the FFN's 8) and j_d = 2 n^2 per document token (the
cross-attention's keys and values, S1 only). Embeddings, LayerNorm, softmax and the score head are left out, as
in Table 1. ``flops`` are `torch.utils.flop_counter.FlopCounterMode` counts (2 per multiply-add; SDPA's CPU
kernel is added to its table) of the very calls timed, on 1 and 2 candidates, scaled to N: the query encoding
once, per-call work (the first block's query projection) once per batch, the rest per candidate; ``flop_ratio``
is the BERT ranker's over each row's, ``gflops_per_s`` = flops / ms, ``compute_gflops_per_s`` leaves the read out.
The analytic multiply-adds match the counted FLOPs / 2 closely (the tests check it): the difference is the first
block's query projection, done once per batch rather than per candidate, and the score head.

Outputs in ``--output_dir`` (default results/earl): ``speed.csv``, ``speed.jsonl`` (one row per size, impl and
length; the CPU model and the torch thread count in every row) and ``speed.png`` (ms per query against document
length, log scale, one panel per size), written atomically; existing files are refused without ``--overwrite``.
``--json`` prints each row as a JSON object on stdout as it is measured; everything else then goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from common.benchmarking import median_ms, refuse_existing, refuse_repeats, write_rows
from common.refusals import ArgumentParser, output_folder, positive_int

if TYPE_CHECKING:
    import torch

    from common.encoders.bert_rankers import BertRanker
    from common.stores.representations import RepresentationStore
    from earl.model import EARL

BENCH = "earl_speed"
IMPLS = ("bert_ranker", "earl_s1", "earl_s2")
EARL_IMPLS = ("earl_s1", "earl_s2")
STRATEGY = {"earl_s1": "s1", "earl_s2": "s2"}
PASS = "infer"
RESULTS = Path(__file__).resolve().parents[1] / "results" / "earl"
QUERY_LENGTH = 16  # Sec. 5.2: "we fixed query length at 16"
#: bert-base-uncased's vocabulary and special ids; random words are drawn from ids FIRST_WORD and up.
VOCAB_SIZE, PAD, CLS, SEP, FIRST_WORD = 30522, 0, 101, 102, 1000
DTYPES = {"fp32": "float32", "fp16": "float16"}
DOCUMENTS = ("encoded", "random")
KEYS_VALUES = ("fused", "model")
FIELDS = ["bench", "impl", "size", "n", "pass", "ms", "candidates", "measured_candidates", "extrapolated",
          "speedup", "cpu_ms", "cpu_speedup", "analytic_ratio", "table1_ratio", "flop_ratio", "affordable_candidates", "query_ms", "read_ms",
          "keys_values_ms", "keys_values", "judge_ms", "flops", "analytic_macs", "gflops_per_s", "compute_gflops_per_s",
          "store_dtype", "store_bytes_per_document", "documents", "batch_size", "query_length", "num_layers",
          "hidden_size", "num_heads", "intermediate_size", "judge_blocks", "query_layers", "repeats", "threads",
          "cpu", "load_1min"]


@dataclass(frozen=True)
class Size:
    """A model size: BERT's (L layers, hidden h, heads, FFN width) and EARL's K judge blocks and l query layers."""

    layers: int
    hidden: int
    heads: int
    intermediate: int
    blocks: int
    query_layers: int

    def describe(self) -> str:
        return (f"L={self.layers}, h={self.hidden}, {self.heads} heads, FFN {self.intermediate}; EARL "
                f"l={self.query_layers}, K={self.blocks}")


SIZES = {
    "base": Size(layers=12, hidden=768, heads=12, intermediate=3072, blocks=2, query_layers=10),  # the paper's
    "small": Size(layers=4, hidden=256, heads=4, intermediate=1024, blocks=2, query_layers=2),  # head width 64
}


# --------------------------------------------------------------------------- analytic cost (Table 1)


@dataclass(frozen=True)
class Constants:
    """Multiply-adds per term of Table 1 (see the module docstring): ``attention`` per attention pair and hidden
    unit, ``layer_token`` n^2 per token of a Transformer layer, ``judge_query_token`` and
    ``judge_document_token`` n^2 per query and per document token of a judge block."""

    attention: float
    layer_token: float
    judge_query_token: float
    judge_document_token: float


def counted_constants(hidden: int, intermediate: int) -> Constants:
    """Table 1's constants in multiply-adds for an FFN of width `intermediate`: 2 i h per token (8 h^2 at BERT's
    i = 4 h), so t = 4 + 2 i / h and j_q = 6 + 2 i / h."""
    ffn = 2 * intermediate / hidden
    return Constants(attention=2, layer_token=4 + ffn, judge_query_token=6 + ffn, judge_document_token=2)


TABLE1 = Constants(attention=1, layer_token=1, judge_query_token=1, judge_document_token=1)
COUNTED = counted_constants(768, 3072)  # a = 2, t = 12, j_q = 14, j_d = 2 (every size here has i = 4 h)


def analytic_cost(impl: str, *, n: int, q: int, d: int, documents: int, layers: int = 1, query_layers: int = 1,
                  blocks: int = 1, constants: Constants = TABLE1) -> float:
    """Table 1's online cost of ranking `documents` candidates for one query: hidden width `n`, query length `q`,
    document length `d`. With the default per-layer counts of 1 and `TABLE1`, exactly the table's cells (BERT
    ranker: ``(n(d+q)^2 + n^2(d+q)) N``; EARL: ``nq^2 + n^2 q`` plus ``(n(qd+q^2) + n^2(q+d)) N`` with S1 or
    ``(n(qd+q^2) + n^2 q) N`` with S2); with `COUNTED`, multiply-adds."""
    c = constants
    if impl == "bert_ranker":
        t = q + d
        return layers * (c.attention * n * t * t + c.layer_token * n * n * t) * documents
    if impl not in EARL_IMPLS:
        raise ValueError(f"unknown implementation {impl!r}")
    query = query_layers * (c.attention * n * q * q + c.layer_token * n * n * q)
    judge = c.attention * n * (q * d + q * q) + c.judge_query_token * n * n * q
    if impl == "earl_s1":
        judge += c.judge_document_token * n * n * d
    return query + blocks * judge * documents


def size_cost(impl: str, size: Size, n: int, documents: int, constants: Constants | None = None) -> float:
    """`analytic_cost` at `size` (query length 16, document length n), in multiply-adds by default."""
    constants = constants or counted_constants(size.hidden, size.intermediate)
    return analytic_cost(impl, n=size.hidden, q=QUERY_LENGTH, d=n, documents=documents, layers=size.layers,
                         query_layers=size.query_layers, blocks=size.blocks, constants=constants)


# --------------------------------------------------------------------------- models and inputs


def build_models(size: Size, max_length: int, seed: int) -> tuple[EARL, BertRanker]:
    """EARL and the BERT ranker of `size`, random weights from `seed`, in eval mode; the ranker's BERT is EARL's
    T_doc (the same modules: same size, and T_qry and the judge blocks are built from it)."""
    import torch
    from transformers import BertModel

    from common.encoders.bert_rankers import BertRanker
    from common.encoders.pretrained import bert_config
    from earl.model import build_earl

    torch.manual_seed(seed)
    config = bert_config(vocab_size=VOCAB_SIZE, pad_token_id=PAD, num_layers=size.layers, hidden_size=size.hidden,
                         num_heads=size.heads, intermediate_size=size.intermediate, dropout=0.1,
                         max_length=max_length)  # fmt: skip
    bert = BertModel(config, add_pooling_layer=False)
    model = build_earl(bert, num_blocks=size.blocks, query_layers=size.query_layers).eval()
    return model, BertRanker(bert).eval()


def query_tokens(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The query, (1, 16) ids ``[CLS] 14 words [SEP]``, and its mask."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    words = torch.randint(FIRST_WORD, VOCAB_SIZE, (1, QUERY_LENGTH - 2), generator=generator)
    tokens = torch.cat([torch.tensor([[CLS]]), words, torch.tensor([[SEP]])], dim=1)
    return tokens, torch.ones_like(tokens)


def document_words(n: int, count: int, seed: int) -> torch.Tensor:
    """`count` documents' n - 1 random words each, (count, n - 1), the same for every implementation."""
    import torch

    generator = torch.Generator().manual_seed(seed * 1_000_003 + n)
    return torch.randint(FIRST_WORD, VOCAB_SIZE, (count, n - 1), generator=generator)


def document_tokens(words: torch.Tensor) -> torch.Tensor:
    """EARL's documents: ``[CLS]`` and the words, n tokens each."""
    import torch

    return torch.cat([torch.full((len(words), 1), CLS), words], dim=1)


def pair_batch(query: torch.Tensor, words: torch.Tensor) -> dict[str, torch.Tensor]:
    """The BERT ranker's input ``[CLS] query [SEP] words [SEP]`` (q + n tokens) for each document of `words`."""
    import torch

    count = len(words)
    tokens = torch.cat([query.expand(count, -1), words, torch.full((count, 1), SEP)], dim=1)
    types = torch.zeros_like(tokens)
    types[:, query.shape[1]:] = 1
    return {"pair_tokens": tokens, "pair_mask": torch.ones_like(tokens), "pair_types": types}


def doc_ids(count: int) -> list[str]:
    return [f"d{i}" for i in range(count)]


# --------------------------------------------------------------------------- stores


def store_identity(size_name: str, size: Size, impl: str, n: int, count: int, documents: str, seed: int) -> dict:
    """What a store's rows are made from: everything that changes them (`common.stores.representations` checks it)."""
    return {"checkpoint": f"random weights, seed {seed}, size {size_name} ({size.describe()})",
            "strategy": STRATEGY[impl], "length": n, "documents": documents, "count": count}


def build_stores(root: Path, model: EARL, *, size_name: str, size: Size, impls: list[str], n: int, count: int,
                 dtype: str, documents: str, seed: int, shard_size: int, batch_size: int,
                 ) -> dict[str, RepresentationStore]:  # fmt: skip
    """The S1 and/or S2 stores (`impls`) of `count` documents of n tokens under `root`, from one pass over D.

    An existing finished store of the same identity is opened, not rebuilt; an unfinished one is resumed.
    """
    import torch

    from common.stores.representations import MANIFEST, RepresentationStore, StoreWriter

    ids = doc_ids(count)
    stores, writers = {}, {}
    for impl in impls:
        folder = root / f"{size_name}_n{n}_{STRATEGY[impl]}_{dtype}_{documents}_{count}"
        identity = store_identity(size_name, size, impl, n, count, documents, seed)
        if (folder / MANIFEST).exists():
            stores[impl] = RepresentationStore.open(folder, expect=identity)
            continue
        width = size.hidden * (1 if impl == "earl_s1" else 2 * size.blocks)
        writers[impl] = StoreWriter(folder, doc_ids=ids, width=width, dtype=DTYPES[dtype], shard_size=shard_size,
                                    identity=identity, extra={"judge_blocks": size.blocks, "heads": size.heads},
                                    resume=True)  # fmt: skip
    if writers:
        words = document_words(n, count, seed) if documents == "encoded" else None
        pending = sorted(set().union(*(set(w.pending()) for w in writers.values())))
        keys_values = fused_keys_values(model)  # D' as EARL.document_keys_values computes it, in one product
        with torch.inference_mode():
            for shard in pending:
                first = shard * shard_size
                last = min(first + shard_size, count)
                if words is None:
                    generator = torch.Generator().manual_seed(seed * 1_000_003 + n * 7919 + shard)
                    hidden = torch.randn(last - first, n, size.hidden, generator=generator)
                else:
                    tokens = document_tokens(words[first:last])
                    hidden = torch.cat([model.encode_documents(part, torch.ones_like(part))
                                        for part in tokens.split(batch_size)])  # fmt: skip
                for impl, writer in writers.items():
                    if shard in writer.pending():
                        rows = hidden if impl == "earl_s1" else keys_values(hidden)
                        writer.write_shard(shard, list(rows))
        for impl, writer in writers.items():
            stores[impl] = writer.finish()
    return {impl: stores[impl] for impl in impls}


# --------------------------------------------------------------------------- what is timed


def fused_keys_values(model: EARL):
    """`EARL.document_keys_values` as one matrix product: every block's key and value projections stacked into one
    (2 K h, h) weight (built once, offline), so D' = D W^T + b in one pass over D, in the same layout (block i's
    keys, then its values) and to the same values; the model's call runs 2 K products of width h and concatenates
    their outputs, another write and read of D'."""
    import torch
    import torch.nn.functional as F

    weight = torch.cat([p for block in model.blocks for p in (block.cross.key.weight, block.cross.value.weight)])
    bias = torch.cat([p for block in model.blocks for p in (block.cross.key.bias, block.cross.value.bias)])
    return lambda documents: F.linear(documents, weight, bias)


class EarlScorer:
    """Scores one query against candidates from a store as timed: T_qry once, then per batch of `batch_size`
    candidates their rows read into a preallocated tensor, keys and values (S1 only) and the judge.

    Every candidate has exactly `n` rows (the benchmark's documents). S1's keys and values are
    `EARL.document_keys_values` (`keys_values` ``model``) or the same product in one matrix product
    (``fused``, `fused_keys_values`). After each call ``parts`` holds the milliseconds of that call's query
    encoding, reads, keys and values, and judge.
    """

    def __init__(self, model: EARL, store: RepresentationStore, impl: str, n: int, batch_size: int,
                 keys_values: str = "fused"):  # fmt: skip
        import torch

        if impl not in EARL_IMPLS:
            raise ValueError(f"EarlScorer scores {', '.join(EARL_IMPLS)}, not {impl!r}")
        if keys_values not in KEYS_VALUES:
            raise ValueError(f"keys_values is one of {', '.join(KEYS_VALUES)}, not {keys_values!r}")
        self.model, self.store, self.impl, self.n = model, store, impl, n
        self.batch_size = batch_size
        self.keys_values = fused_keys_values(model) if keys_values == "fused" else model.document_keys_values
        stored = torch.float16 if store.dtype == "float16" else torch.float32
        self.rows = torch.empty(batch_size, n, store.width, dtype=stored)
        self.rows_numpy = self.rows.numpy()  # the same memory: numpy copies the memory map's rows into it
        self.compute = self.rows if stored == torch.float32 else torch.empty(batch_size, n, store.width)
        self.doc_mask = torch.ones(batch_size, n, dtype=torch.bool)
        self.query_index = torch.zeros(batch_size, dtype=torch.long)
        self.parts: dict[str, float] = {}

    def read(self, ids: list[str]) -> torch.Tensor:
        """The candidates' rows as a (len(ids), n, width) fp32 tensor (the preallocated buffer's first rows)."""
        import numpy as np

        for i, doc_id in enumerate(ids):
            np.copyto(self.rows_numpy[i], self.store.get(doc_id))
        count = len(ids)
        if self.compute is not self.rows:
            self.compute[:count].copy_(self.rows[:count])
        return self.compute[:count]

    def warm(self, ids: list[str]) -> None:
        """Read every candidate's rows once (untimed): their pages are then in the page cache."""
        for start in range(0, len(ids), self.batch_size):
            self.read(ids[start : start + self.batch_size])

    def judge_batch(self, queries: torch.Tensor, query_mask: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Scores of one batch of candidates from their rows (D for S1, D' for S2); times its two parts."""
        count = len(rows)
        start = time.perf_counter()
        keys_values = self.keys_values(rows) if self.impl == "earl_s1" else rows
        middle = time.perf_counter()
        scores = self.model.judge(queries, query_mask, keys_values, self.doc_mask[:count], self.query_index[:count])
        self.parts["keys_values_ms"] = self.parts.get("keys_values_ms", 0.0) + (middle - start) * 1000
        self.parts["judge_ms"] = self.parts.get("judge_ms", 0.0) + (time.perf_counter() - middle) * 1000
        return scores

    def __call__(self, tokens: torch.Tensor, mask: torch.Tensor, ids: list[str]) -> torch.Tensor:
        """Scores (len(ids),) of the candidates `ids` for the query `tokens` (1, q) with `mask`."""
        import torch

        self.parts = dict.fromkeys(("query_ms", "read_ms", "keys_values_ms", "judge_ms"), 0.0)
        start = time.perf_counter()
        queries = self.model.encode_queries(tokens, mask)  # (1, q, h): once per query
        query_mask = mask.bool()
        self.parts["query_ms"] = (time.perf_counter() - start) * 1000
        scores = torch.empty(len(ids))
        for first in range(0, len(ids), self.batch_size):
            chunk = ids[first : first + self.batch_size]
            before = time.perf_counter()
            rows = self.read(chunk)
            self.parts["read_ms"] += (time.perf_counter() - before) * 1000
            scores[first : first + len(chunk)] = self.judge_batch(queries, query_mask, rows)
        return scores


def rank_pairs(ranker: BertRanker, pairs: dict[str, torch.Tensor], batch_size: int) -> torch.Tensor:
    """The BERT ranker's scores of every pair of `pairs`, `batch_size` at a time."""
    import torch

    count = len(pairs["pair_tokens"])
    return torch.cat([ranker({k: v[i : i + batch_size] for k, v in pairs.items()})
                      for i in range(0, count, batch_size)])  # fmt: skip


# --------------------------------------------------------------------------- FLOP counts


def count_flops(step) -> int:
    """FLOPs `torch.utils.flop_counter.FlopCounterMode` counts in one call of `step` (SDPA's CPU flash kernel,
    which its table lacks, counted as its other SDPA kernels are)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

    def cpu_flash(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return sdpa_flop_count(query_shape, key_shape, value_shape)

    custom = {}
    if hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu"):
        custom[torch.ops.aten._scaled_dot_product_flash_attention_for_cpu] = cpu_flash
    with FlopCounterMode(display=False, custom_mapping=custom) as counter:
        step()
    return counter.get_total_flops()


def earl_flops(scorer: EarlScorer, tokens, mask, ids: list[str], candidates: int) -> int:
    """FLOPs of scoring `candidates` candidates as `scorer` does: T_qry once, per call (the first block's query
    projection) once per batch, per candidate the rest, from counts on 1 and 2 candidates."""
    queries = scorer.model.encode_queries(tokens, mask)
    query = count_flops(lambda: scorer.model.encode_queries(tokens, mask))
    one, two = (count_flops(lambda k=k: scorer.judge_batch(queries, mask.bool(), scorer.read(ids[:k])))
                for k in (1, 2))
    per_candidate = two - one
    calls = math.ceil(candidates / scorer.batch_size)
    return query + calls * (one - per_candidate) + candidates * per_candidate


# --------------------------------------------------------------------------- measuring


def cpu_model() -> str:
    """``model name`` of /proc/cpuinfo (the CPU's marketing name), or what platform says."""
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def timed(step, repeats: int) -> tuple[float, float]:
    """Median wall-clock ms of `repeats` calls of `step` (`common.benchmarking.median_ms`) and the median process
    CPU ms of the same calls (all threads' CPU time: with one thread, the time the work took whatever else the
    machine ran; with more, it counts their waits too)."""
    cpu = []

    def step_with_cpu_time():
        start = time.process_time()
        step()
        cpu.append((time.process_time() - start) * 1000)

    return median_ms(step_with_cpu_time, repeats, "cpu"), statistics.median(cpu)


def measure_ranker(ranker: BertRanker, n: int, args: argparse.Namespace) -> dict:
    """Time the BERT ranker on min(--ranker_candidates, N) pairs and scale to N; count FLOPs on one pair."""
    import torch

    measured = min(args.ranker_candidates, args.candidates)
    tokens, _ = query_tokens(args.seed)
    pairs = pair_batch(tokens, document_words(n, measured, args.seed))
    with torch.inference_mode():
        rank_pairs(ranker, {k: v[: args.batch_size] for k, v in pairs.items()}, args.batch_size)  # warm-up
        ms, cpu_ms = timed(lambda: rank_pairs(ranker, pairs, args.batch_size), args.repeats)
        one = {k: v[:1] for k, v in pairs.items()}
        flops = count_flops(lambda: ranker(one)) * args.candidates
    scale = args.candidates / measured
    return {"ms": ms * scale, "cpu_ms": cpu_ms * scale, "measured_candidates": measured,
            "extrapolated": measured < args.candidates, "flops": flops}


def measure_earl(model: EARL, store: RepresentationStore, impl: str, n: int, args: argparse.Namespace) -> dict:
    """Time EARL S1 or S2 (`impl`) on N candidates from `store`, after one untimed read of every candidate and
    one untimed batch; the parts are the medians over the timed queries."""
    import torch

    ids = doc_ids(args.candidates)
    tokens, mask = query_tokens(args.seed)
    scorer = EarlScorer(model, store, impl, n, min(args.earl_batch_size, args.candidates), args.keys_values)
    parts = []

    def step():
        scorer(tokens, mask, ids)
        parts.append(dict(scorer.parts))

    with torch.inference_mode():
        scorer.warm(ids)
        scorer(tokens, mask, ids[: scorer.batch_size])  # warm-up: one batch
        ms, cpu_ms = timed(step, args.repeats)
        flops = earl_flops(scorer, tokens, mask, ids, args.candidates)
    medians = {key: statistics.median(p[key] for p in parts) for key in parts[0]}
    return {"ms": ms, "cpu_ms": cpu_ms, "measured_candidates": args.candidates, "extrapolated": False, "flops": flops,
            **medians,
            "store_bytes_per_document": store.bytes_per_document}


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def make_row(impl: str, size_name: str, n: int, result: dict, ranker: dict | None, args: argparse.Namespace,
             context: dict) -> dict:
    """One output row: the measurement, its ratios to the BERT ranker's (`ranker`, None when not measured) and
    the setting."""
    size = SIZES[size_name]
    macs = size_cost(impl, size, n, args.candidates)
    analytic = size_cost("bert_ranker", size, n, args.candidates) / macs
    table1 = (size_cost("bert_ranker", size, n, args.candidates, TABLE1)
              / size_cost(impl, size, n, args.candidates, TABLE1))
    ms, flops = result["ms"], result["flops"]
    compute_ms = ms - result.get("read_ms", 0.0)
    ranker_ms = ranker["ms"] if ranker else None
    ranker_cpu_ms = ranker.get("cpu_ms") if ranker else None
    row = {"bench": BENCH, "impl": impl, "size": size_name, "n": n, "pass": PASS, "ms": round(ms, 3),
           "candidates": args.candidates, "measured_candidates": result["measured_candidates"],
           "extrapolated": result["extrapolated"],
           "speedup": _round(ranker_ms / ms, 2) if ranker_ms else None,
           "cpu_ms": round(result["cpu_ms"], 3),
           "cpu_speedup": _round(ranker_cpu_ms / result["cpu_ms"], 2) if ranker_cpu_ms else None,
           "analytic_ratio": round(analytic, 2), "table1_ratio": round(table1, 2),
           "flop_ratio": _round(ranker["flops"] / flops, 2) if ranker else None,
           "affordable_candidates": (math.floor(args.candidates * ms / ranker_ms)
                                     if ranker_ms and impl != "bert_ranker" else None),
           "query_ms": _round(result.get("query_ms"), 3), "read_ms": _round(result.get("read_ms"), 3),
           "keys_values_ms": _round(result.get("keys_values_ms"), 3) if impl == "earl_s1" else None,
           "keys_values": args.keys_values if impl == "earl_s1" else None,
           "judge_ms": _round(result.get("judge_ms"), 3),
           "flops": flops, "analytic_macs": round(macs), "gflops_per_s": round(flops / ms / 1e6, 2),
           "compute_gflops_per_s": round(flops / compute_ms / 1e6, 2),
           "store_dtype": args.dtype if impl != "bert_ranker" else None,
           "store_bytes_per_document": result.get("store_bytes_per_document"),
           "documents": args.documents if impl != "bert_ranker" else None,
           "batch_size": args.batch_size if impl == "bert_ranker" else min(args.earl_batch_size, args.candidates),
           "query_length": QUERY_LENGTH, "num_layers": size.layers, "hidden_size": size.hidden,
           "num_heads": size.heads, "intermediate_size": size.intermediate, "judge_blocks": size.blocks,
           "query_layers": size.query_layers, "repeats": args.repeats, **context}
    return row


def run_size(size_name: str, args: argparse.Namespace, store_root: Path, emit) -> list[dict]:
    """Every length and implementation of one size; `emit` is given each row as it is measured."""
    import torch

    size = SIZES[size_name]
    model, ranker = build_models(size, QUERY_LENGTH + max(args.lengths), args.seed)
    impls = [i for i in IMPLS if i in args.impls]
    rows = []
    for n in args.lengths:
        ranker_result = None
        # the ranker's FLOPs are needed for every row's ratio; its time only where it is measured
        if "bert_ranker" in impls:
            ranker_result = measure_ranker(ranker, n, args)
        else:
            tokens, _ = query_tokens(args.seed)
            one = pair_batch(tokens, document_words(n, 1, args.seed))
            with torch.inference_mode():
                ranker_result = {"ms": None, "flops": count_flops(lambda: ranker(one)) * args.candidates}
        if "bert_ranker" in impls:
            row = make_row("bert_ranker", size_name, n, ranker_result, ranker_result, args, context())
            rows.append(row)
            emit(row)
        wanted = [i for i in impls if i in EARL_IMPLS]
        if wanted:
            stores = build_stores(store_root, model, size_name=size_name, size=size, impls=wanted, n=n,
                                  count=args.candidates, dtype=args.dtype, documents=args.documents, seed=args.seed,
                                  shard_size=min(args.earl_batch_size, args.candidates),
                                  batch_size=args.batch_size)  # fmt: skip
            for impl in wanted:
                result = measure_earl(model, stores[impl], impl, n, args)
                row = make_row(impl, size_name, n, result, ranker_result, args, context())
                rows.append(row)
                emit(row)
            if args.store_dir is None:  # a temporary store: free its disk and page cache before the next length
                for store in stores.values():
                    shutil.rmtree(store.folder, ignore_errors=True)
    return rows


def context() -> dict:
    import torch

    return {"threads": torch.get_num_threads(), "cpu": cpu_model(), "load_1min": round(os.getloadavg()[0], 2)}


# --------------------------------------------------------------------------- outputs


def output_paths(out_dir: Path) -> dict[str, Path]:
    return {ext: out_dir / f"speed.{ext}" for ext in ("csv", "jsonl", "png")}


def plot(rows: list[dict], path: Path, overwrite: bool) -> None:
    """ms per query against document length, log scale, one panel per size, one line per implementation (the
    BERT ranker's dashed where it is extrapolated), EARL's points labelled with their speed-up."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from common.io import atomic_write

    sizes = list(dict.fromkeys(r["size"] for r in rows))
    figure, axes = plt.subplots(1, len(sizes), figsize=(6.2 * len(sizes), 4.8), squeeze=False)
    labels = {"bert_ranker": "BERT ranker", "earl_s1": "EARL S1 (stores D)", "earl_s2": "EARL S2 (stores D')"}
    for axis, size_name in zip(axes[0], sizes):
        for impl, color in zip(IMPLS, ("C3", "C0", "C2")):
            points = sorted((r["n"], r["ms"], r) for r in rows if r["size"] == size_name and r["impl"] == impl)
            if not points:
                continue
            extrapolated = any(r["extrapolated"] for *_, r in points)
            label = labels[impl] + (f" (timed on {points[0][2]['measured_candidates']}, scaled)" if extrapolated
                                    else "")
            axis.plot([p[0] for p in points], [p[1] / 1000 for p in points], "--" if extrapolated else "-",
                      marker="o", color=color, label=label)
            for n, ms, r in points:
                if r["speedup"] and impl != "bert_ranker":
                    axis.annotate(f"{r['speedup']:.0f}x", (n, ms / 1000), textcoords="offset points", xytext=(4, 4),
                                  fontsize=8, color=color)
        first = next(r for r in rows if r["size"] == size_name)
        size = SIZES[size_name]
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xticks(sorted({r["n"] for r in rows}), [str(n) for n in sorted({r["n"] for r in rows})])
        axis.set_xlabel("document length d (tokens)")
        axis.set_ylabel(f"seconds per query ({first['candidates']} candidates)")
        axis.grid(True, which="both", alpha=0.3)
        axis.set_title(f"{size_name}: {size.describe()}\nq = {QUERY_LENGTH}, {first['cpu']}, {first['threads']} "
                       f"thread{'s' if first['threads'] > 1 else ''}", fontsize=9)  # fmt: skip
        axis.legend(fontsize=8)
    figure.tight_layout()
    with atomic_write(path, "wb", overwrite=overwrite) as f:
        figure.savefig(f, format="png", dpi=110)
    plt.close(figure)


def write_outputs(rows: list[dict], paths: dict[str, Path], overwrite: bool) -> None:
    write_rows(rows, FIELDS, paths["csv"], paths["jsonl"], overwrite)
    plot(rows, paths["png"], overwrite)


def _cell(value, spec: str, width: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}{spec}}"


def table(rows: list[dict]) -> str:
    """The measurements per size as a text table, then what the BERT ranker could afford and where the speed
    between the FLOP ratio and the measured speed-up goes."""
    lines = []
    for size_name in dict.fromkeys(r["size"] for r in rows):
        group = [r for r in rows if r["size"] == size_name]
        first = group[0]
        lines += [f"size {size_name} ({SIZES[size_name].describe()}), q = {QUERY_LENGTH}, {first['candidates']} "
                  f"candidates, {first['cpu']}, {first['threads']} thread(s)",
                  f"{'impl':<12}{'n':>5}{'ms/query':>11}{'read ms':>9}{'speed-up':>10}{'CPU ms':>11}{'CPU s-u':>9}"
                  f"{'analytic':>10}{'Table 1':>9}{'FLOPs':>8}{'GFLOP/s':>9}{'timed on':>10}{'load':>6}"]
        for r in group:
            timed_on = f"{r['measured_candidates']}" + ("*" if r["extrapolated"] else "")
            lines.append(f"{r['impl']:<12}{r['n']:>5}{r['ms']:>11.1f}{_cell(r['read_ms'], '.1f', 9)}"
                         f"{_cell(r['speedup'], '.1f', 9)}x{r['cpu_ms']:>11.1f}{_cell(r['cpu_speedup'], '.1f', 8)}x"
                         f"{r['analytic_ratio']:>9.1f}x{r['table1_ratio']:>8.1f}x{_cell(r['flop_ratio'], '.1f', 7)}x"
                         f"{r['gflops_per_s']:>9.1f}{timed_on:>10}{r['load_1min']:>6.1f}")
        if any(r["extrapolated"] for r in group):
            lines.append(f"* the BERT ranker was timed on that many candidates and its time scaled linearly to "
                         f"{first['candidates']}: extrapolated")
        lines.append("speed-up: BERT ranker ms / ms (wall clock; CPU s-u: the same with process CPU time); analytic: "
                     "Table 1 counted in multiply-adds (a=2, t=12, j_q=14, j_d=2); Table 1: every constant 1; "
                     "FLOPs: ratio of counted FLOPs; load: 1-minute load average when measured")
        for r in group:
            if r["affordable_candidates"] is not None:
                lines.append(f"  n={r['n']}: in the time {r['impl']} scores {r['candidates']} candidates, the BERT "
                             f"ranker could score {r['affordable_candidates']}"
                             + (" (from its extrapolated time)" if any(g["extrapolated"] for g in group) else ""))
        ranker = {r["n"]: r for r in group if r["impl"] == "bert_ranker"}
        missing = [r for r in group if r["impl"] in EARL_IMPLS and r["speedup"] and r["n"] in ranker]
        if missing:
            lines.append("where the missing speed goes (measured speed-up against the FLOP ratio, i.e. EARL's FLOP "
                         "rate against the ranker's, and EARL's time by part):")
        for r in missing:
            base = ranker[r["n"]]
            parts = [f"T_qry {r['query_ms']:.0f}", f"read {r['read_ms']:.0f}"]
            if r["keys_values_ms"] is not None:
                parts.append(f"keys/values ({r['keys_values']}) {r['keys_values_ms']:.0f}")
            parts.append(f"judge {r['judge_ms']:.0f}")
            lines.append(f"  n={r['n']} {r['impl']}: {r['speedup']:.1f}x of {r['flop_ratio']:.1f}x "
                         f"({r['speedup'] / r['flop_ratio']:.0%}): {r['gflops_per_s']:.1f} GFLOP/s "
                         f"({r['compute_gflops_per_s']:.1f} without the read) vs the ranker's "
                         f"{base['gflops_per_s']:.1f}; ms: {', '.join(parts)} of {r['ms']:.0f}")
        lines.append("")
    return "\n".join(lines).rstrip()


# --------------------------------------------------------------------------- command line


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default after its help, but for None: the help of those options says what they default to."""

    def _get_help_string(self, action: argparse.Action) -> str:
        return action.help if action.default is None else super()._get_help_string(action)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = ArgumentParser(
        prog="python -m earl.benchmark",
        description="EARL Table 3: milliseconds to rank one query (16 tokens) against N candidates with the BERT "
        "ranker, EARL S1 (stores D) and EARL S2 (stores D'), by document length, with the speed-ups beside "
        "Table 1's analytic cost ratio and the counted FLOP ratio. Writes speed.csv, .jsonl and .png under "
        "--output_dir.",
        formatter_class=_Help,
    )
    parser.add_argument("--size", nargs="+", default=["base"], choices=tuple(SIZES),
                        help="model sizes, each measured in turn: base = BERT-base with K=2, l=10 (the paper's); "
                        "small = L=4, h=256, 4 heads, FFN 1024, K=2, l=2")
    parser.add_argument("--lengths", type=positive_int, nargs="+", default=[128, 256, 512], metavar="N",
                        help="document lengths in tokens ([CLS] included), each at least 2")
    parser.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS, metavar="IMPL",
                        help=f"implementations, of {', '.join(IMPLS)} (the speed-ups need bert_ranker)")
    parser.add_argument("--candidates", type=positive_int, default=1000, help="candidates per query, N")
    parser.add_argument("--ranker_candidates", type=positive_int, default=32,
                        help="candidates the BERT ranker is timed on, its time scaled to --candidates")
    parser.add_argument("--batch_size", type=positive_int, default=8,
                        help="BERT ranker pairs per forward pass (and documents per T_doc pass when encoding)")
    parser.add_argument("--earl_batch_size", type=positive_int, default=100,
                        help="EARL candidates per judge call (and documents per store shard)")
    parser.add_argument("--keys_values", choices=KEYS_VALUES, default="fused",
                        help="S1's keys and values at query time: EARL.document_keys_values (model: 2K products "
                        "and a concatenation) or the same product with the weights stacked (fused: one product)")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="fp32",
                        help="how the stores hold rows (fp16 rows are converted to fp32 after reading)")
    parser.add_argument("--documents", choices=DOCUMENTS, default="encoded",
                        help="the stores' D: T_doc on random token ids (encoded) or seeded noise (random: no "
                        "offline encoding, same timing)")
    parser.add_argument("--store_dir", type=output_folder,
                        help="where the stores are built and kept, reused when their identity matches (default: a "
                        "temporary folder, each length's stores removed once measured)")
    parser.add_argument("--repeats", type=positive_int, default=3, help="timed queries (the median is reported)")
    parser.add_argument("--threads", type=positive_int, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the weights, the token ids and the noise")
    parser.add_argument("--output_dir", type=output_folder, default=RESULTS,
                        help="where speed.csv, speed.jsonl and speed.png go")
    parser.add_argument("--overwrite", action="store_true", help="replace existing result files")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object per measurement per line on stdout (the rest on stderr)")
    args = parser.parse_args(argv)
    for option in ("--size", "--lengths", "--impls"):
        refuse_repeats(option, getattr(args, option[2:]))
    if min(args.lengths) < 2:
        parser.error(f"argument --lengths: each must be at least 2 ([CLS] and a word), got {min(args.lengths)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    paths = output_paths(args.output_dir)
    refuse_existing(paths.values(), args.overwrite)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    report = sys.stderr if args.json else sys.stdout
    print(f"EARL speed: {', '.join(args.size)}; lengths {args.lengths}; {args.candidates} candidates (BERT ranker "
          f"timed on {min(args.ranker_candidates, args.candidates)}); {cpu_model()}, {torch.get_num_threads()} "
          f"thread(s); load {os.getloadavg()[0]:.2f}", file=report, flush=True)

    def emit(row: dict) -> None:
        if args.json:
            print(json.dumps(row), flush=True)
        parts = "" if row["read_ms"] is None else f" (read {row['read_ms']:.0f} ms)"
        speedup = "" if row["speedup"] is None else f", {row['speedup']:.1f}x"
        print(f"{row['size']} {row['impl']:>11} n={row['n']}: {row['ms']:.1f} ms/query{parts}{speedup}",
              file=sys.stderr, flush=True)

    rows = []
    with tempfile.TemporaryDirectory(prefix="earl_stores_") as temporary:
        root = args.store_dir if args.store_dir is not None else Path(temporary)
        for size_name in args.size:
            rows += run_size(size_name, args, root, emit)
    write_outputs(rows, paths, args.overwrite)
    print(table(rows), file=report)
    print(f"wrote {', '.join(str(p) for p in paths.values())}", file=report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
