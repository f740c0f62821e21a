"""The processes that train together (DDP's process group): `world_size` for code that must see the whole global
batch, and `leave_process_group_at_exit` for every command that may run in several processes.

Why a command must leave the group itself: Lightning creates it (``_init_dist_connection``) but destroys it at exit
only for NCCL. A gloo group left standing has C++ worker threads that still hold tensors when the interpreter
tears down; destroying them then aborts the process (``terminate called without an active exception``, SIGABRT)
after its work is done, so ``torchrun`` reports a failed launch. It happens now and then, more often in the rank
that finishes first (every rank but zero, which goes on to write the outputs). Destroying the group from an
``atexit`` handler, while the interpreter is whole, is the remedy PyTorch's own discussion names
(pytorch/pytorch#190489, #179291).
"""

from __future__ import annotations

import atexit

import torch


def world_size() -> int:
    """The number of processes of the default process group; 1 where there is none (one process)."""
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    return torch.distributed.get_world_size() if distributed else 1


def leave_process_group_at_exit() -> None:
    """Destroy the default process group, where one exists then, when this process exits (see the module
    docstring). Calling it again registers nothing more."""
    atexit.unregister(_leave_process_group)
    atexit.register(_leave_process_group)


def _leave_process_group() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
