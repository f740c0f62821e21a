"""Trained rankers in Python: `load` a checkpoint or an exported folder of any package, then score, re-rank, export.

    ranker = load("outputs/qds-train-.../checkpoints/best.ckpt")   # or an exported folder
    ranker.score("what do fleas eat", ["Fleas feed on blood ...", "A flea market ..."])   # array([...], float32)
    ranker.rerank(frame)          # columns qid, query, docno, text [, title] in; score and rank added

Scores are those of the package's ``evaluate`` for the same pairs (its ``<package>.portable`` inputs, `precision`
under autocast, float32 scores); ranks follow PyTerrier (0 first) with trec_eval's ties. EARL and MVA also score from
a store (``load(path, store=DIR)``). An exported folder (`Ranker.export`) loads without Lightning.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path

import numpy as np

from common.data.formats import Document
from common.portable import (KEY, Portable, PortableError, check_package, from_entry, materialized,
                             read_folder, write_folder)

PACKAGES = ("qds", "conformer_kernel", "earl", "mva")
#: The precisions a ranker scores in: float32, or autocast to bfloat16 or float16 with float32 scores.
PRECISIONS = ("32-true", "bf16-mixed", "16-mixed")
#: The columns `Ranker.rerank` reads (``title`` and ``url`` too where present; no ``text`` from a store).
COLUMNS = ("qid", "query", "docno", "text")


def load(path: str | Path, *, device: str = "cpu", precision: str = "32-true", batch_size: int = 32,
         store: str | Path | None = None, package: str | None = None) -> Ranker:
    """The ranker of `path`, a ``train`` checkpoint or an exported folder, on `device` in `precision`."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    path = Path(path)
    if path.is_dir():
        portable, weights, run_dir = read_folder(path), None, None
    elif path.is_file():
        portable, weights = _read_checkpoint(path)
        run_dir = path.parent.parent if path.parent.name == "checkpoints" else None
    else:
        raise PortableError(f"{path}: no such checkpoint or folder")
    if package is not None:
        check_package(portable, package, str(path))
    if portable.package not in PACKAGES:
        raise PortableError(f"{path} holds a ranker of {portable.package!r}, which is none of {', '.join(PACKAGES)}")
    module = importlib.import_module(f"{portable.package}.portable")
    scoring = module.build(portable.config, materialized(portable.files))
    if weights is None:
        from safetensors.torch import load_model

        load_model(scoring.model, str(path / "model.safetensors"), strict=True, device="cpu")
    else:
        scoring.model.load_state_dict(weights, strict=True)
    ranker = Ranker(portable, scoring, device=device, precision=precision, batch_size=batch_size, run_dir=run_dir)
    return ranker if store is None else ranker.use_store(store)


def _read_checkpoint(path: Path):
    """`Portable` and the model's weights of a Lightning checkpoint file of any package."""
    import pickle

    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError) as error:
        raise PortableError(f"{path} is not a checkpoint torch can read ({type(error).__name__})") from None
    if not isinstance(state, dict) or "state_dict" not in state:
        raise PortableError(f"{path} is not a checkpoint of a train command (no state_dict)")
    weights = {name.removeprefix("model."): tensor for name, tensor in state["state_dict"].items()
               if name.startswith("model.")}
    if KEY in state:
        return from_entry(state[KEY], str(path)), weights
    for package in PACKAGES:
        module = importlib.import_module(f"{package}.portable")
        if module.recognises(state):
            return from_entry(module.checkpoint_entry(state), str(path)), weights
    raise PortableError(f"{path} is a checkpoint of none of {', '.join(PACKAGES)}")


class Ranker:
    """A trained ranker of any package, scoring (query, document) pairs (module docstring). Made by `load`."""

    def __init__(self, portable: Portable, scoring, *, device: str, precision: str, batch_size: int,
                 run_dir: Path | None):
        import torch

        self.portable, self.scoring = portable, scoring
        self.package, self.config = portable.package, portable.config
        self.precision, self.batch_size, self.run_dir = precision, batch_size, run_dir
        self.device = torch.device(device)
        self.model = scoring.model.to(self.device).eval()
        self._store = None

    def __repr__(self) -> str:
        return f"Ranker({self.package}, device={self.device}, precision={self.precision})"

    def to(self, device: str) -> Ranker:
        import torch

        self.device = torch.device(device)
        self.model.to(self.device)
        return self

    def use_store(self, store: str | Path) -> Ranker:
        """Score from the store `store` (EARL, MVA): documents by id, their text unread; returned."""
        if self.scoring.open_store is None:
            raise PortableError(f"a {self.package} ranker scores no store: give the documents' text")
        self._store = self.scoring.open_store(self.model, Path(store))
        return self

    def score(self, query: str, documents: Sequence[str | Document | Mapping]) -> np.ndarray:
        return self.score_pairs([query] * len(documents), documents)

    def score_pairs(self, queries: Sequence[str], documents: Sequence[str | Document | Mapping]) -> np.ndarray:
        """The (n,) float32 scores of the pairs (``queries[i]``, ``documents[i]``)."""
        if len(queries) != len(documents):
            raise ValueError(f"{len(queries)} queries for {len(documents)} documents")
        if self._store is not None:
            ids = [d if isinstance(d, str) else _document(d).doc_id for d in documents]
            return self._batched(list(queries), ids, self._store, key=lambda i: 0)
        docs = [_document(d) for d in documents]
        return self._batched(list(queries), docs, self._score_batch,
                             key=lambda i: -(len(docs[i].title) + len(docs[i].text)))

    def _score_batch(self, queries: list[str], documents: list[Document]):
        batch = _to_device(self.scoring.encode(queries, documents), self.device)
        return self.model(batch) if self.scoring.score is None else self.scoring.score(self.model, batch)

    def _batched(self, queries: list, documents: list, score, key) -> np.ndarray:
        import torch

        order = sorted(range(len(queries)), key=key)
        scores = np.empty(len(queries), dtype=np.float32)
        with torch.inference_mode(), self._autocast():
            for start in range(0, len(order), self.batch_size):
                rows = order[start : start + self.batch_size]
                out = score([queries[i] for i in rows], [documents[i] for i in rows])
                scores[rows] = out.float().cpu().numpy()
        return scores

    def _autocast(self):
        import torch

        if self.precision == "32-true":
            return nullcontext()
        dtype = torch.bfloat16 if self.precision == "bf16-mixed" else torch.float16
        return torch.autocast(self.device.type, dtype=dtype)

    def rerank(self, frame):
        """`frame` (``qid``, ``query``, ``docno``, ``text`` [, ``title``, ``url``]) with ``score`` and ``rank``."""
        import pandas as pd

        need = [c for c in COLUMNS if c != "text" or self._store is None]
        if missing := [c for c in need if c not in frame.columns]:
            raise KeyError(f"rerank needs the columns {', '.join(need)}; missing: {', '.join(missing)}")
        out = frame.drop(columns=["score", "rank"], errors="ignore").reset_index(drop=True)
        if self._store is not None:
            documents = out["docno"].astype(str).tolist()
        else:
            titles, urls = (out[c].astype(str) if c in out.columns else pd.Series("", index=out.index)
                            for c in ("title", "url"))
            documents = [Document(str(d), str(t), str(h), str(u))
                         for d, t, h, u in zip(out["docno"], out["text"], titles, urls)]
        out["score"] = self.score_pairs(out["query"].astype(str).tolist(), documents).astype(np.float64)
        return ranked_frame(out)

    def export(self, folder: str | Path, *, run_dir: str | Path | None = None) -> Path:
        """Write this ranker into the new folder `folder`, with a model card from `run_dir`."""
        from safetensors.torch import save_model

        module = importlib.import_module(f"{self.package}.portable")
        run = Path(run_dir) if run_dir is not None else self.run_dir
        card = model_card(self.portable, module.PAPER, run, Path(folder).name)

        def save(path: Path) -> None:
            device = next(self.model.parameters()).device
            save_model(self.model.to("cpu"), str(path))
            self.model.to(device)

        write_folder(Path(folder), self.portable, save, card)
        return Path(folder)


def ranked_frame(frame):
    frame = frame.assign(_single=frame["score"].astype(np.float32), _docno=frame["docno"].astype(str))
    frame = frame.sort_values(["qid", "_single", "_docno"], ascending=[True, False, False], kind="stable")
    frame["rank"] = frame.groupby("qid", sort=False).cumcount()
    return frame.drop(columns=["_single", "_docno"]).reset_index(drop=True)


def _document(value) -> Document:
    if isinstance(value, Document):
        return value
    if isinstance(value, str):
        return Document("", value)
    if isinstance(value, Mapping):
        return Document(str(value.get("docno", value.get("doc_id", ""))), str(value["text"]),
                        str(value.get("title", "")), str(value.get("url", "")))
    raise TypeError(f"a document is a text, a Document or a mapping with 'text', not {type(value).__name__}")


def _to_device(batch, device):
    if hasattr(batch, "to"):
        return batch.to(device)
    if isinstance(batch, Mapping):
        return {k: _to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, device) for v in batch)
    return batch


def model_card(portable: Portable, paper: str, run_dir: Path | None, name: str) -> str:
    lines = [f"# {name}", "", f"A {portable.package} ranker trained with efficient-rankers {portable.version}, which "
             f"reproduces {paper}.", ""]
    lines += ["## Use", "", "    from common.api import load", "", f"    ranker = load({name!r})",
              "    ranker.score(\"a query\", [\"a document\", \"another one\"])", "    ranker.rerank(frame)  "
              "# columns qid, query, docno, text", ""]
    if tasks := {k: portable.training.get(k) for k in ("train", "dev", "test") if k in portable.training}:
        lines += ["## Training data", ""] + [f"- {k}: `{json.dumps(v)}`" for k, v in tasks.items()] + [""]
    provenance = _json(run_dir / "provenance.json") if run_dir else None
    if provenance and provenance.get("command"):
        commit = f" at commit `{provenance['commit']}`" if provenance.get("commit") else ""
        commit += ", with uncommitted changes" if provenance.get("dirty") else ""
        lines += ["## Command", "", f"    {provenance['command']}", "", f"(efficient-rankers "
                  f"{provenance.get('version', portable.version)}{commit})", ""]
    metrics = _json(run_dir / "metrics.json") if run_dir else None
    if metrics:
        lines += ["## Metrics", "", f"From the run's `metrics.json` (`{run_dir.name}`):", ""]
        measures = sorted({m for row in metrics.values() if isinstance(row, dict) for m in row})
        lines += ["| run | " + " | ".join(measures) + " |", "|---" * (len(measures) + 1) + "|"]
        for system, row in metrics.items():
            if isinstance(row, dict):
                cells = [f"{row[m]:.4f}" if isinstance(row.get(m), (int, float)) else "" for m in measures]
                lines.append(f"| {system} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Config", "", "```json", json.dumps(portable.config, indent=2, sort_keys=True), "```", ""]
    return "\n".join(lines)


def _json(path: Path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None

