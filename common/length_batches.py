"""Batches of similar length: the rows of a padded batch regrouped so that less padding is computed.

A model whose output for one row does not depend on the other rows of its batch, nor on the padding
after the row (the padding is masked), computes the same outputs from any split of the batch. Each
part is then padded only to its own longest row, at the price of one more call of the model per part.
`length_batches` picks the split that minimises (positions computed) + `call` x (number of calls),
exactly, by dynamic programming over the rows sorted by length (an optimal split into parts never
interleaves lengths, so only the cut points of the sorted order are searched).
"""

from __future__ import annotations

import math
from collections.abc import Callable


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
