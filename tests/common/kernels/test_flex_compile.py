"""FlexAttention's compilation (`common.kernels.flex.FlexKernel`) on CPU: one graph for every shape, never the eager,
dense fallback, and ``impl="auto"`` falling back to ``portable`` on every process when compiling fails.

Dynamo runs here with counting backends (torch's `CompileCounter`, or one that raises as a failed Triton build
would) instead of inductor, which would build a CPU kernel per graph in tens of seconds: the graphs, their guards and
the recompile limit are dynamo's whatever the backend. Forward only, without gradients: FlexAttention has no CPU
backward (`test_flex.py`).
"""

import os
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch._dynamo.testing import CompileCounter

import common.kernels as kernels
import common.kernels.flex as flex_module
from common.kernels import KernelUnavailableError, qds_attention
from common.kernels.checks import qds_inputs
from common.kernels.flex import FlexKernel, flex_attention_qds
from common.kernels.portable import portable_attention
from common.kernels.reference import reference_attention

#: (B, N): single rows and single blocks, B equal to N / 128, N within a block of a multiple of 128 and on one.
SHAPES = [(1, 50), (2, 130), (3, 256), (5, 300), (1, 128), (6, 257), (3, 129), (7, 384), (2, 77), (4, 400)]
HEADS, DIM = 2, 16


def _inputs(batch, n, seed=0):
    return qds_inputs(batch, n, HEADS, DIM, seed=seed)


class GraphCounter(CompileCounter):
    """torch's CompileCounter (graphs compiled: `frame_count`), also counting the calls of those graphs."""

    calls = 0

    def __call__(self, graph, example_inputs):
        compiled = super().__call__(graph, example_inputs)

        def run(*args):
            self.calls += 1
            return compiled(*args)

        return run


def test_one_graph_serves_every_shape():
    """10 shapes, every call run by the graph compiled at the first (none by dynamo's eager fallback): B and N
    bucketed (N to whole blocks, both to at least 2) and compiled with dynamic shapes, no duck sizing. A
    torch.compile'd flex_attention compiled 4 graphs for such shapes (sizes of 1, and sizes equal at a first
    compilation, compile their own)."""
    counter = GraphCounter()
    kernel = FlexKernel(counter, compiled_on=("cpu",))
    for seed, (batch, n) in enumerate(SHAPES):
        inputs = _inputs(batch, n, seed)
        with torch.no_grad():
            out = flex_attention_qds(**inputs, kernel=kernel)
        torch.testing.assert_close(out, reference_attention(**inputs), atol=1e-5, rtol=0)
    assert counter.frame_count == 1
    assert counter.calls == len(SHAPES)


def test_past_the_recompile_limit_a_call_raises_instead_of_running_densely():
    """Every dtype is a graph of its own; with the limit at 1 graph, dynamo would run the float64 call eagerly,
    materialising the (N x N) scores; here it raises."""
    import torch._dynamo

    kernel = FlexKernel(CompileCounter(), compiled_on=("cpu",))
    inputs = _inputs(2, 300)
    doubled = inputs | {name: inputs[name].double() for name in ("q", "k", "v")} | {"global_qkv": None}
    with torch.no_grad(), torch._dynamo.config.patch(recompile_limit=1):
        flex_attention_qds(**(inputs | {"global_qkv": None}), kernel=kernel)
        with pytest.raises(KernelUnavailableError, match="FailOnRecompileLimitHit"):
            flex_attention_qds(**doubled, kernel=kernel)
    assert "FailOnRecompileLimitHit" in kernel.failure


def _failing_backend(graph, example_inputs):
    raise RuntimeError("ptxas fatal: unsupported gpu architecture (a test's compiler failure)")


@pytest.fixture
def auto_flex(monkeypatch):
    """``impl="auto"`` choosing flex on CPU, a fresh warning record, and `flex.KERNEL` set by the test (returned)."""
    monkeypatch.setattr(kernels, "auto_implementation", lambda device, head_dim: "flex")
    monkeypatch.setattr(kernels, "_WARNED", set())

    def use(kernel):
        monkeypatch.setattr(flex_module, "KERNEL", kernel)
        return kernel

    return use


def test_a_failed_compilation_falls_back_to_portable_with_one_warning(auto_flex, recwarn):
    kernel = auto_flex(FlexKernel(_failing_backend, compiled_on=("cpu",)))
    inputs = _inputs(3, 300)
    with torch.no_grad():
        outputs = [qds_attention(**inputs, impl="auto") for _ in range(3)]
        expected = portable_attention(**inputs)
    assert all(torch.equal(out, expected) for out in outputs)
    warned = [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    assert len(warned) == 1
    assert "falls back to the portable kernel: FlexAttention failed to compile" in str(warned[0].message)
    assert "ptxas fatal" in str(warned[0].message)
    with pytest.raises(KernelUnavailableError, match="ptxas fatal"), torch.no_grad():
        qds_attention(**inputs, impl="flex")  # given explicitly, it raises
    assert "ptxas fatal" in kernel.failure


def test_a_compilation_that_works_is_used(auto_flex):
    counter = CompileCounter()
    auto_flex(FlexKernel(counter, compiled_on=("cpu",)))
    inputs = _inputs(3, 300)
    with torch.no_grad():
        out = qds_attention(**inputs, impl="auto")
    torch.testing.assert_close(out, reference_attention(**inputs), atol=1e-5, rtol=0)
    assert counter.frame_count == 1  # the probe's graph ran the call


def test_a_first_call_in_inference_mode_compiles(auto_flex, recwarn):
    """Lightning evaluates in inference mode, its sanity check before any training step: the probe runs there."""
    counter = CompileCounter()
    auto_flex(FlexKernel(counter, compiled_on=("cpu",)))
    inputs = _inputs(3, 300)
    with torch.inference_mode():
        out = qds_attention(**inputs, impl="auto")
    torch.testing.assert_close(out, reference_attention(**inputs), atol=1e-5, rtol=0)
    assert counter.frame_count == 1  # the probe's graph ran the call
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


class _OtherProcess:
    """torch.distributed as seen by a process of a 2-process job: the other process's probe succeeded or not."""

    def __init__(self, succeeded: bool):
        self.succeeded, self.reductions = succeeded, []

    def all_reduce(self, tensor, op):
        self.reductions.append((tensor.clone(), op))
        tensor.clamp_(max=int(self.succeeded))  # MIN with the other process's answer


@pytest.mark.parametrize("other_succeeded", [True, False], ids=["other_succeeded", "other_failed"])
def test_the_processes_agree(auto_flex, monkeypatch, recwarn, other_succeeded):
    """This process compiles; where the other one failed, both run portable (a unit test: the all-reduce is
    simulated; `test_two_processes_agree` runs two)."""
    auto_flex(FlexKernel(CompileCounter(), compiled_on=("cpu",)))
    other = _OtherProcess(other_succeeded)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "gloo")
    monkeypatch.setattr(dist, "all_reduce", other.all_reduce)
    inputs = _inputs(3, 300)
    with torch.no_grad():
        outputs = [qds_attention(**inputs, impl="auto") for _ in range(2)]
        expected = (flex_attention_qds if other_succeeded else portable_attention)(**inputs)
    assert all(torch.equal(out, expected) for out in outputs)
    assert len(other.reductions) == 1  # once, at the first call
    [(sent, op)] = other.reductions
    assert sent.tolist() == [1] and op == dist.ReduceOp.MIN
    warned = [str(w.message) for w in recwarn if issubclass(w.category, RuntimeWarning)]
    assert warned == ([] if other_succeeded else
                      ["impl='auto' falls back to the portable kernel: FlexAttention failed to compile on another "
                       "process of this job"])


def _process(rank: int, init: str, out: str) -> None:
    """Process `rank` of 2 (gloo): its compilation fails on rank 1 only; both run impl='auto' twice."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    kernels.auto_implementation = lambda device, head_dim: "flex"
    flex_module.KERNEL = FlexKernel(_failing_backend if rank == 1 else CompileCounter(), compiled_on=("cpu",))
    inputs = _inputs(3, 300)
    with torch.no_grad(), warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        outputs = [qds_attention(**inputs, impl="auto") for _ in range(2)]
    torch.save({"outputs": outputs, "portable": portable_attention(**inputs), "warnings": [str(w.message) for w in
                warned]}, f"{out}/rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)  # as tests/distributed do: no interpreter teardown with gloo threads still joinable


@pytest.mark.slow
def test_two_processes_agree(tmp_path):
    """Two gloo processes, the compilation failing on one: both run portable, each warning once, with its reason."""
    mp.spawn(_process, args=(f"file://{tmp_path}/init", str(tmp_path)), nprocs=2)
    results = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(2)]
    for result in results:
        assert all(torch.equal(out, result["portable"]) for out in result["outputs"])
        assert len(result["warnings"]) == 1
    assert "another process of this job" in results[0]["warnings"][0]
    assert "ptxas fatal" in results[1]["warnings"][0]
