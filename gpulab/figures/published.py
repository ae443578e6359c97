"""The :class:`Published` record: one published claim with its figure, hardware, source and date."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Published"]


@dataclass(frozen=True)
class Published:
    """One published claim. ``low``/``high`` bound the figure (equal for a single value)."""

    key: str
    claim: str
    low: float
    high: float
    unit: str            # "x" for a speedup ratio, "fraction" for a share of peak, ...
    hardware: str
    source: str
    url: str
    date: str            # when the source was published or last checked (YYYY or YYYY-MM)
    note: str = ""

    @property
    def figure(self) -> str:
        """The figure as text, e.g. ``'2-3x'`` or ``'80-86% of peak'``."""
        if self.unit == "fraction":
            lo, hi = f"{self.low:.0%}", f"{self.high:.0%}"
            return (lo if self.low == self.high else f"{lo[:-1]}-{hi}") + " of peak"
        lo, hi = f"{self.low:g}", f"{self.high:g}"
        return (lo if self.low == self.high else f"{lo}-{hi}") + self.unit

    def __str__(self) -> str:
        return f"{self.figure} on {self.hardware} ({self.source}, {self.date})"

    def __repr__(self) -> str:
        return f"{self}: {self.claim} {self.url}"

    def _repr_html_(self) -> str:
        return (f'<b>{self.figure}</b> on {self.hardware} - <a href="{self.url}" target="_blank">{self.source}</a>'
                f" ({self.date}). {self.claim}")
