"""`common.benchmarks`: the median and spread of the timed calls, the CPU named, a peak resident set that sees
one call's memory, and what a benchmark command shares: its options, its run (threads restored, rows written), rates,
tables, fits, skipped rows and plots."""

import itertools
from pathlib import Path

import pytest

from common.benchmarks import bert_inputs, fits, fresh_process, machine, memory, options, plots, session, timing


def test_median_of_the_timed_calls(monkeypatch):
    # a fake clock: the calls last 3, 1 and 2 ms
    ticks = iter([0.0, 0.003, 1.0, 1.001, 2.0, 2.002])
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(ticks))
    calls = itertools.count()
    assert timing.median_ms(lambda: next(calls), repeats=3, device="cpu") == pytest.approx(2.0)
    assert next(calls) == 3


def test_spread_of_the_timed_calls(monkeypatch):
    ticks = iter([0.0, 0.003, 1.0, 1.001, 2.0, 2.002])
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(ticks))
    times = timing.times_ms(lambda: None, repeats=3, device="cpu")
    assert times == pytest.approx([3.0, 1.0, 2.0])
    assert timing.spread_ms(times) == pytest.approx({"ms": 2.0, "ms_min": 1.0, "ms_max": 3.0})


def test_cpu_description_names_the_model_and_its_vector_extensions(tmp_path):
    """From the first processor's block of /proc/cpuinfo; only the extensions that set a kernel's peak rate."""
    cpuinfo = tmp_path / "cpuinfo"
    block = ("processor\t: {}\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
             "model name\t: AMD EPYC 9R14\nflags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw avx512vl "
             "avx512_vnni avx512_bf16 sha_ni\n\n")
    cpuinfo.write_text(block.format(0) + block.format(1).replace("avx512f ", ""))
    assert machine.cpu_description(cpuinfo) == (
        f"AMD EPYC 9R14 (family 25, model 17), {machine.os.cpu_count()} logical CPUs, "
        "avx avx2 fma avx512f avx512bw avx512vl avx512_vnni avx512_bf16")


def test_peak_rss_after_a_reset_sees_a_temporary_allocation():
    if not memory.reset_peak_rss():
        pytest.skip("/proc/self/clear_refs cannot be written here: the peak cannot be reset")
    before = memory.rss_mb()
    block = bytearray(64 * 2**20)  # 64 MiB, touched
    del block
    assert memory.peak_rss_mb() - before >= 60
    assert memory.max_rss_mb() >= memory.peak_rss_mb() - 1


def test_a_child_over_its_data_limit_fails_cleanly():
    """`limit_data_segment`: an allocation beyond the limit is an error in the process, not the OOM killer."""
    import subprocess
    import sys

    code = ("import torch; from common.benchmarks.memory import limit_data_segment; limit_data_segment(1e-6)\n"
            "try:\n    torch.ones(2**30, dtype=torch.uint8)\nexcept RuntimeError as e:\n    print('refused')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "refused" in done.stdout, done.stderr


def test_a_session_restores_the_thread_count_and_writes_what_it_measured(tmp_path, capsys):
    """``--threads`` holds for the run only (a main called in-process leaves the caller's count); --json rows alone
    on stdout; the CSV's columns default to the rows' keys in order; a second run is refused without --overwrite."""
    import json

    import torch

    parser = options.benchmark_parser("python -m x", "x", results="x", writes="x.csv", repeats=1,
                                           repeats_help="timed calls")
    args = options.parse(parser, ["--threads", "1", "--json"])
    before = torch.get_num_threads()
    rows = [{"bench": "x", "impl": "a", "ms": 1.5}, {"bench": "x", "impl": "b", "ms": None, "skipped": "why"}]
    with session.Session(args, session.output_paths(tmp_path, "x", ("csv", "jsonl"))) as run:
        assert torch.get_num_threads() == 1
        for row in rows:
            run.emit(row, f"progress {row['impl']}")
        assert run.finish(rows) == 0
    assert torch.get_num_threads() == before
    out, err = capsys.readouterr()
    assert [json.loads(line) for line in out.splitlines()] == rows
    assert err.splitlines()[:2] == ["progress a", "progress b"]
    assert (tmp_path / "x.csv").read_text().splitlines() == ["bench,impl,ms,skipped", "x,a,1.5,", "x,b,,why"]
    with pytest.raises(SystemExit) as refused:
        session.Session(args, {"csv": tmp_path / "x.csv"}).__enter__()
    assert refused.value.code == 2
    with session.Session(args, {"csv": tmp_path / "y.csv"}) as run:
        assert run.finish([{"skipped": "every row"}]) == 1 and not (tmp_path / "y.csv").exists()


def test_list_options_refuse_a_value_given_twice(capsys):
    parser = options.benchmark_parser("python -m x", "x", results="x", writes="x", repeats=1,
                                           repeats_help="timed calls")
    parser.add_argument("--lengths", type=int, nargs="+")
    assert options.parse(parser, ["--lengths", "1", "2"]).lengths == [1, 2]
    with pytest.raises(SystemExit):
        options.parse(parser, ["--lengths", "1", "2", "1"])
    assert capsys.readouterr().err.strip() == "error: argument --lengths: 1 is given twice"


def test_rates_keep_four_significant_digits_and_tables_align():
    assert session.significant(0.0017628) == 0.001763 and session.significant(257.69803776) == 257.7
    assert session.rounded(None, 3) is None and session.rounded(1.23456, 3) == 1.235
    columns = [("impl", "impl", ""), ("ms", "ms", ".2f"), ("x2", lambda r: r["ms"] and 2 * r["ms"], ".1f")]
    table = session.text_table([{"impl": "tvm", "ms": 1.5}, {"impl": "portable", "ms": None}], columns)
    assert table.splitlines() == ["impl        ms   x2", "tvm       1.50  3.0", "portable     -    -"]


def test_polyfit_recovers_a_polynomial_and_needs_enough_points():
    fit = fits.polyfit([(3, 5 + 0.5 * 3 + 0.25 * 9), (1, 5.75), (2, 7.0), (4, 11.0)], 2)
    assert fit["coefficients"] == pytest.approx([5, 0.5, 0.25]) and fit["r2"] == pytest.approx(1.0)
    assert fit["lengths"] == [1, 2, 3, 4] and fits.fit_value(fit, 10) == pytest.approx(5 + 5 + 25)
    assert fits.polyfit([(1, 1.0), (2, 2.0)], 2) is None and fits.fit_value(None, 3) is None


def test_a_failed_measurement_is_a_skipped_row_with_its_first_line():
    def fails():
        raise RuntimeError("out of memory\nmore detail")

    assert fresh_process.guarded(fails) == {"skipped": "RuntimeError: out of memory"}
    assert fresh_process.guarded(lambda n: {"ms": n}, n=2) == {"ms": 2}


def test_bert_pairs_hold_the_query_then_each_document():
    import torch

    query = torch.tensor([[101, 7, 8, 102]])
    pairs = bert_inputs.bert_pairs(query, torch.tensor([[5, 6], [9, 9]]), 102)
    assert pairs["pair_tokens"].tolist() == [[101, 7, 8, 102, 5, 6, 102], [101, 7, 8, 102, 9, 9, 102]]
    assert pairs["pair_types"].tolist() == [[0, 0, 0, 0, 1, 1, 1]] * 2 and pairs["pair_mask"].all()


def test_draw_writes_a_png_of_lines_and_bars(tmp_path):
    lines = [plots.Line("a", [(1, 2.0, "x"), (2, 3.0)]), plots.Line("b", [])]
    bars = [plots.Line("train", [("dense", 4.0, "1.00"), ("qds", 2.0, None)])]
    plots.draw([plots.Panel("lines", "n", "ms", lines),
                       plots.Panel("bars", "", "ms", bars, log="y", bars=True)], tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_part_times_sum_each_part_of_a_call(monkeypatch):
    ticks = iter([0.0, 0.002, 1.0, 1.001, 2.0, 2.003])  # a fake clock: read 2 ms, judge 1 ms, read 3 ms
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(ticks))
    parts = timing.PartTimes(("read_ms", "judge_ms", "other_ms"))
    for name in ("read_ms", "judge_ms", "read_ms"):
        with parts(name):
            pass
    assert parts.ms == pytest.approx({"read_ms": 5.0, "judge_ms": 1.0, "other_ms": 0.0})


def test_a_training_step_updates_the_model_and_an_inference_step_does_not():
    """`training_step`: loss, backward, one Adam step (the first moves each weight by lr against its gradient's sign),
    gradients cleared; `inference_step`: eval mode, no graph; `measure_step`: warm-up calls, then the timed ones."""
    import torch

    model = torch.nn.Linear(2, 1)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -1.0]]))
        model.bias.zero_()
    batch = torch.tensor([[1.0, 2.0]])
    step = timing.training_step(model, lambda x: model(x).sum(), lr=0.1)  # gradient: x = (1, 2), bias 1
    assert model.training
    step(batch)
    assert model.weight[0].tolist() == pytest.approx([0.9, -1.1]) and model.bias.tolist() == pytest.approx([-0.1])
    assert model.weight.grad is None
    calls = []
    model.register_forward_hook(lambda *_: calls.append(1))
    infer = timing.inference_step(model)
    assert not model.training and not infer(batch).requires_grad
    measured = timing.measure_step(infer, batch, warmup=2, repeats=3, device="cpu")
    assert len(calls) == 1 + 1 + 1 + 3  # the call above, the peak's call, one more warm-up call, 3 timed ones
    assert measured["ms"] > 0 and measured["peak_mb"] >= 0


def test_size_options_default_to_the_devices_size(capsys):
    sizes = {"cpu": bert_inputs.BertSize(2, 64, 2, 128), "cuda": bert_inputs.BertSize(12, 768, 12, 3072)}
    parser = options.benchmark_parser("python -m x", "x", results="x", writes="x", repeats=1,
                                           repeats_help="timed calls")
    bert_inputs.add_size_options(parser, sizes)
    assert "hidden size (default: 64 on CPU, 768 on CUDA)" in " ".join(parser.format_help().split())
    args = options.parse(parser, ["--num_heads", "4"])
    args.device = "cpu"
    bert_inputs.resolve_size(args, sizes)
    assert (args.num_layers, args.hidden_size, args.num_heads, args.intermediate_size) == (2, 64, 4, 128)
    args = options.parse(parser, ["--num_heads", "5"])
    args.device = "cpu"
    with pytest.raises(SystemExit):
        bert_inputs.resolve_size(args, sizes)
    assert capsys.readouterr().err.strip() == "error: argument --num_heads: must divide the hidden size 64, got 5"
    assert sizes["cpu"].hf_config() == {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2,
                                        "intermediate_size": 128}


def test_argument_types_refuse_with_their_reason():
    import argparse

    even = options.even_int("spans w / 2 each side")
    above = options.int_above(5, "ids 0-4 are special")
    assert even("128") == 128 and above("6") == 6
    for check, text, message in [(even, "33", "must be even (spans w / 2 each side), got 33"),
                                 (even, "0", "must be a positive integer, got 0"),
                                 (above, "5", "must be above 5 (ids 0-4 are special), got 5"),
                                 (above, "x", "must be a positive integer, got x")]:
        with pytest.raises(argparse.ArgumentTypeError, match=r"^" + message.replace("(", r"\(").replace(")", r"\)")):
            check(text)


def test_random_bert_inputs():
    query, mask = bert_inputs.bert_query(6, seed=0)
    assert query.shape == (1, 6) and query[0, 0] == bert_inputs.BERT_CLS and query[0, -1] == bert_inputs.BERT_SEP
    assert query[0, 1:5].tolist() == bert_inputs.random_words(1, 4, seed=0)[0].tolist() and mask.all()
    words = bert_inputs.random_words(3, 5, seed=1)
    assert words.shape == (3, 5)
    assert bert_inputs.FIRST_WORD <= words.min() <= words.max() < bert_inputs.BERT_VOCAB_SIZE
    assert bert_inputs.bert_documents(words).tolist() == [[bert_inputs.BERT_CLS, *row] for row in words.tolist()]


def test_a_bar_chart_and_a_table_of_columns_are_written(tmp_path, capsys):
    rows = [{"bench": "x", "n": n, "pass": pass_, "impl": impl, "ms": ms, "skipped": None}
            for n, pass_, impl, ms in [(8, "train", "a", 2.0), (8, "infer", "a", 1.0), (8, "train", "b", None),
                                       (16, "train", "a", 4.0)]]
    plots.bar_chart(rows, tmp_path / "bars.png", label=lambda r: r["impl"], text=lambda r: f"{r['ms']:.0f}",
                           passes=("train", "infer"), ylabel="ms", title="t")
    assert (tmp_path / "bars.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    parser = options.benchmark_parser("python -m x", "x", results="x", writes="x", repeats=1,
                                           repeats_help="timed calls")
    args = options.parse(parser, [])
    with session.Session(args, {"csv": tmp_path / "x.csv"}) as run:
        assert run.emit(rows[0]) is rows[0]
        assert run.finish(rows[:2], table=(("impl", ""), ("ms", ".1f"))) == 0
    assert capsys.readouterr().out.splitlines()[:3] == ["impl   ms", "a     2.0", "a     1.0"]


#: Every benchmark command and its committed results folder.
BENCHMARKS = {"common.kernels.benchmark": "kernels", "common.scale": "scale",
              "common.commands.loader_benchmark": "loaders", "qds.benchmark": "qds",
              "conformer_kernel.benchmark": "conformer_kernel", "earl.benchmark": "earl",
              "mva.benchmark": "mva", "common.stores.read_benchmark": "mva"}
#: The benchmarks that read finished stores, named on their command line.
READ_STORES = {"common.stores.read_benchmark"}


def test_every_benchmark_is_listed():
    repo = Path(__file__).resolve().parents[2]
    calls = {".".join(p.relative_to(repo).with_suffix("").parts) for top in ("common", "qds", "conformer_kernel",
                                                                              "earl", "mva")
             for p in (repo / top).rglob("*.py") if "benchmark_parser(" in p.read_text()}
    assert calls - {"common.benchmarks.options"} == set(BENCHMARKS)


class _Parsed(Exception):
    """A command's parsed arguments, stopping it before it measures anything."""


@pytest.mark.parametrize("module, results", BENCHMARKS.items())
def test_a_benchmark_writes_under_outputs_by_default_and_into_results_only_when_told(module, results, monkeypatch,
                                                                                    tmp_path):
    """A run with no --output_dir writes into a new outputs/<results>-benchmark-<time> (git-ignored), never into the
    committed results/<results>/; --output_dir results/<results> is what replaces them."""
    import re
    from importlib import import_module

    command = import_module(module)

    def parse(parser, argv):
        raise _Parsed(options.parse(parser, argv))

    monkeypatch.setattr(command, "parse", parse)
    stores = [str(tmp_path)] if module in READ_STORES else []
    if stores:
        (tmp_path / "manifest.json").write_text("{}")  # what its argument type looks for
    parsed = []
    for argv in ([], ["--output_dir", f"results/{results}", "--overwrite"]):
        with pytest.raises(_Parsed) as stopped:
            command.main([*stores, *argv])
        parsed.append(stopped.value.args[0].output_dir)
    default, told = parsed
    assert default.parts[0] == "outputs" and len(default.parts) == 2 and "results" not in default.parts
    assert re.fullmatch(rf"{results}-benchmark-\d{{8}}-\d{{6}}", default.name)
    assert told == Path("results") / results


def test_no_default_store_takes_more_than_a_few_gb():
    """EARL's and MVA's stores at their defaults: at most 4 GB and 1.8 GB on disk, EARL's largest rows (base S2 at
    d = 512: 512 x 768 x 2K=4 columns of 2 bytes, 3,145,728 bytes) still holding the default 1,000 candidates."""
    from earl import benchmark as earl
    from mva import benchmark as mva

    args = earl.parse_args([])
    stores = [(size, strategy, n) for size in earl.SIZES.values() for strategy in ("s1", "s2") for n in args.lengths]
    assert max(earl.store_documents(*store, args) * earl.store_bytes_per_document(*store, args.dtype)
               for store in stores) <= 4e9
    assert earl.store_documents(earl.SIZES["base"], "s2", 512, args) == 4_000_000_000 // 3_145_728 == 1271
    assert args.candidates == 1000
    # MVA1's rows: 70 document timesteps of [D_K | D_V] (2 x 128 fp32), 71,680 bytes a document.
    assert mva.parse_args([]).store_documents * 70 * 256 * 4 <= 1.8e9


def test_store_queries_run_each_draw_cold_then_warm_after_a_spare_warm_up(tmp_path):
    """`cold_then_warm` warms up on draw `repeats`, then queries draws 0 to `repeats` - 1 (their ids ``d{i}``) cold and
    again warm, and counts each draw's distinct shards of 10."""
    from common.benchmarks.store_reads import cold_then_warm, draw_candidates

    class Store:  # the attributes cold_then_warm reads: a folder of files, a length, the shard size
        folder, manifest = tmp_path, {"shard_size": 10}

        def __len__(self):
            return 50

    (tmp_path / "shard-00000.bin").write_bytes(b"\0" * 4096)
    warmed, queried = [], []
    cold, warm, store = cold_then_warm(Store(), 6, 3, 7, warmed.append,
                                       lambda ids: queried.append(ids) or {"n": len(queried)})
    draws = [[f"d{p}" for p in draw_candidates(50, 6, 7, repeat).tolist()] for repeat in range(4)]
    assert warmed == [draws[3]] and queried == draws[:3] * 2
    assert (cold, warm) == ([{"n": 1}, {"n": 2}, {"n": 3}], [{"n": 4}, {"n": 5}, {"n": 6}])
    shards = sorted(len(set(p // 10 for p in draw_candidates(50, 6, 7, repeat).tolist())) for repeat in range(3))
    assert store["store_documents"] == 50 and store["candidate_shards"] == shards[1]
    assert store["store_cached"] is None or 0 <= store["store_cached"] <= 1
