"""Shared fixtures: the real evaluation data in ../shared/data, when present."""

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The `shared/data` folder beside the checkout; skips the test where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real evaluation data not found at {SHARED_DATA} (shared/ beside the checkout)")
    return SHARED_DATA
