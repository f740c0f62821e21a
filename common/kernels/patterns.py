"""Which tokens are global: the attention patterns of QDS-Transformer's Table 4, and their density.

`global_tokens` sets them as the official code does (``src/utils.py``, ``Data.get_inputs``, lines 361-393) from
the query's length, the ``<s>`` positions and the first sentence's start; `synthetic_layout` lays out an input for
tests and benchmarks (`qds.inputs` builds the same facts from real inputs).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

#: Table 4 rows: local only (Sparse-Transformer), Longformer-QA, QDS(S), QDS(Q), QDS.
PATTERNS = ("sparse", "longformer_qa", "qds_s", "qds_q", "qds")


@dataclass(frozen=True)
class Layout:
    """What the official code reads off one input to set its global tokens."""

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
    """(N,) bool mask of the global tokens of a Table 4 pattern, as the official ``attn_pattern`` sets them."""
    mask = torch.zeros(layout.n, dtype=torch.bool)
    cls = torch.arange(layout.n) == 0
    query = torch.arange(layout.n) < layout.query_length
    first_sentence = mask.clone()
    if layout.first_sentence is not None:
        first_sentence[layout.first_sentence] = True
    masks = {"sparse": mask,  # attn_pattern 0, Sparse-Transformer: Eq. 7 only
             "longformer_qa": cls | first_sentence,
             "qds_s": cls | layout.bos,  # 4: tok_mask[0] = 2; tok_mask[bos_idx] = 2 (Eq. 8 + [CLS])
             "qds_q": query | first_sentence,  # 3: tok_mask[range(QL)] = 2; tok_mask[sent_locs[0]] = 2 (Eq. 9, [SOS])
             "qds": query | layout.bos}  # 2: tok_mask[range(QL)] = 2; tok_mask[bos_idx] = 2 (Eq. 10)
    if pattern not in masks:
        raise ValueError(f"unknown attention pattern {pattern!r}; expected one of {', '.join(PATTERNS)}")
    return masks[pattern]


def nonzeros(is_global: Tensor, window: int, key_padding_mask: Tensor | None = None) -> int:
    """Nonzero entries of the adjacency A of one input: the (query, key) pairs its attention computes."""
    is_global = is_global.reshape(-1)
    n, device = is_global.numel(), is_global.device
    valid = (torch.ones(n, dtype=torch.bool, device=device) if key_padding_mask is None
             else ~key_padding_mask.reshape(-1).to(device))
    is_global = is_global & valid
    local_key = torch.cat([torch.zeros(1, dtype=torch.long, device=device),
                           torch.cumsum((valid & ~is_global).long(), 0)])
    position = torch.arange(n, device=device)
    low, high = (position - window // 2).clamp(min=0), (position + window // 2).clamp(max=n - 1) + 1
    band = local_key[high] - local_key[low]
    ordinary = valid & ~is_global
    globals_ = int(is_global.sum())
    return int(band[ordinary].sum()) + int(ordinary.sum()) * globals_ + globals_ * int(valid.sum())


def density(is_global: Tensor, window: int, key_padding_mask: Tensor | None = None) -> float:
    """Fraction of nonzero entries of the adjacency A of one input (Table 5 reports it at n = 2048)."""
    n = is_global.numel()
    return nonzeros(is_global, window, key_padding_mask) / (n * n)
