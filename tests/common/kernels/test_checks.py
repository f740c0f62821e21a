"""The GPU checks of `common.kernels.checks`, run where they run on CPU: FlexAttention's forward only."""

import pytest
import torch

import common.kernels as kernels
import common.kernels.flex as flex_module
from common.kernels.checks import auto_choice, count_compilations, flex_errors, qds_inputs
from common.kernels.flex import FlexKernel


def test_qds_inputs_differ_per_example():
    inputs = qds_inputs(3, 300, heads=2, head_dim=8)
    counts = inputs["is_global"].sum(1).tolist()
    assert len(set(counts)) == 3  # query lengths and sentence spacings differ
    assert inputs["key_padding_mask"].sum(1).tolist() == [0, 100, 0]
    assert not (inputs["is_global"] & inputs["key_padding_mask"]).any()
    assert inputs["q"].shape == (3, 2, 300, 8) and len(inputs["global_qkv"]) == 3


@pytest.mark.parametrize("dtype, bound", [(torch.float32, 1e-5), (torch.bfloat16, 2**-5)])
def test_flex_errors_on_cpu_are_the_forwards(dtype, bound):
    """Forward only on CPU; fp32 within 1e-5 of the reference's largest value, bf16 within 2^-5 (the precision
    bound of tests/distributed/test_precision.py)."""
    errors = flex_errors("cpu", dtype, batch=2, n=300, heads=2, head_dim=16)
    assert list(errors) == ["out"]
    assert 0 <= errors["out"] < bound


def test_flex_errors_see_a_wrong_kernel():
    """A kernel whose ordinary rows come out 0 is far from the reference."""
    def zeros(q, k, v, block_mask):
        return torch.zeros_like(q)

    assert flex_errors("cpu", batch=2, n=300, heads=2, head_dim=16, kernel=zeros)["out"] > 0.1


def test_auto_choice(monkeypatch):
    assert auto_choice("cpu") == ("tvm", None)
    monkeypatch.setattr(kernels, "auto_implementation", lambda device, head_dim: "flex")
    monkeypatch.setattr(flex_module, "KERNEL", FlexKernel("eager", compiled_on=("cpu",)))
    assert auto_choice("cpu", heads=2, head_dim=16) == ("flex", None)

    def failing(graph, example_inputs):
        raise RuntimeError("Triton is not installed (a test's compiler failure)")

    monkeypatch.setattr(flex_module, "KERNEL", FlexKernel(failing, compiled_on=("cpu",)))
    chosen, reason = auto_choice("cpu", heads=2, head_dim=16)
    assert chosen == "portable" and "Triton is not installed" in reason


def test_count_compilations():
    counts = count_compilations([(1, 100), (3, 300), (2, 129)], heads=2, head_dim=16, backend="eager")
    assert counts["graphs"] == 1 and counts["graph_calls"] == counts["flex_calls"] == 3
    assert 0 <= counts["max_error"] < 1e-5
