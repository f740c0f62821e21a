"""Mixed precision: every package's ``train`` under ``--trainer.precision bf16-mixed`` on CPU, against fp32; and the
pieces that bf16 inputs used to break (the QDS kernels, the Conformer's convolution), against their fp32 selves.

The runs: each package's tiny ``train`` (its tests' settings, 2 steps, then the test re-ranking) once in fp32 and
once under ``bf16-mixed``, with a learning rate of 0. The step still runs (forward, backward, optimizer), and a
gradient that is not finite would reach the weights (Adam's update is 0 x NaN) and the second step's loss; but both
runs test the same weights, so their scores differ only by the precision of the computation. (The Conformer-Kernel's
BatchScale and BatchNorm statistics, which training updates whatever the learning rate, differ by bf16's rounding
too.)

Tolerances. bf16 keeps 8 significant bits: every rounding is within 2^-8 of the value, relative. A kernel's output
is rounded a handful of times (inputs, scores, probabilities, output) and its gradients a few more, so the kernels
are held to 2^-5 (8 roundings) of the largest reference value. A ranker's score goes through every layer of the
tiny model (embeddings, attention, feed-forward, head), each rounding its inputs; the scores are held to 2^-4 of the
largest fp32 score of the run, plus 2^-8 absolute, for scores near 0. The score layers themselves run in fp32
(`common.encoders.precision`), so the candidates' scores are as distinct as in fp32: a bf16 score would round the
tiny models' scores (near 0.1, within 1e-3 of each other) to a few values.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch

from common.data.builtin import builtin_source
from common.data.formats import read_run
from common.kernels import qds_attention
from tests.common.kernels.cases import CASES, make_inputs, output_and_grads

pytestmark = pytest.mark.slow  # the second tier (README, "Tests")

#: Kernel outputs and gradients: within this fraction of the largest reference value (module docstring).
KERNEL_TOLERANCE = 2**-5
#: Scores: within this fraction of the run's largest fp32 score, plus `SCORE_ATOL` (module docstring).
SCORE_TOLERANCE = 2**-4
SCORE_ATOL = 2**-8

#: Two steps, the dev check and a checkpoint at the second, the test re-ranking of 4 queries' top 10.
STEPS = ["--trainer.max_steps", "2", "--trainer.val_check_interval", "2", "--save_every_n_steps", "2",
         "--trainer.log_every_n_steps", "1", "--trainer.accelerator", "cpu", "--model.lr", "0"]


def _tiny(package: str) -> tuple[list[str], str]:
    """The package's tiny train settings (its tests') and its re-ranking run file."""
    if package == "conformer_kernel":
        from tests.conformer_kernel.test_train import SMALL

        return [*SMALL, "--data.min_count", "2", "--data.depth", "10", "--data.dev_queries", "3",
                "--data.test_queries", "4", "--trainer.enable_progress_bar", "false"], "run.rerank.trec"
    tiny = __import__(f"tests.{package}.test_train", fromlist=["TINY"]).TINY
    baselines = ["--compare_with", "[]"] if "--compare_with" in tiny else []
    return [*tiny, *baselines], "run.trec"


def _train(package: str, precision: str, out: Path) -> dict:
    train = __import__(f"{package}.train", fromlist=["main"])
    args, _ = _tiny(package)
    return train.main([*args, *STEPS, "--trainer.precision", precision, "--output_dir", str(out)])


@pytest.fixture(scope="module", params=["qds", "conformer_kernel", "earl", "mva"])
def runs(request, tmp_path_factory):
    """(package, {precision: (output folder, metrics)}) of the package's fp32 and bf16-mixed runs."""
    package = request.param
    folders = {}
    for precision in ("32-true", "bf16-mixed"):
        out = tmp_path_factory.mktemp(package) / precision
        folders[precision] = out, _train(package, precision, out)
    return package, folders


def _losses(out: Path) -> list[float]:
    with (out / "logs" / "metrics.csv").open() as f:
        return [float(row["train/loss"]) for row in csv.DictReader(f) if row.get("train/loss")]


def test_bf16_training_steps_have_finite_losses(runs):
    _, folders = runs
    losses = _losses(folders["bf16-mixed"][0])
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses), losses
    reference = _losses(folders["32-true"][0])
    # The first step's loss, of the same weights and batch: within the score tolerance of fp32's.
    assert losses[0] == pytest.approx(reference[0], rel=SCORE_TOLERANCE, abs=SCORE_ATOL)


def test_bf16_evaluation_scores_match_fp32(runs):
    """The re-ranked candidates (each test query's BM25 top 10) get the fp32 scores within the tolerance, and the
    metrics are finite and written."""
    package, folders = runs
    _, run_file = _tiny(package)
    (fp32_out, _), (bf16_out, bf16_metrics) = folders["32-true"], folders["bf16-mixed"]
    assert json.loads((bf16_out / "metrics.json").read_text()) == bf16_metrics
    assert all(math.isfinite(v) for measures in bf16_metrics.values() for v in measures.values())
    fp32, bf16 = read_run(fp32_out / run_file), read_run(bf16_out / run_file)
    assert set(fp32) == set(bf16) and len(fp32) == 4
    bm25 = builtin_source("test").candidates()
    top = {q: sorted(bm25[q], key=bm25[q].get, reverse=True)[:10] for q in fp32}
    pairs = [(fp32[q][d], bf16[q][d]) for q in fp32 for d in top[q]]
    scale = max(abs(a) for a, _ in pairs)
    worst = max(abs(a - b) for a, b in pairs)
    distinct = {name: [len({run[q][d] for d in top[q]}) for q in sorted(top)] for name, run in
                (("fp32", fp32), ("bf16", bf16))}
    print(f"{package}: {len(pairs)} scores, largest |fp32| {scale:.4g}, largest |bf16 - fp32| {worst:.3g}, "
          f"distinct scores per query {distinct}")
    assert worst <= SCORE_TOLERANCE * scale + SCORE_ATOL
    # The score layers run in fp32 (`common.encoders.precision`): no ties that bf16's rounding of scores would make.
    assert distinct["bf16"] == distinct["fp32"]


# --- the pieces ---------------------------------------------------------------------------------------------------


def _bf16(inputs: dict) -> dict:
    """`inputs` of `make_inputs` with q, k, v and the global projections in bf16 (leaves that require gradients)."""
    cast = {key: inputs[key].detach().bfloat16().requires_grad_() for key in ("q", "k", "v")}
    global_qkv = inputs["global_qkv"] and tuple(x.detach().bfloat16().requires_grad_() for x in inputs["global_qkv"])
    return inputs | cast | {"global_qkv": global_qkv}


@pytest.mark.parametrize("mode", ["bf16_inputs", "bf16_autocast", "fp16_autocast"])
@pytest.mark.parametrize("impl", ["reference", "portable", "tvm", "auto"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_kernels_in_half_precision_match_the_fp32_reference(case, impl, mode):
    """Output and gradients, with bf16 inputs or under CPU autocast (``bf16-mixed``; fp16 for the ``16-mixed`` of
    GPUs, 11 significant bits: the bf16 tolerance holds), against the dense reference in fp32; with bf16 inputs the
    output and the gradients keep bf16."""
    if impl == "tvm":
        pytest.importorskip("tvm")
    expected = output_and_grads(lambda **a: qds_attention(**a, impl="reference"), make_inputs(case))
    inputs = _bf16(make_inputs(case)) if mode == "bf16_inputs" else make_inputs(case)
    dtype = torch.float16 if mode == "fp16_autocast" else torch.bfloat16
    with torch.autocast("cpu", dtype=dtype, enabled=mode != "bf16_inputs"):
        got = output_and_grads(lambda **a: qds_attention(**a, impl=impl), inputs)
    if mode == "bf16_inputs":
        assert got[0].dtype == torch.bfloat16 and all(g.dtype == torch.bfloat16 for g in got[1:])
    for name, g, e in zip(["out", "dq", "dk", "dv", "dq_g", "dk_g", "dv_g"], got, expected):
        assert g.shape == e.shape
        error = float((g.float() - e).abs().max())
        assert error <= KERNEL_TOLERANCE * float(e.abs().max()), (name, error)


def test_tvm_backward_under_autocast_computes_in_fp32():
    """A backward run inside an autocast region (as some loops do) keeps the TVM kernels' float32 buffers: the
    gradients equal those of a backward outside it."""
    pytest.importorskip("tvm")
    grads = []
    for inside in (False, True):
        inputs = make_inputs(CASES[0])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = qds_attention(**inputs, impl="tvm")
            if inside:
                out.sum().backward()
        if not inside:
            out.sum().backward()
        grads.append(inputs["q"].grad)
    assert grads[0].dtype == torch.float32 and torch.equal(grads[0], grads[1])


def test_longformer_attention_under_autocast_matches_fp32():
    """The QDS layer (Longformer's parameters) with global tokens under bf16 autocast: its global queries' buffer
    takes the projection's dtype; the output is fp32's within the kernel tolerance."""
    from transformers import LongformerConfig

    from common.kernels.longformer import QDSLongformerSelfAttention

    torch.manual_seed(0)
    config = LongformerConfig(hidden_size=32, num_attention_heads=2, attention_window=8,
                              attention_probs_dropout_prob=0.0)
    layer = QDSLongformerSelfAttention(config, 0, impl="portable").eval()
    hidden = torch.randn(2, 40, 32)
    mask = torch.zeros(2, 40)
    mask[:, :3] = 1.0  # global
    mask[1, 30:] = -1.0  # padding
    with torch.no_grad():
        expected = layer(hidden, attention_mask=mask)[0]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = layer(hidden, attention_mask=mask)[0]
    assert got.dtype == torch.bfloat16
    assert float((got.float() - expected).abs().max()) <= KERNEL_TOLERANCE * float(expected.abs().max())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_conformer_convolution_under_autocast_matches_fp32(dtype):
    """`SameConv1d` under autocast: forward and the gradients of input, weight and bias (returned in their fp32
    dtype) within the kernel tolerance of fp32's."""
    from conformer_kernel.model import SameConv1d

    torch.manual_seed(0)
    x, weight, bias = torch.randn(2, 8, 50), torch.randn(8, 2, 31) * 0.2, torch.randn(8)

    def run(autocast: bool) -> list[torch.Tensor]:
        leaves = [t.clone().requires_grad_() for t in (x, weight, bias)]
        with torch.autocast("cpu", dtype=dtype, enabled=autocast):
            out = SameConv1d.apply(*leaves, 4)
        assert out.dtype == (dtype if autocast else torch.float32)
        (out.float() * torch.linspace(-1, 1, 50)).sum().backward()
        return [out.detach().float(), *(t.grad for t in leaves)]

    expected = run(False)
    got = run(True)
    for name, g, e in zip(["out", "dx", "dweight", "dbias"], got, expected):
        if name != "out":
            assert g.dtype == torch.float32, name
        assert float((g - e).abs().max()) <= KERNEL_TOLERANCE * float(e.abs().max()), name
