"""Which tokens are global: the attention patterns of QDS-Transformer's Table 4, and their density.

The kernels take the global tokens as a boolean per position, so one kernel
serves every pattern. `global_tokens` sets them as the official code does
(hallogameboy/QDS-Transformer, ``src/utils.py``, ``Data.get_inputs``, lines 361-393),
from three facts about an input: the query's length, where its ``<s>`` tokens are,
and where the first sentence starts. `synthetic_layout` lays out a query-document
input for tests and benchmarks; the `qds` package builds the same facts from real
tokenised inputs (`qds.inputs`, both of its layouts).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

#: Table 4 rows: local only (Sparse-Transformer), Longformer-QA, QDS(S), QDS(Q), QDS.
PATTERNS = ("sparse", "longformer_qa", "qds_s", "qds_q", "qds")


@dataclass(frozen=True)
class Layout:
    """What the official code reads off one input to set its global tokens.

    Position 0 is [CLS] (``<s>``); positions ``0 .. query_length - 1`` are the query with its special tokens
    (the official ``QL``); `bos` marks every ``<s>`` token (the official ``bos_idx``: [CLS], the [SOS] markers,
    and in the official layout the second ``<s>`` before the query and before each sentence); `first_sentence`
    is the position of the first sentence's marker (``sent_locs[0]``), None for an input without one.
    """

    n: int
    query_length: int
    bos: Tensor  # (N,) bool
    first_sentence: int | None


def synthetic_layout(n: int, query_len: int = 20, sentence_every: int = 25) -> Layout:
    """``<s>`` + `query_len` query tokens + ``</s>``, then a document with an [SOS] every `sentence_every` tokens."""
    position = torch.arange(n)
    document_start = min(query_len + 2, n)
    sentence_starts = (position >= document_start) & ((position - document_start) % sentence_every == 0)
    first = document_start if document_start < n else None
    return Layout(n, document_start, sentence_starts | (position == 0), first)


def global_tokens(pattern: str, layout: Layout) -> Tensor:
    """(N,) bool mask of the global tokens of a Table 4 pattern, as the official ``attn_pattern`` sets them.

    The official code's help text swaps the names of patterns 3 and 4; its code (and its comments) make pattern 3
    the query one and pattern 4 the sentence one, and so does this.
    """
    mask = torch.zeros(layout.n, dtype=torch.bool)
    cls = torch.arange(layout.n) == 0
    query = torch.arange(layout.n) < layout.query_length
    first_sentence = mask.clone()
    if layout.first_sentence is not None:
        first_sentence[layout.first_sentence] = True
    if pattern == "sparse":  # attn_pattern 0, Sparse-Transformer: Eq. 7 only
        return mask
    if pattern == "longformer_qa":  # 1: tok_mask[0] = 2; tok_mask[sent_locs[0]] = 2
        return cls | first_sentence
    if pattern == "qds_s":  # 4: tok_mask[0] = 2; tok_mask[bos_idx] = 2 (Eq. 8 + [CLS])
        return cls | layout.bos
    if pattern == "qds_q":  # 3: tok_mask[range(QL)] = 2; tok_mask[sent_locs[0]] = 2 (Eq. 9 + the first [SOS])
        return query | first_sentence
    if pattern == "qds":  # 2: tok_mask[range(QL)] = 2; tok_mask[bos_idx] = 2 (Eq. 10)
        return query | layout.bos
    raise ValueError(f"unknown attention pattern {pattern!r}; expected one of {', '.join(PATTERNS)}")


def nonzeros(is_global: Tensor, window: int, key_padding_mask: Tensor | None = None) -> int:
    """Nonzero entries of the adjacency A of one input: the (query, key) pairs its attention computes.

    Counted row by row without building A: an ordinary row keeps its valid, non-global band keys
    plus every valid global key; a global row keeps every valid key; a padded row keeps nothing.
    """
    is_global = is_global.reshape(-1)
    n, device = is_global.numel(), is_global.device
    valid = (torch.ones(n, dtype=torch.bool, device=device) if key_padding_mask is None
             else ~key_padding_mask.reshape(-1).to(device))  # fmt: skip
    is_global = is_global & valid
    local_key = torch.cat([torch.zeros(1, dtype=torch.long, device=device),
                           torch.cumsum((valid & ~is_global).long(), 0)])  # fmt: skip
    position = torch.arange(n, device=device)
    low, high = (position - window // 2).clamp(min=0), (position + window // 2).clamp(max=n - 1) + 1
    band = local_key[high] - local_key[low]  # valid non-global keys in each row's band
    ordinary = valid & ~is_global
    globals_ = int(is_global.sum())
    return int(band[ordinary].sum()) + int(ordinary.sum()) * globals_ + globals_ * int(valid.sum())


def density(is_global: Tensor, window: int, key_padding_mask: Tensor | None = None) -> float:
    """Fraction of nonzero entries of the adjacency A of one input (Table 5 reports it at n = 2048)."""
    n = is_global.numel()
    return nonzeros(is_global, window, key_padding_mask) / (n * n)
