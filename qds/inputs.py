"""Input construction of QDS-Transformer (Sec. 4.1) and its baselines, token by token (design: docs/qds.md).

- ``official`` layout: token for token the official ``utils.Data.get_inputs`` (``src/utils.py`` 311-359),
  ``<s> <s> query </s> <s> <s> title </s> <s> <s> sentence_1 </s> ... </s>``, cut at `max_length`;
- ``sos`` layout: ``<s> query </s> [SOS] title [SOS] sentence_1 ... </s>``, the final ``</s>`` always kept;
- baselines (Sec. 5): RoBERTa pairs, FirstP the first 512 tokens, MaxP passages of 150 words, stride 75;
- `exact_input`, `exact_batch`, `exact_density`: inputs of exactly n tokens for `qds.benchmark` (Table 5).
Difference: the query is cut to `max_query_tokens` (64); the official code cuts none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from common.kernels.patterns import PATTERNS, Layout, density, global_tokens
from qds import LAYOUT, MAX_LENGTH

#: The dense-attention baselines of Table 2.
BASELINES = ("firstp", "maxp")
ALL_PATTERNS = PATTERNS + BASELINES
#: The QDS input layouts (see the module docstring); the first is the default.
LAYOUTS = ("official", "sos")
InputLayout = Literal[LAYOUTS]
#: RoBERTa's <s>, <pad> and </s> ids; the ids below FIRST_ORDINARY_ID are its special tokens.
BOS, PAD, EOS, FIRST_ORDINARY_ID = 0, 1, 2, 5


@dataclass(frozen=True)
class QDSInput:
    """One query-document sequence and the roles the official code reads off it."""

    input_ids: list[int]
    query_length: int  # positions 0 .. query_length - 1 are the query with its special tokens (official QL)
    sentence_starts: list[int]  # the marker before each sentence, in order (official sent_locs)
    bos_positions: list[int]  # every <s> (official bos_idx)

    def global_mask(self, pattern: str) -> list[bool]:
        """Which positions are global under `pattern` (`common.kernels.patterns.global_tokens`)."""
        n = len(self.input_ids)
        bos = torch.zeros(n, dtype=torch.bool)
        bos[self.bos_positions] = True
        first = self.sentence_starts[0] if self.sentence_starts else None
        return global_tokens(pattern, Layout(n, self.query_length, bos, first)).tolist()


def build_qds_input(query: Sequence[int], sentences: Sequence[Sequence[int]], *, bos: int, eos: int,
                    max_length: int = MAX_LENGTH, max_sentences: int = 256, max_query_tokens: int = 64,
                    layout: InputLayout = LAYOUT) -> QDSInput:
    """The QDS input of `layout` from token ids without special tokens (see the module docstring)."""
    query = list(query[:max_query_tokens])
    if len(query) + 4 > max_length:
        raise ValueError(f"max_length {max_length} leaves no room for a query of {len(query)} tokens")
    if layout not in LAYOUTS:
        raise ValueError(f"unknown input layout {layout!r}; expected one of {', '.join(LAYOUTS)}")
    ids, starts = (_official if layout == "official" else _sos)(query, sentences, bos, eos, max_length, max_sentences)
    query_length = len(query) + (3 if layout == "official" else 2)  # <s> <s> query </s>, or <s> query </s>
    return QDSInput(ids, query_length, starts, [i for i, token in enumerate(ids) if token == bos])


def _official(query, sentences, bos, eos, max_length, max_sentences) -> tuple[list[int], list[int]]:
    """Official ``get_inputs`` (lines 321-355): ``[0] + encode(text)`` for the query and each sentence."""
    ids = [bos, bos, *query, eos]
    starts = []
    for sentence in sentences[:max_sentences]:
        if len(ids) >= max_length:
            break
        starts.append(len(ids))
        ids += [bos, bos, *sentence, eos]
    ids.append(eos)
    return ids[:max_length], starts


def _sos(query, sentences, bos, eos, max_length, max_sentences) -> tuple[list[int], list[int]]:
    """One [SOS] before each sentence, the final ``</s>`` kept by cutting the document."""
    ids = [bos, *query, eos]
    starts = []
    room = max_length - 1
    for sentence in sentences[:max_sentences]:
        if not sentence:
            continue
        take = min(len(sentence), room - len(ids) - 1)
        if take <= 0:
            break
        starts.append(len(ids))
        ids += [bos, *sentence[:take]]
    ids.append(eos)
    return ids, starts


def exact_input(n: int, query_tokens: int, sentence_tokens: int, vocab_size: int, generator: torch.Generator,
                layout: InputLayout = LAYOUT) -> QDSInput:
    """A `QDSInput` of exactly n >= query_tokens + 5 tokens in `layout`, random ordinary ids."""

    def ids(k: int) -> list[int]:
        return torch.randint(FIRST_ORDINARY_ID, vocab_size, (k,), generator=generator).tolist()

    if layout == "official":  # <s> <s> query </s>, then <s> <s> sentence </s> each, cut at n as the official code
        lengths = [sentence_tokens] * (-(-(n - query_tokens - 3) // (sentence_tokens + 3)) + 1)
    else:
        whole, rest = divmod(n - query_tokens - 3, sentence_tokens + 1)
        lengths = [sentence_tokens] * (whole + 1)
        if rest == 1:
            lengths[whole - 1] += 1
    built = build_qds_input(ids(query_tokens), [ids(k) for k in lengths], bos=BOS, eos=EOS, max_length=n,
                            max_sentences=len(lengths), max_query_tokens=query_tokens, layout=layout)
    assert len(built.input_ids) == n, (len(built.input_ids), n)
    return built


def exact_batch(n: int, batch_size: int, *, query_tokens: int, sentence_tokens: int, vocab_size: int,
                layout: InputLayout, seed: int, pattern: str | None, device: str = "cpu") -> dict[str, Tensor]:
    """A batch of `batch_size` `exact_input`s of n tokens, labels alternating 1 and 0, `pattern`'s global mask."""
    generator = torch.Generator().manual_seed(seed)
    inputs = [exact_input(n, query_tokens, sentence_tokens, vocab_size, generator, layout) for _ in range(batch_size)]
    batch = {"input_ids": torch.tensor([x.input_ids for x in inputs]),
             "attention_mask": torch.ones(len(inputs), n, dtype=torch.long),
             "labels": torch.tensor([float(i % 2 == 0) for i in range(len(inputs))])}
    if pattern is not None:
        batch["global_attention_mask"] = torch.tensor([x.global_mask(pattern) for x in inputs], dtype=torch.long)
    return {key: value.to(device) for key, value in batch.items()}


def exact_density(pattern: str, n: int, query_tokens: int, sentence_tokens: int, window: int,
                  layout: InputLayout = LAYOUT) -> float:
    """Nonzero fraction of `pattern`'s attention matrix on an `exact_input` of n tokens."""
    built = exact_input(n, query_tokens, sentence_tokens, 100, torch.Generator(), layout)
    return density(torch.tensor(built.global_mask(pattern)), window)


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
        windows.append(" ".join(words[-size:]))
    return windows[:max_passages] or [""]


def pad(sequences: Sequence[Sequence[int]], value: int) -> Tensor:
    """(B, N) long tensor of `sequences` right-padded with `value` to the longest one."""
    rows = [torch.as_tensor(sequence, dtype=torch.long) for sequence in sequences]
    return torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=value)
