"""``python -m <package>.prepare`` then ``python -m <package>.train`` on 2 processes: train builds no cache.

On an empty ``EFFICIENT_RANKERS_CACHE`` and ``IR_DATASETS_HOME``, prepare runs with the tiny run's options (those of
tests/distributed/test_train_launchers.py, the 2 processes' included) and must print each cache as built. Every file
of both folders is then listed with its inode, modification time and size, and the 2-process training run (Lightning's
launcher over gloo) must leave that list as it was: a cache built during training would add files, and one built again
would replace them (a new inode: every cache is published by a rename). Lock files are left out: waiting for a lock
creates its file. QDS learns its tokenizer on the training task (``--data.tokenizer train``); the Conformer-Kernel
learns its vocabulary and word2vec embeddings; both read the built-in collection, its document store and its training
table.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.distributed.test_train_launchers import RUNS, TWO

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
#: Each package's tiny 2-process run, and the caches prepare must build for it (their folders in the cache).
CASES = {
    "qds": ([*RUNS["qds"][0], "--data.tokenizer", "train", *TWO], {"builtin", "digests", "docstore", "training",
                                                                    "tokenizers"}),
    "conformer_kernel": ([*RUNS["conformer_kernel"][0], *TWO], {"builtin", "digests", "docstore", "training",
                                                                 "conformer_kernel"}),
}


def _files(*folders: Path) -> dict[str, tuple[int, int, int]]:
    """Every file under `folders` but lock files, by path: its inode, modification time and size."""
    return {str(path): (stat.st_ino, stat.st_mtime_ns, stat.st_size) for folder in folders
            for path in sorted(folder.rglob("*")) if path.is_file() and path.suffix != ".lock"
            for stat in [path.stat()]}


@pytest.mark.parametrize("package", CASES)
def test_train_after_prepare_builds_no_cache(package, tmp_path):
    args, kinds = CASES[package]
    cache, home = tmp_path / "cache", tmp_path / "ir_datasets"
    env = {**os.environ, "EFFICIENT_RANKERS_CACHE": str(cache), "IR_DATASETS_HOME": str(home),
           "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}

    def run(command: str, *more: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", f"{package}.{command}", *args, *more], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done

    prepared = run("prepare").stdout.splitlines()
    built = [line.split()[-1] for line in prepared if line.startswith("  built ")]
    assert {Path(path).relative_to(cache).parts[0] for path in built} == kinds
    assert prepared[-1] == f"{len(built)} built, 0 found built"
    before = _files(cache, home)
    assert all(any(name.startswith(path) for name in before) for path in built)

    run("train", "--output_dir", str(tmp_path / "run"))
    assert (tmp_path / "run" / "metrics.json").is_file()
    assert _files(cache, home) == before

    again = run("prepare").stdout.splitlines()
    assert again[-1] == f"0 built, {len(built)} found built"
