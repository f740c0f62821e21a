"""Batches of similar length: a padded batch regrouped so that less padding is computed, for a model whose rows are
independent and whose padding is masked. `length_batches` picks, by dynamic programming over the sorted lengths, the
split minimising positions computed + `call` x calls; `by_length` runs a model over it and restores the rows' order.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor


def length_batches(lengths: list[int], padded_length: Callable[[int], int] = int, *, call: float) -> list[list[int]]:
    """The rows of `lengths` (their indices) in batches of similar length, shortest first."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    cost, start = [0.0] + [math.inf] * len(order), [0] * (len(order) + 1)
    for j in range(1, len(order) + 1):
        width = padded_length(lengths[order[j - 1]])
        for i in range(j):
            c = cost[i] + (j - i) * width + call
            if c < cost[j]:
                cost[j], start[j] = c, i
    batches, j = [], len(order)
    while j:
        batches.append(order[start[j] : j])
        j = start[j]
    return batches[::-1]


def by_length(mask: Tensor, run: Callable[[Tensor | slice, int], Tensor], padded_length: Callable[[int], int] = int,
              *, call: float) -> Tensor:
    """``run(rows, n)`` on the batches of similar length of `mask`'s rows, its outputs in the order of the rows."""
    positions = torch.arange(1, mask.shape[1] + 1, device=mask.device)
    lengths = ((mask != 0) * positions).amax(-1).clamp_min(1).tolist()
    batches = length_batches(lengths, padded_length, call=call)
    if len(batches) == 1:
        return run(slice(None), max(lengths))
    parts = [run(torch.tensor(rows, device=mask.device), max(lengths[i] for i in rows)) for rows in batches]
    order = torch.tensor([i for rows in batches for i in rows], device=mask.device)
    return torch.cat(parts).index_select(0, torch.argsort(order))
