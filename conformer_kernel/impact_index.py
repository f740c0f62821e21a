"""The impact index of `conformer_kernel.index` (Mitra et al. 2021, Sec. 2-3): s_td precomputed for every (term,
document) under query term independence, s_qd = Σ_{t∈q} s_td, and full retrieval with it (the paper's "fullrank").

- Terms: as in the official code, every term of the queries to be run (first 20 analysed), optionally the vocabulary.
- Layout: a (terms x documents) float32 CSR matrix as raw ``data.npy``, ``indices.npy``, ``indptr.npy`` (the integer
  type ``scipy.sparse.hstack`` gives the shards' blocks), ``terms.txt``, ``doc_ids.txt`` and ``meta.json``, written
  last; `ImpactIndex.load` memory-maps the arrays. NDRM2's zeros are not stored; NDRM1's and NDRM3's rows are dense.
- Build: Lightning ``predict``, a shard of documents per step, each written atomically to ``shards/`` (``resume``),
  then merged out of core with the memory of one shard (`merge_shards`; docs/conformer_kernel.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import numpy as np
import scipy.sparse as sp
import torch
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.utilities import rank_zero_info
from tqdm.auto import tqdm

from common.data.formats import Run, Topics
from common.io import atomic_write, renamed_on_success
from common.metrics.ordering import exact_ranking
from common.stores.writer import HostCopies, ShardDataset, loader_options
from conformer_kernel import NUM_WORKERS
from conformer_kernel.features import Featurizer
from conformer_kernel.index_folder import ARRAY_FILES, PLAN, output_problem
from conformer_kernel.model import Features
from conformer_kernel.orcas import orcas_from_spec
from conformer_kernel.portable import INPUTS
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
                                    "topics that contain them (conformer_kernel.index --query_tasks)")

    def score_all(self, query_terms: Sequence[str]) -> np.ndarray:
        """s_qd = Σ_{t∈q} s_td for every document (a repeated query term counts each time), float64."""
        self.check_terms([query_terms])
        counts = Counter(query_terms)
        postings = self.matrix[[self.rows[t] for t in counts]].astype(np.float64)  # (terms of q, N)
        return np.asarray(postings.T @ np.array(list(counts.values()), dtype=np.float64)).ravel()

    def search(self, query_terms: Sequence[str], k: int = 100) -> dict[str, float]:
        """The top-`k` documents for `query_terms`, ties as trec_eval (and the official code): larger id first."""
        scores = self.score_all(query_terms)
        if k <= 0:
            return {}
        top = range(len(scores))
        if k < len(scores):  # the documents scoring at least the k-th largest score
            top = np.flatnonzero(scores >= np.partition(scores, len(scores) - k)[len(scores) - k])
        found = {self.doc_ids[i]: float(scores[i]) for i in top}
        return {doc_id: found[doc_id] for doc_id in exact_ranking(found)[:k]}

    def retrieve(self, topics: Topics, featurizer: Featurizer, k: int = 100) -> Run:
        """A run of every topic's top-`k` documents (full retrieval, the paper's "fullrank")."""
        return {qid: self.search(featurizer.query_terms(text), k) for qid, text in tqdm(
            sorted(topics.items()), desc="retrieving", unit=" queries")}

    @classmethod
    def load(cls, folder: str | os.PathLike) -> ImpactIndex:
        """The index in `folder`, its arrays memory-mapped (read-only), not read."""
        folder = Path(folder)
        if not (folder / "meta.json").is_file():
            raise FileNotFoundError(f"{folder}: no complete index (meta.json is written last)")
        terms, doc_ids = ((folder / name).read_text(encoding="utf-8").splitlines()
                          for name in ("terms.txt", "doc_ids.txt"))
        data, indices, indptr = (np.load(folder / name, mmap_mode="r") for name in ARRAY_FILES)
        matrix = sp.csr_matrix((len(terms), len(doc_ids)), dtype=data.dtype)  # given these very arrays: memory maps
        matrix.data, matrix.indices, matrix.indptr = data, indices, indptr  # stay maps (scipy's constructor reads them)
        matrix.check_format(full_check=False)  # lengths and shapes: reads indptr's ends only
        return cls(terms, doc_ids, matrix, json.loads((folder / "meta.json").read_text()))


def index_terms(topic_sets: Iterable[Topics], featurizer: Featurizer, vocabulary: bool = False) -> list[str]:
    """The sorted terms to index: each query's scored terms (first 20 analysed), plus the vocabulary if asked."""
    terms = {t for topics in topic_sets for text in topics.values() for t in featurizer.query_terms(text)}
    if vocabulary:
        terms.update(featurizer.resources.terms[3:])  # not UNK, <S>, </S>
    return sorted(terms)


@dataclass(frozen=True)
class IndexEstimate:
    """The estimated bytes of an index and of the shards its build writes first (`sample`: 0 for a dense one)."""

    terms: int
    documents: int
    postings: int
    sample: int
    index_bytes: int
    shard_bytes: int

    @property
    def peak_bytes(self) -> int:
        return self.index_bytes + self.shard_bytes

    def describe(self) -> str:
        """``2.33 MiB (101 terms x 3,000 documents, 303,000 postings: dense); peak during the build: ...``."""
        from common.stores.size import format_bytes

        how = ("dense" if not self.sample else
               f"{self.postings / max(self.documents, 1):,.1f} a document, from a sample of {self.sample:,}")
        return (f"{format_bytes(self.index_bytes)} ({self.terms:,} terms x {self.documents:,} documents, "
                f"{self.postings:,} postings: {how}); peak during the build: {format_bytes(self.peak_bytes)} (its "
                f"shards, {format_bytes(self.shard_bytes)}, beside the merged index)")


def estimate_index(model: ConformerKernelRanker, featurizer: Featurizer, documents, doc_ids: Sequence[str],
                   terms: Sequence[str], shard_size: int, sample: int | None = None) -> IndexEstimate:
    """The estimated size of the index `build_index` writes (NDRM2's postings counted in a sample of documents)."""
    from common.stores.size import SAMPLE, npy_bytes, sample_positions

    n, t = len(doc_ids), len(terms)
    if model.hparams.model != "ndrm2":  # NDRM1's and NDRM3's rows are dense
        postings, drawn = n * t, 0
    else:  # NDRM2's s_td is nonzero only for the document's terms with an IDF
        scored = {term for term in terms if featurizer.resources.idf.get(term, 0.0) != 0}
        positions = sample_positions(n, SAMPLE if sample is None else sample)
        counts = [len(scored.intersection(featurizer.document_terms(doc)))
                  for doc in documents.get_many([doc_ids[i] for i in positions.tolist()])]
        drawn = len(counts)
        postings = round(n * sum(counts) / drawn) if drawn else 0
    index_dtype = sp.get_index_dtype(maxval=max(postings, n, t))
    meta = {"terms": t, "documents": n, "shard_size": shard_size, "model": model.hparams.model,
            "encoder": model.hparams.encoder, "terms_sha": "0" * 16, "doc_ids_sha": "0" * 16}
    meta_bytes = len(json.dumps(meta, indent=2, sort_keys=True).encode())
    listing = sum(len(item.encode("utf-8")) + 1 for item in (*terms, *doc_ids)) + meta_bytes + 1
    index_bytes = (npy_bytes(np.float32, (postings,)) + npy_bytes(index_dtype, (postings,))
                   + npy_bytes(index_dtype, (t + 1,)) + listing)
    full, last = divmod(n, shard_size)
    shard_bytes = full * npy_bytes(np.float32, (shard_size, t)) + (last and npy_bytes(np.float32, (last, t)))
    shard_bytes += meta_bytes
    return IndexEstimate(t, n, postings, drawn, index_bytes, shard_bytes)


class DocumentShards(ShardDataset):
    """Item i: shard ``todo[i]``; `collate` makes its ``(shard, documents, [(positions, Features' tensors)])``."""

    def __init__(self, doc_ids: list[str], documents, featurizer: Featurizer, terms: list[str], shard_size: int,
                 batch_size: int, todo: list[int]):
        super().__init__(todo)
        self.doc_ids, self.documents, self.featurizer, self.terms = doc_ids, documents, featurizer, terms
        self.shard_size, self.batch_size = shard_size, batch_size

    def collate(self, items: list[int]) -> tuple[int, int, list[tuple[torch.Tensor, tuple[torch.Tensor, ...]]]]:
        shard = super().collate(items)  # one shard per prediction step
        ids = self.doc_ids[shard * self.shard_size : (shard + 1) * self.shard_size]
        docs = [self.featurizer.document_terms(doc) for doc in self.documents.get_many(ids)]
        order = sorted(range(len(docs)), key=lambda i: len(docs[i]))
        batches = []
        for start in range(0, len(docs), self.batch_size):
            part = order[start : start + self.batch_size]
            f = self.featurizer.batch([self.terms], [[docs[i] for i in part]])  # one pseudo-query
            batches.append((torch.tensor(part), tuple(getattr(f, name) for name in Features.__dataclass_fields__)))
        return shard, len(docs), batches


class TermDocumentScorer(L.LightningModule):
    """predict_step: a shard's `DocumentShards` batches -> its (docs, terms) s_td."""

    def __init__(self, model: ConformerKernelRanker, terms: list[str], term_chunk: int):
        super().__init__()
        self.model, self.terms, self.term_chunk = model, terms, term_chunk

    def predict_step(self, batch, batch_idx: int) -> tuple[int, np.ndarray]:
        shard, documents, batches = batch
        copies, pending = HostCopies(self.device), []
        for part, fields in batches:
            f = Features(*(x.to(self.device, non_blocking=True) for x in fields))
            s_td = self.model.model.index_scores(f, self.term_chunk)[:, : len(self.terms)]  # not the padding to 20
            pending.append((part, copies.copy(s_td)))
        copies.wait()  # once a shard: every batch's scores are on the host
        scores = np.empty((documents, len(self.terms)), dtype=np.float32)
        for part, s_td in pending:
            scores[part.numpy()] = s_td.float().numpy()
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
                resume: bool = False, trainer_options: dict | None = None,
                num_workers: int = NUM_WORKERS) -> ImpactIndex | None:
    """Compute (or with `resume` finish) the index into `folder`: the index on global rank zero, else None."""
    folder = Path(folder)
    meta = {"terms": len(terms), "documents": len(doc_ids), "shard_size": shard_size,
            "model": model.hparams.model, "encoder": model.hparams.encoder,
            "terms_sha": _digest(terms), "doc_ids_sha": _digest(doc_ids)}
    plan = folder / PLAN
    shards = -(-len(doc_ids) // shard_size)
    # Listed before any process writes one (a shard is written once all have joined the prediction).
    todo = [s for s in range(shards) if not shard_path(folder, s).exists()]
    options = dict(trainer_options or {})  # its callbacks (a command's progress) beside the shards' writer
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_model_summary=False,
                        callbacks=[ShardWriter(folder), *options.pop("callbacks", [])], default_root_dir=folder,
                        **options)
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
        dataset = DocumentShards(doc_ids, documents, featurizer, terms, shard_size, batch_size, todo)
        loader = torch.utils.data.DataLoader(dataset, batch_size=1, collate_fn=dataset.collate,
                                             **loader_options(trainer, num_workers))
        trainer.predict(TermDocumentScorer(model, terms, term_chunk), loader, return_predictions=False)
    trainer.strategy.barrier()
    if not trainer.is_global_zero:
        return None
    merge_shards(folder, shards, len(terms), len(doc_ids))
    for name, lines in (("terms.txt", terms), ("doc_ids.txt", doc_ids)):  # replacing a killed merge's
        with atomic_write(folder / name, overwrite=True) as f:
            f.writelines(f"{line}\n" for line in lines)
    with atomic_write(folder / "meta.json", overwrite=True) as f:  # last: it marks a finished index
        json.dump(meta, f, indent=2, sort_keys=True)
        f.write("\n")
    shutil.rmtree(folder / "shards")
    return ImpactIndex.load(folder)


#: Elements of a shard (documents x terms) turned into postings at once: bounds the merge's buffers (~40 B each).
MERGE_CHUNK = 1 << 18


def merge_shards(folder: Path, shards: int, terms: int, documents: int) -> None:
    """Merge ``shards/`` of `folder` into the index's CSR arrays with the memory of one shard, in two passes."""
    paths = [shard_path(folder, s) for s in range(shards)]
    counts, seen = np.zeros(terms, dtype=np.int64), 0  # pass 1: (terms,) the nonzero scores of each term
    for path in tqdm(paths, desc="merging shards (1/2: counting)"):
        block = np.load(path)  # (documents of the shard, terms)
        counts += np.count_nonzero(block, axis=0)
        seen += len(block)
    if seen != documents:
        raise ValueError(f"the shards hold {seen} documents, not {documents}")
    indptr = np.concatenate([[0], np.cumsum(counts)])  # (terms + 1,) int64
    nnz = int(indptr[-1])
    # int64 exactly where sp.hstack(blocks, format="csr") chooses it (scipy 1.17)
    index_dtype = sp.get_index_dtype(maxval=max(nnz, documents, terms))
    data_path, indices_path, indptr_path = (folder / name for name in ARRAY_FILES)
    cursor, first = indptr[:-1].copy(), 0  # pass 2: each term's next posting; the shard's first document
    with _new_npy(data_path, np.float32, nnz) as data_tmp, _new_npy(indices_path, index_dtype, nnz) as indices_tmp:
        for path in tqdm(paths, desc="merging shards (2/2: writing)"):
            block = np.load(path)  # (documents of the shard, terms)
            step = max(1, MERGE_CHUNK // len(block))  # terms per chunk
            for lo in range(0, block.shape[1], step):
                _scatter(block[:, lo : lo + step], cursor[lo : lo + step], first, data_tmp, indices_tmp)
            first += len(block)
    with atomic_write(indptr_path, "wb", overwrite=True) as f:
        np.save(f, indptr.astype(index_dtype))


def _scatter(part: np.ndarray, cursor: np.ndarray, first: int, data_path: Path, indices_path: Path) -> None:
    """Copy the nonzeros of `part` (documents, k terms) to the files at `cursor` (k,), mapped for this chunk only."""
    rows = np.ascontiguousarray(part.T)  # (k, documents): term-major
    nonzero = rows != 0  # (k, documents) bool; NaN counts as nonzero, -0.0 not, as in scipy
    counts = np.count_nonzero(nonzero, axis=1)  # (k,)
    flat = np.flatnonzero(nonzero)  # (n,) positions in `rows`, term-major, documents ascending
    starts = np.cumsum(counts) - counts  # (k,) each term's first position in `flat`
    target = np.arange(len(flat)) + np.repeat(cursor - starts, counts)  # (n,) positions in the files
    data, indices = np.load(data_path, mmap_mode="r+"), np.load(indices_path, mmap_mode="r+")  # (nnz,) each
    data[target] = rows.ravel()[flat]
    indices[target] = flat % rows.shape[1] + first
    cursor += counts


@contextlib.contextmanager
def _new_npy(path: Path, dtype, length: int) -> Iterator[Path]:
    """A zero (length,) .npy file under a fixed temporary name beside `path`, renamed onto it on success."""
    with renamed_on_success(path.with_name(f".{path.name}.tmp"), path) as tmp:
        np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=(length,)).flush()  # the header; its size
        yield tmp


def evaluated_topics(data) -> Topics:
    """The evaluated test queries of `data` (a `conformer_kernel.data.ConformerKernelDataModule`) and their text."""
    topics = data.source("test").topics()
    return {qid: topics[qid] for qid in data.eval_queries("test")}


def full_ranking(model: ConformerKernelRanker, featurizer: Featurizer, data, folder: str | os.PathLike,
                 trainer_options: dict | None = None, index: ImpactIndex | None = None, *,
                 resume: bool = False, num_workers: int = NUM_WORKERS) -> Run | None:
    """The top 100 of each evaluated test query from `index` or one built into `folder`; None off rank zero."""
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
                            resume=resume, num_workers=num_workers)
        if index is None:  # not global rank zero, which merged the shards
            return None
    return index.retrieve(topics, featurizer)


def load_for_inference(checkpoint: str, orcas=None,
                       data: dict | None = None) -> tuple[ConformerKernelRanker, Featurizer]:
    """A trained model in eval mode and the featuriser of its vocabulary, limits and ORCAS field."""
    if data is None:
        data = torch.load(checkpoint, map_location="cpu", weights_only=True).get("datamodule_hyper_parameters", {})
    field = orcas_from_spec(orcas if orcas else data.get("orcas"))
    model = ConformerKernelRanker.load_from_checkpoint(checkpoint, map_location="cpu").eval()
    featurizer = Featurizer(model.resources, *(data.get(name, default) for name, default in INPUTS.items()), field)
    return model, featurizer


def _digest(items: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(items).encode()).hexdigest()[:16]

