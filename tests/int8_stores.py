"""What tests/earl/test_int8_store.py and tests/mva/test_int8_store.py share: a package's fp32 and int8 stores of the
documents a fixture checkpoint re-ranks (its ``index`` command over a collection file of them), and the scores its
``evaluate --store`` gives from each."""

from pathlib import Path

from common.data.docstore import DocumentStore
from common.data.formats import write_collection
from common.data.specs import source_from_spec
from tests.bert_portable_checks import run_scores

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints"
#: The built-in test queries evaluated (a seeded sample, as ``--test_queries``) and the candidates re-ranked of each.
QUERIES, DEPTH = 8, 10
CPU = ["--accelerator", "cpu", "--devices", "1"]


def candidates_collection(pairs: list[tuple[str, str]], path: Path) -> Path:
    """A collection file of the documents of `pairs`, built-in test passages."""
    documents = source_from_spec("builtin:test").documents()
    write_collection(path, documents.get_many(sorted({doc_id for _, doc_id in pairs})))
    return path


def forget_collection(path: Path) -> None:
    """Remove the collection file's cached document store (under the shared cache, keyed by its content)."""
    DocumentStore.for_collection(path).path.unlink()


def stores_and_scores(index, evaluate, checkpoint: Path, collection: Path, root: Path, pairs: list[tuple[str, str]],
                      *index_options: str) -> dict[str, tuple]:
    """``{dtype: (store, {pair: score}, metrics)}`` for fp32 and int8: a package's `index` command over `collection`,
    then its `evaluate` command with ``--store`` on the built-in test task's `QUERIES` queries at `DEPTH`."""
    built = {}
    for dtype in ("fp32", "int8"):
        store = index.main(["--checkpoint", str(checkpoint), *index_options, "--collection", str(collection),
                                    "--output_dir", str(root / dtype), "--dtype", dtype, "--shard_size", "32",
                                    "--batch_size", "16", *CPU])
        out = root / f"evaluated_{dtype}"
        metrics = evaluate.main(["--checkpoint", str(checkpoint), "--task", "builtin:test", "--test_queries",
                                         str(QUERIES), "--depth", str(DEPTH), "--accelerator", "cpu", "--store",
                                         str(root / dtype), "--output_dir", str(out)])
        run = run_scores(out)
        built[dtype] = (store, {pair: run[pair] for pair in pairs}, metrics)
    return built
