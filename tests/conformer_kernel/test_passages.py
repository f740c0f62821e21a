"""The real-data command, ``python -m conformer_kernel.train --config conformer_kernel/configs/trec-dl-passages.yaml``:
NDRM3 trained on TREC DL 2020 passages and tested on TREC DL 2019 passages (rank_llm candidate files in
../shared/data), about a minute on 2 CPU cores. Measured with seed 0
(results/conformer_kernel/runs/trec-dl-passages/metrics.json): NDCG@10 0.3970, AP 0.1871, RR 0.4418 against BM25's
0.5058, 0.2476, 0.7036; the tolerance leaves room for other CPUs' floating-point differences."""

import json
from pathlib import Path

import pytest
import yaml

from conformer_kernel import train

pytestmark = [pytest.mark.slow, pytest.mark.whole_run]  # the second tier, run alone (README, "Tests")

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "conformer_kernel" / "configs" / "trec-dl-passages.yaml"


def test_the_config_names_the_shared_files_relative_to_the_repository():
    data = yaml.safe_load(CONFIG.read_text())["data"]
    paths = [data[split][key] for split in ("train", "test") for key in ("rank_llm_path", "qrels_path")]
    paths += [c["rank_llm_path"] for c in data["collections"]]
    assert all(p.startswith("../shared/data/trec_dl/") for p in paths)
    assert "2020" in data["train"]["name"] and "2019" in data["test"]["name"] and data["dev"] is None
    assert data["collections"][0]["rank_llm_path"] == data["test"]["rank_llm_path"]  # both years' passages


def test_trained_on_2020_tested_on_2019(shared_data, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the config's paths are relative to the repository
    metrics = train.main(["--config", str(CONFIG), "--output_dir", str(tmp_path / "run")])
    bm25, ndrm3 = metrics["bm25"], metrics["ndrm3-rerank"]
    assert [round(bm25[m], 4) for m in ("ndcg_cut_10", "map", "recip_rank")] == [0.5058, 0.2476, 0.7036]
    assert ndrm3["ndcg_cut_10"] == pytest.approx(0.3970, abs=0.01)
    assert ndrm3["map"] == pytest.approx(0.1871, abs=0.01)
    assert ndrm3["ncg@100"] == bm25["ncg@100"]  # the same candidates, the top 20 re-ordered
    task = json.loads((tmp_path / "run" / "task.json").read_text())
    assert task["dataset"] is None and task["test"]["name"] == "trec-dl-2019-passages"
