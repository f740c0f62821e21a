"""The folder of a `conformer_kernel.impact_index` index: its files, an unfinished one's plan, and whether a folder can
take one (no heavy imports: the command lines check their folders before torch is imported).
"""

from __future__ import annotations

from pathlib import Path

#: A finished index's CSR arrays (memory-mapped by `conformer_kernel.impact_index.ImpactIndex.load`).
ARRAY_FILES = ("data.npy", "indices.npy", "indptr.npy")
#: A finished index's files (`conformer_kernel.impact_index.build_index`); meta.json, written last, marks one.
INDEX_FILES = (*ARRAY_FILES, "terms.txt", "doc_ids.txt", "meta.json")
#: An unfinished index's plan (what it indexes, with which model), written before its first shard.
PLAN = "shards/plan.json"


def output_problem(folder: Path, resume: bool = False) -> str | None:
    """What keeps an index from being built into `folder` (new, empty, or unfinished with `resume`), or None."""
    if folder.exists() and not folder.is_dir():
        return f"{folder} is a file, not a folder"
    if (folder / "meta.json").exists():
        return f"{folder} already holds an index; choose a new folder"
    if (folder / PLAN).exists():
        return None if resume else f"{folder} holds an unfinished index: pass --resume to finish it, or a new folder"
    if folder.exists() and any(folder.iterdir()):
        return f"{folder} is not empty; choose a new folder"
    return None
