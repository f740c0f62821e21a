"""``python -m conformer_kernel.index`` states the index's size, and its build's peak on disk, before computing it
(`conformer_kernel.impact_index.estimate_index`):

- on `builtin:test` (3,000 documents, the 101 terms of its topics), for NDRM1, NDRM2 and NDRM3, the estimated index
  is within 10% of the finished index's bytes, and the estimated peak within 10% of what the folder holds just
  before its shards are removed; NDRM1's and NDRM3's postings are dense, NDRM2's (counted in a sample of 1,000
  documents) within 10% of its nonzeros;
- where ``--output_dir``'s filesystem has less free space than the peak, one line naming ``--output_dir``, exit status 2,
  nothing written.

The models are tiny (tests/conformer_kernel/test_index.py's sizes) with random weights over the vocabulary and IDFs
of tests/fixtures/checkpoints/conformer_kernel.ckpt (built from the built-in collection).
"""

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from tests.conftest import record_returns
from tests.conformer_kernel.test_index import SMALL, _checkpoint

from common.stores.size import format_bytes, written_bytes
from conformer_kernel import impact_index
from conformer_kernel.impact_index import load_for_inference
from conformer_kernel.index import main
from conformer_kernel.ranker import ConformerKernelRanker

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints" / "conformer_kernel.ckpt"
TERMS, DOCUMENTS = 101, 3000


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, one_thread):
    root = tmp_path_factory.mktemp("ck_size")
    resources = load_for_inference(str(FIXTURE))[0].resources
    made = {}
    for kind in ("ndrm1", "ndrm2", "ndrm3"):
        torch.manual_seed(0)
        model = ConformerKernelRanker(model=kind, vocab_size=len(resources), **SMALL)
        model.use_resources(resources)
        _checkpoint(model.eval(), resources, root / f"{kind}.ckpt")
        made[kind] = root / f"{kind}.ckpt"
    return made


@pytest.fixture
def estimates(monkeypatch):
    """The estimates the command makes, as `estimate_index` returns them."""
    return record_returns(monkeypatch, impact_index, "estimate_index")


def args(checkpoint, output, *extra: str) -> list[str]:
    return ["--checkpoint", str(checkpoint), "--collection", "builtin:test", "--query_tasks", "builtin:test", "--output_dir",
            str(output), "--shard_size", "500", "--batch_size", "32", "--accelerator", "cpu", "--devices", "1",
            *extra]


@pytest.mark.parametrize("kind", ["ndrm1", "ndrm2"])  # NDRM3's postings are dense as NDRM1's
def test_the_estimates_are_within_10_percent_of_the_index_and_the_peak(checkpoints, tmp_path, estimates,
                                                                       monkeypatch, capsys, kind):
    output, peaks = tmp_path / "index", []
    rmtree = shutil.rmtree

    def measured(path, *arguments, **options):  # the folder just before its shards are removed: the peak
        if Path(path) == output / "shards":
            peaks.append(written_bytes(output))
        return rmtree(path, *arguments, **options)

    monkeypatch.setattr(shutil, "rmtree", measured)
    index = main(args(checkpoints[kind], output))
    (estimate,) = estimates
    actual, (peak,) = written_bytes(output), peaks
    assert (estimate.terms, estimate.documents) == (TERMS, DOCUMENTS) == index.matrix.shape
    if kind == "ndrm2":
        assert estimate.sample == 1000 and index.matrix.nnz < TERMS * DOCUMENTS / 2  # sparse
        assert estimate.postings == pytest.approx(index.matrix.nnz, rel=0.10)
    else:
        assert estimate.sample == 0 and estimate.postings == index.matrix.nnz == TERMS * DOCUMENTS
    assert estimate.index_bytes == pytest.approx(actual, rel=0.10)
    assert estimate.peak_bytes == pytest.approx(peak, rel=0.10)
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("estimated index size: ")]
    assert line.startswith(f"estimated index size: {estimate.describe()}; free on {tmp_path}: ")
    assert f"{TERMS} terms x {DOCUMENTS:,} documents, {estimate.postings:,} postings: " in line
    with capsys.disabled():
        print(f"\nCK {kind}: index estimated {estimate.index_bytes:,} bytes, built {actual:,} "
              f"({estimate.index_bytes / actual - 1:+.2%}); peak estimated {estimate.peak_bytes:,}, measured {peak:,} "
              f"({estimate.peak_bytes / peak - 1:+.2%}); postings {estimate.postings:,} of {index.matrix.nnz:,}")


def test_no_room_for_the_peak_is_refused_in_one_line_before_anything_is_written(checkpoints, tmp_path, estimates,
                                                                                monkeypatch, capsys):
    output = tmp_path / "index"
    monkeypatch.setattr(shutil, "disk_usage", lambda path: SimpleNamespace(total=2**40, used=2**40 - 2**20,
                                                                           free=2**20))
    with pytest.raises(SystemExit) as exit_info:
        main(args(checkpoints["ndrm2"], output))
    assert exit_info.value.code == 2
    (estimate,) = estimates
    said = capsys.readouterr()
    assert said.err == (f"error: --output_dir: no room for the index in {output}: its build needs an estimated "
                        f"{format_bytes(estimate.peak_bytes)} at its peak (the index and its shards) and {tmp_path} "
                        "has 1.00 MiB free\n")
    assert "estimated index size" not in said.out and not output.exists()
