"""Code run on the meta device as a stand-in for a GPU, every op checked to meet tensors on one device (`on_meta`).

A CPU machine has no second device to put tensors on; the meta device is one (tensors with a shape and no data). A
tensor made on the CPU where the data is on the device meets it there as it would on a GPU, and most ops refuse it.
`on_meta` runs code under a dispatch mode that is stricter than the meta kernels and does what they cannot:

- Every op's tensors must be on one device, a 0-d CPU tensor excepted (torch reads it as a number on any device).
  The meta kernels, like CUDA's, also take a CPU index tensor and copy it over: a copy from the host per call, which
  the mode refuses too. Copies between devices (``.to``, ``copy_``) are what they are for and pass.
- A meta tensor has no values to read: the host's reads of one (``int(x)``, ``.item()``, ``.tolist()``, ``.cpu()``)
  and the ops whose output shape depends on the values (``nonzero``, ``unique``, ``x[mask]``) run as if every value
  were 1, so that code which reads a length or a count back from the device runs on and its later placement is
  checked. The values computed are then not the model's: these runs check where tensors are, the CPU tests check
  the values.

The checks follow autograd into the backward pass, which runs in the thread-local state of the ``with`` block.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

META = torch.device("meta")

aten = torch.ops.aten
#: The ops that move data between devices: their tensors are on two devices by design (``to`` reaches the mode
#: itself under inference mode, ``_to_copy`` otherwise).
TRANSFERS = {aten._to_copy, aten.to, aten.copy_}


class MixedDevices(AssertionError):
    """An op met tensors on more than one device."""


class OneDevice(TorchDispatchMode):
    """The dispatch mode of `on_meta` (module docstring)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [x for x in tree_leaves((args, kwargs)) if isinstance(x, Tensor)]
        if func.overloadpacket not in TRANSFERS:
            devices = {str(t.device) for t in tensors if not (t.device.type == "cpu" and t.dim() == 0)}
            if len(devices) > 1:
                raise MixedDevices(f"{func} meets tensors on {' and '.join(sorted(devices))}")
        if any(t.is_meta for t in tensors):
            read = _read_as_ones(func, args, kwargs)
            if read is not None:
                return read
        return func(*args, **kwargs)


def _read_as_ones(func, args, kwargs):
    """What `func` gives on meta tensors read as if every value were 1, where it reads values; else None."""
    x = args[0]
    if func in (aten._local_scalar_dense.default, aten.item.default):  # int(x), x.item()
        return True if x.dtype == torch.bool else 1
    if func is aten.is_nonzero.default:  # bool(x) (as it reaches here under inference mode)
        return True
    if func.overloadpacket in (aten._to_copy, aten.to):  # .cpu(), .tolist(), .to(device)
        device, dtype = _destination(x, [*args[1:], *kwargs.values()])
        if device.type != "meta":
            return torch.ones(x.shape, dtype=dtype, device=device)
    if func is aten.copy_.default and not x.is_meta:  # a host tensor filled from the device
        return x.fill_(1)
    if func is aten.nonzero.default:  # every position
        return torch.ones(x.shape).nonzero().to(META)
    if func.overloadpacket in (aten.index, aten.index_put, aten.index_put_) and any(map(_is_mask, args[1])):
        indices = []  # x[mask]: a k-dimensional mask is the k index tensors of its positions, here every one
        for i in args[1]:
            indices += torch.ones(i.shape).nonzero().to(META).unbind(1) if _is_mask(i) else [i]
        return func(x, indices, *args[2:], **kwargs)
    if func is aten.unique_dim.default:  # every slice equal: the first, every one its inverse
        dim = args[1] % x.dim()
        return (x.narrow(dim, 0, min(1, x.shape[dim])), x.new_zeros(x.shape[dim], dtype=torch.long),
                x.new_full((min(1, x.shape[dim]),), x.shape[dim], dtype=torch.long))
    if func is aten._unique2.default:  # every value equal
        return (x.new_ones(min(1, x.numel())), x.new_zeros(x.shape, dtype=torch.long),
                x.new_full((min(1, x.numel()),), x.numel(), dtype=torch.long))
    return None


def _is_mask(index: Tensor | None) -> bool:
    return index is not None and index.dtype in (torch.bool, torch.uint8)


def _destination(x: Tensor, arguments: list) -> tuple[torch.device, torch.dtype]:
    """The device and dtype a ``to`` or ``_to_copy`` of `x` with these `arguments` gives."""
    other = next((a for a in arguments if isinstance(a, Tensor)), None)  # x.to(other)
    if other is not None:
        return other.device, other.dtype
    device = next((a for a in arguments if isinstance(a, torch.device)), x.device)
    return device, next((a for a in arguments if isinstance(a, torch.dtype)), x.dtype)


def on_meta() -> OneDevice:
    """``with on_meta():`` runs the block under `OneDevice`: an op meeting two devices raises `MixedDevices`, a meta
    tensor reads as ones (module docstring)."""
    return OneDevice()


def to_meta(batch):
    """A batch (a dict of them, a tensor, a dataclass with ``to``; anything else as it is) on the meta device."""
    if isinstance(batch, dict):
        return {k: to_meta(v) for k, v in batch.items()}
    return batch.to(META) if hasattr(batch, "to") else batch


def assert_on_meta(*tensors: Tensor) -> None:
    """Each tensor is on the meta device."""
    for t in tensors:
        assert t.device == META, f"a result is on {t.device}, not on the model's device"


def assert_every_gradient_on_meta(module: nn.Module) -> None:
    """Every parameter of `module` got a gradient, on the meta device, of its shape."""
    missing = [name for name, p in module.named_parameters() if p.grad is None]
    assert not missing, f"no gradient reached {missing[:5]}"
    for name, p in module.named_parameters():
        assert p.grad.device == META and p.grad.shape == p.shape, name
