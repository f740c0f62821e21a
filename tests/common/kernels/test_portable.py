"""The portable PyTorch kernel equals the dense reference, forward and gradients (fp32, atol 1e-5)."""

import pytest
import torch

from tests.common.kernels.cases import CASES, make_inputs, output_and_grads
from common.kernels import qds_attention
from common.kernels.portable import portable_attention
from common.kernels.reference import reference_attention


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_portable_equals_reference(case):
    inputs = make_inputs(case)
    expected = output_and_grads(reference_attention, inputs)
    actual = output_and_grads(portable_attention, inputs)
    for name, a, e in zip(["out", "dq", "dk", "dv", "dq_g", "dk_g", "dv_g"], actual, expected):
        assert torch.allclose(a, e, atol=1e-5, rtol=0), f"{name}: max diff {(a - e).abs().max():.3g}"


def test_padded_rows_are_zero_and_their_gradients_finite():
    case = next(c for c in CASES if c.name == "padding_only")
    inputs = make_inputs(case)
    out, *grads = output_and_grads(portable_attention, inputs)
    assert out[1, :, 1:].abs().max() == 0 and out[0, :, -30:].abs().max() == 0
    assert all(torch.isfinite(g).all() for g in grads)


def test_auto_falls_back_to_portable_when_tvm_cannot_run(monkeypatch):
    import common.kernels as kernels

    def unavailable(*args):
        raise kernels.KernelUnavailableError("TVM is not installed (test)")

    real = kernels.get_implementation
    monkeypatch.setattr(kernels, "get_implementation", lambda impl: unavailable if impl == "tvm" else real(impl))
    inputs = make_inputs(CASES[0])
    with pytest.warns(RuntimeWarning, match="falls back to the portable kernel: TVM is not installed"):
        out = qds_attention(**inputs, impl="auto")
    assert torch.equal(out, portable_attention(**inputs))
    with pytest.raises(ValueError, match="unknown attention implementation 'dense'"):
        qds_attention(**inputs, impl="dense")
