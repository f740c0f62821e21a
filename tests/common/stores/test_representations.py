"""common.stores.representations and common.stores.writer: a store's round trip in float32 and float16, its
files and manifest, each candidate's byte range advised to the kernel before it is read (offsets worked by hand), a
store pickled without its memory maps, resuming after a damaged or killed build (byte for byte the uninterrupted store), the refusal
of a store built from something else, of a missing document, of a damaged shard and of a folder in use."""

import hashlib
import json
import mmap
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch

import common.stores.representations as representations
from common.stores.writer import ShardDataset, build_store
from common.stores.representations import (
    CorruptStoreError,
    MissingRepresentationError,
    RepresentationStore,
    StoreMismatchError,
    StoreWriter,
    checkpoint_hash,
    store_output_problem,
    verify_store,
    will_need_range,
)

WIDTH = 3
#: Rows of each document: shards of 4 are (3, 1, 0, 7), (2, 5, 1, 4) and (0, 0), the last one an empty file.
LENGTHS = [3, 1, 0, 7, 2, 5, 1, 4, 0, 0]
IDS = [f"D{i:03d}" for i in range(len(LENGTHS))]
CHECKPOINT, OTHER = "ab12" + "0" * 60, "cd34" + "f" * 60
IDENTITY = {"checkpoint": CHECKPOINT, "strategy": "s1"}
TRAINER = {"accelerator": "cpu", "devices": 1, "enable_progress_bar": False}


def _matrices(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((n, WIDTH)).astype(np.float32) for n in LENGTHS]


def _writer(folder, dtype="float32", resume=False, **changes) -> StoreWriter:
    settings = dict(doc_ids=IDS, width=WIDTH, dtype=dtype, shard_size=4, identity=IDENTITY, extra={"heads": 2})
    return StoreWriter(folder, **{**settings, **changes}, resume=resume)


def _write(writer: StoreWriter, matrices, shards) -> None:
    for i in shards:
        writer.write_shard(i, matrices[i * 4 : (i + 1) * 4])


def _build(folder, dtype="float32", matrices=None) -> RepresentationStore:
    writer = _writer(folder, dtype)
    _write(writer, _matrices() if matrices is None else matrices, [2, 0, 1])  # any order
    return writer.finish()


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_round_trip_float32(tmp_path):
    matrices = _matrices()
    store = _build(tmp_path / "store", matrices=matrices)
    assert sorted(os.listdir(tmp_path / "store")) == [
        "ids.npy", "locations.npy", "manifest.json", "plan.json", "shard-00000.bin", "shard-00000.index.json", "shard-00001.bin",
        "shard-00001.index.json", "shard-00002.bin", "shard-00002.index.json"]
    assert len(store) == 10 and store.doc_ids == IDS and "D004" in store and "D010" not in store
    assert (store.width, store.dtype, store.identity) == (WIDTH, "float32", IDENTITY)
    for doc_id, matrix in zip(IDS, matrices):
        got = store.get(doc_id)
        assert got.dtype == np.float32 and got.shape == (len(matrix), WIDTH) and np.array_equal(got, matrix)
        assert not got.flags.writeable
    owner = store.get("D003")  # a view of the mapped shard, not a copy
    while isinstance(owner, np.ndarray):
        assert not owner.flags.owndata
        owner = owner.base
    assert isinstance(owner, memoryview) and isinstance(owner.obj, mmap.mmap)
    assert owner.obj[:] == (tmp_path / "store" / "shard-00000.bin").read_bytes()  # the map of shard 0's file
    assert all(np.array_equal(a, b) for a, b in zip(store.get_many(["D009", "D001"]), [matrices[9], matrices[1]]))

    batch, mask = store.padded(["D002", "D003", "D001", "D008"])
    assert batch.dtype == torch.float32 and batch.shape == (4, 7, WIDTH) and mask.dtype == torch.bool
    assert mask.sum(1).tolist() == [0, 7, 1, 0] and mask[2].tolist() == [True] + [False] * 6
    assert torch.equal(batch[1], torch.from_numpy(matrices[3]))
    assert torch.equal(batch[2, :1], torch.from_numpy(matrices[1]))
    assert not batch[0].any() and not batch[2, 1:].any() and not batch[3].any()
    empty, none = store.padded(["D008", "D009"])
    assert empty.shape == (2, 0, WIDTH) and none.shape == (2, 0)

    manifest = json.loads((tmp_path / "store" / "manifest.json").read_text())
    assert manifest == store.manifest
    plan = json.loads((tmp_path / "store" / "plan.json").read_text())
    assert plan == {k: v for k, v in manifest.items() if k not in ("shards", "rows", "bytes", "bytes_per_document")}
    assert plan["format"] == 2 and plan["shard_size"] == 4 and plan["documents"] == 10
    assert plan["extra"] == {"heads": 2} and plan["identity"] == IDENTITY
    assert plan["doc_ids_sha256"] == hashlib.sha256(json.dumps(IDS).encode()).hexdigest()
    assert [(s["file"], s["documents"], s["rows"], s["bytes"]) for s in manifest["shards"]] == [
        ("shard-00000.bin", 4, 11, 11 * WIDTH * 4), ("shard-00001.bin", 4, 12, 12 * WIDTH * 4),
        ("shard-00002.bin", 2, 0, 0)]
    for shard in manifest["shards"]:
        data = (tmp_path / "store" / shard["file"]).read_bytes()
        assert len(data) == shard["bytes"] and hashlib.sha256(data).hexdigest() == shard["sha256"]
    assert (manifest["rows"], manifest["bytes"]) == (23, 23 * WIDTH * 4)
    assert store.bytes_per_document == manifest["bytes_per_document"] == 23 * WIDTH * 4 / 10
    first = (tmp_path / "store" / "shard-00000.bin").read_bytes()
    assert first == np.concatenate(matrices[:4]).astype("<f4").tobytes()  # raw little-endian rows, C order
    index = json.loads((tmp_path / "store" / "shard-00001.index.json").read_text())
    assert (index["doc_ids"], index["offsets"], index["rows"]) == (IDS[4:8], [0, 2, 7, 8], [2, 5, 1, 4])
    # The id table: the ids sorted, and each one's position, first row in its shard and rows (by hand from LENGTHS).
    ids = np.load(tmp_path / "store" / "ids.npy")
    assert ids.dtype == np.dtype("S4") and ids.tolist() == [d.encode() for d in sorted(IDS)]
    locations = np.load(tmp_path / "store" / "locations.npy")
    assert locations.dtype == np.int64 and locations.tolist() == [
        [0, 0, 3], [1, 3, 1], [2, 4, 0], [3, 4, 7], [4, 0, 2], [5, 2, 5], [6, 7, 1], [7, 8, 4], [8, 0, 0], [9, 0, 0]]


def test_round_trip_float16(tmp_path):
    matrices = [m * 1000 for m in _matrices(1)]  # values float16 rounds
    store = _build(tmp_path / "store", "float16", matrices)
    assert store.dtype == "float16" and store.manifest["bytes"] == 23 * WIDTH * 2
    for doc_id, matrix in zip(IDS, matrices):
        assert store.get(doc_id).dtype == np.float16 and np.array_equal(store.get(doc_id), matrix.astype(np.float16))
    assert not np.array_equal(matrices[0].astype(np.float16).astype(np.float32), matrices[0])
    batch, _ = store.padded(["D003"], dtype=torch.float16)
    assert batch.dtype == torch.float16 and torch.equal(batch[0], torch.from_numpy(matrices[3].astype(np.float16)))


def test_tensors_and_any_float_are_cast_to_the_store_dtype(tmp_path):
    writer = _writer(tmp_path / "store", shard_size=10)
    matrices = _matrices()
    arrays = [torch.from_numpy(m).to(torch.bfloat16) if i % 2 else m.astype(np.float64) for i, m in enumerate(matrices)]
    writer.write_shard(0, arrays)
    store = writer.finish()
    assert np.array_equal(store.get("D000"), matrices[0])
    assert np.array_equal(store.get("D003"), torch.from_numpy(matrices[3]).to(torch.bfloat16).float().numpy())


def test_every_shard_stays_mapped_and_fewer_where_descriptors_are_short(tmp_path):
    store = _build(tmp_path / "store")
    held = [store.get(doc_id) for doc_id in IDS[::-1]] + [store.get(doc_id) for doc_id in IDS]
    assert sorted(store._maps) == [0, 1, 2] and store._kept == 3
    store = RepresentationStore.open(tmp_path / "store")
    store._kept = 1  # what a process with too few descriptors keeps
    held = [store.get(doc_id) for doc_id in IDS]  # each shard mapped, let go, mapped again
    assert len(store._maps) == 1
    assert all(np.array_equal(a, b) for a, b in zip(held, _matrices()))


def test_advised_ranges_are_page_aligned_and_cover_the_bytes():
    assert will_need_range(0, 1, page=4096) == (0, 1)
    assert will_need_range(5000, 100, page=4096) == (4096, 1004)  # bytes 5000..5099 of the page at 4096
    assert will_need_range(8192, 4096, page=4096) == (8192, 4096)
    assert will_need_range(4095, 2, page=4096) == (0, 4097)  # straddles two pages


@pytest.mark.parametrize("dtype, row_bytes", [("float32", 4 * WIDTH), ("float16", 2 * WIDTH), ("int8", WIDTH + 4)])
def test_each_candidates_byte_range_is_advised_before_it_is_read(tmp_path, monkeypatch, dtype, row_bytes):
    store = _build(tmp_path / "store", dtype)
    advised = []
    monkeypatch.setattr(representations, "_will_need",
                        lambda memory, offset, length: advised.append((len(memory), offset, length)))
    store.get_many(["D005", "D003", "D002", "D009"])
    # shard 0 is D000..D003 of (3, 1, 0, 7) rows, 11 in all; shard 1 is D004..D007 of (2, 5, 1, 4), 12 in all; D003
    # starts at row 3 + 1 = 4, D005 at row 2; D002 and D009 (an empty shard) hold no row and are not advised
    assert sorted(advised) == sorted([(11 * row_bytes, 4 * row_bytes, 7 * row_bytes),
                                      (12 * row_bytes, 2 * row_bytes, 5 * row_bytes)])
    advised.clear()
    store.get_many(["D005", "D003"], read_ahead=False)  # a warm-up: shards mapped, nothing asked for
    assert advised == []


@pytest.mark.skipif(not hasattr(mmap, "MADV_WILLNEED"), reason="madvise(MADV_WILLNEED) is Linux's and macOS's")
def test_advising_a_real_map_reads_the_same_rows(tmp_path):
    matrices = _matrices()
    store = _build(tmp_path / "store", matrices=matrices)
    got = store.get_many(IDS[::-1])  # every document, each advised on its shard's map (page-aligned or refused)
    assert all(np.array_equal(a, b) for a, b in zip(got, matrices[::-1]))


def test_a_store_pickles_without_its_memory_maps(tmp_path):
    matrices = _matrices()
    store = _build(tmp_path / "store", matrices=matrices)
    store.get_many(IDS)  # every shard mapped
    copy = pickle.loads(pickle.dumps(store))  # a memory map itself cannot be pickled
    assert len(store._maps) == 3 and len(copy._maps) == 0
    assert all(np.array_equal(copy.get(doc_id), matrix) for doc_id, matrix in zip(IDS, matrices))


def test_ids_are_found_by_binary_search_whatever_their_length(tmp_path):
    ids = ["b", "a10", "a9", "é1", "a", "zz" * 8, "a1"]  # unsorted, of several lengths, one not ASCII
    writer = StoreWriter(tmp_path / "store", doc_ids=ids, width=1, dtype="float32", shard_size=3, identity=IDENTITY)
    for shard in range(3):
        writer.write_shard(shard, [np.full((k + 1, 1), k) for k in range(3 * shard, min(3 * shard + 3, len(ids)))])
    store = writer.finish()
    assert [float(store.get(doc_id)[0, 0]) for doc_id in ids] == list(range(len(ids)))
    assert [len(m) for m in store.get_many(ids[::-1])] == list(range(len(ids), 0, -1))
    assert store.doc_ids == ids and len(store) == 7
    # Prefixes, extensions, ids longer than any stored (numpy would cut them to the stored width) and a NUL.
    for absent in ["", "a0", "a100", "zz" * 8 + "z", "zz" * 9, "b\0", "e1", "A"]:
        assert absent not in store
        with pytest.raises(MissingRepresentationError):
            store.get(absent)
    with pytest.raises(ValueError, match="must not hold NUL"):
        StoreWriter(tmp_path / "other", doc_ids=["a\0"], width=1, dtype="float32", shard_size=1, identity=IDENTITY)


def test_write_shard_checks_its_arrays(tmp_path):
    writer = _writer(tmp_path / "store")
    matrices = _matrices()
    with pytest.raises(ValueError, match="shard 0 has 4 documents; got 3 arrays"):
        writer.write_shard(0, matrices[:3])
    with pytest.raises(ValueError, match=r"document 'D001': expected a \(rows, 3\) matrix, got shape \(1, 4\)"):
        writer.write_shard(0, [matrices[0], np.zeros((1, 4)), matrices[2], matrices[3]])
    with pytest.raises(ValueError, match=r"got shape \(3,\)"):
        writer.write_shard(0, [np.zeros(3), *matrices[1:4]])
    with pytest.raises(IndexError, match="shards 0 to 2, not 3"):
        writer.write_shard(3, [])
    assert not (tmp_path / "store").exists()  # nothing written yet: not even the plan
    writer.write_shard(1, matrices[4:8])
    with pytest.raises(ValueError, match="shard 1 of .* is already written"):
        writer.write_shard(1, matrices[4:8])
    with pytest.raises(RuntimeError, match=r"2 of 3 shards are not written \(0, 2\)"):
        writer.finish()
    assert writer.pending() == [0, 2] and not (tmp_path / "store" / "manifest.json").exists()


@pytest.mark.parametrize("settings, message", [
    (dict(doc_ids=[]), "no documents"),
    (dict(doc_ids=["a", "b", "a"]), "'a' is listed twice"),
    (dict(width=0), "width must be a positive integer"),
    (dict(shard_size=2.5), "shard_size must be a positive integer"),
    (dict(dtype="int16"), "dtype must be one of float32, float16, int8, got .int16."),
    (dict(identity={"checkpoint": CHECKPOINT}), "identity lacks strategy"),
])
def test_bad_plans_are_refused(tmp_path, settings, message):
    with pytest.raises(ValueError, match=message):
        _writer(tmp_path / "store", **settings)


@pytest.mark.parametrize("damage, verify", [("truncated", False), ("index missing", False),
                                           ("byte flipped", True), ("byte flipped", False)])
def test_resume_redoes_missing_and_damaged_shards(tmp_path, damage, verify):
    matrices = _matrices()[:8] + [np.ones((2, WIDTH)) * k for k in range(6)]
    ids = [f"D{i:03d}" for i in range(14)]  # 4 shards: 4, 4, 4, 2 documents
    whole = _writer(tmp_path / "whole", doc_ids=ids)
    _write(whole, matrices, [0, 1, 2, 3])
    uninterrupted = whole.finish()

    killed = _writer(tmp_path / "killed", doc_ids=ids)
    _write(killed, matrices, [0, 2, 3])
    shard = tmp_path / "killed" / "shard-00003.bin"  # the last shard
    if damage == "truncated":
        shard.write_bytes(shard.read_bytes()[:-WIDTH * 4])  # one row short
    elif damage == "index missing":  # killed between the .bin and its index
        (tmp_path / "killed" / "shard-00003.index.json").unlink()
    else:
        data = bytearray(shard.read_bytes())
        data[7] ^= 0x10
        shard.write_bytes(bytes(data))
    (tmp_path / "killed" / ".shard-00001.bin.x1y2z3.tmp").write_bytes(b"half a shard")  # a write killed midway

    assert store_output_problem(tmp_path / "killed") == f"{tmp_path / 'killed'} holds an unfinished store; " \
                                                         "resume it, or choose a new folder"
    with pytest.raises(ValueError, match="holds an unfinished store"):
        _writer(tmp_path / "killed", doc_ids=ids)
    resumed = _writer(tmp_path / "killed", doc_ids=ids, resume=True, verify=verify)
    if damage == "byte flipped" and not verify:  # the sizes agree: kept unless verified, and verify_store finds it
        assert resumed.pending() == [1]
        _write(resumed, matrices, [1])
        resumed.finish()
        with pytest.raises(CorruptStoreError, match=r"shard-00003\.bin: its checksum is not the manifest's"):
            verify_store(tmp_path / "killed")
        return
    assert resumed.pending() == [1, 3]
    _write(resumed, matrices, [3, 1])
    store = resumed.finish()
    assert store.manifest == uninterrupted.manifest  # the same checksums
    assert _files(tmp_path / "killed") == _files(tmp_path / "whole")  # temporary file removed, every byte the same
    assert verify_store(tmp_path / "killed") == uninterrupted.manifest


def _toy_arrays(doc_ids: list[str]) -> list[np.ndarray]:
    """Deterministic matrices from the document's number: k % 4 rows (none for every fourth), of value k.j."""
    return [np.full((k % 4, 4), k, dtype=np.float32) + np.arange(4, dtype=np.float32) / 10
            for k in (int(doc_id[1:]) for doc_id in doc_ids)]


class Toy(L.LightningModule):
    """A representation module as `build_store` wants one; `kill_at` SIGKILLs the process in that shard's step."""

    def __init__(self, writer: StoreWriter, kill_at: int | None = None):
        super().__init__()
        self.writer, self.kill_at = writer, kill_at

    def predict_step(self, shard_index: int):
        if shard_index == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return shard_index, _toy_arrays(self.writer.shard_doc_ids(shard_index))


TOY_IDS = [f"T{i:02d}" for i in range(23)]  # 4 shards of 6: 6, 6, 6, 5 documents


def _toy_writer(folder, resume=False) -> StoreWriter:
    return StoreWriter(folder, doc_ids=TOY_IDS, width=4, dtype="float16", shard_size=6,
                       identity={"checkpoint": CHECKPOINT, "strategy": "toy"}, resume=resume)


def toy_build(folder, kill_at=None, resume=False) -> RepresentationStore | None:
    writer = _toy_writer(folder, resume)
    return build_store(Toy(writer, kill_at), writer, TRAINER)


def test_a_build_killed_by_sigkill_resumes_to_the_uninterrupted_store(tmp_path):
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            f"from test_representations import toy_build; toy_build({str(tmp_path / 'killed')!r}, kill_at=2)")
    killed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert sorted(os.listdir(tmp_path / "killed")) == [
        "plan.json", "shard-00000.bin", "shard-00000.index.json", "shard-00001.bin", "shard-00001.index.json"]
    assert _toy_writer(tmp_path / "killed", resume=True).pending() == [2, 3]

    whole = toy_build(tmp_path / "whole")
    resumed = toy_build(tmp_path / "killed", resume=True)
    assert _files(tmp_path / "killed") == _files(tmp_path / "whole")
    assert resumed.manifest == whole.manifest and resumed.manifest["rows"] == sum(i % 4 for i in range(23))
    for doc_id, matrix in zip(TOY_IDS, _toy_arrays(TOY_IDS)):
        assert np.array_equal(resumed.get(doc_id), matrix.astype(np.float16))
    with pytest.raises(ValueError, match="already holds a finished store"):
        toy_build(tmp_path / "killed", resume=True)


def test_shard_dataset_gives_one_pending_shard_per_step():
    dataset = ShardDataset([1, 4, 5])
    assert len(dataset) == 3 and [dataset[i] for i in range(3)] == [1, 4, 5]
    loader = torch.utils.data.DataLoader(dataset, batch_size=1, collate_fn=dataset.collate)
    assert list(loader) == [1, 4, 5]


def test_a_store_of_another_checkpoint_or_strategy_is_refused(tmp_path):
    folder = tmp_path / "store"
    _build(folder)
    assert len(RepresentationStore.open(folder, expect=IDENTITY)) == 10
    with pytest.raises(StoreMismatchError) as error:
        RepresentationStore.open(folder, expect={"checkpoint": OTHER})
    assert str(error.value) == (f"{folder} was built from checkpoint ab1200000000…; "
                                "this needs checkpoint cd34ffffffff…")
    with pytest.raises(StoreMismatchError) as error:
        RepresentationStore.open(folder, expect={"checkpoint": OTHER, "strategy": "s2"})
    assert str(error.value) == (f"{folder} was built from checkpoint ab1200000000… with strategy s1; "
                                "this needs checkpoint cd34ffffffff… with strategy s2")
    with pytest.raises(StoreMismatchError, match=r"was built with strategy s1; this needs strategy s2\Z"):
        RepresentationStore.open(folder, expect={"checkpoint": CHECKPOINT, "strategy": "s2"})
    assert isinstance(error.value, ValueError)


@pytest.mark.parametrize("change, difference", [
    (dict(identity={"checkpoint": CHECKPOINT, "strategy": "s2"}), "strategy s1; this build has strategy s2"),
    (dict(identity={"checkpoint": OTHER, "strategy": "s1"}), "checkpoint ab1200000000…; this build has checkpoint cd"),
    (dict(doc_ids=IDS[::-1]), "doc ids [0-9a-f]{12}…; this build has doc ids [0-9a-f]{12}…"),
    (dict(doc_ids=IDS[:9]), "documents 10; this build has documents 9"),
    (dict(width=4), "width 3; this build has width 4"),
    (dict(dtype="float16"), "dtype float32; this build has dtype float16"),
    (dict(shard_size=5), "shard_size 4; this build has shard_size 5"),
    (dict(extra={"heads": 4}), "extra.heads 2; this build has extra.heads 4"),
])
def test_resuming_another_plan_is_refused(tmp_path, change, difference):
    _write(_writer(tmp_path / "store"), _matrices(), [0])
    with pytest.raises(StoreMismatchError, match=f"holds an unfinished store planned with {difference}"):
        _writer(tmp_path / "store", resume=True, **change)


def test_a_missing_document_is_named(tmp_path):
    store = _build(tmp_path / "store")
    with pytest.raises(MissingRepresentationError) as error:
        store.get("nope")
    assert str(error.value) == f"document 'nope' is not in the store {tmp_path / 'store'} (built for 10 documents)"
    assert isinstance(error.value, KeyError)
    with pytest.raises(MissingRepresentationError, match="'D999'"):
        store.padded(["D001", "D999"])


def test_a_damaged_shard_is_found(tmp_path):
    folder = tmp_path / "store"
    _build(folder)
    shard = folder / "shard-00001.bin"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0x01
    shard.write_bytes(bytes(data))
    assert np.array_equal(RepresentationStore.open(folder).get("D000"), _matrices()[0])  # sizes only
    with pytest.raises(CorruptStoreError, match=r"shard-00001\.bin: its checksum is not the manifest's"):
        RepresentationStore.open(folder, verify=True)
    shard.write_bytes(bytes(data[:-4]))
    with pytest.raises(CorruptStoreError, match=rf"shard-00001\.bin: {len(data) - 4} bytes, not the {len(data)}"):
        RepresentationStore.open(folder)


def test_a_damaged_id_table_or_an_old_format_is_found(tmp_path):
    folder = tmp_path / "store"
    _build(folder)
    ids = np.load(folder / "ids.npy")
    np.save(folder / "ids.npy", ids[[1, 0, *range(2, len(ids))]])  # two ids swapped: same size, wrong order
    RepresentationStore.open(folder)  # sizes only
    with pytest.raises(CorruptStoreError, match=r"ids\.npy: not the plan's doc ids, sorted"):
        verify_store(folder)
    np.save(folder / "ids.npy", ids[:-1])
    with pytest.raises(CorruptStoreError, match="its id table does not list the manifest's 10 documents"):
        RepresentationStore.open(folder)
    np.save(folder / "ids.npy", ids)
    locations = np.load(folder / "locations.npy")
    locations[3, 2] += 1
    np.save(folder / "locations.npy", locations)
    with pytest.raises(CorruptStoreError, match=r"locations\.npy: not the rows the shards' indexes list"):
        verify_store(folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "format": 1}))
    with pytest.raises(CorruptStoreError, match="a store of format 1; this code reads format 2"):
        RepresentationStore.open(folder)


def test_the_verify_command(tmp_path):
    folder = tmp_path / "store"
    _build(folder)
    command = [sys.executable, "-m", "common.stores.verify"]
    done = subprocess.run([*command, str(folder)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == f"ok: {folder} (10 documents, 3 shards, 276 bytes)\n"
    shard = folder / "shard-00000.bin"
    data = bytearray(shard.read_bytes())
    data[0] ^= 0x01
    shard.write_bytes(bytes(data))
    done = subprocess.run([*command, str(folder)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines()[-1] == (f"error: {shard}: its checksum is not the manifest's (the file was "
                                            "changed or damaged)")
    done = subprocess.run([*command, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (2, f"error: argument STORE: {tmp_path} holds no finished store "
                                                 "(no manifest.json)\n")


LIMITED = """
import resource, sys
import numpy as np
sys.path.insert(0, {tests!r})
from test_representations import IDENTITY
from common.stores.representations import StoreWriter
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard}))
writer = StoreWriter({folder!r}, doc_ids=[str(i) for i in range(300)], width=2, dtype="float32", shard_size=1,
                     identity=IDENTITY)
for i in range(300):
    writer.write_shard(i, [np.full((1, 2), i)])
store = writer.finish()
held = store.get_many([str(i) for i in range(300)])
assert [float(m[0, 0]) for m in held] == list(range(300))
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], store._kept, len(store._maps))
"""


@pytest.mark.parametrize("hard", ["hard", "700"])
def test_a_store_of_more_shards_than_open_files_allowed(tmp_path, hard):
    """300 shards under a soft limit of 256 open files: the limit is raised so every shard stays mapped; where the
    hard limit is 700, the maps beyond what fits beside the spare descriptors are let go, and every read works."""
    code = LIMITED.format(tests=str(Path(__file__).parent), soft=256, hard=hard, folder=str(tmp_path / "store"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    soft, kept, mapped = map(int, done.stdout.split())
    if hard == "hard":
        assert soft > 300 + 512 and kept == mapped == 300
    else:
        assert soft == 700 and kept == mapped and 1 <= kept < 700 - 512


def test_folders_in_use_are_refused(tmp_path):
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine")
    for resume in (False, True):
        assert store_output_problem(stray, resume) == f"{stray} is not empty; choose a new folder"
        with pytest.raises(ValueError, match=f"^{stray} is not empty; choose a new folder$"):
            _writer(stray, resume=resume)
    finished = tmp_path / "finished"
    _build(finished)
    for resume in (False, True):
        with pytest.raises(ValueError, match="already holds a finished store; open it, or choose a new folder"):
            _writer(finished, resume=resume)
    (tmp_path / "file").write_text("")
    assert store_output_problem(tmp_path / "file") == f"{tmp_path / 'file'} is a file, not a folder"
    with pytest.raises(FileNotFoundError, match=f"{stray} holds no finished store"):
        RepresentationStore.open(stray)

    leftover = tmp_path / "leftover"  # killed while writing its plan: as good as empty
    leftover.mkdir()
    (leftover / ".plan.json.abc123.tmp").write_text("{")
    assert store_output_problem(leftover) is None and store_output_problem(tmp_path / "new") is None
    _write(_writer(leftover), _matrices(), [0])
    with pytest.raises(FileNotFoundError, match=r"no finished store .*an unfinished one: resume its build"):
        RepresentationStore.open(leftover)


def test_checkpoint_hash_is_the_sha256_of_the_file(tmp_path):
    path = tmp_path / "model.ckpt"
    data = np.random.default_rng(0).bytes(3 << 20)
    path.write_bytes(data)
    assert checkpoint_hash(path) == hashlib.sha256(data).hexdigest()
