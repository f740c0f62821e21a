"""BERT-family inputs of (query, document) pairs: ``[CLS] query [SEP]`` cut to `query_length` and ``[CLS] title text
[SEP]`` cut to `passage_length`, read apart (each distinct query once, ``query_index`` (B,) per pair: models spread
them with ``index_select``, deterministic in backward on CPU) or concatenated (``pair_tokens``, ``pair_types``).
Passages are tokenised once, cached by (id, title, text), cleared past 200,000 entries.
"""

from __future__ import annotations

import torch
from torch import Tensor

from common.data.formats import Document
from common.encoders.tokenizers import LazyTokenizer


def pad(rows: list[list[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    width = max(len(r) for r in rows)
    tokens = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, : len(row)] = 1
    return tokens, mask


class BertInputs(LazyTokenizer):
    """(query text, document) pairs -> a model batch."""

    def __init__(self, pairs: bool, tokenizer: str, query_length: int, passage_length: int, tokenizer_task=None):
        if query_length < 3 or passage_length < 3:
            raise ValueError("query_length and passage_length must leave room for [CLS], a token and [SEP]")
        super().__init__(tokenizer, tokenizer_task)
        self.pairs, self.query_length, self.passage_length = pairs, query_length, passage_length

    def words(self, texts: list[str], length: int) -> list[list[int]]:
        """Token ids without special tokens, cut to leave room for [CLS] and [SEP] in `length`."""
        return [ids[: length - 2] for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]

    def passage_words(self, documents: list[Document]) -> list[list[int]]:
        keys = [(d.doc_id, d.title, d.text) for d in documents]  # by content: one id may name two texts
        if missing := {key: d for key, d in zip(keys, documents) if key not in self._cache}:
            if len(self._cache) >= 200_000:
                self._cache.clear()
            texts = [f"{d.title} {d.text}".strip() for d in missing.values()]
            self._cache.update(zip(missing, self.words(texts, self.passage_length)))
        return [self._cache[key] for key in keys]

    def _framed(self, words: list[list[int]]) -> tuple[Tensor, Tensor]:
        """``[CLS] words [SEP]`` rows padded: (B, n) tokens and mask."""
        tok = self.tokenizer
        return pad([[tok.cls_token_id, *w, tok.sep_token_id] for w in words], tok.pad_token_id)

    def queries(self, texts: list[str]) -> dict[str, Tensor]:
        return dict(zip(("query_tokens", "query_mask"), self._framed(self.words(texts, self.query_length))))

    def documents(self, documents: list[Document]) -> dict[str, Tensor]:
        return dict(zip(("doc_tokens", "doc_mask"), self._framed(self.passage_words(documents))))

    def __call__(self, queries: list[str], documents: list[Document]) -> dict[str, Tensor]:
        if self.pairs:
            return self._pairs(queries, documents)
        distinct = list(dict.fromkeys(queries))
        row = {text: i for i, text in enumerate(distinct)}
        return {**self.queries(distinct), "query_index": torch.tensor([row[q] for q in queries]),
                **self.documents(documents)}

    def _pairs(self, queries: list[str], documents: list[Document]) -> dict[str, Tensor]:
        tok = self.tokenizer
        rows, types = [], []
        for q, d in zip(self.words(queries, self.query_length), self.passage_words(documents)):
            first = [tok.cls_token_id, *q, tok.sep_token_id]
            rows.append(first + [*d, tok.sep_token_id])
            types.append([0] * len(first) + [1] * (len(d) + 1))
        tokens, mask = pad(rows, tok.pad_token_id)
        return {"pair_tokens": tokens, "pair_mask": mask, "pair_types": pad(types, 0)[0]}
