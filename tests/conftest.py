"""Shared fixtures: the real evaluation data in ../shared/data, when present; one torch thread for tiny models."""

from pathlib import Path

import pytest
import torch

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The `shared/data` folder beside the checkout; skips the test where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real evaluation data not found at {SHARED_DATA} (shared/ beside the checkout)")
    return SHARED_DATA


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: intra-op threads only add overhead, a lot of it on a busy 2-core machine.

    Module-scoped, so that module fixtures (a model trained once per file) run with it too; a file
    opts in with ``pytestmark = pytest.mark.usefixtures("one_thread")``.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
