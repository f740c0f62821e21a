"""The real-data commands, ``python -m qds.train --config qds/configs/trec-dl-passages[-minilm].yaml``: QDS-Transformer
trained on TREC DL 2020 passages and tested on TREC DL 2019 passages (rank_llm candidate files in ../shared/data).
The from-scratch config runs here (about a minute and a half on 2 CPU cores); measured with seed 0
(results/qds/runs/trec-dl-passages/metrics.json): NDCG@10 0.4341, MAP 0.2128 against BM25's 0.5058 and 0.2476.
The tolerance leaves room for other CPUs' floating-point differences."""

import json
from pathlib import Path

import pytest
import yaml

from qds import train

pytestmark = [pytest.mark.slow, pytest.mark.whole_run]  # the second tier, run alone (README, "Tests")

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "qds" / "configs"


@pytest.mark.parametrize("name", ["trec-dl-passages.yaml", "trec-dl-passages-minilm.yaml"])
def test_the_configs_name_the_shared_files_relative_to_the_repository(name):
    data = yaml.safe_load((CONFIGS / name).read_text())["data"]
    paths = [data[split][key] for split in ("train", "test") for key in ("rank_llm_path", "qrels_path")]
    assert all(p.startswith("../shared/data/trec_dl/") for p in paths)
    assert "2020" in data["train"]["name"] and "2019" in data["test"]["name"] and data["dev"] is None
    assert (data["relevance_level"], data["missing_documents"], data["depth"]) == (2, "skip", 20)


def test_trained_on_2020_tested_on_2019(shared_data, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the config's paths are relative to the repository
    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "cache"))  # the BPE is learnt here, not reused
    with pytest.warns(UserWarning, match=r"data.train \(trec-dl-2020-passages\): 1,053 of 1,666 relevant judged "
                                         r"documents \(label >= 2\) have no text in its collection"):
        metrics = train.main(["--config", str(CONFIGS / "trec-dl-passages.yaml"), "--output_dir",
                              str(tmp_path / "run")])
    bm25, qds = metrics["bm25"], metrics["qds"]
    assert [round(bm25[m], 4) for m in ("ndcg_cut_10", "map", "mrr@10")] == [0.5058, 0.2476, 0.7024]
    assert qds["ndcg_cut_10"] == pytest.approx(0.4341, abs=0.02)
    assert qds["map"] == pytest.approx(0.2128, abs=0.02)
    assert json.loads((tmp_path / "run" / "metrics.json").read_text()) == metrics
