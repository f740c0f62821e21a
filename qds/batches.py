"""QDS-Transformer's batch encoder: (query text, document) pairs -> the model's input tensors, for one pattern.

`Encoder` serves the data module's loaders and `qds.portable` alike, so a pair gets the same inputs wherever it is
scored. A document's sentence tokens are cached per process, keyed by id, title and text (at most `CACHE_SIZE`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from common.data.formats import Document
from common.data.specs import SourceSpec
from common.encoders.tokenizers import LazyTokenizer
from qds import LAYOUT, MAX_LENGTH
from qds.inputs import BASELINES, build_qds_input, pad, pair_input, passages
from qds.sentences import split_sentences

#: Document sentences read (official code: 256) and MaxP passages scored (16: about QDS's 2048 tokens), by default.
MAX_SENTENCES, MAX_PASSAGES = 256, 16
#: Documents whose sentence tokens a process keeps.
CACHE_SIZE = 100_000


class Encoder(LazyTokenizer):
    """(query text, document) pairs -> a model batch for one pattern (`qds.inputs`); `tokenizer` a name or folder."""

    def __init__(self, pattern: str, tokenizer: str, max_length: int = MAX_LENGTH, max_sentences: int = MAX_SENTENCES,
                 max_passages: int = MAX_PASSAGES, tokenizer_task: SourceSpec | None = None,
                 layout: str = LAYOUT):
        super().__init__(tokenizer, tokenizer_task)
        self.pattern, self.layout = pattern, layout
        self.max_length = min(max_length, 512) if pattern in BASELINES else max_length
        self.max_sentences, self.max_passages = max_sentences, max_passages

    def __call__(self, queries: list[str], documents: list[Document]) -> dict[str, Tensor]:
        tok = self.tokenizer
        query_ids = tok(queries, add_special_tokens=False)["input_ids"]
        bos, eos, pad_id = tok.bos_token_id, tok.eos_token_id, tok.pad_token_id
        if self.pattern in BASELINES:
            return self._pairs(query_ids, documents, bos, eos, pad_id)
        inputs = [build_qds_input(q, self._sentences(d), bos=bos, eos=eos, max_length=self.max_length,
                                  max_sentences=self.max_sentences, layout=self.layout)
                  for q, d in zip(query_ids, documents)]
        input_ids = pad([x.input_ids for x in inputs], pad_id)  # (B, N)
        return {"input_ids": input_ids, "attention_mask": (input_ids != pad_id).long(),
                "global_attention_mask": pad([x.global_mask(self.pattern) for x in inputs], 0)}

    def _sentences(self, document: Document) -> list[list[int]]:
        """Token ids of the title, then each sentence of the body (the URL dropped, as the official code does)."""
        key = (document.doc_id, document.title, document.text)
        cached = self._cache.get(key)
        if cached is None:
            title = [document.title] if document.title.strip() or self.layout == "official" else []
            sentences = title + split_sentences(document.text)
            cached = self.tokenizer(sentences, add_special_tokens=False)["input_ids"] if sentences else []
            if len(self._cache) >= CACHE_SIZE:
                self._cache.clear()
            self._cache[key] = cached
        return cached

    def _pairs(self, query_ids, documents, bos, eos, pad_id) -> dict[str, Tensor]:
        sequences, owner = [], []
        for i, (q, d) in enumerate(zip(query_ids, documents)):
            words = f"{d.title} {d.text}".split()
            texts = [" ".join(words)] if self.pattern == "firstp" else passages(words, max_passages=self.max_passages)
            for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]:
                sequences.append(pair_input(q, ids, bos=bos, eos=eos, max_length=self.max_length))
                owner.append(i)
        input_ids = pad(sequences, pad_id)  # (P, N), P sequences: one per document (FirstP) or per passage (MaxP)
        return {"input_ids": input_ids, "attention_mask": (input_ids != pad_id).long(),
                "passage_doc": torch.tensor(owner),  # (P,) the document of each sequence
                "num_docs": torch.tensor(len(documents))}
