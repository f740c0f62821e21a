"""``python -m mva.index`` states the store's size before building it (`common.stores.size`):

- `mva.store.document_row_counts` (the `Representation`'s ``rows``) is the sum of the keep mask
  `mva.query_scorer.document_rows` returns, for MVA under each document pooling (all tokens, First-K, K [CLS] timesteps,
  temporal) and for DE, on a batch of documents of many lengths, a few shorter than K;
- the estimate printed before the build is within 10% of the bytes of the store built on `builtin:test` (3,000
  passages, a sample of 1,000 of them tokenised), for two poolings and DE (whose rows are a third of its store), in
  fp32 and fp16;
- where ``--output_dir``'s filesystem has less free space than the estimate, one line naming ``--output_dir``, exit status
  2, nothing written.

The models are the tiny ones of tests/mva/test_index.py (h = 16, 2 heads of 8, passages of 76 tokens).
"""

import shutil
from types import SimpleNamespace

import pytest
import torch
from tests.conftest import record_returns
from tests.mva.test_index import CPU, DATA, save_checkpoint

from common.data.formats import Document
from common.data.specs import source_from_spec
from common.stores import size
from common.stores.size import format_bytes, written_bytes
from mva import index
from mva.index import read_trained
from mva.store import data_encoder, load_ranker, representation

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

SETTINGS = {"all": {"doc_pooling": "all"}, "first_k": {"doc_pooling": "first_k", "doc_timesteps": 12},
            "cls": {"doc_pooling": "cls", "doc_timesteps": 6}, "temporal": {"doc_pooling": "temporal", "doc_factor": 3}}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, one_thread):
    root = tmp_path_factory.mktemp("mva_size")
    made = {name: save_checkpoint(root / f"mva_{name}.ckpt", **settings) for name, settings in SETTINGS.items()}
    return made | {"de": save_checkpoint(root / "de.ckpt", "de", seed=1)}


@pytest.fixture
def estimates(monkeypatch):
    """The estimates the command makes, as `common.stores.size.estimate_store` returns them."""
    return record_returns(monkeypatch, size, "estimate_store")


def args(checkpoint, output, *extra: str) -> list[str]:
    return ["--checkpoint", str(checkpoint), "--collection", "builtin:test", "--output_dir", str(output), "--batch_size",
            "500", *extra, *CPU]


@pytest.mark.parametrize("name", [*SETTINGS, "de"])
def test_rows_are_the_keep_masks_sum(checkpoints, name):
    state = read_trained(checkpoints[name])
    ranker, encoder = load_ranker(state), data_encoder(state["datamodule_hyper_parameters"])
    stored = representation(ranker, encoder)
    documents = source_from_spec("builtin:test").documents().get_many([f"D{i:04d}" for i in range(0, 3000, 150)])
    short = [Document(f"s{n}", " ".join(["river"] * n)) for n in (0, 1, 2, 4, 5, 7)]  # fewer timesteps than K
    batch = encoder.documents([*documents, *short])
    lengths = batch["doc_mask"].sum(1)
    assert lengths.min() == 2 and lengths.max() == DATA["passage_length"] == 76
    with torch.inference_mode():
        rows, keep = stored.represent(batch["doc_tokens"], batch["doc_mask"])
    assert rows.shape[:2] == keep.shape and rows.shape[2] == stored.width
    counts = stored.rows(batch["doc_mask"])
    assert torch.equal(counts, keep.sum(1))
    assert len(set(counts.tolist())) > (1 if name in ("all", "first_k", "temporal") else 0)


@pytest.mark.parametrize("name, dtype", [("all", "fp32"), ("temporal", "fp16"), ("cls", "fp32"), ("de", "fp16"),
                                         ("temporal", "int8")])
def test_the_estimate_is_within_10_percent_of_the_built_store(checkpoints, tmp_path, estimates, capsys, name, dtype):
    output = tmp_path / "store"
    store = index.main(args(checkpoints[name], output, "--dtype", dtype))
    (estimate,) = estimates
    actual = written_bytes(output)
    assert estimate.documents == 3000 and estimate.sample == 1000 and estimate.width == store.width
    assert estimate.bytes == pytest.approx(actual, rel=0.10)
    assert estimate.rows_bytes == pytest.approx(store.manifest["bytes"], rel=0.10)
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("estimated size: ")]
    row = {"fp32": f"width {store.width} x 4 bytes", "fp16": f"width {store.width} x 2 bytes",
           "int8": f"(width {store.width} + a 4-byte scale) bytes"}[dtype]
    assert line.startswith(f"estimated size: {format_bytes(estimate.bytes)} (3,000 documents x mean "
                           f"{estimate.mean_rows:,.1f} rows x {row}, from a sample of 1,000); free on {tmp_path}: ")
    with capsys.disabled():
        print(f"\nMVA {name} {dtype}: estimated {estimate.bytes:,} bytes, built {actual:,} "
              f"({estimate.bytes / actual - 1:+.2%}; rows {estimate.rows_bytes:,} of {store.manifest['bytes']:,})")


def test_no_room_is_refused_in_one_line_before_anything_is_written(checkpoints, tmp_path, estimates, monkeypatch,
                                                                   capsys):
    output = tmp_path / "store"
    monkeypatch.setattr(shutil, "disk_usage", lambda path: SimpleNamespace(total=2**40, used=2**40 - 2**20,
                                                                           free=2**20))
    with pytest.raises(SystemExit) as exit_info:
        index.main(args(checkpoints["all"], output))
    assert exit_info.value.code == 2
    (estimate,) = estimates
    said = capsys.readouterr()
    assert said.err == (f"error: --output_dir: no room for the store in {output}: it needs an estimated "
                        f"{format_bytes(estimate.bytes)} and {tmp_path} has 1.00 MiB free\n")
    assert "estimated size" not in said.out and not output.exists()
