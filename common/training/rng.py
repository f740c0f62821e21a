"""The global random generators' states, to save in a checkpoint and restore on resuming.

Dropout, samplers and shuffles draw from the global generators (Python's `random`, NumPy's
legacy ``np.random``, torch's CPU generator and the current CUDA device's). A run resumed from a
checkpoint repeats the uninterrupted one only if those generators continue where they were when
the checkpoint was written: save `rng_states()` in the checkpoint (a LightningModule's
``on_save_checkpoint``) and pass it to `set_rng_states` when loading it (``on_load_checkpoint``).

The states are tensors and plain Python values only, so a checkpoint that holds them still loads
with ``torch.load(weights_only=True)``.

CUDA: only the current device's generator, the one a process of a DDP run draws from (each process has its GPU,
Lightning makes it current). Every visible device's would tie a checkpoint to the devices its process saw: a resumed
process that sees fewer (SLURM's ``--gpus-per-task=1``, ``CUDA_VISIBLE_DEVICES``) could not restore them.
"""

from __future__ import annotations

import random

import numpy as np
import torch


def rng_states() -> dict:
    """The states of Python's, NumPy's, torch's and (where available) CUDA's global generators."""
    kind, keys, position, has_gauss, gauss = np.random.get_state()
    # NumPy's key array as an int64 tensor: weights_only loading accepts no ndarray.
    numpy_state = (kind, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, gauss)
    states = {"torch": torch.get_rng_state(), "numpy": numpy_state, "python": random.getstate()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state()  # the current device's (module docstring)
    return states


def set_rng_states(states: dict) -> None:
    """Restore the generators to `states` (from `rng_states`); the current CUDA device's only where saved and
    available."""
    torch.set_rng_state(states["torch"])
    kind, keys, position, has_gauss, gauss = states["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), position, has_gauss, gauss))
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state(states["cuda"])
