"""``python -m earl.index`` states the store's size before building it (`common.stores.size`):

- `earl.store.document_row_counts` (the `Representation`'s ``rows``) is the sum of the keep mask ``represent``
  returns, for S1 and S2, on a batch of documents of several lengths;
- the estimate printed before the build is within 10% of the bytes of the store built on `builtin:test` (3,000
  passages, a sample of 1,000 of them tokenised), S1 and S2, fp32 and fp16;
- where the filesystem of ``--output_dir`` has less free space (``shutil.disk_usage``) than the estimate, the command
  refuses in one line naming ``--output_dir``, the estimate and the free space, exit status 2, and writes nothing; with
  ``--resume``, less what the folder holds already.

The model is the tiny EARL of tests/earl/test_index.py (h = 8, K = 2, passages of 96 tokens, some of them shorter).
"""

import shutil
from types import SimpleNamespace

import pytest
import torch
from tests.conftest import record_returns
from tests.earl.test_index import CPU, save_checkpoint

from common.data.specs import source_from_spec
from common.stores import size
from common.stores.size import format_bytes, written_bytes
from earl import index
from earl.index import read_trained
from earl.store import data_encoder, load_ranker, representation

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, one_thread):
    return save_checkpoint(tmp_path_factory.mktemp("earl_size") / "earl.ckpt")


def args(checkpoint, strategy: str, output, *extra: str) -> list[str]:
    return ["--checkpoint", str(checkpoint), "--strategy", strategy, "--collection", "builtin:test", "--output_dir",
            str(output), "--batch_size", "500", *extra, *CPU]


@pytest.fixture
def estimates(monkeypatch):
    """The estimates the command makes, as `common.stores.size.estimate_store` returns them."""
    return record_returns(monkeypatch, size, "estimate_store")


@pytest.mark.parametrize("strategy", ["s1", "s2"])
def test_rows_are_the_keep_masks_sum(checkpoint, strategy):
    state = read_trained(checkpoint)
    ranker, encoder = load_ranker(state), data_encoder(state["datamodule_hyper_parameters"])
    stored = representation(ranker, encoder, strategy=strategy)
    documents = source_from_spec("builtin:test").documents()
    batch = encoder.documents(documents.get_many([f"D{i:04d}" for i in range(0, 3000, 100)]))
    lengths = batch["doc_mask"].sum(1)
    assert lengths.min() < lengths.max() == 96  # padding in this batch
    with torch.inference_mode():
        rows, keep = stored.represent(batch["doc_tokens"], batch["doc_mask"])
    assert rows.shape[:2] == keep.shape and rows.shape[2] == stored.width
    assert torch.equal(stored.rows(batch["doc_mask"]), keep.sum(1))


@pytest.mark.parametrize("strategy, dtype", [("s1", "fp32"), ("s2", "fp16")])
def test_the_estimate_is_within_10_percent_of_the_built_store(checkpoint, tmp_path, estimates, capsys, strategy,
                                                              dtype):
    output = tmp_path / "store"
    store = index.main(args(checkpoint, strategy, output, "--dtype", dtype))
    (estimate,) = estimates
    actual = written_bytes(output)
    assert estimate.documents == 3000 and estimate.sample == 1000 and estimate.width == store.width
    assert estimate.dtype == {"fp32": "float32", "fp16": "float16"}[dtype]
    assert estimate.bytes == pytest.approx(actual, rel=0.10)
    assert estimate.rows_bytes == pytest.approx(store.manifest["bytes"], rel=0.10)
    printed = capsys.readouterr().out.splitlines()
    line = next(line for line in printed if line.startswith("estimated size: "))
    assert line.startswith(f"estimated size: {format_bytes(estimate.bytes)} (3,000 documents x mean "
                           f"{estimate.mean_rows:,.1f} rows x width {store.width} x {4 if dtype == 'fp32' else 2} "
                           "bytes, from a "
                           f"sample of 1,000); free on {tmp_path}: ")
    assert printed.index(line) == printed.index(next(p for p in printed if p.startswith("building "))) + 1
    with capsys.disabled():
        print(f"\nEARL {strategy.upper()} {dtype}: estimated {estimate.bytes:,} bytes, built {actual:,} "
              f"({estimate.bytes / actual - 1:+.2%})")


def free(monkeypatch, nbytes: int) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda path: SimpleNamespace(total=2 * nbytes, used=nbytes, free=nbytes))


def test_no_room_is_refused_in_one_line_before_anything_is_written(checkpoint, tmp_path, estimates, monkeypatch,
                                                                   capsys):
    output = tmp_path / "new" / "store"
    free(monkeypatch, 1000)
    with pytest.raises(SystemExit) as exit_info:
        index.main(args(checkpoint, "s1", output))
    assert exit_info.value.code == 2
    (estimate,) = estimates
    said = capsys.readouterr()
    assert said.err == (f"error: --output_dir: no room for the store in {output}: it needs an estimated "
                        f"{format_bytes(estimate.bytes)} and {tmp_path} has 1,000 bytes free\n")
    assert "estimated size" not in said.out and not (tmp_path / "new").exists()


def test_resume_needs_room_for_what_is_left(checkpoint, tmp_path, estimates, monkeypatch, capsys):
    output = tmp_path / "store"
    output.mkdir()
    (output / "plan.json").write_text("{}\n" + " " * 5000)  # an unfinished store, 5,003 bytes of it written
    free(monkeypatch, 2000)
    with pytest.raises(SystemExit) as exit_info:
        index.main(args(checkpoint, "s1", output, "--resume"))
    assert exit_info.value.code == 2
    (estimate,) = estimates
    assert capsys.readouterr().err == (
        f"error: --output_dir: no room for the store in {output}: it needs an estimated "
        f"{format_bytes(estimate.bytes - 5003)} more ({format_bytes(estimate.bytes)} in all, 4.89 KiB written) and "
        f"{output} has 1.95 KiB free\n")
    assert sorted(p.name for p in output.iterdir()) == ["plan.json"]
