"""``mva.index --dtype int8`` and ``mva.evaluate --store`` with the fixture MVA (tests/fixtures/checkpoints/mva.ckpt:
temporal pooling by 2, one head of p = 8) and DE (mva-de.ckpt, h = 32): stores of the documents of 8 built-in test
queries' top 10, fp32 and int8. An int8 store holds the fp32 store's rows in width + 4 bytes each against 4·width
(counted from the widths: MVA's [D_K | D_V] of 2 x 8, 20 against 64; DE's 32, 36 against 128), and ``mva.evaluate``
scores from it unchanged: MVA within 1% of the fp32 scores' spread; DE, whose score is a dot product, within the
bound the rows' error gives it, |q . (d' - d)| <= ||q||_1 max|d| / 254 (each value of d within max|d| / 127 / 2).

The fixture DE's scores all lie within 2.3e-4 of 32.002 (its [CLS] outputs nearly one vector), below what int8 rows
resolve (the bound above is 0.22 here), so its int8 store reorders its candidates; the test prints the NDCG@10
of both."""

import numpy as np
import pytest
import torch

from mva import evaluate, index
from mva.data import MVADataModule
from mva.store import data_encoder, load_ranker
from tests.int8_stores import (DEPTH, FIXTURES, QUERIES, candidates_collection, forget_collection,
                               stores_and_scores)

pytestmark = pytest.mark.usefixtures("one_thread")

#: The fixtures' row widths: MVA's 2·H·p, DE's h.
WIDTHS = {"mva": 2 * 1 * 8, "mva-de": 32}


@pytest.fixture(scope="module")
def built(tmp_path_factory, one_thread):
    root = tmp_path_factory.mktemp("mva_int8")
    pairs = MVADataModule(train=None, dev=None, test="builtin:test", depth=DEPTH, test_queries=QUERIES,
                          passage_length=48).eval_pairs("test")
    collection = candidates_collection(pairs, root / "candidates.jsonl")
    yield {name: stores_and_scores(index, evaluate, FIXTURES / f"{name}.ckpt", collection, root / name, pairs)
           for name in WIDTHS}
    forget_collection(collection)


def report(name: str, built: dict, differences: list[float], spread: float, capsys) -> None:
    (fp32, _, fp32_metrics), (int8, _, int8_metrics) = (built[name][d] for d in ("fp32", "int8"))
    run = name.split("-")[-1]
    with capsys.disabled():
        print(f"\n{run.upper()} int8 store vs fp32: largest |score difference| {max(differences):.2e} (score spread "
              f"{spread:.3g}), NDCG@10 {int8_metrics[run]['ndcg_cut_10']:.4f} vs "
              f"{fp32_metrics[run]['ndcg_cut_10']:.4f}, {int8.bytes_per_document:,.0f} vs "
              f"{fp32.bytes_per_document:,.0f} bytes a document")


@pytest.mark.parametrize("name", list(WIDTHS))
def test_an_int8_store_holds_the_fp32_rows_in_width_plus_4_bytes_each(built, name):
    (fp32, fp32_scores, _), (int8, int8_scores, _) = (built[name][d] for d in ("fp32", "int8"))
    width = WIDTHS[name]
    assert (fp32.width, int8.width, int8.dtype) == (width, width, "int8")
    rows = fp32.manifest["rows"]
    assert int8.manifest["rows"] == rows and len(int8) == len(fp32) == len({d for _, d in fp32_scores})
    assert (fp32.manifest["bytes"], int8.manifest["bytes"]) == (rows * width * 4, rows * (width + 4))
    assert sorted(int8_scores) == sorted(fp32_scores) and len(fp32_scores) == QUERIES * DEPTH


def test_mva_scores_from_an_int8_store_within_1_percent_of_the_spread(built, capsys):
    (_, fp32_scores, _), (_, int8_scores, _) = (built["mva"][d] for d in ("fp32", "int8"))
    spread = max(fp32_scores.values()) - min(fp32_scores.values())
    differences = [abs(int8_scores[p] - fp32_scores[p]) for p in sorted(fp32_scores)]
    assert spread > 1e-2 and 0 < max(differences) <= 0.01 * spread  # the fixture's scores span 0.026
    report("mva", built, differences, spread, capsys)


def test_de_scores_from_an_int8_store_within_the_dot_products_bound(built, capsys):
    (fp32, fp32_scores, _), (_, int8_scores, _) = (built["mva-de"][d] for d in ("fp32", "int8"))
    state = torch.load(FIXTURES / "mva-de.ckpt", weights_only=True)
    model, encoder = load_ranker(state).model, data_encoder(state["datamodule_hyper_parameters"])
    topics = MVADataModule(train=None, dev=None, test="builtin:test").source("test").topics()
    differences = []
    for qid, doc_id in sorted(fp32_scores):
        encoded = encoder.queries([topics[qid]])
        with torch.inference_mode():
            query = model.embed(encoded["query_tokens"], encoded["query_mask"])[0].double().numpy()  # (h,)
        bound = np.abs(query).sum() * np.abs(fp32.get(doc_id)).max() / 254
        difference = abs(int8_scores[(qid, doc_id)] - fp32_scores[(qid, doc_id)])
        assert difference <= bound * (1 + 1e-3) + 1e-5  # float32 scores of about 32: their rounding
        differences.append(difference)
    assert max(differences) > 0
    report("mva-de", built, differences, max(fp32_scores.values()) - min(fp32_scores.values()), capsys)
