"""`tests.devices.on_meta`, the meta device standing in for a GPU: what it refuses (an op meeting two devices, in the
forward pass and in a backward one, a CPU index tensor that the meta kernels accept), what it lets pass (0-d CPU
numbers, copies between devices), and the host's reads of meta tensors as ones."""

import pytest
import torch

from tests.devices import META, MixedDevices, on_meta


def test_an_op_meeting_a_cpu_tensor_and_a_device_tensor_is_refused():
    x = torch.ones(3, device=META)
    with on_meta(), pytest.raises(MixedDevices, match="aten.add.Tensor meets tensors on cpu and meta"):
        x + torch.ones(3)


def test_a_cpu_index_tensor_is_refused_where_the_meta_kernel_copies_it_over():
    x = torch.ones(4, 2, device=META)
    assert x[torch.tensor([0, 2])].shape == (2, 2)  # torch's meta kernel, as CUDA's, takes a CPU index
    with on_meta(), pytest.raises(MixedDevices, match="aten.index.Tensor"):
        x[torch.tensor([0, 2])]
    y = torch.ones(4, device=META)
    with on_meta(), pytest.raises(MixedDevices, match="aten.index_put_"):
        y[torch.arange(2)] = 0.0


def test_cpu_numbers_and_copies_between_devices_pass():
    x = torch.ones(3, device=META)
    with on_meta():
        y = x * torch.tensor(2.0) + torch.ones(3).to(META)  # a 0-d CPU tensor is a number on any device
        y.copy_(torch.zeros(3))
    assert y.device == META


class CpuGradient(torch.autograd.Function):
    """The identity, whose backward adds a CPU tensor to the incoming gradient."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad + torch.zeros(grad.shape)


def test_a_backward_pass_meeting_two_devices_is_refused():
    x = torch.ones(3, device=META, requires_grad=True)
    with on_meta(), pytest.raises(MixedDevices, match="cpu and meta"):
        CpuGradient.apply(x).sum().backward()


def test_the_hosts_reads_of_meta_tensors_read_ones():
    x = torch.ones(3, 2, device=META)
    with on_meta():
        assert int(x.sum()) == 1 and x[0, 0].item() == 1
        assert x.tolist() == [[1.0, 1.0]] * 3
        assert torch.equal(x.long().cpu(), torch.ones(3, 2, dtype=torch.long))
        positions = x.nonzero()  # every position is nonzero
        rows, inverse = torch.unique(x, dim=0, return_inverse=True)  # every row the same
        values, counts = torch.unique(x, return_counts=True)
    assert positions.device == META and positions.shape == (6, 2)
    assert rows.shape == (1, 2) and inverse.shape == (3,) and inverse.device == META
    assert values.shape == (1,) and counts.shape == (1,)
