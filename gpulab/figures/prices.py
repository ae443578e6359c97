"""Published on-demand cloud prices, as data with provenance: the :class:`Price` record and the ``PRICES`` table
that :mod:`gpulab.cost` reads.

A price enters ``PRICES`` with a dated record of the provider's own list price: its page, or a dataset that records
the provider's price list with the day it was retrieved (said so in ``source``). Prices quoted without a date or a
provider behind them stay out. List prices change; each entry says when it was seen and what it covers (a GPU alone,
or a whole instance divided by its GPUs). For your own machine or contract, pass your price instead
(:func:`gpulab.cost.hourly_price`).

Example:
    >>> p = Price("example-t4", 0.35, "1 x T4 attached to a VM (GPU only)", "T4", 1, "Example Cloud", "us-central1",
    ...           "Example pricing page", "https://example.com/pricing", "2025-06")
    >>> str(p)
    '$0.35 per GPU-hour: T4 on Example Cloud us-central1, on demand (Example pricing page, 2025-06)'
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

__all__ = ["Price", "PRICES"]


def _usd(x: float) -> str:
    """Dollars as prices are written: two decimals ($0.10, $2.74), three figures below a cent's precision ($0.526)."""
    return f"${x:,.2f}" if x >= 0.995 or abs(x * 100 - round(x * 100)) < 1e-9 else f"${x:.3g}"


@dataclass(frozen=True)
class Price:
    """A published on-demand price per GPU-hour (the instance's price divided by its GPUs), with provenance.

    ``gpu`` is the GPU as :func:`gpulab.gpu_spec` knows it (``"T4"``, ``"A100 40GB SXM"``, ``"H100 SXM"``), or
    ``None`` for a CPU machine, whose ``usd_per_hour`` is the machine's whole price. ``date`` is ``"YYYY-MM"``, the
    month the page showed the price; ``note`` says what the price covers and what it leaves out.
    """

    key: str
    usd_per_hour: float
    instance: str
    gpu: str | None
    gpus: int
    provider: str
    region: str
    source: str
    url: str
    date: str
    note: str = ""

    def __post_init__(self) -> None:
        x = self.usd_per_hour
        if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x) or x <= 0:
            raise ValueError(f"Price {self.key!r}: usd_per_hour must be a positive finite number, got {x!r}")
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, numbers.Integral) or self.gpus < 1:
            raise ValueError(f"Price {self.key!r}: gpus must be a whole number >= 1, got {self.gpus!r}")

    @property
    def per(self) -> str:
        """``"GPU-hour"`` for a GPU's price, ``"hour"`` for a CPU machine or a price given by hand."""
        return "hour" if self.gpu is None else "GPU-hour"

    def __str__(self) -> str:
        if not self.url:                     # a price given by hand: no page behind it
            return f"{_usd(float(self.usd_per_hour))} per {self.per}: {self.instance} ({self.source})"
        what = self.gpu if self.gpu is not None else self.instance
        where = " ".join(s for s in (self.provider, self.region) if s)
        origin = ", ".join(s for s in (self.source, self.date) if s)
        return f"{_usd(float(self.usd_per_hour))} per {self.per}: {what} on {where}, on demand ({origin})"


_RECEIPTS = ("{vendor} on-demand list price as recorded by the data-receipts GPU pricing dataset (retrieved 2026-11-09)",
             "https://raw.githubusercontent.com/datareceipts/data-receipts/main/109-gpu-pricing/hyperscalers.json")
_TODAY = "check the provider's page for today's price"

# Dated records of providers' list prices (Linux, on demand). No T4 price with such a record could be checked: a T4
# learner passes their own price (Colab bills compute units, not hours).
PRICES: tuple[Price, ...] = (
    Price("aws-p4d-a100-40gb", 21.957642 / 8, "p4d.24xlarge (8 x A100 40GB SXM, $21.96 per hour)", "A100 40GB SXM", 8,
          "AWS", "us-east-1", _RECEIPTS[0].format(vendor="AWS EC2"), _RECEIPTS[1], "2026-11",
          f"the whole instance (8 GPUs, 96 vCPUs, 1152 GiB memory) divided by its 8 GPUs; {_TODAY}: "
          "https://aws.amazon.com/ec2/pricing/on-demand/"),
    Price("aws-p5-h100", 55.04 / 8, "p5.48xlarge (8 x H100 SXM, $55.04 per hour)", "H100 SXM", 8,
          "AWS", "us-east-1", _RECEIPTS[0].format(vendor="AWS EC2"), _RECEIPTS[1], "2026-11",
          f"the whole instance (8 GPUs, 192 vCPUs, 2 TiB memory) divided by its 8 GPUs; {_TODAY}: "
          "https://aws.amazon.com/ec2/pricing/on-demand/"),
    Price("azure-nc24ads-a100-80gb", 3.673, "Standard_NC24ads_A100_v4 (1 x A100 80GB PCIe)", "A100 80GB PCIe", 1,
          "Azure", "eastus", _RECEIPTS[0].format(vendor="Azure"), _RECEIPTS[1], "2026-11",
          f"the whole VM with its one GPU; {_TODAY}: https://azure.microsoft.com/pricing/details/virtual-machines/linux/"),
)
