"""`common.length_batches`: the split it returns is the cheapest of every split into runs of the sorted rows,
checked by enumerating them all."""

import random

import pytest

from common.length_batches import length_batches


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
