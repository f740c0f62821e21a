"""What tests/earl/test_portable.py and tests/mva/test_portable.py check alike of a BERT-family ranker loaded by
`common.api.load`: the pairs and scores an evaluate command wrote, a checkpoint saved as a trainer saves it (its
`common.portable` entry made by the ranker's own ``on_save_checkpoint``), scores in a fresh process without
Lightning, and the cache of tokenised passages keyed by content."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import lightning as L
import numpy as np
import torch

from common.data.formats import Document, read_run
from common.data.specs import source_from_spec

#: Scores agree within this, relative and absolute (the contract's 1e-6).
TOLERANCE = 1e-6


def save_as_trainer(ranker, data: dict, path: Path) -> Path:
    """`ranker`'s checkpoint as a trainer writes it, as far as loading reads it: weights, hyper-parameters, the
    data module's `data` and what ``on_save_checkpoint`` adds (the portable entry among them)."""
    state = {"state_dict": ranker.state_dict(), "hyper_parameters": dict(ranker.hparams),
             "datamodule_hyper_parameters": data, "pytorch-lightning_version": L.__version__}
    ranker.on_save_checkpoint(state)
    torch.save(state, path)
    return path


def spread_weights(ranker, seed: int):
    """`ranker` with every matrix redrawn with a large spread (its scores then differ from pair to pair)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for parameter in ranker.parameters():
            if parameter.ndim > 1:
                parameter.normal_(0, 0.3)
    return ranker


def run_scores(folder: Path) -> dict[tuple[str, str], float]:
    """Every (qid, docid) score of ``run.trec`` in `folder` (written with repr: every digit of the float)."""
    return {(qid, doc_id): score for qid, scores in read_run(folder / "run.trec").items()
            for doc_id, score in scores.items()}


def pair_texts(task: str, pairs: list[tuple[str, str]]) -> tuple[list[str], list[Document]]:
    """The query texts and documents of `pairs` of `task`."""
    source = source_from_spec(task)
    topics, documents = source.topics(), source.documents()
    return [topics[qid] for qid, _ in pairs], documents.get_many([doc_id for _, doc_id in pairs])


def assert_close(got, expected) -> None:
    got, expected = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=TOLERANCE, atol=TOLERANCE)
    assert expected.max() - expected.min() > 1e-3  # scores that differ: agreement is not that of constants


def scores_in_fresh_process(*jobs: tuple[Path, Path | None, list[str], list]) -> list[list[float]]:
    """Each job's ``common.api.load(folder, store=store).score_pairs(queries, documents)`` (`Document` s, or doc ids
    where scoring from a store), in one new Python process, which must not import Lightning; their scores."""
    code = (
        "import json, sys\n"
        "from common.api import load\n"
        "from common.data.formats import Document\n"
        "out = []\n"
        "for folder, store, queries, documents in json.loads(sys.stdin.read()):\n"
        "    documents = [d if isinstance(d, str) else Document(*d) for d in documents]\n"
        "    out.append(load(folder, store=store).score_pairs(queries, documents).tolist())\n"
        "gone = [m for m in ('lightning', 'lightning_fabric', 'torchmetrics') if m in sys.modules]\n"
        "assert not gone, gone\n"
        "print(json.dumps(out))\n"
    )
    payload = json.dumps([[str(folder), None if store is None else str(store), queries,
                           [d if isinstance(d, str) else [d.doc_id, d.text, d.title] for d in documents]]
                          for folder, store, queries, documents in jobs])
    result = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def assert_cache_keyed_by_content(load_ranker) -> None:
    """Two documents under one id, and bare texts (id ""), each score as a ranker that never saw the other:
    `load_ranker()` gives a fresh ranker."""
    query, first, second = "what do fleas eat", "fleas feed on the blood of mammals", "a flea market sells old things"
    ranker = load_ranker()
    seen = ranker.score(query, [Document("d1", first)])
    again = ranker.score(query, [Document("d1", second)])  # the same id, another text
    bare = ranker.score(query, [first, second])  # both of id ""
    fresh = load_ranker().score(query, [Document("d1", second)])
    np.testing.assert_allclose(again, fresh, rtol=TOLERANCE, atol=TOLERANCE)
    np.testing.assert_allclose(bare, [seen[0], fresh[0]], rtol=TOLERANCE, atol=TOLERANCE)
    assert abs(float(seen[0]) - float(fresh[0])) > 1e-4  # the two texts score apart


def assert_tested_checkpoint_scores_its_run(out: Path, data_module, package: str) -> None:
    """The best-on-dev checkpoint a training command tested in `out` carries its `common.portable` entry (of
    `package`, written by the ranker's ``on_save_checkpoint`` in Lightning's own save), and `common.api.load` of it
    scores the pairs its test pass re-ranked as ``out/run.trec`` holds them; `data_module`: the package's class."""
    from common.api import load
    from common.portable import KEY

    (best,) = (out / "checkpoints").glob("best-*.ckpt")
    state = torch.load(best, weights_only=True, map_location="cpu")
    assert state[KEY]["package"] == package
    data = data_module(**{**state["datamodule_hyper_parameters"], "train": None, "dev": None})
    pairs = data.eval_pairs("test")
    run = run_scores(out)
    queries, documents = pair_texts(state["datamodule_hyper_parameters"]["test"], pairs)
    assert_close(load(best).score_pairs(queries, documents), [run[p] for p in pairs])
