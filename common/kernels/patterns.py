"""Which tokens are global: the attention patterns of QDS-Transformer's Table 4, and their density.

The kernels take the global tokens as a boolean per position, so one kernel
serves every pattern. `synthetic_layout` lays out a query-document input as the
QDS input construction does (``<s>`` query ``</s>`` then an [SOS] marker before
each sentence), for tests and benchmarks; the `qds` package builds the same
masks from real tokenised inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

#: Table 4 rows: local only (Sparse-Transformer), Longformer-QA, QDS(S), QDS(Q), QDS.
PATTERNS = ("sparse", "longformer_qa", "qds_s", "qds_q", "qds")


@dataclass(frozen=True)
class Layout:
    """Token roles of one input: position 0 is [CLS] (``<s>``), then the query and its ``</s>``, then the document."""

    n: int
    cls: Tensor  # (N,) bool
    query: Tensor  # (N,) bool: query tokens and the query's closing </s>
    sentence_starts: Tensor  # (N,) bool: the [SOS] markers
    document_start: int  # the first position after the query's </s>


def synthetic_layout(n: int, query_len: int = 20, sentence_every: int = 25) -> Layout:
    """``<s>`` + `query_len` query tokens + ``</s>``, then a document with an [SOS] every `sentence_every` tokens."""
    position = torch.arange(n)
    document_start = min(query_len + 2, n)
    query = (position >= 1) & (position < document_start)
    sentence_starts = (position >= document_start) & ((position - document_start) % sentence_every == 0)
    return Layout(n, position == 0, query, sentence_starts, document_start)


def global_tokens(pattern: str, layout: Layout) -> Tensor:
    """(N,) bool mask of the global tokens of a Table 4 pattern, as the official QDS code sets them.

    The official ``attn_pattern`` keeps [CLS] global in every pattern but the Sparse-Transformer,
    and Longformer-QA's token "before the document" is the first [SOS].
    """
    if pattern == "sparse":  # Sparse-Transformer: Eq. 7 only
        return torch.zeros(layout.n, dtype=torch.bool)
    if pattern == "longformer_qa":  # one token before the query and one before the document
        mask = layout.cls.clone()
        first_sentence = layout.sentence_starts.nonzero()
        if len(first_sentence):
            mask[first_sentence[0, 0]] = True
        return mask
    if pattern == "qds_s":  # Eq. 8 + [CLS]
        return layout.sentence_starts | layout.cls
    if pattern == "qds_q":  # Eq. 9 + [CLS]
        return layout.query | layout.cls
    if pattern == "qds":  # Eq. 10
        return layout.query | layout.sentence_starts | layout.cls
    raise ValueError(f"unknown attention pattern {pattern!r}; expected one of {', '.join(PATTERNS)}")


def density(is_global: Tensor, window: int, key_padding_mask: Tensor | None = None) -> float:
    """Fraction of nonzero entries of the adjacency A of one input (Table 5 reports it at n = 2048).

    Counted row by row without building A: an ordinary row keeps its valid, non-global band keys
    plus every valid global key; a global row keeps every valid key; a padded row keeps nothing.
    """
    is_global = is_global.reshape(-1)
    n = is_global.numel()
    valid = torch.ones(n, dtype=torch.bool) if key_padding_mask is None else ~key_padding_mask.reshape(-1)
    is_global = is_global & valid
    local_key = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum((valid & ~is_global).long(), 0)])
    position = torch.arange(n)
    low, high = (position - window // 2).clamp(min=0), (position + window // 2).clamp(max=n - 1) + 1
    band = local_key[high] - local_key[low]  # valid non-global keys in each row's band
    ordinary = valid & ~is_global
    nonzero = int(band[ordinary].sum()) + int(ordinary.sum()) * int(is_global.sum()) + int(is_global.sum()) * int(valid.sum())
    return nonzero / (n * n)
