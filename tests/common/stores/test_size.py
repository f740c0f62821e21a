"""`common.stores.size`: a store's size estimated before it is built, against stores written by
`common.stores.representations.StoreWriter` (a toy representation: a document's rows are its words, any width and
dtype), and the helpers (the sample, the free space of a folder not yet made, file sizes, sizes for people).
The index commands' estimates against their real stores: tests/earl/test_store_size.py,
tests/mva/test_store_size.py, tests/conformer_kernel/test_index_size.py."""

import json
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from common.data.formats import Document
from common.stores.representations import StoreWriter
from common.stores.size import (estimate_store, format_bytes, free_space, json_bytes, npy_bytes, sample_positions,
                                written_bytes)
from common.stores.writer import Representation


class Lookup(dict):
    def get_many(self, ids):
        return [self[i] for i in ids]


class WordMasks:
    """An encoder whose ``doc_mask`` marks a document's words (at least one), padded to the batch's longest."""

    def documents(self, docs):
        lengths = [max(len(d.text.split()), 1) for d in docs]
        return {"doc_mask": (torch.arange(max(lengths))[None] < torch.tensor(lengths)[:, None]).long()}


def toy(width: int) -> Representation:
    return Representation(nn.Identity(), None, width, "toy", {"note": "rows are words"}, rows=lambda m: m.sum(1))


def collection(n: int, seed: int = 0) -> tuple[Lookup, list[str]]:
    rng = np.random.default_rng(seed)
    ids = [f"doc-{i}" * (1 + i % 3) for i in range(n)]  # ids of several lengths
    return Lookup({d: Document(d, " ".join(["w"] * int(rng.integers(1, 60)))) for d in ids}), ids


def build(folder, documents: Lookup, ids: list[str], width: int, dtype: str, shard_size: int) -> int:
    """Write the toy store; its files' bytes."""
    writer = StoreWriter(folder, doc_ids=ids, width=width, dtype=dtype, shard_size=shard_size,
                         identity={"checkpoint": "c" * 64, "strategy": "toy"}, extra={"note": "rows are words"})
    encoder = WordMasks()
    for shard in writer.pending():
        docs = documents.get_many(writer.shard_doc_ids(shard))
        rows = encoder.documents(docs)["doc_mask"].sum(1).tolist()
        writer.write_shard(shard, [np.ones((r, width)) for r in rows])
    writer.finish()
    return written_bytes(folder)


#: Bytes a row: width floats of 4 or 2 bytes; int8's width codes after a 4-byte scale.
ROW_BYTES = {"float32": lambda width: 4 * width, "float16": lambda width: 2 * width, "int8": lambda width: width + 4}


@pytest.mark.parametrize("width, dtype, shard_size", [(3, "float32", 7), (1, "float16", 1000), (16, "float32", 50),
                                                      (5, "int8", 7)])
def test_an_estimate_from_every_document_is_the_store_but_for_digits(tmp_path, width, dtype, shard_size):
    documents, ids = collection(120)
    actual = build(tmp_path / "store", documents, ids, width, dtype, shard_size)
    estimate = estimate_store(toy(width), WordMasks(), documents, ids, dtype=dtype, shard_size=shard_size)
    rows = sum(WordMasks().documents([d])["doc_mask"].sum().item() for d in documents.values())
    assert estimate.sample == estimate.documents == 120 and estimate.mean_rows == rows / 120
    assert estimate.rows_bytes == rows * ROW_BYTES[dtype](width)
    assert estimate.bytes == pytest.approx(actual, rel=0.005)  # the indexes' offsets: digits of typical rows


def test_an_estimate_from_a_sample(tmp_path):
    documents, ids = collection(3000, seed=1)
    actual = build(tmp_path / "store", documents, ids, 4, "float32", 500)
    estimate = estimate_store(toy(4), WordMasks(), documents, ids, shard_size=500, sample=300, batch_size=64)
    assert estimate.sample == 300 and estimate.bytes == pytest.approx(actual, rel=0.05)
    assert estimate.describe() == (f"{format_bytes(estimate.bytes)} (3,000 documents x mean {estimate.mean_rows:.1f} "
                                   "rows x width 4 x 4 bytes, from a sample of 300)")
    int8 = estimate_store(toy(4), WordMasks(), documents, ids, dtype="int8", shard_size=500, sample=300, batch_size=64)
    assert int8.rows_bytes == round(3000 * estimate.mean_rows * 8)  # (4 codes + a 4-byte scale) a row
    assert int8.describe() == (f"{format_bytes(int8.bytes)} (3,000 documents x mean {estimate.mean_rows:.1f} rows x "
                               "(width 4 + a 4-byte scale) bytes, from a sample of 300)")


def test_sample_positions():
    drawn = sample_positions(3000, 1000)
    assert len(drawn) == len(set(drawn.tolist())) == 1000 and (np.diff(drawn) > 0).all() and drawn.max() < 3000
    assert np.array_equal(drawn, sample_positions(3000, 1000))  # seeded
    assert not np.array_equal(drawn, sample_positions(3000, 1000, seed=1))
    assert np.array_equal(sample_positions(700, 1000), np.arange(700))


def test_free_space_is_the_nearest_existing_folders(tmp_path, monkeypatch):
    asked = []
    monkeypatch.setattr(shutil, "disk_usage", lambda path: asked.append(path) or SimpleNamespace(free=123))
    assert free_space(tmp_path / "a" / "b") == (tmp_path, 123)
    (tmp_path / "a").mkdir()
    assert free_space(tmp_path / "a" / "b") == (tmp_path / "a", 123)
    (tmp_path / "file").write_text("x")
    assert free_space(tmp_path / "file") == (tmp_path, 123)
    assert asked == [tmp_path, tmp_path / "a", tmp_path]


def test_file_sizes(tmp_path):
    for dtype, shape in (("S17", (3000,)), (np.int64, (3000, 3)), (np.float32, (500, 101)), (np.int32, (0,))):
        np.save(tmp_path / "a.npy", np.zeros(shape, dtype=dtype))
        assert npy_bytes(dtype, shape) == (tmp_path / "a.npy").stat().st_size
    value = {"doc_ids": ["é", "b"], "rows": [1, 22]}
    with open(tmp_path / "a.json", "w", encoding="utf-8") as f:  # as common.stores.representations writes JSON
        json.dump(value, f, indent=1, ensure_ascii=False)
        f.write("\n")
    assert json_bytes(value) == (tmp_path / "a.json").stat().st_size
    assert written_bytes(tmp_path) == sum(p.stat().st_size for p in tmp_path.iterdir())
    assert written_bytes(tmp_path / "missing") == 0


def test_format_bytes():
    assert [format_bytes(n) for n in (0, 1023, 1024, 1536, 2**20 * 17.58, 2**30 * 1.234, 2**50)] == [
        "0 bytes", "1,023 bytes", "1.00 KiB", "1.50 KiB", "17.58 MiB", "1.23 GiB", "1,024.00 TiB"]
