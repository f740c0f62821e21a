"""The impact index of `conformer_kernel.index`: s_td precomputed for every (term, document), and retrieval with it.

Query term independence (Mitra et al. 2021, Sec. 2-3): every NDRM scores a query as the sum of
its terms' scores, s_qd = Σ_{t∈q} s_td, and s_td depends on the term and the document only. So
s_td can be computed offline for a set of terms over the whole collection and stored as an
impact index, a (terms x documents) `scipy.sparse.csr_matrix`, each row a term's postings; full
retrieval multiplies a query's term counts by it and keeps the top 100 (`ImpactIndex.search`),
the paper's single-stage "fullrank" setting. Which terms: as in the official code, every term of
the queries to be run (the first 20 analysed terms of each topic), optionally the whole model
vocabulary. NDRM1 and NDRM3 score every (term, document) pair, so their postings are dense
(T x N x 4 bytes); NDRM2's are zero where the term does not occur, and zeros are not stored.

Computation: Lightning ``predict`` over shards of ``shard_size`` documents (a shard per
prediction step; with several devices the shards are split among them). Global rank zero alone
checks the folder and writes its plan, before the shards are computed; each shard's scores
are written atomically to ``shards/`` as soon as they exist, so an interrupted run resumes where
it stopped (``resume``); when every shard exists the rank-zero process merges them into
``index.npz`` (+ ``terms.txt``, ``doc_ids.txt``, ``meta.json``) and removes the shards.

This module imports torch and Lightning; the command line, ``python -m conformer_kernel.index``, is
`conformer_kernel.index`, which answers ``--help`` and bad options without them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import lightning as L
import numpy as np
import scipy.sparse as sp
import torch
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import Dataset
from tqdm.auto import tqdm

from common.data.formats import Run, Topics
from common.io import atomic_write
from conformer_kernel.features import Featurizer
from conformer_kernel.index_folder import PLAN, output_problem
from conformer_kernel.orcas import orcas_from_spec
from conformer_kernel.ranker import ConformerKernelRanker


class UnfinishedIndexError(ValueError):
    """An unfinished index to resume that was started for other terms, documents or model."""


class MissingTermsError(ValueError):
    """Query terms that an index was not built for."""


class ImpactIndex:
    """s_td postings: ``matrix[term, doc]`` (float32 CSR) with its `terms` and `doc_ids`."""

    def __init__(self, terms: Sequence[str], doc_ids: Sequence[str], matrix: sp.csr_matrix, meta: dict | None = None):
        if matrix.shape != (len(terms), len(doc_ids)):
            raise ValueError(f"matrix {matrix.shape} does not match {len(terms)} terms x {len(doc_ids)} documents")
        self.terms, self.doc_ids, self.matrix = list(terms), list(doc_ids), matrix.tocsr()
        self.meta = meta or {}
        self.rows = {t: i for i, t in enumerate(self.terms)}

    def check_terms(self, queries: Iterable[Sequence[str]]) -> None:
        """Raise `MissingTermsError` naming the terms of `queries` (each a query's terms) this index lacks."""
        missing = sorted({t for terms in queries for t in terms if t not in self.rows})
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            some = f"{len(missing)} query term is" if len(missing) == 1 else f"{len(missing)} query terms are"
            raise MissingTermsError(f"{some} not in the index ({shown}); build it with the "
                                    "topics that contain them (conformer_kernel.index --topics)")

    def score_all(self, query_terms: Sequence[str]) -> np.ndarray:
        """s_qd = Σ_{t∈q} s_td for every document (a repeated query term counts each time), float64."""
        self.check_terms([query_terms])
        counts = Counter(query_terms)
        postings = self.matrix[[self.rows[t] for t in counts]].astype(np.float64)  # (terms of q, N)
        return np.asarray(postings.T @ np.array(list(counts.values()), dtype=np.float64)).ravel()

    def search(self, query_terms: Sequence[str], k: int = 100) -> dict[str, float]:
        """The top-`k` documents for `query_terms`; ties in trec_eval's (and the official code's) order:
        the larger document id first."""
        scores = self.score_all(query_terms)
        if k <= 0:
            return {}
        if k < len(scores):
            kth = np.partition(scores, len(scores) - k)[len(scores) - k]
            top = np.flatnonzero(scores >= kth)
        else:
            top = np.arange(len(scores))
        top = sorted(top, key=lambda i: (scores[i], self.doc_ids[i]), reverse=True)[:k]
        return {self.doc_ids[i]: float(scores[i]) for i in top}

    def retrieve(self, topics: Topics, featurizer: Featurizer, k: int = 100) -> Run:
        """A run of every topic's top-`k` documents (full retrieval, the paper's "fullrank")."""
        return {qid: self.search(featurizer.query_terms(text), k) for qid, text in tqdm(
            sorted(topics.items()), desc="retrieving", unit=" queries")}

    # -- storage --

    def save(self, folder: str | os.PathLike, overwrite: bool = False) -> None:
        folder = Path(folder)
        with atomic_write(folder / "index.npz", "wb", overwrite=overwrite) as f:
            sp.save_npz(f, self.matrix, compressed=False)
        _write_lines(folder / "terms.txt", self.terms, overwrite)
        _write_lines(folder / "doc_ids.txt", self.doc_ids, overwrite)
        with atomic_write(folder / "meta.json", overwrite=overwrite) as f:  # last: marks a complete index
            json.dump(self.meta, f, indent=2, sort_keys=True)
            f.write("\n")

    @classmethod
    def load(cls, folder: str | os.PathLike) -> ImpactIndex:
        folder = Path(folder)
        if not (folder / "meta.json").is_file():
            raise FileNotFoundError(f"{folder}: no complete index (meta.json is written last)")
        return cls(_read_lines(folder / "terms.txt"), _read_lines(folder / "doc_ids.txt"),
                   sp.load_npz(folder / "index.npz"), json.loads((folder / "meta.json").read_text()))


def index_terms(topic_sets: Iterable[Topics], featurizer: Featurizer, vocabulary: bool = False) -> list[str]:
    """The sorted terms to index: each query's scored terms (first 20 analysed), plus the vocabulary if asked."""
    terms = {t for topics in topic_sets for text in topics.values() for t in featurizer.query_terms(text)}
    if vocabulary:
        terms.update(featurizer.resources.terms[3:])  # not UNK, <S>, </S>
    return sorted(terms)


# --- computing the postings with Lightning predict ------------------------------------------------------


class DocumentShards(Dataset):
    """Item i: (i, the analysed term lists of shard i's documents); only the shards still to compute."""

    def __init__(self, doc_ids: list[str], documents, featurizer: Featurizer, shard_size: int, todo: list[int]):
        self.doc_ids, self.documents, self.featurizer = doc_ids, documents, featurizer
        self.shard_size, self.todo = shard_size, todo

    def __len__(self) -> int:
        return len(self.todo)

    def __getitem__(self, index: int) -> tuple[int, list[list[str]]]:
        shard = self.todo[index]
        ids = self.doc_ids[shard * self.shard_size : (shard + 1) * self.shard_size]
        return shard, [self.featurizer.document_terms(doc) for doc in self.documents.get_many(ids)]

    @staticmethod
    def collate(items):
        (item,) = items  # one shard per prediction step
        return item


class TermDocumentScorer(L.LightningModule):
    """Wraps a trained `ConformerKernelRanker`: predict_step turns a shard's documents into (docs, terms) s_td."""

    def __init__(self, model: ConformerKernelRanker, featurizer: Featurizer, terms: list[str], batch_size: int,
                 term_chunk: int):
        super().__init__()
        self.model, self.featurizer, self.terms = model, featurizer, terms
        self.batch_size, self.term_chunk = batch_size, term_chunk

    def predict_step(self, batch, batch_idx: int) -> tuple[int, np.ndarray]:
        shard, docs = batch
        # Batches of the shard's documents in order of length: a batch is padded to its longest document.
        order = sorted(range(len(docs)), key=lambda i: len(docs[i]))
        scores = np.empty((len(docs), len(self.terms)), dtype=np.float32)
        for start in range(0, len(docs), self.batch_size):
            part = order[start : start + self.batch_size]
            f = self.featurizer.batch([self.terms], [[docs[i] for i in part]]).to(self.device)  # one pseudo-query
            s_td = self.model.model.index_scores(f, self.term_chunk)[:, : len(self.terms)]  # not the padding to 20
            scores[part] = s_td.float().cpu().numpy()
        return shard, scores  # (docs, terms)


class ShardWriter(BasePredictionWriter):
    """Writes each shard's scores to ``shards/<shard>.npy`` atomically, as soon as they exist."""

    def __init__(self, folder: Path):
        super().__init__(write_interval="batch")
        self.folder = folder

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx=0):
        shard, scores = prediction
        path = shard_path(self.folder, shard)
        if not path.exists():  # a padded DistributedSampler may hand the same shard to two ranks
            with atomic_write(path, "wb", overwrite=True) as f:
                np.save(f, scores.astype(np.float32))


def shard_path(folder: Path, shard: int) -> Path:
    return folder / "shards" / f"{shard:07d}.npy"


def build_index(model: ConformerKernelRanker, featurizer: Featurizer, documents, doc_ids: list[str], terms: list[str],
                folder: str | os.PathLike, *, shard_size: int = 256, batch_size: int = 8, term_chunk: int = 64,
                resume: bool = False, trainer_options: dict | None = None) -> ImpactIndex | None:
    """Compute (or finish computing, with `resume`) the index of `documents` for `terms` into `folder`.

    Returns the index on global rank zero (None on the other ranks).
    """
    folder = Path(folder)
    meta = {"terms": len(terms), "documents": len(doc_ids), "shard_size": shard_size,
            "model": model.hparams.model, "encoder": model.hparams.encoder,
            "terms_sha": _digest(terms), "doc_ids_sha": _digest(doc_ids)}
    plan = folder / PLAN
    shards = -(-len(doc_ids) // shard_size)
    # Every process lists the shards to compute before any of them is written: a shard is written only once all
    # processes have joined the prediction.
    todo = [s for s in range(shards) if not shard_path(folder, s).exists()]
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_model_summary=False,
                        callbacks=[ShardWriter(folder)], default_root_dir=folder, **(trainer_options or {}))
    if trainer.is_global_zero:  # the folder is rank zero's: the others would find the plan it has just written
        problem = output_problem(folder, resume)
        if problem:
            raise FileExistsError(problem)
        if plan.exists() and json.loads(plan.read_text()) != meta:
            raise UnfinishedIndexError(f"{folder}: the unfinished index was started with other terms, documents or "
                                       "model; give the same ones, or a new folder")
        if not plan.exists():
            with atomic_write(plan) as f:
                json.dump(meta, f, indent=2, sort_keys=True)
    if todo:
        dataset = DocumentShards(doc_ids, documents, featurizer, shard_size, todo)
        loader = torch.utils.data.DataLoader(dataset, batch_size=1, collate_fn=DocumentShards.collate)
        scorer = TermDocumentScorer(model, featurizer, terms, batch_size, term_chunk)
        trainer.predict(scorer, loader, return_predictions=False)
    trainer.strategy.barrier()
    if not trainer.is_global_zero:
        return None
    blocks = [sp.csr_matrix(np.load(shard_path(folder, s)).T) for s in tqdm(range(shards), desc="merging shards")]
    index = ImpactIndex(terms, doc_ids, sp.hstack(blocks, format="csr", dtype=np.float32), meta)
    index.save(folder)
    shutil.rmtree(folder / "shards")
    return index


# --- full retrieval with a trained model ----------------------------------------------------------------


def evaluated_topics(data) -> Topics:
    """The evaluated test queries of `data` (a `conformer_kernel.data.ConformerKernelDataModule`) and their text."""
    topics = data.source("test").topics()
    return {qid: topics[qid] for qid in data.eval_queries("test")}


def full_ranking(model: ConformerKernelRanker, featurizer: Featurizer, data, folder: str | os.PathLike,
                 trainer_options: dict | None = None, index: ImpactIndex | None = None, *,
                 resume: bool = False) -> Run | None:
    """The top 100 of every evaluated test query of `data` (a `ConformerKernelDataModule`) by full retrieval: from `index`,
    or from one built into `folder` for those queries' terms over the test collection.

    `resume`: `folder` may hold what a killed run left there: its finished index is read, an unfinished one
    finished, and one killed before its plan was written started again.

    Where `trainer_options` name several processes, each computes its part of the index's shards and global rank
    zero returns the run; the others return None."""
    topics = evaluated_topics(data)
    folder = Path(folder)
    if index is None and resume and (folder / "meta.json").is_file():
        index = ImpactIndex.load(folder)
    elif index is None and resume and not (folder / PLAN).is_file():
        shutil.rmtree(folder, ignore_errors=True)
    if index is None:
        documents = data.source("test").documents()
        doc_ids, terms = list(documents), index_terms([topics], featurizer)
        rank_zero_info(f"fullrank: indexing {len(terms)} query terms x {len(doc_ids)} documents into {folder}")
        index = build_index(model, featurizer, documents, doc_ids, terms, folder, trainer_options=trainer_options,
                            resume=resume)
        if index is None:  # not global rank zero, which merged the shards
            return None
    return index.retrieve(topics, featurizer)


def checkpoint_data_settings(checkpoint: str) -> dict:
    """The data module's settings a checkpoint was trained with (empty where it holds none)."""
    return torch.load(checkpoint, map_location="cpu", weights_only=True).get("datamodule_hyper_parameters", {})


def load_for_inference(checkpoint: str, orcas=None, data: dict | None = None) -> tuple[ConformerKernelRanker, Featurizer]:
    """A trained model in eval mode and a featuriser with its vocabulary, IDFs, text limits and ORCAS field (`orcas`,
    else the one of `data`, the checkpoint's `checkpoint_data_settings`, read here where not given).

    The ORCAS field is read first: a missing or malformed file of it is found before the model is built."""
    data = checkpoint_data_settings(checkpoint) if data is None else data
    field = orcas_from_spec(orcas if orcas else data.get("orcas"))
    model = ConformerKernelRanker.load_from_checkpoint(checkpoint, map_location="cpu").eval()
    featurizer = Featurizer(model.resources, data.get("max_query_terms", 20), data.get("max_doc_terms", 4000),
                            data.get("max_orcas_terms", 2000), field)
    return model, featurizer


def _write_lines(path: Path, lines: Iterable[str], overwrite: bool) -> None:
    with atomic_write(path, overwrite=overwrite) as f:
        f.writelines(f"{line}\n" for line in lines)


def _read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _digest(items: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(items).encode()).hexdigest()[:16]

