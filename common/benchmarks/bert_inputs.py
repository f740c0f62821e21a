"""BERT-sized models built from scratch for benchmarks (`BertSize`, as options) and their inputs of random words:
queries, documents and a ranker's ``[CLS] query [SEP] document [SEP]`` pairs."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import ClassVar

from common.refusals import positive_int, usage_error


#: bert-base-uncased's vocabulary size and its [PAD], [CLS] and [SEP] ids; random words are drawn from FIRST_WORD on.
BERT_VOCAB_SIZE, BERT_PAD, BERT_CLS, BERT_SEP, FIRST_WORD = 30522, 0, 101, 102, 1000


@dataclass(frozen=True)
class BertSize:
    """A BERT's size, for benchmarks that build one from scratch (timing does not depend on the weights)."""

    #: The sizes' names as options and as `common.encoders.pretrained.bert_config` takes them.
    OPTIONS: ClassVar[tuple[str, ...]] = ("num_layers", "hidden_size", "num_heads", "intermediate_size")

    layers: int
    hidden: int
    heads: int
    intermediate: int

    def describe(self) -> str:
        return f"L={self.layers}, h={self.hidden}, {self.heads} heads, FFN {self.intermediate}"

    def options(self) -> dict[str, int]:
        return dict(zip(self.OPTIONS, (self.layers, self.hidden, self.heads, self.intermediate)))

    def hf_config(self) -> dict[str, int]:
        """The size as Hugging Face's BERT-family configs name it."""
        return {"num_hidden_layers": self.layers, "hidden_size": self.hidden, "num_attention_heads": self.heads,
                "intermediate_size": self.intermediate}


def add_size_options(parser: argparse.ArgumentParser, sizes: dict[str, BertSize]) -> None:
    """``--num_layers``... (`BertSize.OPTIONS`), each left out defaulting to the device's size in `sizes`."""
    for name in BertSize.OPTIONS:
        defaults = ", ".join(f"{size.options()[name]} on {device.upper()}" for device, size in sizes.items())
        parser.add_argument(f"--{name}", type=positive_int, help=f"{name.replace('_', ' ')} (default: {defaults})")


def resolve_size(args: argparse.Namespace, sizes: dict[str, BertSize]) -> None:
    """Set the size options left out to ``sizes[args.device]``'s; heads not dividing the hidden size are refused."""
    for name, value in sizes[args.device].options().items():
        setattr(args, name, getattr(args, name) or value)
    if args.hidden_size % args.num_heads:
        usage_error(f"argument --num_heads: must divide the hidden size {args.hidden_size}, got {args.num_heads}")


def random_words(count: int, length: int, seed: int):
    """(count, length) random ids of bert-base-uncased's words (`FIRST_WORD` on), drawn from `seed`."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randint(FIRST_WORD, BERT_VOCAB_SIZE, (count, length), generator=generator)


def bert_query(length: int, seed: int):
    """A query of `length` tokens, ``[CLS]`` `random_words` ``[SEP]`` (1, length), and its mask."""
    import torch

    words = random_words(1, length - 2, seed)
    tokens = torch.cat([torch.tensor([[BERT_CLS]]), words, torch.tensor([[BERT_SEP]])], dim=1)
    return tokens, torch.ones_like(tokens)


def bert_documents(words):
    """Documents ``[CLS] words`` (count, 1 + length) of `words` (count, length)."""
    import torch

    return torch.cat([torch.full((len(words), 1), BERT_CLS), words], dim=1)


def bert_pairs(query, documents, sep: int = BERT_SEP) -> dict:
    """BERT's pair inputs ``query documents[i] [SEP]`` for each row of `documents` (count, d); `query` (1, q) holds
    [CLS] and its [SEP]; the token types are 1 from the document on."""
    import torch

    tokens = torch.cat([query.expand(len(documents), -1), documents, torch.full((len(documents), 1), sep)], dim=1)
    types = torch.zeros_like(tokens)
    types[:, query.shape[1]:] = 1
    return {"pair_tokens": tokens, "pair_mask": torch.ones_like(tokens), "pair_types": types}
