"""The rankers' score layers in their parameters' precision, under mixed precision too.

Under autocast (``--trainer.precision bf16-mixed``) a linear layer or matrix product runs in bfloat16 and returns
bfloat16, whose 8 significant bits round a score near 5 to a multiple of 1/32 (near 0.1, of 1/2048): candidates
closer than that tie, and a ranking of a thousand candidates falls back on document ids. The last step from a
representation to the score (a linear layer to one logit, a dot product) costs one vector product per score, so
each ranker runs it through `full_precision`: autocast off, the inputs cast to the parameters' dtype. The
representations still come from bf16 layers and carry their rounding, but the scores keep float32's resolution,
as different as those representations make them. Without autocast nothing changes: the inputs already have that
dtype, and the call is the plain one. On a device that has no autocast (the meta device, on which the tests run the
models to find tensors made on another device) there is none to turn off, and the call is the plain one too.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor


def full_precision(function: Callable[..., Tensor], *inputs: Tensor, dtype: torch.dtype) -> Tensor:
    """``function(*inputs)`` with autocast off and the floating `inputs` cast to `dtype` (the parameters' dtype:
    ``layer.weight.dtype``); (B, ...) tensors in, `function`'s output out."""
    device_type = inputs[0].device.type
    cast = [x.to(dtype) if x.is_floating_point() else x for x in inputs]
    if not torch.amp.is_autocast_available(device_type):  # no autocast to turn off (`torch.autocast` refuses it)
        return function(*cast)
    with torch.autocast(device_type, enabled=False):
        return function(*cast)
