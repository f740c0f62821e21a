"""Stores of seeded noise, the benchmarks' stand-in for encoded documents (reading a row costs the same whatever it
holds): a `StoreWriter`'s pending shards filled from `common.benchmarks.store_reads.noise_documents`."""

from __future__ import annotations

from common.benchmarks.store_reads import noise_documents
from common.stores.representations import StoreWriter


def write_noise(writer: StoreWriter, seed: int, rows: int) -> None:
    """Each pending shard of `writer`: its documents' `rows` x width rows of the noise of `seed`, in the plan's type."""
    for shard in writer.pending():
        first, count = shard * writer.shard_size, len(writer.shard_doc_ids(shard))
        writer.write_shard(shard, list(noise_documents(seed, first, count, rows, writer.width, writer.plan["dtype"])))
