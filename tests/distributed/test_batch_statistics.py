"""The Conformer-Kernel's batch statistics on 2 processes equal one process's on the whole batch: NDRM2's BatchScale
(Eq. 4's cumulative mean) and NDRM3's BatchNorm (Eq. 3), forward, running statistics and gradients, against
``nn.BatchNorm1d`` and the mean computed by hand on the whole batch (gloo, CPU)."""

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from conformer_kernel.model import BatchNorm, BatchScale

pytestmark = pytest.mark.slow

PROCESSES = 2


def batches(step: int) -> torch.Tensor:
    """The whole batch of step `step`: (8, 2) term-score pairs, seeded."""
    return torch.randn(8, 2, generator=torch.Generator().manual_seed(step), dtype=torch.float64) * 3 + 1


def weights() -> torch.Tensor:
    return torch.linspace(-1, 1, 16, dtype=torch.float64).view(8, 2)  # d loss / d output: not symmetric


def run_slice(rank: int, init: str, out: str) -> None:
    """Process `rank` of 2: three training steps on its half of each batch; its results saved to `out`."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=PROCESSES)
    norm, scale = BatchNorm(2).double(), BatchScale().double()
    rows = slice(rank * 4, rank * 4 + 4)
    outputs, grads = [], []
    for step in range(3):
        x = batches(step)[rows].clone().requires_grad_()
        y = norm(x)
        (y * weights()[rows]).sum().backward()
        outputs.append(y.detach())
        grads.append(x.grad)
        scale(batches(step)[rows])
    weight_grad = norm.weight.grad.clone()
    dist.all_reduce(weight_grad)  # what DDP adds (before its mean) over the processes
    torch.save({"outputs": outputs, "grads": grads, "weight_grad": weight_grad, "norm": norm.state_dict(),
                "scale": scale.state_dict()}, f"{out}/rank{rank}.pt")
    dist.barrier()  # both results are saved
    dist.destroy_process_group()
    # Leave without the interpreter's teardown: under load a gloo worker thread still joinable there aborts the
    # process ("terminate called without an active exception", pytorch/pytorch#190489), after its work is done.
    os._exit(0)


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("batch_statistics")
    mp.spawn(run_slice, args=(f"file://{folder}/init", str(folder)), nprocs=PROCESSES)
    return [torch.load(folder / f"rank{r}.pt") for r in range(PROCESSES)]


def test_batch_norm_is_the_whole_batchs(two_processes):
    """Each slice is normalised with the whole batch's mean and variance, its input gradient is the whole batch's
    (every slice's share of the statistics included), and the running statistics are the whole batch's."""
    reference = nn.BatchNorm1d(2).double()
    for step in range(3):
        x = batches(step).requires_grad_()
        y = reference(x)
        (y * weights()).sum().backward()
        got = torch.cat([two_processes[r]["outputs"][step] for r in range(PROCESSES)])
        torch.testing.assert_close(got, y.detach(), rtol=0, atol=1e-12)
        torch.testing.assert_close(torch.cat([two_processes[r]["grads"][step] for r in range(PROCESSES)]), x.grad,
                                   rtol=0, atol=1e-12)
    for rank in range(PROCESSES):
        torch.testing.assert_close(two_processes[rank]["weight_grad"], reference.weight.grad, rtol=0, atol=1e-12)
        for key, value in reference.state_dict().items():
            torch.testing.assert_close(two_processes[rank]["norm"][key], value, rtol=0, atol=1e-12)


def test_batch_scale_mean_is_every_value_seen(two_processes):
    """Eq. 4's E[x] after three steps is the mean of the three whole batches, on both processes."""
    everything = torch.cat([batches(step) for step in range(3)])
    for rank in range(PROCESSES):
        state = two_processes[rank]["scale"]
        assert state["count"].item() == everything.numel()
        torch.testing.assert_close(state["running_mean"], everything.mean(), rtol=0, atol=1e-12)
