"""Fixtures the `mva` tests share."""

import pytest

from common.data.builtin import builtin_source


@pytest.fixture(scope="module")
def documents():
    """The built-in collection's training documents (`common.data.source.DocumentLookup`)."""
    return builtin_source("train").documents()
