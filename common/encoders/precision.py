"""The rankers' score layers in their parameters' precision, under mixed precision too: `full_precision` runs the last
step to a score with autocast off and the inputs cast to the parameters' dtype, so bf16-mixed scores keep float32's
resolution (bfloat16 would tie candidates closer than 1/32 near 5). Without autocast it is the plain call.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor


def full_precision(function: Callable[..., Tensor], *inputs: Tensor, dtype: torch.dtype) -> Tensor:
    """``function(*inputs)`` with autocast off and the floating `inputs` cast to `dtype`."""
    device_type = inputs[0].device.type
    cast = [x.to(dtype) if x.is_floating_point() else x for x in inputs]
    if not torch.amp.is_autocast_available(device_type):
        return function(*cast)
    with torch.autocast(device_type, enabled=False):
        return function(*cast)
