"""`common.encoders.length_batches`: the split it returns is the cheapest of every split into runs of the sorted rows,
checked by enumerating them all; `by_length` runs each batch and returns the outputs in the rows' order, on the
mask's device (the meta device, `tests.devices.on_meta`)."""

import random

import pytest
import torch

import common.encoders.length_batches
from common.encoders.length_batches import by_length, length_batches
from tests.devices import META, on_meta


def _partitions(n: int):
    """Every split of 0..n-1 into consecutive runs."""
    for cuts in range(2 ** (n - 1)):
        bounds = [0, *(i + 1 for i in range(n - 1) if cuts >> i & 1), n]
        yield [list(range(a, b)) for a, b in zip(bounds, bounds[1:])]


@pytest.mark.parametrize("seed", range(5))
def test_length_batches_are_the_cheapest_split(seed):
    rng = random.Random(seed)
    lengths = [rng.randint(1, 300) for _ in range(8)]
    padded, call = (lambda n: min(n + 30, 200)), rng.choice([0, 50, 500])
    batches = length_batches(lengths, padded, call=call)
    assert sorted(i for batch in batches for i in batch) == list(range(8))

    def cost(split):
        return sum(len(b) * padded(max(lengths[i] for i in b)) + call for b in split)

    order = sorted(range(8), key=lengths.__getitem__)
    best = min(cost([[order[i] for i in run] for run in split]) for split in _partitions(8))
    assert cost(batches) == best


def test_by_length_runs_each_batch_cut_to_its_longest_row_and_restores_the_order():
    mask = torch.zeros(5, 9)
    for row, n in enumerate([9, 2, 7, 1, 2]):
        mask[row, :n] = 1
    mask[4, 0] = 0  # a row's length runs to its last position, whatever comes before it
    calls = []

    def run(rows, n):
        calls.append((rows.tolist(), n))
        return rows.double() * 100 + n  # (b,): which row, and how far it was read

    out = by_length(mask, run, call=3)
    assert calls == [([3, 1, 4], 2), ([2, 0], 9)]  # rows sorted by length, (3 x 2 + 3) + (2 x 9 + 3) = 30 < 5 x 9 + 3
    assert out.tolist() == [9, 102, 209, 302, 402]


def test_by_length_with_one_batch_reads_every_row_in_place():
    mask = torch.ones(3, 4)
    mask[1, 3] = 0
    out = by_length(mask, lambda rows, n: torch.arange(12.0).view(3, 4)[rows, :n].sum(1), call=100)
    assert out.tolist() == [6, 22, 38]  # one batch: all rows as a slice, read to the longest (4)


def test_by_length_makes_its_index_tensors_on_the_masks_device(monkeypatch):
    """Several batches on the meta device: each batch's rows, their order and the outputs' gather are on the mask's
    device. (A meta mask has no lengths to read; the split is patched to two batches.)"""
    monkeypatch.setattr(common.encoders.length_batches, "length_batches", lambda lengths, padded, call: [[0, 2], [1]])
    mask, x = torch.ones(3, 5, device=META), torch.ones(3, 5, 4, device=META)
    seen = []

    def run(rows, n):
        seen.append(rows.device)
        return x[rows, :n].sum(1)  # (b, 4)

    with on_meta():
        out = by_length(mask, run, call=0)
    assert seen == [META, META] and out.device == META and out.shape == (3, 4)
