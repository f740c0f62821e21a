"""The global generators' states (Python, NumPy's legacy ``np.random``, torch's CPU generator and the current CUDA
device's) as tensors and plain values, saved in a checkpoint and restored on resuming, so that a resumed run repeats
the uninterrupted one. Only the current CUDA device's: every visible device's would tie a checkpoint to a device count.
"""

from __future__ import annotations

import random

import numpy as np
import torch


def rng_states() -> dict:
    kind, keys, position, has_gauss, gauss = np.random.get_state()
    numpy_state = (kind, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, gauss)
    states = {"torch": torch.get_rng_state(), "numpy": numpy_state, "python": random.getstate()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state()
    return states


def set_rng_states(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    kind, keys, position, has_gauss, gauss = states["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), position, has_gauss, gauss))
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state(states["cuda"])
