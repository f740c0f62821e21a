"""A least-squares polynomial of a measurement against the length, and its value elsewhere."""

from __future__ import annotations

from collections.abc import Sequence


def polyfit(points: Sequence[tuple[float, float]], degree: int) -> dict | None:
    """The least-squares polynomial of `degree` through `points` (x, y): ``coefficients`` lowest order first, ``r2``
    and the x values (``lengths``); None with too few points."""
    import numpy as np

    if len(points) <= degree:
        return None
    x, y = (np.array(v, dtype=float) for v in zip(*sorted(points)))
    coefficients = np.polyfit(x, y, degree)
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(((y - np.polyval(coefficients, x)) ** 2).sum()) / total if total > 0 else 1.0
    return {"degree": degree, "coefficients": [float(c) for c in coefficients[::-1]], "r2": r2,
            "lengths": [int(v) for v in x]}


def fit_value(fit: dict | None, x):
    """The `polyfit` polynomial at `x` (a number or an array); None without a fit."""
    return None if fit is None else sum(c * x**i for i, c in enumerate(fit["coefficients"]))
