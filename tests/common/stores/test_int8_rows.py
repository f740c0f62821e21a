"""int8 stores (`common.stores.rows` in `common.stores.representations`): rows' scales and codes worked by hand and
laid out on disk as the docstring says (a little-endian float32 scale, then the codes); every value read back within
half its row's scale of the float written; width + 4 bytes a row against fp32's 4·width, counted by hand; a damaged,
truncated or mislabelled int8 store refused as float ones are, and a build resumed after a truncated int8 shard is the
uninterrupted store byte for byte."""

import json
import struct

import numpy as np
import pytest
import torch

from common.stores.representations import CorruptStoreError, RepresentationStore, verify_store
from common.stores.rows import decode_into, encode
from tests.common.stores.test_representations import (IDS, WIDTH, _build, _files, _matrices, _write,
                                                      _writer)

#: Rows worked by hand: scale = max|x| / 127, code = round(x / scale), half to even.
BY_HAND = np.array([[127.0, -63.5, 0.0],  # scale 1; codes 127, round(-63.5) = -64, 0
                    [254.0, 1.0, -3.0],  # scale 2; codes 127, round(0.5) = 0, round(-1.5) = -2
                    [0.5, -1.27, 0.0],  # scale 1.27 / 127 = 0.01; codes 50, -127, 0
                    [0.0, 0.0, 0.0]])  # scale 0, codes 0
CODES = [[127, -64, 0], [127, 0, -2], [50, -127, 0], [0, 0, 0]]
READ_BACK = [[127.0, -64.0, 0.0], [254.0, 0.0, -4.0], [0.5, -1.27, 0.0], [0.0, 0.0, 0.0]]


def test_rows_scales_and_codes_by_hand():
    rows = encode(BY_HAND, "int8")
    assert rows.dtype.itemsize == WIDTH + 4
    assert rows["scale"].tolist() == pytest.approx([1.0, 2.0, 0.01, 0.0], rel=1e-6, abs=0)
    assert rows["codes"].tolist() == CODES
    out = np.empty((4, WIDTH), dtype=np.float32)
    decode_into(rows, out)
    np.testing.assert_allclose(out, READ_BACK, rtol=1e-6, atol=0)
    # half the scale off at most, and the second row's 1 and -3 exactly that (1 = scale 2 / 2)
    assert np.abs(out - BY_HAND)[1].tolist() == [0.0, 1.0, 1.0]
    half = np.empty((4, WIDTH), dtype=np.float16)
    decode_into(rows, half)  # into any float type
    assert half.dtype == np.float16 and half[1].tolist() == [254.0, 0.0, -4.0]


@pytest.mark.parametrize("float_type", [np.float16, np.float32, np.float64])
def test_decoded_values_are_float32_code_times_scale_in_any_float_type(float_type):
    rows = encode(np.random.default_rng(0).standard_normal((5, 7)) * 10, "int8")
    out = np.empty((5, 7), dtype=float_type)
    decode_into(rows, out)
    # one value at a time: the code as float32, times its row's float32 scale, rounded to the out type
    expected = [[float_type(np.float32(code) * np.float32(scale)) for code in codes]
                for scale, codes in zip(rows["scale"].tolist(), rows["codes"].tolist())]
    assert out.dtype == float_type and out.tobytes() == np.array(expected, dtype=float_type).tobytes()


def test_a_shard_holds_each_rows_scale_then_its_codes(tmp_path):
    writer = _writer(tmp_path / "store", "int8", doc_ids=["a", "b"], shard_size=2)
    writer.write_shard(0, [BY_HAND[:2], BY_HAND[3:]])
    store = writer.finish()
    assert (tmp_path / "store" / "shard-00000.bin").read_bytes() == (
        struct.pack("<f3b", 1.0, 127, -64, 0) + struct.pack("<f3b", 2.0, 127, 0, -2) + struct.pack("<f3b", 0, 0, 0, 0))
    assert store.manifest["bytes"] == 3 * (WIDTH + 4) == 21 and store.manifest["format"] == 3  # format 2 reads floats
    assert store.dtype == "int8" and store.get("a")["codes"].tolist() == CODES[:2]  # the stored records, mapped
    batch, mask = store.padded(["b", "a"])
    assert batch.dtype == torch.float32 and mask.tolist() == [[True, False], [True, True]]
    assert batch.tolist() == [[[0.0] * 3, [0.0] * 3], READ_BACK[:2]]


def test_every_value_is_read_back_within_half_its_rows_scale(tmp_path):
    """Rows of norms from 0.01 to 100 (seeded normal draws scaled), each read back (`padded`, as the scorers read)
    within scale / 2 of the float written, scale = max|x| / 127 worked out in float64 here; to float32 rounding (5e-5 of
    the scale)."""
    matrices = [m * np.float32(10.0 ** (i % 5 - 2)) for i, m in enumerate(_matrices(2))]
    store = _build(tmp_path / "store", "int8", matrices)
    batch, mask = store.padded(IDS)
    assert batch.dtype == torch.float32 and mask.sum(1).tolist() == [len(m) for m in matrices]
    errors = []
    for i, matrix in enumerate(matrices):
        scale = np.abs(matrix.astype(np.float64)).max(axis=1, initial=0.0, keepdims=True) / 127  # (rows, 1)
        error = np.abs(batch[i, : len(matrix)].double().numpy() - matrix)
        assert (error <= scale * (0.5 + 5e-5)).all()
        assert not batch[i, len(matrix) :].any()
        errors += (error / np.maximum(scale, 1e-30)).ravel().tolist()
    assert 0.3 < max(errors) <= 0.50005  # rounding happened, up to the bound
    # read_into: the same floats into a preallocated batch
    out = np.full((len(IDS), 7, WIDTH), -1.0, dtype=np.float32)
    assert store.read_into(IDS, out) == [len(m) for m in matrices]
    assert np.array_equal(out[3], batch[3].numpy()) and (out[0, 3:] == -1).all()


def test_an_int8_store_takes_width_plus_4_bytes_a_row_against_fp32s_4_width(tmp_path):
    """23 rows of width 3 (tests/common/stores/test_representations.py's LENGTHS): 23 x (3 + 4) = 161 bytes against
    23 x 3 x 4 = 276; 10 documents, 16.1 and 27.6 bytes each."""
    fp32, int8 = _build(tmp_path / "fp32"), _build(tmp_path / "int8", "int8")
    assert (int8.manifest["rows"], int8.manifest["bytes"], fp32.manifest["bytes"]) == (23, 161, 276)
    assert (int8.bytes_per_document, fp32.bytes_per_document) == (16.1, 27.6)
    assert [s["bytes"] for s in int8.manifest["shards"]] == [11 * 7, 12 * 7, 0]
    assert [(tmp_path / "int8" / s["file"]).stat().st_size for s in int8.manifest["shards"]] == [77, 84, 0]


def test_a_damaged_truncated_or_mislabelled_int8_store_is_refused(tmp_path):
    folder = tmp_path / "store"
    _build(folder, "int8")
    shard = folder / "shard-00001.bin"
    data = shard.read_bytes()
    shard.write_bytes(data[:-1] + bytes([data[-1] ^ 0x01]))  # the last code changed
    RepresentationStore.open(folder)  # sizes only
    with pytest.raises(CorruptStoreError, match=r"shard-00001\.bin: its checksum is not the manifest's"):
        verify_store(folder)
    for cut in (1, WIDTH + 4):  # part of a row, a whole row
        shard.write_bytes(data[:-cut])
        with pytest.raises(CorruptStoreError, match=rf"shard-00001\.bin: {len(data) - cut} bytes, not the 84"):
            RepresentationStore.open(folder)
    shard.write_bytes(data)
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "format": 2}))  # int8 rows under the float format
    with pytest.raises(CorruptStoreError, match="a store of format 2; this code reads format 3 for int8 rows"):
        RepresentationStore.open(folder)
    (folder / "manifest.json").write_text(json.dumps({**manifest, "dtype": "int4"}))
    with pytest.raises(CorruptStoreError, match="a store of 'int4' rows; this code reads float32, float16, int8 rows"):
        RepresentationStore.open(folder)
    floats = tmp_path / "floats"
    _build(floats)
    manifest = json.loads((floats / "manifest.json").read_text())
    (floats / "manifest.json").write_text(json.dumps({**manifest, "dtype": "int8", "format": 3}))  # float rows
    with pytest.raises(CorruptStoreError, match=r"00000\.bin: 132 bytes, not 11 rows of 7 bytes \(int8, width 3\)"):
        RepresentationStore.open(floats)


def test_a_build_resumed_after_a_truncated_int8_shard_is_the_uninterrupted_store(tmp_path):
    matrices = _matrices()
    whole = _writer(tmp_path / "whole", "int8")
    _write(whole, matrices, [0, 1, 2])
    uninterrupted = whole.finish()
    killed = _writer(tmp_path / "killed", "int8")
    _write(killed, matrices, [0, 1])
    shard = tmp_path / "killed" / "shard-00001.bin"
    shard.write_bytes(shard.read_bytes()[: -(WIDTH + 4)])  # one row short
    resumed = _writer(tmp_path / "killed", "int8", resume=True)
    assert resumed.pending() == [1, 2]
    _write(resumed, matrices, [2, 1])
    assert resumed.finish().manifest == uninterrupted.manifest
    assert _files(tmp_path / "killed") == _files(tmp_path / "whole")


def test_a_value_that_is_not_finite_is_refused(tmp_path):
    with pytest.raises(ValueError, match="shard 0, document 'D001': int8 rows quantise finite values only"):
        _writer(tmp_path / "store", "int8").write_shard(0, [m if i != 1 else np.array([[1.0, np.inf, 0.0]])
                                                            for i, m in enumerate(_matrices()[:4])])
    assert not (tmp_path / "store").exists()
