"""``earl.index --dtype int8`` and ``earl.evaluate --store`` with the fixture EARL
(tests/fixtures/checkpoints/earl.ckpt, h = 32, K = 1): S1 and S2 stores of the documents of 8 built-in test queries'
top 10, fp32 and int8. An int8 store holds the fp32 store's rows in width + 4 bytes each against 4·width (counted
from the widths: 36 against 128 for S1, 68 against 256 for S2), and ``earl.evaluate`` scores from it, unchanged,
within 1% of the fp32 scores' spread."""

import pytest

from earl import evaluate, index
from earl.data import EARLDataModule
from tests.int8_stores import (DEPTH, FIXTURES, QUERIES, candidates_collection, forget_collection,
                               stores_and_scores)

pytestmark = pytest.mark.usefixtures("one_thread")

CHECKPOINT = FIXTURES / "earl.ckpt"
HIDDEN, BLOCKS = 32, 1  # the fixture's h and K


@pytest.fixture(scope="module")
def built(tmp_path_factory, one_thread):
    root = tmp_path_factory.mktemp("earl_int8")
    pairs = EARLDataModule(train=None, dev=None, test="builtin:test", depth=DEPTH, test_queries=QUERIES,
                           passage_length=48).eval_pairs("test")
    collection = candidates_collection(pairs, root / "candidates.jsonl")
    yield {strategy: stores_and_scores(index, evaluate, CHECKPOINT, collection, root / strategy, pairs, "--strategy",
                                       strategy)
           for strategy in ("s1", "s2")}
    forget_collection(collection)


@pytest.mark.parametrize("strategy, width", [("s1", HIDDEN), ("s2", 2 * BLOCKS * HIDDEN)])
def test_an_int8_store_scores_as_the_fp32_one_in_a_quarter_of_the_bytes(built, strategy, width, capsys):
    (fp32, fp32_scores, fp32_metrics), (int8, int8_scores, int8_metrics) = (built[strategy][dtype]
                                                                            for dtype in ("fp32", "int8"))
    assert (fp32.width, int8.width, int8.dtype) == (width, width, "int8")
    rows = fp32.manifest["rows"]
    assert int8.manifest["rows"] == rows and len(int8) == len(fp32) and rows > len(fp32)
    assert (fp32.manifest["bytes"], int8.manifest["bytes"]) == (rows * width * 4, rows * (width + 4))
    assert sorted(int8_scores) == sorted(fp32_scores) and len(fp32_scores) == QUERIES * DEPTH
    pairs = sorted(fp32_scores)
    spread = max(fp32_scores.values()) - min(fp32_scores.values())
    differences = [abs(int8_scores[p] - fp32_scores[p]) for p in pairs]
    assert spread > 1e-4 and 0 < max(differences) <= 0.01 * spread  # the fixture's scores span 1.1e-3
    name = fp32.manifest["extra"]["model"]  # the run's name in metrics.json
    with capsys.disabled():
        print(f"\nEARL {strategy.upper()} int8 store vs fp32: largest |score difference| {max(differences):.2e} "
              f"(score spread {spread:.3g}), NDCG@10 {int8_metrics[name]['ndcg_cut_10']:.4f} vs "
              f"{fp32_metrics[name]['ndcg_cut_10']:.4f}, {int8.bytes_per_document:,.0f} vs "
              f"{fp32.bytes_per_document:,.0f} bytes a document")
