"""Loading the official QDS-Transformer checkpoint (github.com/hallogameboy/QDS-Transformer, ``modellib.QDSTModel``).

Its keys map as ``base.*`` -> ``model.encoder.*``, ``hidden_layer.*`` -> ``model.head.hidden.*``, ``final_layer.*``
-> ``model.head.out.*``; ``base.embeddings.position_ids`` is dropped; any other key, or a missing or mis-shaped
parameter, is an error.
"""

from __future__ import annotations

import os

import torch

from qds.ranker import QDSRanker

_HEAD = {"hidden_layer.": "model.head.hidden.", "final_layer.": "model.head.out."}


def from_official(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The official checkpoint's state dict renamed to `QDSRanker`'s (see the module docstring)."""
    mapped, unknown = {}, []
    for key, value in state_dict.items():
        if key == "base.embeddings.position_ids":
            continue
        if key.startswith("base."):
            mapped["model.encoder." + key[len("base.") :]] = value
        elif prefix := next((p for p in _HEAD if key.startswith(p)), None):
            mapped[_HEAD[prefix] + key[len(prefix) :]] = value
        else:
            unknown.append(key)
    if unknown:
        raise KeyError(f"keys of no official QDS-Transformer parameter: {', '.join(unknown[:10])}")
    return mapped


def is_official(state_dict: dict) -> bool:
    """Whether `state_dict` is in the official naming (a ``base.`` Longformer and the two head layers)."""
    return any(k.startswith("base.") for k in state_dict) and "final_layer.weight" in state_dict


def load_official(model: QDSRanker, path: str | os.PathLike) -> QDSRanker:
    """Load the official checkpoint file at `path` into `model` (a ``qds`` pattern of the same size); strict."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not is_official(state):
        raise ValueError(f"{path} is not an official QDS-Transformer checkpoint (no 'base.' / 'final_layer.' keys)")
    mapped = from_official(state)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(mapped))
    unexpected = sorted(set(mapped) - set(expected))
    shapes = [k for k in set(mapped) & set(expected) if mapped[k].shape != expected[k].shape]
    if missing or unexpected or shapes:
        raise ValueError(f"{path} does not fit this model: missing {missing[:5]}, unexpected {unexpected[:5]}, shape "
                         f"mismatches {sorted(shapes)[:5]} (build it with the checkpoint's encoder size and window)")
    model.load_state_dict(mapped)
    return model
