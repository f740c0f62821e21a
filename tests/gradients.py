"""Gradient checks: a fast path and its reference give the same gradients for every parameter; a model's gradients
repeat bit for bit."""

from collections.abc import Callable

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


def assert_repeatable_gradients(loss: Callable[[], Tensor], params: list[Tensor], runs: int = 8) -> None:
    """``loss()``'s gradients for `params` are bit-identical over `runs` backward passes on two threads: a kernel
    that adds in parallel (indexing's backward, ``x[index]`` with a repeated index, uses atomic adds on CPU above
    32,768 elements) sums in a different order each time, and the same seed then trains different weights."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        first = torch.autograd.grad(loss(), params)
        for _ in range(runs - 1):
            assert all(torch.equal(a, b) for a, b in zip(first, torch.autograd.grad(loss(), params)))
    finally:
        torch.set_num_threads(threads)
