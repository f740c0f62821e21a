"""Random token rows for the BERT-family models' tests (EARL's, MVA's): ``[CLS] w ... [SEP]`` right-padded, over a
small vocabulary whose ids 0, 1, 2 are padding, [CLS] and [SEP]."""

import torch

CLS, SEP, PAD = 1, 2, 0
#: The vocabulary: the three special ids, then words.
VOCAB_SIZE = 40


def tokens(lengths: list[int], width: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``[CLS] w ... [SEP]`` rows of the given lengths (special tokens included), right-padded to `width`, and their
    mask."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.full((len(lengths), width), PAD)
    for row, n in enumerate(lengths):
        ids[row, 0], ids[row, n - 1] = CLS, SEP
        ids[row, 1 : n - 1] = torch.randint(3, VOCAB_SIZE, (n - 2,), generator=generator)
    return ids, (ids != PAD).long()
