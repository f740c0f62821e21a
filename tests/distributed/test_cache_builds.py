"""One-time work happens once: caches asked for by several processes at the same moment are built by one of them.

torchrun and srun start every rank at once, and each rank builds what it needs on first use. This starts 2 worker
processes at once (as 2 ranks would start) on an empty ``EFFICIENT_RANKERS_CACHE`` and an empty ir_datasets store,
and has them ask, each cache at the same moment (a file barrier before each), for: the built-in collection and its
BM25 candidates, the built-in byte-level BPE, the document store of the built-in collection, the Conformer-Kernel
vocabulary, IDFs and word2vec embeddings (through its data module, as training asks), an ORCAS field, and an
built-in training task's table of its qrels and run files (`common.data.source.FileSource.training_table`), and an
ir_datasets task's document store and training table (`common.data.training_table`; through the data module's
``prepare_data``, as two nodes' local rank 0 would on one shared file system).

Each build function is wrapped in the workers to append a line to a log, so the builds are counted where they
happen, whatever calls them. Asserted: 1 process builds each cache once; 2 processes build each cache once between
them (not once each); the ir_datasets store holds each document once; and the caches of the 2-process run hold the
same bytes as the 1-process run's.
"""

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = 200
IRDS_ID = "efficient-rankers-test/cache-builds"
#: The caches in the order the workers ask for them, and how many builds each makes in a fresh cache.
BUILDS = {"builtin": 1, "bm25": 1, "bpe": 1, "docstore": 1, "vocabulary": 1, "orcas": 1, "file_table": 1, "irds": 1,
          "table": 1}


def _docs_tsv() -> str:
    return "".join(f"d{i:03d}\thttp://x.example/{i}\ttitle {i}\tbody of document {i} about topic {i % 7}\n"
                   for i in range(DOCUMENTS))


def _qrels_and_run() -> tuple[str, str]:
    """10 queries, each with one relevant document and 20 scored candidates."""
    qrels = "".join(f"q{q} 0 d{q * 20:03d} 1\n" for q in range(10))
    run = "".join(f"q{q} Q0 d{q * 20 + r:03d} {r + 1} {20 - r}.5 bm25\n" for q in range(10) for r in range(20))
    return qrels, run


# --- the worker (runs in its own process: python -c "...; worker(...)") -----------------------------------------


def worker(rank: int, world: int, run: str, inputs: str) -> None:
    """Ask for every cache, each at the same moment as the other workers; log each build to ``run/builds.log``."""
    run_dir, inputs_dir = Path(run), Path(inputs)
    log = run_dir / "builds.log"

    def counted(name, build):
        def wrapper(*args, **kwargs):
            with open(log, "a") as f:
                f.write(f"{name} {rank}\n")
            return build(*args, **kwargs)

        return wrapper

    import ir_datasets
    from ir_datasets.datasets.base import Dataset
    from ir_datasets.formats import TrecQrels, TrecScoredDocs, TsvDocs
    from ir_datasets.indices import lz4_pickle
    from ir_datasets.util import LocalDownload

    import common.data.builtin as builtin
    import common.encoders.tokenizers as tokenizers
    import conformer_kernel.orcas as orcas
    from common.data.docstore import DocumentStore
    from common.data.irds import IrDatasetsSource
    from common.data.source import FileSource
    from conformer_kernel.data import ConformerKernelDataModule
    from conformer_kernel.vocab import Resources
    from tests.common.data.test_irds import MarcoDoc  # the msmarco-document layout

    builtin.build_builtin = counted("builtin", builtin.build_builtin)
    builtin.bm25_retrieve = counted("bm25", builtin.bm25_retrieve)
    tokenizers.train_bpe = counted("bpe", tokenizers.train_bpe)
    DocumentStore.build = classmethod(counted("docstore", DocumentStore.build.__func__))
    Resources.build = classmethod(counted("vocabulary", Resources.build.__func__))
    orcas._build = counted("orcas", orcas._build)
    lz4_pickle.Lz4PickleLookup.transaction = counted("irds", lz4_pickle.Lz4PickleLookup.transaction)
    IrDatasetsSource._training_table = counted("table", IrDatasetsSource._training_table)
    FileSource._stream_table = counted("file_table", FileSource._stream_table)

    docs = TsvDocs(LocalDownload(run_dir / "irds" / "docs.tsv"), doc_cls=MarcoDoc)
    qrels = TrecQrels(LocalDownload(run_dir / "irds" / "qrels.txt"), {0: "not", 1: "relevant"})
    ir_datasets.registry.register(IRDS_ID, Dataset(docs, qrels, TrecScoredDocs(LocalDownload(run_dir / "irds" /
                                                                                              "run.txt"))))

    def together(step: str) -> None:
        """Wait until every worker has reached `step`."""
        (run_dir / f"at-{step}-{rank}").touch()
        deadline = time.monotonic() + 120
        while not all((run_dir / f"at-{step}-{r}").exists() for r in range(world)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"rank {rank}: the other workers never reached {step}")
            time.sleep(0.01)

    together("builtin")
    root = builtin.ensure_builtin()
    together("bpe")
    tokenizers.load_tokenizer("builtin", vocab_size=512)
    together("docstore")
    FileSource(root / "topics.train.tsv", collection_path=root / "collection.jsonl").documents()
    together("vocabulary")
    data = ConformerKernelDataModule(train="builtin:train", dev=None, test=None, embedding_dim=8, min_count=2,
                                     embedding_epochs=1)
    len(data.resources)
    together("orcas")
    orcas.OrcasField.from_files(inputs_dir / "orcas-queries.tsv", inputs_dir / "orcas-qrels.tsv", progress=False)
    together("file_table")
    builtin.builtin_source("train").training_table()
    together("irds")
    ConformerKernelDataModule(train=f"irds:{IRDS_ID}", dev=None, test=None).prepare_data()
    print(f"rank {rank}: irds store holds {ir_datasets.load(IRDS_ID).docs_store().count()} documents")


# --- the test --------------------------------------------------------------------------------------------------


def _run(run_dir: Path, inputs: Path, world: int) -> tuple[Counter, list[str]]:
    """Start `world` workers at once on an empty cache in `run_dir`; the builds each cache took, and their outputs."""
    (run_dir / "irds").mkdir(parents=True)
    (run_dir / "irds" / "docs.tsv").write_text(_docs_tsv())
    qrels, run = _qrels_and_run()
    (run_dir / "irds" / "qrels.txt").write_text(qrels)
    (run_dir / "irds" / "run.txt").write_text(run)
    env = {**os.environ, "EFFICIENT_RANKERS_CACHE": str(run_dir / "cache"), "IR_DATASETS_HOME": str(run_dir / "home"),
           "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT)}
    workers = [
        subprocess.Popen([sys.executable, "-c", f"from tests.distributed.test_cache_builds import worker; "
                          f"worker({rank}, {world}, {str(run_dir)!r}, {str(inputs)!r})"],
                         cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for rank in range(world)
    ]
    deadline = time.monotonic() + 600
    while any(w.poll() is None for w in workers) and not any(w.poll() for w in workers):
        assert time.monotonic() < deadline, "the workers took over 10 minutes"
        time.sleep(0.2)
    for w in workers:  # one failed: the others would wait for it at the next barrier
        if w.poll() is None:
            w.kill()
    outputs = [w.communicate()[0] for w in workers]
    failed = [f"worker {rank} of {world} exited {w.returncode}:\n{output[-3000:]}"
              for rank, (w, output) in enumerate(zip(workers, outputs)) if w.returncode > 0]
    assert not failed, "\n".join(failed)
    builds = Counter(line.split()[0] for line in (run_dir / "builds.log").read_text().splitlines())
    return builds, outputs


def _contents(run_dir: Path) -> dict[str, str]:
    """Every cache file of a run (not the lock files) by its path, the collection's key in a name blanked, with
    the sha256 of its bytes; the vocabulary's ``meta.json`` by its options alone."""
    files = {}
    for tree in ("cache", "irds"):
        for path in sorted((run_dir / tree).rglob("*")):
            if not path.is_file() or path.suffix == ".lock" or path.name == "docs.tsv":
                continue
            # The vocabulary and the files' digests are named by a key of their input files' paths and times, which
            # the built-in collection of each run has its own of (the docstore and tables: of their contents).
            name = re.sub(r"-[0-9a-f]{16}", "-KEY", str(path.relative_to(run_dir)))
            data = path.read_bytes()
            if path.name == "meta.json" and "conformer_kernel" in path.parts:
                data = json.dumps(json.loads(data)["options"], sort_keys=True).encode()
            if path.name == "table.json" and "files" in json.loads(data)["source"]:  # the built-in files' paths
                data = json.dumps({**json.loads(data), "source": None}, sort_keys=True).encode()
            files[name] = hashlib.sha256(data).hexdigest()
    return files


def test_two_processes_build_each_cache_once_and_the_same_bytes_as_one(tmp_path):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "orcas-queries.tsv").write_text("q1\tcheap flights\nq2\tflight deals\nq3\thotel\n")
    (inputs / "orcas-qrels.tsv").write_text("q1 0 D1 1\nq2 0 D1 1\nq3 0 D2 1\nq1 0 D3 1\n")

    one, _ = _run(tmp_path / "one", inputs, 1)
    two, outputs = _run(tmp_path / "two", inputs, 2)

    assert one == Counter(BUILDS)
    assert two == Counter(BUILDS)  # not once per process
    for rank, output in enumerate(outputs):
        assert f"rank {rank}: irds store holds {DOCUMENTS} documents" in output
    single, double = _contents(tmp_path / "one"), _contents(tmp_path / "two")
    assert {name.split(os.sep)[1] for name in single} >= {"builtin", "tokenizers", "docstore", "conformer_kernel",
                                                          "orcas", "training"}
    assert any(name.startswith(os.path.join("irds", "docs.tsv.pklz4")) for name in single)
    assert double == single
