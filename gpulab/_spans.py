"""Time spans (start, end) in seconds: merged where they overlap, and the length they cover.

Example:
    >>> merge_spans([(0.0, 1.0), (0.5, 2.0), (3.0, 4.0)])
    [(0.0, 2.0), (3.0, 4.0)]
    >>> covered([(0.0, 1.0), (0.5, 2.0), (3.0, 4.0)], lo=0.5, hi=3.5)
    2.0
"""
from __future__ import annotations

from collections.abc import Iterable

__all__ = ["merge_spans", "covered"]


def merge_spans(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted spans, overlapping or touching ones merged into one."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def covered(spans: Iterable[tuple[float, float]], lo: float | None = None, hi: float | None = None) -> float:
    """Total length inside at least one span, each clipped to ``[lo, hi]`` (overlaps counted once)."""
    clipped = ((a if lo is None else max(a, lo), b if hi is None else min(b, hi)) for a, b in spans)
    return sum(b - a for a, b in merge_spans((a, b) for a, b in clipped if b > a))
