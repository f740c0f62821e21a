"""Shared fixtures: the real evaluation data in ../shared/data, when present; one torch thread for tiny models.

Under pytest-xdist (``-n 2``, as the README's test line and `.ci/run` run both tiers) each worker and every command it
starts runs on one thread (``OMP_NUM_THREADS=1``, set before torch is imported): two workers of torch's default two
threads each would put four spinning OpenMP threads on two cores.

Every test starts with torch's own thread count (a benchmark's ``main(["--threads", "1"])`` called in-process
would otherwise leave the rest of the session on one thread), and TVM's thread pool is sized from that count
here, before any test imports TVM: it is sized once per process (`common.kernels.tvm_kernel`), and a first
import under `one_thread` would leave the end-to-end runs, which use the TVM kernel, on one TVM thread.
"""

import os
from pathlib import Path

import pytest

if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402  (after the thread count above)

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
THREADS = torch.get_num_threads()
if "OMP_NUM_THREADS" not in os.environ:
    os.environ.setdefault("TVM_NUM_THREADS", str(THREADS))


@pytest.fixture(autouse=True)
def torch_threads(request):
    """Each test begins with torch's default thread count, unless its module asks for `one_thread`."""
    torch.set_num_threads(1 if "one_thread" in request.fixturenames else THREADS)


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
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(THREADS)


def record_returns(monkeypatch, owner, name: str) -> list:
    """Replace ``owner.name`` (a function) by one that calls it and keeps what it returns, for the test's duration;
    the list of those returns, in call order."""
    made, function = [], getattr(owner, name)

    def spy(*arguments, **options):
        made.append(function(*arguments, **options))
        return made[-1]

    monkeypatch.setattr(owner, name, spy)
    return made
