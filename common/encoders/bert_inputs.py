"""BERT-family model inputs of (query, document) pairs, read apart (dual encoders, EARL, MVA) or concatenated
(cross-encoders); the batches `common.encoders.bert_rankers` and the papers' models read.

- A query is ``[CLS] query [SEP]`` cut to `query_length` tokens and a passage ``[CLS] title text [SEP]`` cut to
  `passage_length`, special tokens included (the ids are the tokenizer's ``cls_token_id`` and ``sep_token_id``:
  [CLS]/[SEP] for WordPiece, ``<s>``/``</s>`` for the built-in BPE).
- Apart: a batch holds each distinct query once (``query_tokens``, ``query_mask``, (Bq, q)) and, per pair, the row
  of its query (``query_index``, (B,)), so a query encoder runs once per query; then ``doc_tokens``, ``doc_mask``
  (B, d). The models spread the queries over the pairs with ``index_select``, whose backward adds a query's gradients
  in pair order: indexing's backward (``x[query_index]``) adds them with parallel atomic adds on CPU, and the same
  seed then trained different weights from run to run.
- Concatenated: ``[CLS] query [SEP] passage [SEP]`` with the same query and passage tokens (``pair_tokens``,
  ``pair_mask``, and ``pair_types``: 0 for the query's part, 1 for the passage's).
- Passages are tokenised once and cached by their content, the (document id, title, text) triple (cleared past
  200,000 entries): never by id alone, which two texts may share (two collections' ``D1``, the empty id
  `common.api` gives a bare text). A worker process starts with its own tokenizer and an empty cache
  (`common.encoders.tokenizers.LazyTokenizer`).

The training batches (a positive and its negatives per group) and the evaluation batches of these inputs are made by
`common.encoders.bert_data.BertTriplesDataModule`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from common.data.formats import Document
from common.encoders.tokenizers import LazyTokenizer


def pad(rows: list[list[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """Token id lists as a right-padded (B, n) tensor and its (B, n) 0/1 mask."""
    width = max(len(r) for r in rows)
    tokens = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, : len(row)] = 1
    return tokens, mask


class BertInputs(LazyTokenizer):
    """(query text, document) pairs -> a model batch: concatenated (`pairs`, a cross-encoder's) or apart (module
    docstring); `tokenizer` by name or path (`common.encoders.tokenizers.load_tokenizer`, loaded on first use)."""

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
        missing = {key: d for key, d in zip(keys, documents) if key not in self._cache}
        if missing:
            if len(self._cache) >= 200_000:
                self._cache.clear()
            texts = [f"{d.title} {d.text}".strip() for d in missing.values()]
            self._cache.update(zip(missing, self.words(texts, self.passage_length)))
        return [self._cache[key] for key in keys]

    def queries(self, texts: list[str]) -> dict[str, Tensor]:
        """``query_tokens`` and ``query_mask`` (B, q) of query texts."""
        tok = self.tokenizer
        tokens, mask = pad([[tok.cls_token_id, *w, tok.sep_token_id] for w in self.words(texts, self.query_length)],
                           tok.pad_token_id)  # fmt: skip
        return {"query_tokens": tokens, "query_mask": mask}

    def documents(self, documents: list[Document]) -> dict[str, Tensor]:
        """``doc_tokens`` and ``doc_mask`` (B, d) of documents."""
        tok = self.tokenizer
        tokens, mask = pad([[tok.cls_token_id, *w, tok.sep_token_id] for w in self.passage_words(documents)],
                           tok.pad_token_id)  # fmt: skip
        return {"doc_tokens": tokens, "doc_mask": mask}

    def __call__(self, queries: list[str], documents: list[Document]) -> dict[str, Tensor]:
        """The batch of the pairs (``queries[i]``, ``documents[i]``)."""
        if self.pairs:
            return self._pairs(queries, documents)
        distinct = list(dict.fromkeys(queries))
        row = {text: i for i, text in enumerate(distinct)}
        return {**self.queries(distinct), "query_index": torch.tensor([row[q] for q in queries]),
                **self.documents(documents)}  # fmt: skip

    def _pairs(self, queries: list[str], documents: list[Document]) -> dict[str, Tensor]:
        tok = self.tokenizer
        rows, types = [], []
        for q, d in zip(self.words(queries, self.query_length), self.passage_words(documents)):
            first = [tok.cls_token_id, *q, tok.sep_token_id]
            rows.append(first + [*d, tok.sep_token_id])
            types.append([0] * len(first) + [1] * (len(d) + 1))
        tokens, mask = pad(rows, tok.pad_token_id)
        return {"pair_tokens": tokens, "pair_mask": mask, "pair_types": pad(types, 0)[0]}
