"""`common.stores.writer`'s feeding of the device: a shard's documents read and tokenised by the loader's collate_fn
(so in its worker processes), in batches of similar length; its loader's options; the rows copied back to the host
once a shard (on CUDA without waiting; checked where a GPU is present, the CPU path everywhere)."""

import os
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.accelerators import CPUAccelerator, CUDAAccelerator
from torch.utils.data import DataLoader

from common.data.formats import Document
from common.stores.writer import DocumentIndexer, EncodedShards, HostCopies, loader_options

#: Shard s holds documents d{s}0, d{s}1, ...: five in shard 0, three in shard 1.
SHARDS = {0: [f"d0{i}" for i in range(5)], 1: ["d10", "d11", "d12"]}


class Documents:
    """Documents whose text is as many words as the last digit of their id, plus one (d03: 4 words)."""

    def get_many(self, ids):
        return [Document(doc_id, " ".join(["word"] * (int(doc_id[-1]) + 1))) for doc_id in ids]


class PidEncoder:
    """Token ids: the process that encoded them, one per word; the mask marks the words."""

    def documents(self, docs):
        lengths = [len(doc.text.split()) for doc in docs]
        mask = torch.tensor([[1] * n + [0] * (max(lengths) - n) for n in lengths])
        return {"doc_tokens": mask * os.getpid(), "doc_mask": mask}


def shards(pending=(0, 1)) -> EncodedShards:
    return EncodedShards(list(pending), SHARDS.__getitem__, Documents(), PidEncoder(), batch_size=2)


def test_a_shard_is_read_and_encoded_in_batches_of_similar_length():
    shard, batches = shards().collate([0])
    assert shard == 0
    # by length, shortest first: d00 (1 word), d01 (2), d02, d03, d04 (5), in batches of 2
    assert [positions.tolist() for positions, _, _ in batches] == [[0, 1], [2, 3], [4]]
    assert [mask.sum(1).tolist() for _, _, mask in batches] == [[1, 2], [3, 4], [5]]


def test_the_loader_workers_do_the_reading_and_tokenising():
    dataset = shards()
    loader = DataLoader(dataset, batch_size=1, collate_fn=dataset.collate, num_workers=2)
    seen = {}
    for shard, batches in loader:
        seen[shard] = {int(tokens.max()) for _, tokens, _ in batches}  # the pids that encoded them
    assert set(seen) == {0, 1}
    pids = set().union(*seen.values())
    assert os.getpid() not in pids and len(pids) == 2  # each shard encoded by a worker of its own


@pytest.mark.parametrize("accelerator, pinned", [(CUDAAccelerator(), True), (CPUAccelerator(), False)])
def test_index_loaders_pin_on_cuda_and_keep_their_workers(accelerator, pinned):
    trainer = SimpleNamespace(accelerator=accelerator)
    assert loader_options(trainer, 2) == {"num_workers": 2, "persistent_workers": True, "pin_memory": pinned}
    assert loader_options(trainer, 0) == {"num_workers": 0, "persistent_workers": False, "pin_memory": pinned}


def _doubled_prefix(tokens: torch.Tensor, mask: torch.Tensor):
    """(B, d) -> rows (B, d, 2) of [token, 2 x token] and the keep mask: a document's rows are its real tokens."""
    rows = torch.stack([tokens, 2 * tokens], -1).float()
    return rows.to(torch.bfloat16), mask


def test_a_shards_rows_come_back_per_document_in_the_shards_order():
    indexer = DocumentIndexer(torch.nn.Identity(), _doubled_prefix)
    shard, arrays = indexer.predict_step(shards().collate([1]))
    assert shard == 1 and len(arrays) == 3
    pid = os.getpid()
    for i, array in enumerate(arrays):  # d1i has i + 1 words: i + 1 rows [pid, 2 pid], as float32
        assert array.dtype == torch.float32
        assert array.tolist() == [[float(torch.tensor(pid).bfloat16()), float(torch.tensor(2 * pid).bfloat16())]] * (
            i + 1)


def test_host_copies_on_the_cpu_are_the_tensors():
    copies = HostCopies(torch.device("cpu"))
    x = torch.arange(6.0)
    copied = copies.copy(x)
    copies.wait()
    assert not copies.cuda and torch.equal(copied, x)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU: the non-blocking copy is checked on one")
def test_host_copies_from_cuda_are_pinned_and_whole_after_the_wait():
    device = torch.device("cuda")
    copies = HostCopies(device)
    results = []
    for seed in range(8):  # kernels queued after the copies were: the wait is for all of them
        x = torch.randn(512, 512, device=device, generator=torch.Generator(device).manual_seed(seed))
        y = x @ x
        results.append((y, copies.copy(y)))
    copies.wait()
    for on_device, on_host in results:
        assert on_host.is_pinned() and on_host.device.type == "cpu"
        assert torch.equal(on_host, on_device.cpu())
