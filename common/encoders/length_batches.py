"""Batches of similar length: the rows of a padded batch regrouped so that less padding is computed.

A model whose output for one row does not depend on the other rows of its batch, nor on the padding
after the row (the padding is masked), computes the same outputs from any split of the batch. Each
part is then padded only to its own longest row, at the price of one more call of the model per part.
`length_batches` picks the split that minimises (positions computed) + `call` x (number of calls),
exactly, by dynamic programming over the rows sorted by length (an optimal split into parts never
interleaves lengths, so only the cut points of the sorted order are searched). `by_length` runs a
model over those batches and puts its outputs back in the rows' order.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor


def length_batches(lengths: list[int], padded_length: Callable[[int], int] = int, *,
                   call: float) -> list[list[int]]:
    """The rows of `lengths` (their indices) in batches of similar length, shortest first: those that minimise the
    positions computed, each batch padded to `padded_length` of its longest row, plus `call` positions per batch."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    cost, start = [0.0] + [math.inf] * len(order), [0] * (len(order) + 1)
    for j in range(1, len(order) + 1):  # cost[j]: the j shortest rows in batches
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
    """``run(rows, n)`` on the batches of similar length of `mask`'s rows, its outputs in the order of the rows.

    `mask` (B, N) is nonzero on the positions a row needs, a row's length is its last such position (at least 1),
    and `run` gets each batch's row indices (a slice of all rows when there is one batch) and its longest length.
    """
    positions = torch.arange(1, mask.shape[1] + 1, device=mask.device)
    lengths = ((mask != 0) * positions).amax(-1).clamp_min(1).tolist()
    batches = length_batches(lengths, padded_length, call=call)
    if len(batches) == 1:
        return run(slice(None), max(lengths))
    parts = [run(torch.tensor(rows, device=mask.device), max(lengths[i] for i in rows)) for rows in batches]
    order = torch.tensor([i for rows in batches for i in rows], device=mask.device)
    # index_select: its backward (index_add_) takes a third of what indexing's (index_put_) does here.
    return torch.cat(parts).index_select(0, torch.argsort(order))
