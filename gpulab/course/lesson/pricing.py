"""The hourly price a lesson's cost columns use: the learner's own (``PRICE_PER_HOUR`` in the notebook), else the
published on-demand price of their GPU where gpulab lists one (:mod:`gpulab.cost`), else none: then the tables show
no cost, never a guessed one.

Example:
    >>> from gpulab import course
    >>> course.lesson_price(0.5).usd_per_hour
    0.5
    >>> course.lesson_price(None, device="cpu") is None
    True
"""
from __future__ import annotations

from typing import Any

from ..._check import device_arg
from ...cost import Price, hourly_price, price_here

__all__ = ["lesson_price", "describe_price"]


def lesson_price(price_per_hour: Any = None, device: Any = None) -> Price | None:
    """``price_per_hour`` (USD per hour, or a key of ``gl.cost.prices()``) as a :class:`~gpulab.cost.Price`; when
    None, the published price of the GPU the lesson runs on (None on a CPU or an unlisted GPU)."""
    device_arg("device", device)
    if price_per_hour is not None:
        return hourly_price(price_per_hour)
    return price_here(device)


def describe_price(price: Price | None) -> str:
    """One line saying which price the cost columns use, or why there are none."""
    if price is not None and not isinstance(price, Price):
        raise TypeError(f"price must be a gl.cost.Price (from course.lesson_price(...)) or None, got "
                        f"{type(price).__name__} {price!r:.60}")
    if price is None:
        return ("no hourly price: cost columns are left out. Set PRICE_PER_HOUR to what your machine costs per hour "
                "(USD) to see them")
    return f"cost columns use {price}"
