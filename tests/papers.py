"""A paper's text read at test time, for tests that hold code and configs to the sentences it prints
(`tests.earl.paper`, `tests.mva.paper`); ``../shared/papers`` beside the checkout, skipped where it is absent."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest


@cache
def _text(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.is_file() else None


def paper_text(path: Path, name: str) -> str:
    """The text of the paper at `path` (`name` in the skip's reason); skips the test where it is absent."""
    text = _text(path)
    if text is None:
        pytest.skip(f"the {name} paper's text is not at {path} (shared/papers beside the checkout)")
    return text


def quoted(path: Path, name: str, sentence: str) -> tuple[str, ...]:
    """The groups of `sentence`, a regular expression of a sentence of the paper (whitespace as in the text), which
    the paper must contain; skips where the paper is absent."""
    found = re.search(sentence, paper_text(path, name))
    assert found, f"the paper does not say {sentence!r}"
    return found.groups()


def training_groups(dataset) -> list:
    """Four training groups of three queries from a training dataset of groups: two groups of its first query, then
    the first group of each of two other queries (a query in two groups, spread by ``query_index`` once collated)."""
    seen, chosen = set(), [0, 1]
    for i in range(2, len(dataset)):
        if dataset[i].qid not in {dataset[0].qid} | seen and len(seen) < 2:
            seen.add(dataset[i].qid)
            chosen.append(i)
    groups = [dataset[i] for i in chosen]
    assert len({g.qid for g in groups}) == 3 and groups[0].qid == groups[1].qid
    return groups
