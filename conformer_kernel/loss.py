"""RankNet (Burges et al. 2005), the Conformer-Kernel's training objective (Sec. 4).

For every pair of documents of one query with different labels, -log σ(s_i - s_j) where document
i has the higher label; each query's loss is the mean over its pairs, and the batch's loss the
mean over queries (official ``loss.py``; a query without a pair contributes 0). The official code
adds 1e-6 inside the log; ``logsigmoid`` computes the same value without it, stably.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def ranknet_loss(scores: Tensor, labels: Tensor) -> Tensor:
    """(Q, D) scores and labels -> the scalar RankNet loss."""
    diff = scores[:, :, None] - scores[:, None, :]  # (Q, D, D): s_i - s_j
    pairs = (labels[:, :, None] > labels[:, None, :]).to(scores.dtype)  # label_i > label_j
    per_query = (-F.logsigmoid(diff) * pairs).sum((1, 2)) / pairs.sum((1, 2)).clamp_min(1.0)
    return per_query.mean()
