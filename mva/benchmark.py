"""``python -m mva.benchmark``: measured milliseconds of joint compute per query over N candidates for the dual
encoder (DE), the three MVA operating points and cross-attention (CA), beside the cost calculator's MACs
(`mva.costs`) and each method's bytes per document (Zhou and Devlin 2021, ../shared/papers/mva.txt, Tables 5-6).

Tables 5 and 6 compare methods by "joint compute" (what re-ranking costs per query once the documents'
representations are stored) and storage; they are counted, not timed. This command times the same work on this
machine, so the counted ratios can be set beside measured ones:

- ``de``: the dot product of the query's h-vector with N stored h-vectors (one matrix-vector product);
- ``mva1``, ``mva2``, ``mva3``: `mva.model.MultiVectorAttention.score`, the scoring head of Sec. 2.1, over N
  candidates' stored [D_K | D_V] rows (d timesteps x 2Hp; random tensors of those shapes: the cost does not
  depend on their values) with the query's Q_K, Q_V (q timesteps, expanded over the candidates without a copy),
  at `mva.costs.table5`'s operating points: MVA1 q = 7, d = 70, p = 128; MVA2 q = 8, d = 24, p = 64; MVA3 q = 8,
  d = 16, p = 32 (one head each), all N candidates in one call;
- ``ca``: `common.encoders.bert_rankers.BertRanker` over N concatenated pairs of 128 tokens (``[CLS]`` 6 query words
  ``[SEP]`` 119 document words ``[SEP]``), in batches of ``--batch_size``. CA costs about a second per candidate
  on a few CPU cores at base size, so it is timed over ``--ca_candidates`` (``timed_candidates``, ``timed_ms``)
  and scaled linearly to N (``extrapolated``): every candidate is independent work of the same size.

Left out, as in the paper's joint compute: the query's encoding (done once per query, whatever N) and, for DE and
MVA, the documents' encoding (offline). Reading the rows from a store is left out too: they are in memory.
ColBERT is in Table 5 only from the calculator (`python -m mva.costs`); it is not timed here.

Sizes (``--size``): ``base`` = BERT-base (12 layers, h = 768, FFN 3072, 12 heads), the paper's, for CA and DE's
h; ``small`` = the offline MiniLM's size (6 layers, h = 384, FFN 1536, 12 heads). The MVA points do not depend on
the size. BERT is built from scratch (`common.encoders.pretrained.bert_config`, transformers ``BertModel``, random weights
from ``--seed``), eval mode; everything runs in ``torch.inference_mode``, fp32.

Timing (`common.benchmarking.median_ms`): one untimed warm-up call, then the median of ``--repeats`` calls
(``--ca_repeats`` for CA), milliseconds per query. Columns: ``macs`` from the calculator (``mva_macs``,
``dual_encoder_macs``, ``bert_macs`` at the size, times N; ``mflops`` is the paper's unit, millions of MACs),
``gflops_per_s`` = 2 x macs / time, ``ca_time_ratio`` = CA's ms / the row's and ``ca_macs_ratio`` = CA's macs /
the row's (how many times cheaper than CA, measured and counted), ``bytes_per_document`` = 4 x the calculator's
floats (fp32: ``mva_storage``, h for DE, none for CA), and the device, CPU model and torch thread count
(``load_1min``: the load average when measured). On a machine shared with other jobs, ``--threads 1`` is the
steadier measure: the MVA head is many small operations, and with two threads each parallel region waits for a
core another job holds (MVA3 took ~64 ms per query that way against ~1 ms with one thread, at a load of 5 on 2
cores).

Outputs in ``--output_dir`` (default results/mva): ``speed.csv``, ``speed.jsonl`` (one row per size and method)
and ``speed.png`` (ms per query against joint compute and against bytes per document, log axes; skipped with a
note where matplotlib is not installed), written atomically; existing files are refused without ``--overwrite``.
``--json`` prints each row as a JSON object on stdout; everything else then goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from common.benchmarking import DEVICES, median_ms, refuse_existing, refuse_repeats, resolve_device, write_rows
from common.refusals import ArgumentParser, output_folder, positive_int
from mva.costs import PAIR_TOKENS, QUERY_TIMESTEPS, bert_macs, dual_encoder_macs, mva_macs, mva_storage

BENCH = "mva_speed"
IMPLS = ("de", "mva1", "mva2", "mva3", "ca")
RESULTS = Path(__file__).resolve().parents[1] / "results" / "mva"
#: bert-base-uncased's vocabulary and special ids; random words are drawn from ids FIRST_WORD and up.
VOCAB_SIZE, PAD, CLS, SEP, FIRST_WORD = 30522, 0, 101, 102, 1000
FLOAT_BYTES = 4  # fp32
FIELDS = ["bench", "impl", "size", "candidates", "timed_candidates", "extrapolated", "ms", "timed_ms", "macs",
          "mflops", "gflops_per_s", "ca_time_ratio", "ca_macs_ratio", "storage_floats", "bytes_per_document",
          "setting", "query_timesteps", "doc_timesteps", "projection", "heads", "hidden_size", "num_layers",
          "intermediate_size", "pair_tokens", "batch_size", "repeats", "device", "gpu", "cpu", "threads",
          "load_1min"]  # fmt: skip


@dataclass(frozen=True)
class Point:
    """An MVA operating point (`mva.costs.table5`): q query and d document timesteps, projection p, H heads."""

    query: int
    doc: int
    projection: int
    heads: int = 1

    def describe(self) -> str:
        return f"q = {self.query}, d = {self.doc}, p = {self.projection}" + (f", H = {self.heads}" if self.heads > 1
                                                                             else "")


POINTS = {"mva1": Point(QUERY_TIMESTEPS, 70, 128), "mva2": Point(8, 24, 64), "mva3": Point(8, 16, 32)}


@dataclass(frozen=True)
class Size:
    """CA's BERT (and DE's h): layers, hidden width, heads, FFN width."""

    layers: int
    hidden: int
    heads: int
    intermediate: int

    def describe(self) -> str:
        return f"L={self.layers}, h={self.hidden}, {self.heads} heads, FFN {self.intermediate}"


SIZES = {"base": Size(12, 768, 12, 3072), "small": Size(6, 384, 12, 1536)}


# --------------------------------------------------------------------------- the calculator's numbers


def cost(impl: str, size: Size) -> tuple[int, int, str]:
    """MACs per candidate, floats stored per document and the setting of `impl` at `size`, from `mva.costs`."""
    if impl == "de":
        return dual_encoder_macs(size.hidden), size.hidden, f"dot product of h = {size.hidden}"
    if impl == "ca":
        return (bert_macs(PAIR_TOKENS, size.layers, size.hidden, size.intermediate), 0,
                f"BERT ({size.describe()}) over {PAIR_TOKENS} pair tokens")
    point = POINTS[impl]
    return (mva_macs(point.query, point.doc, point.projection, point.heads),
            mva_storage(point.doc, point.projection, point.heads), point.describe())


# --------------------------------------------------------------------------- what is timed


def mva_step(point: Point, candidates: int, device: str, seed: int):
    """`MultiVectorAttention.score` of one query over `candidates` stored [D_K | D_V] rows (random, seeded)."""
    import torch

    from mva.model import MultiVectorAttention

    torch.manual_seed(seed)
    hp = point.heads * point.projection
    head = MultiVectorAttention(hp, hp, point.projection, point.heads).eval().to(device)  # only `score` runs
    query_keys = torch.randn(1, point.query, hp, device=device).expand(candidates, -1, -1)
    query_values = torch.randn(1, point.query, hp, device=device).expand(candidates, -1, -1)
    query_keep = torch.ones(1, point.query, dtype=torch.bool, device=device).expand(candidates, -1)
    documents = torch.randn(candidates, point.doc, 2 * hp, device=device)
    doc_keep = torch.ones(candidates, point.doc, dtype=torch.bool, device=device)
    return lambda: head.score(query_keys, query_values, query_keep, documents, doc_keep)


def de_step(hidden: int, candidates: int, device: str, seed: int):
    """The query's h-vector against `candidates` stored h-vectors."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    documents = torch.randn(candidates, hidden, generator=generator).to(device)
    query = torch.randn(hidden, generator=generator).to(device)
    return lambda: documents @ query


def build_ranker(size: Size, seed: int):
    """CA: `BertRanker` over a from-scratch BERT of `size`, random weights from `seed`, eval mode."""
    import torch
    from transformers import BertModel

    from common.encoders.bert_rankers import BertRanker
    from common.encoders.pretrained import bert_config

    torch.manual_seed(seed)
    config = bert_config(vocab_size=VOCAB_SIZE, pad_token_id=PAD, num_layers=size.layers, hidden_size=size.hidden,
                         num_heads=size.heads, intermediate_size=size.intermediate, dropout=0.1,
                         max_length=max(512, PAIR_TOKENS))  # fmt: skip
    return BertRanker(BertModel(config, add_pooling_layer=False)).eval()


def pair_batch(count: int, seed: int) -> dict:
    """`count` pairs of ``[CLS] query [SEP] document [SEP]``, PAIR_TOKENS tokens: the query's QUERY_TIMESTEPS - 1
    words (the same in every pair) and each document's own random words."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    query = torch.randint(FIRST_WORD, VOCAB_SIZE, (1, QUERY_TIMESTEPS - 1), generator=generator)
    words = torch.randint(FIRST_WORD, VOCAB_SIZE, (count, PAIR_TOKENS - QUERY_TIMESTEPS - 2), generator=generator)
    tokens = torch.cat([torch.full((count, 1), CLS), query.expand(count, -1), torch.full((count, 1), SEP), words,
                        torch.full((count, 1), SEP)], dim=1)  # fmt: skip
    types = torch.zeros_like(tokens)
    types[:, QUERY_TIMESTEPS + 1:] = 1
    return {"pair_tokens": tokens, "pair_mask": torch.ones_like(tokens), "pair_types": types}


def ca_step(ranker, count: int, batch_size: int, device: str, seed: int):
    """CA over `count` pairs in batches of `batch_size`; and a warm-up of one batch."""
    import torch

    pairs = {k: v.to(device) for k, v in pair_batch(count, seed).items()}
    batches = [{k: v[i:i + batch_size] for k, v in pairs.items()} for i in range(0, count, batch_size)]
    return (lambda: torch.cat([ranker(batch) for batch in batches])), (lambda: ranker(batches[0]))


# --------------------------------------------------------------------------- measuring


def cpu_model() -> str:
    """``model name`` of /proc/cpuinfo or lscpu (the CPU's marketing name), else what platform says."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or platform.machine()


def context(device: str) -> dict:
    import torch

    gpu = torch.cuda.get_device_name() if device == "cuda" else None
    return {"device": device, "gpu": gpu, "cpu": cpu_model(), "threads": torch.get_num_threads(),
            "load_1min": round(os.getloadavg()[0], 2)}


def measure(size_name: str, args: argparse.Namespace, device: str, log) -> list[dict]:
    """Every method at one size; rows in `IMPLS` order, CA's ratios filled in."""
    import torch

    size = SIZES[size_name]
    n = args.candidates
    rows = []
    with torch.inference_mode():
        for impl in IMPLS:
            macs, floats, setting = cost(impl, size)
            row = {"bench": BENCH, "impl": impl, "size": size_name, "candidates": n}
            if impl == "ca":
                timed = min(args.ca_candidates, n)
                step, warm_up = ca_step(build_ranker(size, args.seed).to(device), timed, args.batch_size, device,
                                        args.seed)  # fmt: skip
                repeats = args.ca_repeats
            else:
                timed = n
                step = (de_step(size.hidden, n, device, args.seed) if impl == "de"
                        else mva_step(POINTS[impl], n, device, args.seed))  # fmt: skip
                warm_up, repeats = step, args.repeats
            warm_up()
            timed_ms = median_ms(step, repeats, device)
            ms = timed_ms * n / timed  # linear in the candidates: each is independent work of the same size
            point = POINTS.get(impl)
            row.update({
                "timed_candidates": timed, "extrapolated": timed != n, "ms": ms, "timed_ms": timed_ms,
                "macs": macs * n, "mflops": macs * n / 1e6, "gflops_per_s": 2 * macs * n / ms / 1e6,
                "storage_floats": floats, "bytes_per_document": FLOAT_BYTES * floats, "setting": setting,
                "query_timesteps": point.query if point else (QUERY_TIMESTEPS if impl == "ca" else 1),
                "doc_timesteps": point.doc if point else (None if impl == "ca" else 1),
                "projection": point.projection if point else None, "heads": point.heads if point else None,
                "hidden_size": None if point else size.hidden,
                "num_layers": size.layers if impl == "ca" else None,
                "intermediate_size": size.intermediate if impl == "ca" else None,
                "pair_tokens": PAIR_TOKENS if impl == "ca" else None,
                "batch_size": min(args.batch_size, timed) if impl == "ca" else n, "repeats": repeats,
                **context(device)})  # fmt: skip
            rows.append(row)
            log(f"{size_name} {impl:>4}: {ms:.3f} ms/query over {n} candidates"
                + (f" (timed on {timed}, scaled)" if timed != n else ""))
    ca = rows[IMPLS.index("ca")]
    for row in rows:
        row["ca_time_ratio"] = ca["ms"] / row["ms"]
        row["ca_macs_ratio"] = ca["macs"] / row["macs"]
    return rows


# --------------------------------------------------------------------------- outputs


def output_paths(out_dir: Path, plot: bool) -> dict[str, Path]:
    return {ext: out_dir / f"speed.{ext}" for ext in (("csv", "jsonl", "png") if plot else ("csv", "jsonl"))}


def has_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


LABELS = {"de": "DE", "mva1": "MVA1", "mva2": "MVA2", "mva3": "MVA3", "ca": "CA"}


def plot(rows: list[dict], path: Path, overwrite: bool) -> None:
    """Two panels, log axes: ms per query against joint compute (millions of MACs), and against bytes per document
    (CA, which stores nothing, left out); one marker per size, one colour per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    from common.io import atomic_write

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    colours = dict(zip(IMPLS, ("C0", "C2", "C1", "C4", "C3")))
    markers = dict(zip(SIZES, ("o", "s")))
    for r in rows:
        style = {"color": colours[r["impl"]], "marker": markers[r["size"]], "linestyle": "none"}
        label = f"{LABELS[r['impl']]} ({r['size']})" + (f", timed on {r['timed_candidates']}" if r["extrapolated"]
                                                        else "")
        left.plot(r["mflops"], r["ms"], label=label, **style)
        left.annotate(LABELS[r["impl"]], (r["mflops"], r["ms"]), textcoords="offset points", xytext=(4, 4),
                      fontsize=8)
        if r["bytes_per_document"]:
            right.plot(r["bytes_per_document"], r["ms"], **style)
            right.annotate(LABELS[r["impl"]], (r["bytes_per_document"], r["ms"]), textcoords="offset points",
                           xytext=(4, 4), fontsize=8)
    first = rows[0]
    where = first["gpu"] or f"{first['cpu']}, {first['threads']} thread(s)"
    for axis in (left, right):
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_ylabel(f"ms per query ({first['candidates']} candidates)")
        axis.grid(True, which="both", alpha=0.3)
    right.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # log minor labels overlap at this span
    left.set_xlabel("joint compute (millions of MACs per query, mva.costs)")
    right.set_xlabel("bytes per document (fp32; CA stores none)")
    left.set_title(f"MVA Table 5, measured: {where}", fontsize=9)
    right.set_title("ms per query against storage", fontsize=9)
    left.legend(fontsize=7)
    figure.tight_layout()
    with atomic_write(path, "wb", overwrite=overwrite) as f:
        figure.savefig(f, format="png", dpi=110)
    plt.close(figure)


def table(rows: list[dict]) -> str:
    lines = []
    for size_name in dict.fromkeys(r["size"] for r in rows):
        group = [r for r in rows if r["size"] == size_name]
        first = group[0]
        where = first["gpu"] or first["cpu"]
        lines += [f"size {size_name} ({SIZES[size_name].describe()}), {first['candidates']} candidates, "
                  f"{first['device']}: {where}, {first['threads']} thread(s)",
                  f"{'impl':<6}{'ms/query':>12}{'timed on':>10}{'MMACs':>14}{'GFLOP/s':>9}{'CA/ms':>13}"
                  f"{'CA/MACs':>13}{'bytes/doc':>11}  setting"]  # fmt: skip
        for r in group:
            timed_on = f"{r['timed_candidates']}" + ("*" if r["extrapolated"] else "")
            lines.append(f"{r['impl']:<6}{r['ms']:>12.3f}{timed_on:>10}{r['mflops']:>14,.1f}{r['gflops_per_s']:>9.1f}"
                         f"{r['ca_time_ratio']:>12,.0f}x{r['ca_macs_ratio']:>12,.0f}x{r['bytes_per_document']:>11,}"
                         f"  {r['setting']}")
        if any(r["extrapolated"] for r in group):
            lines.append("* timed on that many candidates, scaled linearly to the rest")
        lines.append("CA/ms: CA's measured time over the row's; CA/MACs: CA's MACs over the row's (mva.costs)")
        lines.append("")
    return "\n".join(lines).rstrip()


# --------------------------------------------------------------------------- command line


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = ArgumentParser(
        prog="python -m mva.benchmark",
        description="MVA Tables 5-6, measured: milliseconds of joint compute per query over N candidates for DE, "
        "MVA1-3 and CA (the query's encoding left out), beside mva.costs' MACs and bytes per document. Writes "
        "speed.csv, .jsonl and .png under --output_dir.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--size", nargs="+", default=["base"], choices=tuple(SIZES),
                        help="CA's BERT and DE's h: base = BERT-base (12 layers, h 768, FFN 3072); small = the "
                        "MiniLM's (6 layers, h 384, FFN 1536)")
    parser.add_argument("--candidates", type=positive_int, default=1000, help="candidates per query, N")
    parser.add_argument("--ca_candidates", type=positive_int, default=16,
                        help="candidates CA is timed on, its time scaled linearly to --candidates")
    parser.add_argument("--batch_size", type=positive_int, default=16, help="CA pairs per forward pass")
    parser.add_argument("--repeats", type=positive_int, default=20,
                        help="timed queries for DE and MVA (the median is reported)")
    parser.add_argument("--ca_repeats", type=positive_int, default=3, help="timed queries for CA")
    parser.add_argument("--device", choices=DEVICES, default="cpu", help="where to run (cuda where available)")
    parser.add_argument("--threads", type=positive_int, default=None,
                        help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the weights, the rows and the token ids")
    parser.add_argument("--output_dir", type=output_folder, default=RESULTS,
                        help="where speed.csv, speed.jsonl and speed.png go")
    parser.add_argument("--overwrite", action="store_true", help="replace existing result files")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object per row on stdout (the rest on stderr)")
    args = parser.parse_args(argv)
    refuse_repeats("--size", args.size)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    draw = has_matplotlib()
    paths = output_paths(args.output_dir, draw)
    refuse_existing(paths.values(), args.overwrite)
    device = resolve_device(args.device)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    report = sys.stderr if args.json else sys.stdout
    print(f"MVA speed: {', '.join(args.size)}; {args.candidates} candidates (CA timed on "
          f"{min(args.ca_candidates, args.candidates)}); {device}, {cpu_model()}, {torch.get_num_threads()} "
          f"thread(s); load {os.getloadavg()[0]:.2f}", file=report, flush=True)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    rows = []
    for size_name in args.size:
        rows += measure(size_name, args, device, log)
    if args.json:
        for row in rows:
            print(json.dumps(row), flush=True)
    write_rows(rows, FIELDS, paths["csv"], paths["jsonl"], args.overwrite)
    if draw:
        plot(rows, paths["png"], args.overwrite)
    else:
        print("matplotlib is not installed: speed.png skipped", file=report)
    print(table(rows), file=report)
    print(f"wrote {', '.join(str(p) for p in paths.values())}", file=report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
