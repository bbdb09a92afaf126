"""Summaries of repeated measurements: median with min and max, and same-round ratios.

Runs in the bench process. A figure is always the median of the measured repetitions (the
warm-up is never among them) with the min and max beside it, so a reader sees the spread.
A ratio is computed per round from two systems measured in that round (interleaved), and
then summarised the same way: the noise of a shared machine hits both sides of each ratio.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

Figure = dict[str, Any]
"""``{"median", "min", "max", "n", "unit"}``: JSON-ready."""


def figure(values: Iterable[float], unit: str = "ms", digits: int = 4) -> Figure:
    """The median, min and max of ``values`` (an empty list gives ``n: 0`` and nulls)."""
    data = [float(v) for v in values]
    if not data:
        return {"median": None, "min": None, "max": None, "n": 0, "unit": unit}
    return {
        "median": round(statistics.median(data), digits),
        "min": round(min(data), digits),
        "max": round(max(data), digits),
        "n": len(data),
        "unit": unit,
    }


def ratios(numerators: Sequence[float], denominators: Sequence[float]) -> Figure:
    """Per-round ratios ``a[i] / b[i]`` summarised as a figure (unit ``x``)."""
    pairs = [(a, b) for a, b in zip(numerators, denominators, strict=False) if b > 0]
    return figure((a / b for a, b in pairs), unit="x", digits=3)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of ``values``; None if empty."""
    data = sorted(float(v) for v in values)
    if not data:
        return None
    rank = max(1, math.ceil(q / 100 * len(data)))
    return round(data[min(rank, len(data)) - 1], 4)


def median(values: Iterable[float]) -> float:
    """The median of a non-empty sequence."""
    return float(statistics.median(list(values)))


def ns_to_ms(value: float) -> float:
    """Nanoseconds to milliseconds."""
    return value / 1e6


def linear_fit(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """Least-squares ``(slope, intercept)`` of ``y = slope * x + intercept``; None if < 2 x."""
    if len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    slope = sxy / sxx
    return slope, mean_y - slope * mean_x
