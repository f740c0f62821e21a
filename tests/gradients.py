"""A fast path and its reference computing the same function: the same gradients for every parameter."""

import torch
from torch import Tensor


def assert_same_gradients(got: Tensor, want: Tensor, params: list[Tensor], upstream: Tensor | None = None, *,
                          rtol: float, atol: float) -> None:
    """The gradients of ``(got * upstream).sum()`` and ``(want * upstream).sum()`` (plain sums without `upstream`)
    are equal for every parameter; a parameter one leaves out of the graph the other leaves out too."""
    weight = 1 if upstream is None else upstream
    for a, b in zip(torch.autograd.grad((got * weight).sum(), params, allow_unused=True),
                    torch.autograd.grad((want * weight).sum(), params, allow_unused=True)):
        if a is None or b is None:
            assert a is None and b is None
        else:
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol)
