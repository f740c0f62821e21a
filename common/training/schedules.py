"""Learning-rate schedules shared by the training loops (Lightning modules and `mva.pretrain`'s plain loop)."""

from __future__ import annotations

import torch


def warmup_linear_decay(optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int):
    """Linear warm-up over `warmup_steps`, then linear decay to zero at `total_steps`."""
    total = max(1, total_steps)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (total - step) / max(1, total - warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
