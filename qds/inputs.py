"""Input construction of QDS-Transformer and its baselines, token by token (the official code's choices).

QDS input (Sec. 4.1; official ``utils.Data.get_inputs``)::

    <s> query </s> [SOS] title [SOS] sentence_1 ... [SOS] sentence_k </s>

- [SOS] is the ``<s>`` id, as in the official code; the title is the first sentence and the URL
  is dropped (official ``split_collection_into_sentences.py``).
- At most `max_sentences` (256) sentences and `max_length` (2048) tokens. The final ``</s>``
  is always kept: the document is cut so that it fits (the official code appends it and then
  cuts the sequence, which can drop it). A sentence cut to its bare [SOS] is dropped.
- The query is cut to `max_query_tokens` (64) so the document keeps room; MS MARCO queries are
  far shorter. The official code neither cuts queries nor wraps each sentence's tokens in
  their own ``<s> ... </s>`` as ``tokenizer.encode`` there does; this follows the issue's
  specification, one [SOS] then the sentence's tokens.

Global tokens per attention pattern (Table 4; Eqs. 7-10; official ``attn_pattern``; the definition
lives in `common.kernels.patterns.global_tokens`):

- ``sparse`` (Sparse-Transformer): none, local window only (Eq. 7);
- ``longformer_qa``: ``<s>`` before the query and the [SOS] before the document;
- ``qds_s``: ``<s>`` ([CLS]) and every [SOS] (Eq. 8 + [CLS]);
- ``qds_q``: every query position, ``<s>`` and the query's ``</s>`` included (Eq. 9);
- ``qds``: the union (Eq. 10).

Baseline inputs (Sec. 5, RoBERTa FirstP / MaxP, dense attention): RoBERTa's pair format
``<s> query </s></s> passage </s>``. FirstP takes the first ``512`` tokens of the document
(title, then body); MaxP cuts the title + body into passages of 150 words with a stride of 75
(Dai and Callan 2019), at most `max_passages` (16, about 2,048 tokens of document as QDS reads),
each paired with the query; the model max-pools their scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from common.kernels.patterns import PATTERNS, Layout, global_tokens

#: The dense-attention baselines of Table 2.
BASELINES = ("firstp", "maxp")
ALL_PATTERNS = PATTERNS + BASELINES


@dataclass(frozen=True)
class QDSInput:
    """One query-document sequence and the role of each position."""

    input_ids: list[int]
    query_end: int  # position of the query's </s>; positions 0..query_end are the query's
    sentence_starts: list[int]  # positions of the [SOS] markers, in order

    def global_mask(self, pattern: str) -> list[bool]:
        """Which positions are global under `pattern` (`common.kernels.patterns.global_tokens`)."""
        n = len(self.input_ids)
        position = torch.arange(n)
        sentence_starts = torch.zeros(n, dtype=torch.bool)
        sentence_starts[self.sentence_starts] = True
        query = (position >= 1) & (position <= self.query_end)
        layout = Layout(n, position == 0, query, sentence_starts, self.query_end + 1)
        return global_tokens(pattern, layout).tolist()


def build_qds_input(
    query: Sequence[int],
    sentences: Sequence[Sequence[int]],
    *,
    bos: int,
    eos: int,
    max_length: int = 2048,
    max_sentences: int = 256,
    max_query_tokens: int = 64,
) -> QDSInput:
    """``<s> query </s> ([SOS] sentence)* </s>`` from token ids (see the module docstring)."""
    query = list(query[:max_query_tokens])
    if len(query) + 3 > max_length:
        raise ValueError(f"max_length {max_length} leaves no room for a query of {len(query)} tokens")
    ids = [bos, *query, eos]
    query_end = len(ids) - 1
    starts = []
    room = max_length - 1  # the final </s>
    for sentence in sentences[:max_sentences]:
        if not sentence:
            continue
        take = min(len(sentence), room - len(ids) - 1)
        if take <= 0:
            break
        starts.append(len(ids))
        ids.append(bos)  # [SOS]
        ids.extend(sentence[:take])
    ids.append(eos)
    return QDSInput(ids, query_end, starts)


def pair_input(query: Sequence[int], passage: Sequence[int], *, bos: int, eos: int, max_length: int = 512,
               max_query_tokens: int = 64) -> list[int]:
    """RoBERTa's pair format ``<s> query </s></s> passage </s>``, the passage cut to fit `max_length`."""
    query = list(query[:max_query_tokens])
    room = max_length - len(query) - 4
    if room <= 0:
        raise ValueError(f"max_length {max_length} leaves no room for a query of {len(query)} tokens")
    return [bos, *query, eos, eos, *passage[:room], eos]


def passages(words: Sequence[str], size: int = 150, stride: int = 75, max_passages: int = 16) -> list[str]:
    """Overlapping word windows of a document (MaxP, Dai and Callan 2019); an empty document gives one empty passage."""
    starts = range(0, max(len(words) - size, 0) + 1, stride)
    windows = [" ".join(words[start : start + size]) for start in starts]
    if len(words) > size and (len(words) - size) % stride:
        windows.append(" ".join(words[-size:]))  # the tail the last stride missed
    return windows[:max_passages] or [""]


def pad(sequences: Sequence[Sequence[int]], value: int) -> Tensor:
    """(B, N) long tensor of `sequences` right-padded with `value` to the longest one."""
    n = max(len(s) for s in sequences)
    out = torch.full((len(sequences), n), value, dtype=torch.long)
    for row, sequence in enumerate(sequences):
        out[row, : len(sequence)] = torch.as_tensor(sequence, dtype=torch.long)
    return out
