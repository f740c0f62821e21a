"""``impl="auto"`` (common.kernels): which implementation runs on which device, and its fallback.

No GPU is needed: the CUDA branch is a choice from the device type, Triton's presence and the compute capability,
so those are what the tests set (`torch.cuda.get_device_capability`, ``importlib.util.find_spec("triton")``); no
kernel is run on a pretended device.
"""

import importlib.util

import pytest
import torch

import common.kernels as kernels
from common.kernels import auto_implementation, qds_attention
from common.kernels.flex import flex_attention_qds
from common.kernels.portable import portable_attention
from tests.common.kernels.cases import CASES, make_inputs

CUDA = torch.device("cuda", 0)


@pytest.fixture
def gpu(monkeypatch):
    """A CUDA device of the capability the test sets (`gpu["capability"]`) and Triton installed or not."""
    state = {"capability": (9, 0), "triton": True}
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args):
        if name == "triton":
            return real_find_spec("torch") if state["triton"] else None  # any spec stands for "installed"
        return real_find_spec(name, *args)

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: state["capability"])
    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    return state


def test_cpu_runs_tvm():
    assert auto_implementation(torch.device("cpu"), 64) == "tvm"


def test_cuda_runs_flex_where_it_compiles(gpu):
    assert auto_implementation(CUDA, 64) == "flex"  # Hopper, the paper model's head_dim (768 / 12)
    gpu["capability"] = (7, 0)  # Volta: the oldest inductor's Triton backend takes
    assert auto_implementation(CUDA, 16) == "flex"


@pytest.mark.parametrize(
    "capability, triton, head_dim, why",
    [((6, 1), True, 64, "Pascal: no Triton backend"), ((8, 0), False, 64, "Triton not installed"),
     ((8, 0), True, 8, "head_dim under 16: Triton's tl.dot")],
)
def test_cuda_runs_portable_where_flex_cannot_compile(gpu, capability, triton, head_dim, why):
    gpu.update(capability=capability, triton=triton)
    assert auto_implementation(CUDA, head_dim) == "portable", why


@pytest.mark.parametrize("device", ["mps", "xpu", "meta"])
def test_other_devices_run_portable(device, gpu):
    assert auto_implementation(torch.device(device), 64) == "portable"


def test_a_chosen_flex_that_cannot_run_falls_back_to_portable(monkeypatch):
    """The dispatch after the choice, run for real on CPU: flex chosen, its forward runs where no gradient is
    needed; with gradients (which FlexAttention lacks on CPU) the call warns and runs portable."""
    monkeypatch.setattr(kernels, "auto_implementation", lambda device, head_dim: "flex")
    monkeypatch.setattr(kernels, "_WARNED", set())
    inputs = make_inputs(CASES[0])
    with torch.no_grad():
        assert torch.equal(qds_attention(**inputs, impl="auto"), flex_attention_qds(**inputs))
    with pytest.warns(RuntimeWarning, match="falls back to the portable kernel: FlexAttention .* no backward pass"):
        out = qds_attention(**inputs, impl="auto")
    assert torch.equal(out, portable_attention(**inputs))
