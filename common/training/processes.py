"""The processes that train together: `world_size`, and `leave_process_group_at_exit`, which destroys the default
group from an ``atexit`` handler: Lightning destroys only NCCL groups, and a gloo group torn down with the interpreter
aborts the finished process (SIGABRT; pytorch/pytorch#190489, #179291).
"""

from __future__ import annotations

import atexit

import torch


def world_size() -> int:
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    return torch.distributed.get_world_size() if distributed else 1


def leave_process_group_at_exit() -> None:
    """Destroy the default process group, where one exists then, when this process exits (see the module docstring)."""
    atexit.unregister(_leave_process_group)
    atexit.register(_leave_process_group)


def _leave_process_group() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
