"""The processes that train together (DDP's process group), for code that must see the whole global batch."""

from __future__ import annotations

import torch


def world_size() -> int:
    """The number of processes of the default process group; 1 where there is none (one process)."""
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    return torch.distributed.get_world_size() if distributed else 1
