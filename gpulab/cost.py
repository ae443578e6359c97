"""What a measured throughput costs: a price per hour (yours, or a published on-demand list price with its source)
turned into US dollars per million items.

A cost figure is only as good as the two numbers behind it: the throughput you measured and the price you pass.
Published prices (:func:`prices`) are list prices on a given date, not what any account pays after discounts,
commitments or spot markets; pass your own price when you know it.

Example:
    >>> from gpulab import cost
    >>> p = cost.hourly_price(3.6)                 # USD per hour of the machine you measured on
    >>> str(p)
    '$3.60 per hour: your price (price_per_hour given)'
    >>> round(cost.cost_per_million(p.usd_per_hour, 1000.0), 6)   # 1,000 items/s at $3.60/h
    1.0
    >>> cost.cost_per_million(3.6, None) is None   # no throughput, no cost
    True
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

from ._check import positive
from ._format import TableView
from .figures.prices import PRICES, Price, _usd
from .reference import gpu_spec

__all__ = ["Price", "PriceTable", "hourly_price", "price_for_gpu", "price_here", "price_mismatch", "cost_per_million", "prices",
           "gpus_arg", "price_note"]


def _by_key() -> dict[str, Price]:
    return {p.key: p for p in PRICES}


def _what_to_pass() -> str:
    keys = ", ".join(map(repr, sorted(_by_key())))
    return ("a positive finite number of USD per hour, a Price, or the key of a reference price "
            + (f"({keys})" if keys else "(none is listed: pass a number)"))


def hourly_price(price_per_hour: float | int | str | Price) -> Price:
    """The price per hour as a :class:`Price`: a positive finite number of USD per hour (your own price), the key
    of a reference price (:func:`prices` lists them), or a :class:`Price`, returned as it is.

    A number becomes ``Price(key="given", ...)`` with no page behind it, priced per hour of the whole machine.
    Anything else raises ``TypeError`` (a bool, a list...) or ``ValueError`` (0, a negative, NaN, infinity, an
    unknown key), naming the value and what to pass.

    Example:
        >>> hourly_price(0.35).usd_per_hour, hourly_price(0.35).key
        (0.35, 'given')
        >>> hourly_price(0)
        Traceback (most recent call last):
        ...
        ValueError: price_per_hour must be a positive finite number of USD per hour, ... got 0
    """
    if isinstance(price_per_hour, Price):
        return price_per_hour
    if isinstance(price_per_hour, str):
        found = _by_key().get(price_per_hour)
        if found is None:
            raise ValueError(f"price_per_hour must be {_what_to_pass()}; no reference price is called "
                             f"{price_per_hour!r}")
        return found
    if isinstance(price_per_hour, bool) or not isinstance(price_per_hour, numbers.Real):
        raise TypeError(f"price_per_hour must be {_what_to_pass()}, got {type(price_per_hour).__name__} "
                        f"{price_per_hour!r:.60}")
    if not math.isfinite(price_per_hour) or price_per_hour <= 0:
        raise ValueError(f"price_per_hour must be {_what_to_pass()}, got {price_per_hour!r}")
    return Price(key="given", usd_per_hour=float(price_per_hour), instance="your price", gpu=None, gpus=1,
                 provider="given", region="", source="price_per_hour given", url="", date="")


def price_for_gpu(name: str) -> Price | None:
    """The reference price of the GPU called ``name`` as torch or nvidia-smi report it (``"Tesla T4"``,
    ``"NVIDIA A100-SXM4-40GB"``, ``"NVIDIA H100 80GB HBM3"``), matched exactly through
    :func:`gpulab.gpu_spec`'s names and aliases; the first listed when several providers price that GPU.

    ``None`` when gpulab does not know the GPU (no guess at a similar card), for a MIG slice (a slice is not
    priced as the whole card), and when no reference price lists it.

    Example:
        >>> price_for_gpu("NVIDIA A10G") is None      # not a GPU gpulab knows: no near match is guessed
        True
    """
    try:
        spec = gpu_spec(name)
    except KeyError:
        return None
    if spec.parent is not None:
        return None
    for p in PRICES:
        if p.gpu is not None and gpu_spec(p.gpu).name == spec.name:
            return p
    return None


def price_here(device: Any = None) -> Price | None:
    """The reference price of the GPU this process computes on (``device``, default the current CUDA device), or
    None: on a CPU, an Apple GPU, a MIG slice or a GPU without a listed price (then pass your own price).

    Example:
        >>> price_here("cpu") is None
        True
    """
    kind = "cpu" if device is None else str(getattr(device, "type", device)).split(":")[0]
    try:
        import torch
    except ImportError:
        return None
    if device is None:
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind != "cuda" or not torch.cuda.is_available():
        return None
    return price_for_gpu(torch.cuda.get_device_name(None if device is None else torch.device(device)))


def price_mismatch(price: Price, device_name: str) -> str | None:
    """A note when ``price`` is a GPU's and the work ran on another device (``device_name`` as measured: a CPU's
    model, a GPU's name): the cost is then a what-if, not this machine's. None when the price fits or is yours.

    Example:
        >>> from gpulab.figures.prices import PRICES
        >>> price_mismatch(PRICES[0], "AMD EPYC").startswith("a what-if")
        True
    """
    if price.gpu is None:
        return None
    try:
        same = gpu_spec(device_name).name == gpu_spec(price.gpu).name
    except KeyError:
        same = False
    return None if same else (f"a what-if: the {price.gpu} price over times measured on {device_name}, not what "
                              "this machine costs")


def gpus_arg(gpus: Any, price: Price | None = None) -> int:
    """``gpus``, how many GPUs a run used, checked: a whole number >= 1, else ``TypeError``/``ValueError`` naming it.
    Above 1 it needs a price per GPU-hour (a GPU's published price): a price given as a number, or a CPU machine's,
    is the whole machine's price per hour already.

    Example:
        >>> gpus_arg(8, hourly_price("aws-p5-h100"))
        8
        >>> gpus_arg(0)
        Traceback (most recent call last):
        ...
        ValueError: gpus must be the number of GPUs the run used, a whole number >= 1, got 0
    """
    if isinstance(gpus, bool) or not isinstance(gpus, numbers.Integral):
        raise TypeError(f"gpus must be the number of GPUs the run used, a whole number >= 1, got "
                        f"{type(gpus).__name__} {gpus!r:.60}")
    if gpus < 1:
        raise ValueError(f"gpus must be the number of GPUs the run used, a whole number >= 1, got {gpus!r}")
    if gpus > 1 and price is not None and price.gpu is None:
        raise ValueError(f"gpus={gpus} multiplies a price per GPU-hour, but {price} is the whole machine's price per "
                         "hour: pass gpus=1 with the whole machine's price, or a GPU's published price "
                         "(gl.cost.prices()) with the number of GPUs")
    return int(gpus)


def price_note(price: Price, gpus: int = 1) -> str:
    """How a run is priced: ``str(price)``, and for a run on several GPUs the hourly price it pays.

    Example:
        >>> price_note(hourly_price(2.0))
        '$2.00 per hour: your price (price_per_hour given)'
        >>> from gpulab.figures.prices import Price
        >>> p = Price("example-h100", 3.0, "8 x H100", "H100 SXM", 8, "Example", "", "Example page", "https://e.x", "2026-01")
        >>> price_note(p, gpus=8)
        '$24.00 per hour: 8 GPUs x $3.00 per GPU-hour: H100 SXM on Example, on demand (Example page, 2026-01)'
    """
    gpus = gpus_arg(gpus, price)
    if gpus == 1:
        return str(price)
    return f"{_usd(float(price.usd_per_hour) * gpus)} per hour: {gpus} GPUs x {price}"


def cost_per_million(usd_per_hour: float, items_per_s: float | None, gpus: int = 1) -> float | None:
    """US dollars per million items at ``items_per_s``: ``usd_per_hour x gpus / 3600 / items_per_s * 1e6``, where
    ``gpus`` is how many GPUs the run used, each paid ``usd_per_hour`` (a price per GPU-hour; 1 for a whole machine's
    price).

    ``None`` when there is no throughput to price (``None``, zero, negative, NaN or infinite). A price of 0 gives
    0; a negative or non-finite price raises ``ValueError``.

    Example:
        >>> round(cost_per_million(0.35, 500.0), 4)    # $0.35/h at 500 items/s
        0.1944
        >>> round(cost_per_million(2.0, 1000.0, gpus=8), 4)   # 8 GPUs at $2.00 per GPU-hour, 1,000 items/s in all
        4.4444
        >>> cost_per_million(0.35, 0.0) is None
        True
    """
    gpus = gpus_arg(gpus)
    usd = positive("usd_per_hour", usd_per_hour, allow_zero=True, unit="USD per hour") * gpus
    if items_per_s is None:
        return None
    if isinstance(items_per_s, bool) or not isinstance(items_per_s, numbers.Real):
        raise TypeError(f"items_per_s must be a number of items per second or None, got {items_per_s!r:.60}")
    if not math.isfinite(items_per_s) or items_per_s <= 0:
        return None
    return usd / 3600.0 / float(items_per_s) * 1e6


@dataclass(frozen=True, repr=False)
class PriceTable(TableView):
    """Reference prices side by side (immutable): text in a terminal, HTML in Jupyter; ``price(key)`` gives one
    row's :class:`Price`.

    Example:
        >>> t = prices()
        >>> repr(t).splitlines()[1].split()[:3]
        ['key', '$/GPU-hour', 'GPU']
        >>> "<table" in t._repr_html_()
        True
    """

    prices: tuple[Price, ...]
    title: str = "Published on-demand cloud prices"

    def __len__(self) -> int:
        return len(self.prices)

    def price(self, key: str) -> Price:
        """The row called ``key`` (any name :func:`hourly_price` accepts)."""
        return hourly_price(key)

    def _columns(self) -> tuple[list[str], list[Any], str]:
        header = ["key", "$/GPU-hour", "GPU", "instance", "provider", "region", "date", "source"]
        rows = [[p.key, _usd(float(p.usd_per_hour)) + ("" if p.gpu is not None else " (machine)"),
                 p.gpu or "CPU only", p.instance, p.provider, p.region, p.date, p.source] for p in self.prices]
        footer = ("published on-demand list prices on the dates given, not what any account pays (discounts, "
                  "commitments and spot prices differ); a cost figure divides the price by the throughput you "
                  "measured" + ("" if self.prices else "; no reference price is listed: pass your own"))
        return header, rows, footer


def prices() -> PriceTable:
    """Every reference price as a :class:`PriceTable` (key, $/GPU-hour, GPU, instance, provider, region, date,
    source), each read on the provider's own pricing page.

    Example:
        >>> len(prices()) == len(set(p.key for p in prices().prices))
        True
    """
    return PriceTable(tuple(PRICES))
