"""Every ``evaluate`` and ``index`` command on 2 CPU processes over gloo writes the same bytes as on 1 process.

Each command runs on the tiny checkpoints of ``tests/fixtures/checkpoints`` once as a single process and once as
two: under Lightning's own launcher (``--devices 2``, which starts the second process by re-running the command
line) or under ``torchrun --nproc_per_node 2`` (both processes run the command line from the start); the files it
writes are then compared byte for byte: ``run*.trec``, ``metrics.json``, ``task.json``, the representation stores'
shards and manifests, the impact index's arrays (raw ``.npy`` files) and text files. The two-process launch must
also finish: global rank zero alone checks and writes the output folder, so the other process never refuses the
folder the launch has begun nor writes the same files, and a folder holding another run is still refused, once,
before the second process starts.

Each launcher's test loop runs ``qds.evaluate`` or ``conformer_kernel.evaluate`` (``qds.evaluate`` under torchrun
and as SLURM's two tasks, ``srun``, simulated: `tests.distributed.slurm`; ``conformer_kernel.evaluate`` under
Lightning's launcher).
Each ``index`` command runs fresh under one launcher and resumed under the other: a one-process build killed
(SIGKILL) as its third shard begins, the first two written, is finished with ``--resume`` by two processes, which
must compute the missing shards alone and end with the uninterrupted build's bytes.

EARL's and MVA's evaluate commands score in one process (the paper's online setting): launched as two, rank zero
does all of it and the other writes nothing (MVA's costs.json, holding the seconds scoring took, is left out of
the comparison). Every process runs with one thread (``OMP_NUM_THREADS=1``).
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.distributed.slurm import srun_tasks

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
CHECKPOINTS = REPO / "tests" / "fixtures" / "checkpoints"
#: The fixtures' tiny evaluation (tests/fixtures/checkpoints/README.md): few queries, shallow candidates.
QUERIES, DEPTH = ["--test_queries", "4"], ["--depth", "10"]


def launch(module: str, args: list[str], how: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``python -m module args`` as one process (`how` ``single``) or two (``lightning``: ``--devices 2``;
    ``torchrun``; ``srun``: as SLURM's two tasks); a failure shows the end of its output."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    if how == "srun":
        zero, other = srun_tasks([sys.executable, "-m", module, *args], cwd, env)
        for rank, done in enumerate((zero, other)):
            assert done.returncode == 0, f"srun {module} rank {rank}: exit {done.returncode}\n{done.stderr[-3000:]}"
        return zero
    if how == "torchrun":
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                   "-m", module, *args]
    else:
        command = [sys.executable, "-m", module, *args]
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{how} {module}: exit {done.returncode}\n{(done.stdout + done.stderr)[-3000:]}"
    return done


def devices(how: str) -> list[str]:
    """A Lightning command's ``--devices``: 2 under a two-process launch (torchrun's world must match it)."""
    return ["--devices", "1" if how == "single" else "2"]


def files(folder: Path) -> dict[str, Path]:
    """Every file under `folder` by its relative path."""
    return {str(p.relative_to(folder)): p for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_same_files(one: Path, two: Path, names: tuple[str, ...] | None = None) -> None:
    """`one` and `two` hold the same files with the same bytes; `names`: those files (the others may differ), else
    every one but provenance.json, whose command line names the launch's own --devices and --output_dir."""
    ones, twos = files(one), files(two)
    if names is None:
        assert ones.keys() == twos.keys()
        ones.pop("provenance.json", None)
    else:
        ones = {name: ones[name] for name in names}
    for name, path in ones.items():
        assert path.read_bytes() == twos[name].read_bytes(), name


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("launchers")


# --- qds.evaluate and conformer_kernel.evaluate: Lightning's test loop on every process -----------------------


def qds_evaluate(root: Path, how: str) -> Path:
    out = root / f"qds-{how}"
    launch("qds.evaluate", ["--checkpoint", str(CHECKPOINTS / "qds.ckpt"), "--task", "builtin:test", *DEPTH,
                            *devices(how), "--output_dir", str(out)], how, root)
    return out


@pytest.fixture(scope="module")
def qds_single(root) -> Path:
    return qds_evaluate(root, "single")


@pytest.mark.parametrize("how", ["torchrun", "srun"])
def test_qds_evaluate_on_two_processes_writes_what_one_writes(root, qds_single, how):
    two = qds_evaluate(root, how)
    assert sorted(files(two)) == ["metrics.json", "provenance.json", "run.trec", "task.json"]
    assert_same_files(qds_single, two)
    command = json.loads((two / "provenance.json").read_text())["command"]  # rank zero's, written once
    assert command.startswith("python -m qds.evaluate --checkpoint ") and command.endswith(f"--output_dir {two}")
    assert len((two / "run.trec").read_text().splitlines()) == 100 * 100  # every candidate of the 100 queries


def test_a_two_process_launch_still_refuses_a_folder_holding_another_run(root):
    out = root / "used"
    out.mkdir()
    (out / "run.trec").write_text("someone else's\n")
    done = subprocess.run([sys.executable, "-m", "qds.evaluate", "--checkpoint", str(CHECKPOINTS / "qds.ckpt"),
                           "--task", "builtin:test", "--devices", "2", "--output_dir", str(out)],
                          cwd=root, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2
    assert done.stderr.count(f"--output_dir: {out} is not empty") == 1
    assert sorted(files(out)) == ["run.trec"]


def conformer_kernel_evaluate(root: Path, how: str) -> Path:
    out = root / f"ck-{how}"
    launch("conformer_kernel.evaluate", ["--checkpoint", str(CHECKPOINTS / "conformer_kernel.ckpt"), "--task",
                                         "builtin:test", "--modes", "rerank", "fullrank", *DEPTH, *QUERIES,
                                         *devices(how), "--output_dir", str(out)], how, root)
    return out


@pytest.fixture(scope="module")
def conformer_kernel_single(root) -> Path:
    return conformer_kernel_evaluate(root, "single")


def test_conformer_kernel_evaluate_on_two_processes_writes_what_one_writes(root, conformer_kernel_single):
    two = conformer_kernel_evaluate(root, "lightning")
    assert {"run.rerank.trec", "run.fullrank.trec", "metrics.json", "task.json", "index/meta.json"} <= set(files(two))
    assert_same_files(conformer_kernel_single, two)


def conformer_kernel_index_args(out: Path, how: str) -> list[str]:
    return ["--checkpoint", str(CHECKPOINTS / "conformer_kernel.ckpt"), "--collection", "builtin:test", "--query_tasks",
            "builtin:test", "--shard_size", "500", "--accelerator", "cpu", *devices(how),
            "--output_dir", str(out)]


@pytest.fixture(scope="module")
def conformer_kernel_index(root) -> Path:
    """The index of 3,000 documents (6 shards) built by one process."""
    out = root / "ck-index-single"
    launch("conformer_kernel.index", conformer_kernel_index_args(out, "single"), "single", root)
    return out


def test_conformer_kernel_index_on_two_processes_builds_what_one_builds(root, conformer_kernel_index):
    two = root / "ck-index-lightning"
    launch("conformer_kernel.index", conformer_kernel_index_args(two, "lightning"), "lightning", root)
    assert sorted(files(two)) == ["data.npy", "doc_ids.txt", "indices.npy", "indptr.npy", "meta.json",
                                  "terms.txt"]  # the shards merged
    assert json.loads((two / "meta.json").read_text())["documents"] == 3000
    assert_same_files(conformer_kernel_index, two)


def test_a_killed_index_resumed_on_two_processes_is_the_one_built_by_one(root, conformer_kernel_index):
    out = root / "ck-index-resumed"
    kill_at_third_shard("conformer_kernel.index", conformer_kernel_index_args(out, "single"),
                        "conformer_kernel.impact_index.TermDocumentScorer", "batch[0]", root)
    assert sorted(files(out)) == ["shards/0000000.npy", "shards/0000001.npy", "shards/plan.json"]
    launch("conformer_kernel.index", [*conformer_kernel_index_args(out, "torchrun"), "--resume"], "torchrun", root)
    assert_same_files(conformer_kernel_index, out)


def kill_at_third_shard(module: str, args: list[str], scorer: str, shard: str, cwd: Path) -> None:
    """Run ``python -m module args`` as one process, killed (SIGKILL) as the `scorer` class's ``predict_step``
    is given shard 2, the first two written; `shard` is the expression of its ``batch`` argument naming the
    shard."""
    path, name = scorer.rsplit(".", 1)
    code = (f"import os, signal, sys\nfrom {path} import {name}\nfrom {module} import main\n"
            f"step = {name}.predict_step\n"
            "def dying(self, batch, batch_idx=0):\n"
            f"    if {shard} == 2:\n"
            "        os.kill(os.getpid(), signal.SIGKILL)\n"
            "    return step(self, batch, batch_idx)\n"
            f"{name}.predict_step = dying\nmain({args!r})\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == -signal.SIGKILL, (done.stdout + done.stderr)[-3000:]


# --- earl and mva: stores built by Lightning predict, evaluated in one process -------------------------------


@pytest.fixture(scope="module")
def collection(root) -> Path:
    """The documents of the evaluated candidates (4 queries, top 10: 40 documents), so that the stores are small
    and hold every candidate; the cached document store of the file is removed afterwards."""
    from common.data.docstore import DocumentStore
    from common.data.formats import write_collection
    from common.data.specs import source_from_spec
    from earl.data import EARLDataModule
    from mva.data import MVADataModule

    doc_ids = set()
    for module, architecture in ((EARLDataModule, "earl"), (MVADataModule, "mva")):
        data = module(train=None, dev=None, test="builtin:test", architecture=architecture, tokenizer="builtin",
                      depth=10, test_queries=4)
        data.check_tasks()
        doc_ids |= {doc_id for _, doc_id in data.eval_pairs("test")}
    path = root / "candidates.jsonl"
    write_collection(path, source_from_spec("builtin:test").documents().get_many(sorted(doc_ids)))
    yield path
    DocumentStore.for_collection(path).path.unlink(missing_ok=True)


#: Each package's launcher of its fresh two-process store build and its other, which resumes a killed build.
STORES = {"earl": ("lightning", "torchrun", ["--strategy", "s2"]), "mva": ("torchrun", "lightning", [])}


def store_args(package: str, collection: Path, out: Path, how: str) -> list[str]:
    return ["--checkpoint", str(CHECKPOINTS / f"{package}.ckpt"), *STORES[package][2], "--collection",
            str(collection), "--shard_size", "8", "--batch_size", "3", "--accelerator", "cpu", *devices(how),
            "--output_dir", str(out)]


@pytest.fixture(scope="module")
def stores(root, collection) -> dict:
    """Each package's store of `collection` built by one process and by two (shards of 8 documents: 5 shards,
    split 3 and 2)."""
    built = {}
    for package, (how, _, _) in STORES.items():
        for run in ("single", how):
            out = root / f"{package}-store-{run}"
            launch(f"{package}.index", store_args(package, collection, out, run), run, root)
            built[package, run] = out
    return built


@pytest.mark.parametrize("package", sorted(STORES))
def test_a_store_built_by_two_processes_is_the_one_built_by_one(stores, package):
    how = STORES[package][0]
    one, two = stores[package, "single"], stores[package, how]
    assert "manifest.json" in files(two) and "shard-00004.bin" in files(two)
    assert_same_files(one, two)


@pytest.mark.parametrize("package", ["mva"])  # the writer is common.stores.writer's for both; CK's index: torchrun
def test_a_killed_store_resumed_on_two_processes_is_the_one_built_by_one(root, collection, stores, package):
    how = STORES[package][1]
    out = root / f"{package}-store-resumed"
    kill_at_third_shard(f"{package}.index", store_args(package, collection, out, "single"),
                        "common.stores.writer.DocumentIndexer", "batch[0]", root)
    assert sorted(files(out)) == ["plan.json", "shard-00000.bin", "shard-00000.index.json", "shard-00001.bin",
                                  "shard-00001.index.json"]
    launch(f"{package}.index", [*store_args(package, collection, out, how), "--resume"], how, root)
    assert_same_files(stores[package, "single"], out)


@pytest.mark.parametrize("package", sorted(STORES))
def test_store_evaluation_launched_as_two_processes_writes_what_one_writes(root, stores, package):
    how = STORES[package][0]
    outs = {}
    for run, launcher in (("single", "single"), (how, "torchrun")):  # no --devices: torchrun starts the two
        outs[run] = root / f"{package}-evaluate-{run}"
        launch(f"{package}.evaluate", ["--checkpoint", str(CHECKPOINTS / f"{package}.ckpt"), "--task", "builtin:test",
                                       *QUERIES, *DEPTH, "--accelerator", "cpu", "--store", str(stores[package, run]),
                                       "--output_dir", str(outs[run])], launcher, root)
    # mva's costs.json holds the seconds it took
    assert_same_files(outs["single"], outs[how], ("run.trec", "metrics.json", "task.json"))
