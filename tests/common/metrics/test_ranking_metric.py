"""`RankingMetrics`: batches in one process, and Lightning DDP on 2 CPU processes, give the same values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from common.data.formats import read_qrels, read_run, write_run
from common.metrics import RankingMetrics, evaluate_run

REPO = Path(__file__).resolve().parents[3]
MEASURES = ["ndcg_cut_10", "map", "mrr@10", "recall_100", "P_10", "gdeval_ndcg@10", "gdeval_err@20", "ncg@100"]
QRELS = "trec_dl/qrels/qrels.dl19-passage.txt"
RUN = "trec_dl/runs/rank_llm_data_top100/BM25.trec_results_dl19_top100.txt"


def float32_run(run):
    """Scores as a float32 model emits them: the reference must see the same numbers."""
    return {qid: {doc: float(np.float32(score)) for doc, score in docs.items()} for qid, docs in run.items()}


def test_updates_in_batches_equal_evaluate_run(shared_data):
    qrels, run = read_qrels(shared_data / QRELS), read_run(shared_data / RUN)
    triples = [(qid, doc, score) for qid, docs in run.items() for doc, score in docs.items()]
    metric = RankingMetrics(qrels, MEASURES, relevance_level=2)
    for start in range(0, len(triples), 97):
        qids, docs, scores = zip(*triples[start : start + 97], strict=True)
        metric.update(list(qids), list(docs), torch.tensor(scores, dtype=torch.float32))
    values = {name: value.item() for name, value in metric.compute().items()}
    assert values == evaluate_run(qrels, float32_run(run), MEASURES, relevance_level=2)
    assert values["ndcg_cut_10"] == pytest.approx(0.5058, abs=5e-5)  # published, Anserini regressions


def test_repeated_pairs_count_once_and_reset_clears():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    metric = RankingMetrics(qrels, ["recip_rank", "num_ret"])
    metric.update(["q1", "q1", "q2"], ["a", "x", "b"], [0.5, 0.9, 0.1])
    metric.update(["q1"], ["x"], torch.tensor([0.9]))  # a DistributedSampler pad repeats a sample
    values = metric.compute()
    assert values["recip_rank"].item() == 0.75 and values["num_ret"].item() == 3
    metric.reset()
    with pytest.raises(ValueError, match="before any update"), pytest.warns(UserWarning, match="before the ``update``"):
        metric.compute()


def test_non_ascii_ids_round_trip():
    metric = RankingMetrics({"qü-1": {"dœc": 1}}, ["recip_rank"])
    metric.update(["qü-1", "qü-1"], ["dœc", ""], [1.0, 2.0])
    assert metric.compute()["recip_rank"].item() == 0.5


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown measure"):
        RankingMetrics({"q": {"d": 1}}, ["nope"])
    with pytest.raises(ValueError, match="2 qids, 1 docids"):
        RankingMetrics({"q": {"d": 1}}).update(["q", "q"], ["d"], [1.0, 2.0])


DDP_SCRIPT = textwrap.dedent(
    """
    import json
    import sys
    from pathlib import Path

    import lightning as L
    import torch
    from torch.utils.data import DataLoader

    from common.data.formats import read_qrels, read_run
    from common.metrics import RankingMetrics

    QRELS, RUN, OUT, MEASURES = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4].split(",")


    class Scorer(L.LightningModule):
        def __init__(self, qrels):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.ones(()))
            self.metric = RankingMetrics(qrels, MEASURES, relevance_level=2)
            self.seen = 0

        def validation_step(self, batch, batch_idx):
            qids, docids, scores = batch
            self.seen += len(qids)
            self.metric.update(qids, docids, scores * self.scale)

        def on_validation_epoch_end(self):
            values = {name: value.item() for name, value in self.metric.compute().items()}
            record = {"world_size": self.trainer.world_size, "seen": self.seen, "values": values}
            (OUT / f"rank{self.global_rank}.json").write_text(json.dumps(record))
            self.metric.reset()


    if __name__ == "__main__":
        run = read_run(RUN)
        triples = [(q, d, torch.tensor(s, dtype=torch.float32)) for q, docs in run.items() for d, s in docs.items()]
        trainer = L.Trainer(
            accelerator="cpu", devices=2, strategy="ddp", logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, default_root_dir=OUT,
        )
        trainer.validate(Scorer(read_qrels(QRELS)), DataLoader(triples, batch_size=50))
    """
)


def test_lightning_ddp_on_two_cpu_processes_matches_one_process(shared_data, tmp_path):
    """4,299 triples (the BM25 run minus one document) over 2 ranks: each rank sees half, padded by
    one repeated sample; the synchronised compute on both ranks equals the single-process value."""
    run = read_run(shared_data / RUN)
    last_qid = sorted(run)[-1]
    run[last_qid].pop(sorted(run[last_qid])[0])
    write_run(tmp_path / "run.txt", run)
    script = tmp_path / "ddp_ranking_metrics.py"
    script.write_text(DDP_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, str(script), str(shared_data / QRELS), str(tmp_path / "run.txt"), str(tmp_path)]
    done = subprocess.run(
        [*command, ",".join(MEASURES)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]

    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert [r["seen"] for r in ranks] == [2150, 2150]  # 4,299 triples + 1 padding sample
    reference = evaluate_run(
        read_qrels(shared_data / QRELS), float32_run(read_run(tmp_path / "run.txt")), MEASURES, relevance_level=2
    )
    assert ranks[0]["values"] == ranks[1]["values"] == reference


def test_candidates_rank_the_unscored_below_as_the_written_run():
    """Re-ranking the top 2 of 4 (b above a): with the candidates, c and d follow in first-stage order and AP counts
    d at rank 4, (1/2 + 2/4) / 2 = 0.5, as run.trec's; without them d is missed, (1/2) / 2 = 0.25."""
    qrels = {"q": {"a": 1, "d": 1}}
    candidates = {"q": {"a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0}}
    full = RankingMetrics(qrels, ["map", "recall_100"], candidates=candidates)
    cut = RankingMetrics(qrels, ["map", "recall_100"])
    for metric in (full, cut):
        metric.update(["q", "q"], ["b", "a"], torch.tensor([0.9, 0.1]))  # re-ranked: b above a
    assert full.compute()["map"].item() == pytest.approx(0.5)
    assert full.compute()["recall_100"].item() == 1.0
    assert cut.compute()["map"].item() == pytest.approx(0.25) and cut.compute()["recall_100"].item() == 0.5
