"""The learner's figures beside published ones: citations, datasheet peaks and the closing table of a lesson.

:func:`your_numbers` builds the "your numbers vs published" table that ends each lesson from rows made by
:func:`measured`: the learner's figure, the published figure(s) it is compared with, their hardware and
source, and the ratio of the two where both are numbers in the same unit. :func:`cite` words published
figures for text, :func:`datasheet` turns a GPU's datasheet peak into a citable figure, and
:func:`published_curve` reads the points of a published curve from the reference data.

Example:
    >>> t = your_numbers([measured("fp32 matmul peak", 0.5, "TFLOP/s", vs=datasheet("T4", "fp32"))])
    >>> row = t.to_dataframe().iloc[0]
    >>> row["published"], round(float(row["ratio_low"]), 3)
    ('8.1 TFLOP/s', 0.062)
    >>> cite("amp-pytorch")
    '2-3x on NVIDIA Volta, Turing, Ampere GPUs'
"""
from __future__ import annotations

import difflib
import math
import os
import numbers
import re
from collections import abc
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Sequence

from ..._check import whole
from ..._format import NA, TableView, fmt_number
from ...reference import PUBLISHED, Published, gpu_spec

__all__ = ["Cited", "Measured", "YourNumbers", "by_this_course", "cite", "datasheet", "measured", "published_curve",
           "your_numbers"]


@dataclass(frozen=True)
class Cited:
    """One published figure with its provenance. ``low``/``high`` bound it in ``unit`` (equal for one value).

    Example:
        >>> str(datasheet("T4", "bandwidth"))
        '320 GB/s on T4, memory bandwidth (NVIDIA T4 datasheet)'
    """

    figure: str          # as text, e.g. "2-3x" or "8.1 TFLOP/s"
    low: float
    high: float
    unit: str
    hardware: str
    source: str
    url: str
    date: str = ""
    key: str | None = None   # the key of gpulab.published, when it comes from there

    def __str__(self) -> str:
        return f"{self.figure} on {self.hardware} ({self.source})"


def _lookup(key: Any) -> Published:
    if not isinstance(key, str):
        raise TypeError(f"a published figure is named by its key (a str, see gl.references()), got {key!r}")
    if key not in PUBLISHED:
        near = difflib.get_close_matches(key, list(PUBLISHED), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(map(repr, near))}?" if near else "; gl.references() lists them all"
        raise ValueError(f"no published figure {key!r}{hint}")
    return PUBLISHED[key]


def _cited(p: Published) -> Cited:
    return Cited(p.figure, float(p.low), float(p.high), p.unit.strip(), p.hardware, p.source, p.url, p.date, p.key)


def cite(*keys: str, source: bool = False) -> str:
    """Published figures named by their keys, worded for a table or a sentence: ``"figure on hardware"``,
    joined by ``"; "``; ``source=True`` adds each one's source in brackets.

    Example:
        >>> cite("amp-hf-v100", "mamf-a100")
        '2.1x on NVIDIA Tesla V100-SXM2 16GB; 86% of peak on NVIDIA A100 SXM (CUDA 12.1)'
    """
    if not keys:
        raise ValueError("cite needs at least one key of a published figure, e.g. cite('amp-pytorch')")
    if not isinstance(source, bool):
        raise TypeError(f"source must be True or False, got {source!r}")
    figures = [_lookup(k) for k in keys]
    return "; ".join(f"{p.figure} on {p.hardware}" + (f" ({p.source})" if source else "") for p in figures)


# quantity -> (GPUSpec attribute, divisor, unit, words)
_DATASHEET = {
    "fp32": ("fp32_flops", 1e12, "TFLOP/s", "fp32 peak"),
    "tf32": ("tf32_tensor_flops", 1e12, "TFLOP/s", "tf32 tensor-core peak"),
    "fp16": ("fp16_tensor_flops", 1e12, "TFLOP/s", "fp16 tensor-core peak"),
    "bf16": ("bf16_tensor_flops", 1e12, "TFLOP/s", "bf16 tensor-core peak"),
    "bandwidth": ("bandwidth_bytes_per_s", 1e9, "GB/s", "memory bandwidth"),
    "memory": ("memory_bytes", 2**30, "GiB", "memory"),
}
DatasheetQuantity = Literal["fp32", "tf32", "fp16", "bf16", "16-bit", "bandwidth", "memory"]


def datasheet(gpu: str, quantity: DatasheetQuantity) -> Cited:
    """A datasheet peak of ``gpu`` (any name :func:`gpulab.gpu_spec` accepts) as a citable figure, in TFLOP/s
    (``"fp32"``, ``"tf32"``, ``"fp16"``, ``"bf16"``), GB/s (``"bandwidth"``) or GiB (``"memory"``).
    ``"16-bit"`` is the bf16 tensor-core peak where the datasheet lists one, else the fp16 one (a T4).
    ``"memory"`` is what ``nvidia-smi`` shows (a T4's 15 GiB, its datasheet's 16 GB less what ECC keeps).

    Example:
        >>> datasheet("T4", "16-bit").figure, datasheet("T4", "16-bit").hardware
        ('65 TFLOP/s', 'T4, fp16 tensor-core peak')
    """
    if not isinstance(gpu, str):
        raise TypeError(f"gpu must be a GPU name such as 'T4', got {gpu!r}")
    if quantity not in (*_DATASHEET, "16-bit"):
        raise ValueError(f"quantity must be one of {[*_DATASHEET, '16-bit']}, got {quantity!r}")
    spec = gpu_spec(gpu)
    if quantity == "16-bit":
        quantity = "bf16" if spec.bf16_tensor_flops else "fp16"
    field, divisor, unit, words = _DATASHEET[quantity]
    raw = getattr(spec, field)
    if raw is None:
        raise ValueError(f"the {spec.name} datasheet lists no {words} (quantity {quantity!r}); "
                         f"'16-bit' picks the tensor-core type the card has")
    value = raw / divisor
    if quantity == "memory" and spec.datasheet_memory_bytes:     # a T4: what nvidia-smi shows, not the 16 GB
        words = f"memory as nvidia-smi shows it (datasheet: {spec.datasheet_memory_bytes / divisor:g} GB)"
    return Cited(f"{fmt_number(value)} {unit}", value, value, unit, f"{spec.name}, {words}", spec.source, spec.url,
                 key=None)


def by_this_course(figure: str, *, unit: str | None = None, root: Any = None) -> tuple[Cited, ...]:
    """The figure ``figure`` as this course's own check measured it on real GPUs (the ledger of GPU runs,
    ``tests/gpu/runs`` of the course's checkout): the newest run on each GPU, as figures to set beside the published
    ones (``vs=[..., *course.by_this_course("capstone_fastest_vs_seed")]``), or ``()`` where the ledger has none
    (never measured, or no checkout here). ``unit="fraction"`` turns a ``%`` figure into a fraction.

    Example:
        >>> all(c.source.startswith("measured by this course") for c in by_this_course("capstone_fastest_vs_seed"))
        True
    """
    from ...preflight import find_course
    from ...preflight.ledger import figure_runs, ledger_folder, read_ledger

    if not isinstance(figure, str) or not figure:
        raise TypeError(f"figure must be a figure's name in the ledger, e.g. 'capstone_fastest_vs_seed', got {figure!r}")
    if unit is not None and not isinstance(unit, str):
        raise TypeError(f"unit must be a text such as 'fraction' or 'x', or None, got {unit!r}")
    if root is not None and not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"root must be the course's folder (a path) or None, got {type(root).__name__} {root!r}")
    try:
        course = find_course(root)
    except ValueError:
        course = None
    newest: dict[str, dict[str, Any]] = {}
    for f in figure_runs(read_ledger(ledger_folder(course)), figure):
        newest.setdefault(f["gpu"], f)
    out = []
    for gpu, f in newest.items():
        value, have = float(f["value"]), f["unit"]
        if unit == "fraction" and have == "%":
            value, have = value / 100, "fraction"
        elif unit is not None and _unit(unit) != _unit(have):
            raise ValueError(f"the ledger's {figure!r} is in {have!r}, not {unit!r}")
        text = f"{value:.0%}" if have == "fraction" else _with_unit(value, have)
        note = " ".join(str(f.get("note") or "").split())
        commit = (f" at commit {f['commit'][:7]}" + (" with uncommitted changes" if f.get("dirty") else "")
                  if f.get("commit") else "")
        out.append(Cited(text, value, value, have, f"{gpu}" + (f" ({note[:90]})" if note else ""),
                         f"measured by this course{commit}" + (", transcribed from its report" if f["transcribed"]
                                                                else ""), "tests/gpu/runs", f["date"]))
    return tuple(out)


def published_curve(key: str) -> tuple[tuple[int, float], ...]:
    """The ``(x, value)`` points a published figure's claim lists as ``"<value> at <x>"`` (e.g.
    ``"652 at 8"`` or ``"79 img/s at batch 1"``), sorted by ``x``. When the figure is a ratio (unit ``"x"``), the
    last value over the first must agree with it, so a reworded claim cannot silently give other numbers.

    Example:
        >>> published_curve("resnet50-t4-batch-1-to-256")[:2]
        ((1, 79.0), (8, 652.0))
    """
    p = _lookup(key)
    found = re.findall(r"(\d[\d,]*(?:\.\d+)?)(?: [a-zA-Z/]+)? at (?:batch )?(\d+)\b", p.claim)
    points = tuple(sorted({int(x): float(v.replace(",", "")) for v, x in found}.items()))
    if len(points) < 2:
        raise ValueError(f"published figure {key!r} lists no curve ('<value> at <x>' pairs) in its claim")
    ratio = points[-1][1] / points[0][1]
    if p.unit.strip() == "x" and not math.isclose(ratio, p.low, rel_tol=0.01) and not p.low <= ratio <= p.high:
        raise ValueError(f"the curve of {key!r} gives {ratio:.3g}x from first to last point, but its figure is "
                         f"{p.figure}: the claim and the figure disagree")
    return points


# ----------------------------------------------------------------------------------------------
def _unit(u: str) -> str:
    return u.strip()


def _with_unit(value: float, unit: str, digits: int = 3) -> str:
    if unit == "fraction":
        return f"{100 * value:.{max(digits - 3, 0)}f}%"
    text = fmt_number(value, digits)
    if not unit:
        return text
    return text + unit if unit[0] in "x%" else f"{text} {unit}"


@dataclass(frozen=True)
class Measured:
    """One row of :func:`your_numbers`: the learner's figure and what it is compared with (see :func:`measured`).

    Example:
        >>> measured("copy", 11.5, "GB/s", vs="pinned-pcie-gen3").yours_text
        '11.5 GB/s'
    """

    quantity: str
    yours: float | str | None
    unit: str
    cited: tuple[Cited, ...]
    claim: str | None = None
    source: str | None = None
    note: str = ""
    noisy: bool = False
    digits: int = 3

    @property
    def yours_text(self) -> str:
        if self.yours is None:
            return NA
        return self.yours if isinstance(self.yours, str) else _with_unit(self.yours, self.unit, self.digits)

    def ratio(self, c: Cited) -> tuple[float, float] | None:
        """``yours / published`` against ``c``, from its high to its low end; None unless both are positive
        numbers in the same unit."""
        if (not isinstance(self.yours, float) or self.yours <= 0 or _unit(c.unit) != self.unit or c.low <= 0
                or c.high <= 0):
            return None
        return self.yours / c.high, self.yours / c.low


def measured(quantity: str, yours: float | str | None, unit: str = "", *,
             vs: str | Published | Cited | Sequence[str | Published | Cited] = (), claim: str | None = None,
             source: str | None = None, note: str = "", noisy: bool = False, digits: int = 3) -> Measured:
    """A row for :func:`your_numbers`.

    Args:
        quantity: what was measured, e.g. ``"bf16 training speedup"``.
        yours: the learner's figure: a number in ``unit``, a text (``"batch 64"``), or None (not measured here).
        unit: the unit of a numeric ``yours``: ``"x"``, ``"GB/s"``, ``"TFLOP/s"``, ``"fraction"`` (shown as %)...
        vs: published figures to compare with: keys of :func:`gpulab.published`, ``Published`` objects or
            :func:`datasheet` figures. Each gets its own line with hardware and source, and the ratio
            ``yours / published`` where its unit equals ``unit``.
        claim, source: a published statement that is not a figure (``"equal up to rounding"``) and where it is from.
        note: a remark shown beside the row (what differs between the two setups).
        noisy: the measurement was noisy: the row is marked ``*`` and its ratio is not shown.
        digits: significant digits of a numeric ``yours`` (a ``"fraction"`` shows ``digits - 3`` decimals of %).

    Example:
        >>> measured("copy", 11.5, "GB/s", vs="pinned-pcie-gen3").ratio(datasheet("T4", "bandwidth"))
        (0.0359375, 0.0359375)
    """
    if not isinstance(quantity, str) or not quantity.strip():
        raise ValueError(f"quantity must be a non-empty text naming what was measured, got {quantity!r}")
    if isinstance(yours, bool) or not (yours is None or isinstance(yours, (numbers.Real, str))):
        raise TypeError(f"yours for {quantity!r} must be a number, a text or None, got {yours!r}")
    if isinstance(yours, numbers.Real):
        yours = float(yours)
        if math.isnan(yours):
            yours = None
        elif math.isinf(yours):
            raise ValueError(f"yours for {quantity!r} must be finite, got {yours!r}")
    for name, value in (("unit", unit), ("note", note)):
        if not isinstance(value, str):
            raise TypeError(f"{name} for {quantity!r} must be a text, got {value!r}")
    for name, value in (("claim", claim), ("source", source)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} for {quantity!r} must be a text or None, got {value!r}")
    if not isinstance(noisy, bool):
        raise TypeError(f"noisy for {quantity!r} must be True or False, got {noisy!r}")
    whole(f"digits for {quantity!r}", digits)
    if isinstance(vs, (str, Published, Cited)):
        items = [vs]
    elif isinstance(vs, Iterable):
        items = list(vs)
    else:
        raise TypeError(f"vs for {quantity!r} must be a key of gl.published, a Published, a course.datasheet figure "
                        f"or a list of them, got {vs!r}")
    cited = []
    for item in items:
        if isinstance(item, Cited):
            cited.append(item)
        elif isinstance(item, Published):
            cited.append(_cited(item))
        elif not isinstance(item, str):
            raise TypeError(f"vs for {quantity!r} must hold keys of gl.published, Published or course.datasheet "
                            f"figures, got {item!r:.60}")
        else:
            cited.append(_cited(_lookup(item)))
    return Measured(quantity, yours, _unit(unit), tuple(cited), claim, source, note, noisy, digits)


@dataclass(frozen=True, repr=False)
class YourNumbers(TableView):
    """The learner's figures beside published ones (immutable); one line per published figure.
    ``to_dataframe()`` gives the numbers unformatted.

    Example:
        >>> t = your_numbers([measured("speedup", 1.2, "x", vs=["amp-pytorch", "amp-hf-v100"])])
        >>> t.to_dataframe()["published"].tolist()
        ['2-3x', '2.1x']
    """

    rows: tuple[Measured, ...]
    title: str = "Your numbers vs published"

    def __post_init__(self) -> None:
        if not self.rows:
            raise ValueError("your_numbers needs at least one row (from course.measured)")
        bad = [type(r).__name__ for r in self.rows if not isinstance(r, Measured)]
        if bad:
            raise TypeError(f"your_numbers takes rows made by course.measured(...), got {', '.join(bad)}")
        names = [r.quantity for r in self.rows]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"quantities must be unique, repeated: {dupes}")

    def _lines(self) -> list[tuple[Measured, Cited | None, bool]]:
        """(row, cited figure or None for a claim, first line of the row)."""
        out: list[tuple[Measured, Cited | None, bool]] = []
        for r in self.rows:
            parts: list[Cited | None] = [*r.cited] + ([None] if r.claim is not None or not r.cited else [])
            out += [(r, c, i == 0) for i, c in enumerate(parts)]
        return out

    def to_dataframe(self) -> Any:
        """One line per published figure: quantity, yours (number or None), yours_text, unit, published,
        published_low/high, hardware, source, date, url, ratio_low/high (NaN where not comparable), note, noisy."""
        import pandas as pd

        nan = float("nan")
        recs = []
        for r, c, _ in self._lines():
            ratio = None if c is None or r.noisy else r.ratio(c)
            recs.append({
                "quantity": r.quantity, "yours": r.yours if isinstance(r.yours, float) else nan,
                "yours_text": r.yours_text, "unit": r.unit,
                "published": c.figure if c else (r.claim or ""),
                "published_low": c.low if c else nan, "published_high": c.high if c else nan,
                "hardware": c.hardware if c else "", "source": c.source if c else (r.source or ""),
                "date": c.date if c else "", "url": c.url if c else "",
                "ratio_low": ratio[0] if ratio else nan, "ratio_high": ratio[1] if ratio else nan,
                "note": r.note, "noisy": r.noisy})
        return pd.DataFrame(recs)

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        show_note = any(r.note for r in self.rows)
        header = ["quantity", "yours", "published", "hardware", "source", "yours / published"]
        header += ["note"] if show_note else []
        rows = []
        for r, c, first in self._lines():
            ratio = None if c is None or r.noisy else r.ratio(c)
            if ratio is None:
                ratio_text = ""
            else:
                lo, hi = (fmt_number(v, digits=2) for v in ratio)
                ratio_text = lo if lo == hi else f"{lo}-{hi}"
            source = (f"{c.source} ({c.date})" if c.date else c.source) if c else (r.source or "")
            line = [r.quantity if first else "", (r.yours_text + (" *" if r.noisy else "")) if first else "",
                    c.figure if c else (r.claim or ""), c.hardware if c else "", source, ratio_text]
            line += [r.note if first else ""] if show_note else []
            rows.append(line)
        notes = ["yours: measured here; yours / published only where both are numbers in the same unit"]
        if any(r.noisy for r in self.rows):
            notes.append("* noisy measurement: re-run before comparing")
        return header, rows, "; ".join(notes)


def your_numbers(rows: Iterable[Measured], *, title: str = "Your numbers vs published") -> YourNumbers:
    """The closing table of a lesson: each of the learner's figures (rows from :func:`measured`) beside the
    published figures it is compared with, their hardware and source, and ``yours / published``.

    Example:
        >>> table = your_numbers([measured("speedup", 1.4, "x", vs="amp-pytorch")])
        >>> float(table.to_dataframe().loc[0, "ratio_high"])
        0.7
    """
    if not isinstance(title, str):
        raise TypeError(f"title must be a text, got {title!r}")
    if isinstance(rows, Measured):
        raise TypeError("your_numbers takes a list of rows: your_numbers([course.measured(...), ...])")
    if isinstance(rows, (str, bytes)) or not isinstance(rows, abc.Iterable):
        raise TypeError(f"rows must be a list of course.measured(...) rows, got {type(rows).__name__} {rows!r:.60}")
    return YourNumbers(tuple(rows), title)
