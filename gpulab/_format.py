"""Human formatting of numbers with units: the one place where values become text."""
from __future__ import annotations

import html
import math
from typing import Iterable, Sequence

__all__ = ["fmt_bytes", "fmt_seconds", "fmt_rate", "fmt_flops", "fmt_number", "html_table", "text_table"]

NA = "N/A"


def _missing(x: float | None) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def fmt_seconds(s: float | None, digits: int = 3) -> str:
    """``fmt_seconds(0.00123)`` -> ``'1.23 ms'``."""
    if _missing(s):
        return NA
    a = abs(s)
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if a >= scale or unit == "ns":
            return f"{s / scale:.{digits}g} {unit}"
    return f"{s:.{digits}g} s"  # pragma: no cover


def _si(x: float, units: Sequence[str], base: float, digits: int) -> str:
    i = 0
    while abs(x) >= base and i < len(units) - 1:
        x /= base
        i += 1
    if abs(float(f"{x:.{digits}g}")) >= base and i < len(units) - 1:   # 999.7 GB/s rounds to 1 TB/s
        x /= base
        i += 1
    text = f"{x:.0f}" if abs(float(f"{x:.{digits}g}")) >= 10**digits else f"{x:.{digits}g}"   # 999.5 MiB: "1000"
    return f"{text} {units[i]}"


def fmt_bytes(n: float | None, digits: int = 3) -> str:
    """Binary units: ``fmt_bytes(3 * 2**30)`` -> ``'3 GiB'``."""
    if _missing(n):
        return NA
    return _si(float(n), ("B", "KiB", "MiB", "GiB", "TiB", "PiB"), 1024.0, digits)


def fmt_rate(x: float | None, unit: str = "B/s", digits: int = 3) -> str:
    """Decimal SI rate: ``fmt_rate(2.9e10)`` -> ``'29 GB/s'``."""
    if _missing(x):
        return NA
    return _si(float(x), tuple(p + unit for p in ("", "k", "M", "G", "T", "P", "E")), 1000.0, digits)


def fmt_flops(x: float | None, digits: int = 3) -> str:
    """``fmt_flops(1.9e11)`` -> ``'190 GFLOP/s'``."""
    return fmt_rate(x, "FLOP/s", digits)


def fmt_number(x: float | None, digits: int = 3) -> str:
    """Compact number: ``fmt_number(12345.6)`` -> ``'1.23e+04'`` style only when needed."""
    if _missing(x):
        return NA
    if isinstance(x, int) or (abs(x) >= 1 and float(x).is_integer() and abs(x) < 1e7):
        return f"{int(x):,}"
    if 1e-3 <= abs(x) < 1e7:
        return f"{x:,.{digits}g}" if abs(x) < 1000 else f"{x:,.0f}"
    return f"{x:.{digits}g}"


def text_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A plain aligned table (no colour codes)."""
    rows = [list(map(str, r)) for r in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in rows)) if rows else len(str(h)) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    out = [line(list(map(str, header))), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)


def html_table(header: Sequence[str], rows: Iterable[Sequence[str]], caption: str | None = None,
               footer: str | None = None) -> str:
    """A small HTML table; every cell is escaped."""
    e = html.escape
    parts = ['<table class="gpulab">']
    if caption:
        parts.append(f'<caption style="text-align:left;font-weight:bold">{e(caption)}</caption>')
    parts.append("<thead><tr>" + "".join(f"<th>{e(str(h))}</th>" for h in header) + "</tr></thead><tbody>")
    for r in rows:
        parts.append("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in r) + "</tr>")
    parts.append("</tbody></table>")
    if footer:
        parts.append(f'<div style="font-size:smaller;color:#555">{e(footer)}</div>')
    return "".join(parts)


class TableView:
    """Mixin for result objects shown as one table: subclasses give ``title`` and ``_columns()``
    (header, rows, footer); this renders them as text in a terminal and HTML in Jupyter."""

    title: str

    def _columns(self) -> tuple[Sequence[str], list[Sequence[str]], str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        header, rows, footer = self._columns()
        return f"{self.title}\n{text_table(header, rows)}\n{footer}"

    def _repr_html_(self) -> str:
        header, rows, footer = self._columns()
        return html_table(header, rows, caption=self.title, footer=footer)
