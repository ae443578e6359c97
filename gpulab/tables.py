"""Comparison tables: variants side by side with speedup, memory, share of the machine's limit,
and the published figure beside your own.

Example:
    >>> import gpulab as gl
    >>> a = gl.benchmark(sum, range(20000), label="big", min_run_time=0.05, items=1)
    >>> b = gl.benchmark(sum, range(2000), label="small", min_run_time=0.05, items=1)
    >>> table = gl.compare([a, b], baseline="big")
    >>> table.speedup("small") > 1
    True
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ._check import axes, checked, mapping, rows_arg, table_rows
from ._format import TableView, NA, fmt_bytes, fmt_number, fmt_rate, fmt_seconds, html_table, text_table
from .limits import ceiling_for
from .reference import Published, published
from .timing import Measurement

__all__ = ["Comparison", "compare"]

_TIME_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"))


def _time_unit(medians: Sequence[float]) -> tuple[float, str]:
    """One unit for the whole table: the largest that keeps the smallest value >= 1."""
    smallest = min(medians)
    for scale, unit in _TIME_UNITS:
        if smallest >= scale:
            return scale, unit
    return _TIME_UNITS[-1]


@dataclass(frozen=True, repr=False)
class Comparison(TableView):
    """Measurements side by side (immutable). ``to_dataframe()`` gives the numbers unformatted.

    Columns: median time, IQR as % of the median, items/s, speedup vs ``baseline``, peak memory,
    achieved FLOP/s or bandwidth and their share of ``peak_flops`` / ``peak_bandwidth`` (the
    machine's measured limit), joules per item (per call without ``items``) where the device's energy counter
    was read, the cost per million items at ``price`` (a :class:`~gpulab.cost.Price`: an hourly price given
    or published) and the measured throughput, and the published figure for the row when one is given.
    ``energy``: None shows the energy column when a row has a figure, True always (rows without one say
    "not measurable"), False never.
    """

    measurements: tuple[Measurement, ...]
    baseline: str
    title: str = "Comparison"
    peak_flops: float | None = None
    peak_bandwidth: float | None = None
    published: Mapping[str, Published] = field(default_factory=dict)
    setup_s: Mapping[str, float] = field(default_factory=dict)   # one-off cost per row (compile, export)
    price: Any = None            # gpulab.cost.Price: the hourly price the cost column uses
    energy: bool | None = None
    gpus: int = 1                # GPUs the measured work used: a price per GPU-hour is paid this many times
    # the ceilings the shares divide by: the given ones, raised to a row's rate when it ran faster
    flops_ceiling: float | None = field(init=False)
    bandwidth_ceiling: float | None = field(init=False)
    ceiling_notes: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        labels = table_rows(self.measurements, Measurement, "gl.benchmark", self.baseline, self.published,
                            name="measurements", published_name="published_figures")
        for k, v in self.setup_s.items():
            if k not in labels:
                raise ValueError(f"setup_s given for unknown label {k!r}; labels are {labels}")
            if not (isinstance(v, (int, float)) and v >= 0 and math.isfinite(v)):
                raise ValueError(f"setup_s[{k!r}] must be seconds >= 0, got {v!r}")
        for name in ("peak_flops", "peak_bandwidth"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
                raise ValueError(f"{name} must be a positive rate per second, got {v!r}")
        flops, n1 = ceiling_for(self.peak_flops, [(m.label, m.flops_per_s) for m in self.measurements])
        bw, n2 = ceiling_for(self.peak_bandwidth, [(m.label, m.bytes_per_s) for m in self.measurements], "B/s")
        object.__setattr__(self, "flops_ceiling", flops)
        object.__setattr__(self, "bandwidth_ceiling", bw)
        object.__setattr__(self, "ceiling_notes", tuple(n for n in (n1, n2) if n))

    def measurement(self, label: str) -> Measurement:
        for m in self.measurements:
            if m.label == label:
                return m
        raise KeyError(f"no measurement {label!r}; labels: {[m.label for m in self.measurements]}")

    def speedup(self, label: str) -> float:
        """Baseline median time / this row's median time (>1 is faster)."""
        return self.measurement(self.baseline).median_s / self.measurement(label).median_s

    def break_even_calls(self, label: str) -> float | None:
        """Calls after which ``label``'s one-off cost (``setup_s``) is paid back by its faster calls, counted
        against the baseline's time per call; None when it is not faster or has no one-off cost."""
        cost = self.setup_s.get(label)
        saved = self.measurement(self.baseline).median_s - self.measurement(label).median_s
        if cost is None or saved <= 0:
            return None
        return cost / saved

    def joules_per_item(self, label: str) -> float | None:
        """Joules per item of ``label`` (per call when it has no ``items``); None where energy was not measurable."""
        m = self.measurement(label)
        return m.joules_per_call if m.items is None else m.joules_per_item

    def cost_per_million(self, label: str) -> float | None:
        """USD per million items of ``label`` (calls without ``items``) at ``price`` and its measured throughput."""
        m = self.measurement(label)
        if self.price is None:
            return None
        from .cost import cost_per_million

        return cost_per_million(self.price.usd_per_hour, m.items_per_s if m.items is not None else 1 / m.median_s,
                                self.gpus)

    def to_dataframe(self) -> Any:
        """The table as a pandas DataFrame of raw numbers (seconds, items/s, bytes, fractions)."""
        import pandas as pd

        rows = []
        for m in self.measurements:
            pub = self.published.get(m.label)
            rows.append({
                "label": m.label,
                "median_s": m.median_s,
                "iqr_pct": 100 * m.relative_iqr,
                "runs": m.runs,
                "items_per_s": m.items_per_s,
                "speedup": self.speedup(m.label),
                "peak_memory_bytes": m.peak_memory_bytes,
                "flops_per_s": m.flops_per_s,
                "fraction_of_peak_flops": (m.flops_per_s / self.flops_ceiling
                                           if self.flops_ceiling and m.flops_per_s is not None else None),
                "bytes_per_s": m.bytes_per_s,
                "fraction_of_peak_bandwidth": (m.bytes_per_s / self.bandwidth_ceiling
                                               if self.bandwidth_ceiling and m.bytes_per_s is not None else None),
                "joules_per_item": self.joules_per_item(m.label),
                "usd_per_million": self.cost_per_million(m.label),
                "noisy": m.noisy,
                "setup_s": self.setup_s.get(m.label),
                "break_even_calls": self.break_even_calls(m.label),
                "published": str(pub) if pub else None,
            })
        return pd.DataFrame(rows).set_index("label")

    # ---- rendering -------------------------------------------------------------------------
    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        scale, unit = _time_unit([m.median_s for m in self.measurements])
        ms = self.measurements
        show_items = any(m.items is not None for m in ms)
        show_mem = any(m.peak_memory_bytes is not None for m in ms)
        show_flops = any(m.flops is not None for m in ms)
        show_bw = any(m.bytes_moved is not None for m in ms)
        header = ["variant", f"median ({unit})", "IQR"]
        header += ["items/s"] if show_items else []
        header += [f"speedup vs {self.baseline}"]
        header += ["one-off cost", "break-even"] if self.setup_s else []
        header += ["peak memory"] if show_mem else []
        header += ["achieved"] if show_flops else []
        header += ["% of peak FLOP/s"] if show_flops and self.peak_flops else []
        header += ["bandwidth"] if show_bw else []
        header += ["% of peak bandwidth"] if show_bw and self.peak_bandwidth else []
        per = "item" if show_items else "call"
        show_j = self.energy or (self.energy is None and any(self.joules_per_item(m.label) is not None for m in ms))
        joules = [j for m in ms if (j := self.joules_per_item(m.label)) is not None]
        j_scale, j_unit = (1e3, "mJ") if joules and max(joules) < 0.1 else (1.0, "J")
        header += [f"{j_unit} per {per}"] if show_j else []
        header += [f"$ per 1M {per}s"] if self.price is not None else []
        header += ["published"] if self.published else []
        rows = []
        for m in ms:
            r = [m.label + (" *" if m.noisy else ""), f"{m.median_s / scale:.4g}", f"{m.relative_iqr:.0%}"]
            r += [fmt_number(m.items_per_s)] if show_items else []
            r += [f"{self.speedup(m.label):.2f}x"]
            if self.setup_s:
                cost, be = self.setup_s.get(m.label), self.break_even_calls(m.label)
                r += [NA if cost is None else fmt_seconds(cost),
                      NA if cost is None else ("never" if be is None else f"{fmt_number(math.ceil(be))} calls")]
            r += [fmt_bytes(m.peak_memory_bytes)] if show_mem else []
            r += [fmt_rate(m.flops_per_s, "FLOP/s")] if show_flops else []
            if show_flops and self.peak_flops:
                r += [NA if m.flops_per_s is None else f"{m.flops_per_s / self.flops_ceiling:.0%}"]
            r += [fmt_rate(m.bytes_per_s)] if show_bw else []
            if show_bw and self.peak_bandwidth:
                r += [NA if m.bytes_per_s is None else f"{m.bytes_per_s / self.bandwidth_ceiling:.0%}"]
            if show_j:
                j = self.joules_per_item(m.label)
                r += ["not measurable" if j is None else f"{j * j_scale:.3g}"]
            if self.price is not None:
                c = self.cost_per_million(m.label)
                r += [NA if c is None else f"{c:.3g}"]
            if self.published:
                p = self.published.get(m.label)
                r += [f"{p.figure} ({p.hardware}; {p.source})" if p else ""]
            rows.append(r)
        env = ms[0].env
        notes = [f"times in {unit} per call, median of runs; measured on {env}"]
        if self.peak_flops or self.peak_bandwidth:
            peaks = [fmt_rate(self.flops_ceiling, "FLOP/s")] if self.flops_ceiling else []
            peaks += [fmt_rate(self.bandwidth_ceiling)] if self.bandwidth_ceiling else []
            notes.append("peak = this machine's measured limit: " + ", ".join(peaks))
            notes += list(self.ceiling_notes)
        if show_j:
            notes.append(_energy_note(ms))
        if self.price is not None:
            from .cost import price_mismatch, price_note

            whatif = price_mismatch(self.price, env.device_name)
            notes.append(f"cost = {price_note(self.price, self.gpus)} x the measured time per {per}"
                         + (f" ({whatif})" if whatif else ""))
        if any(m.noisy for m in ms):
            notes.append("* noisy: IQR 10% or more of the median - re-run before trusting small differences")
        return header, rows, "; ".join(notes)

    def plot(self, metric: str = "speedup", ax: Any = None) -> Any:
        """Bar chart of ``"speedup"``, ``"items_per_s"``, ``"median_s"`` or ``"fraction_of_peak_flops"`` (any numeric
        column of :meth:`to_dataframe`), each bar with its value, the axis in its unit; returns the matplotlib Axes."""
        df = self.to_dataframe()
        if metric not in df.columns:
            raise ValueError(f"unknown metric {metric!r}: choose from {list(df.columns)}")
        import matplotlib.pyplot as plt

        axes("ax", ax)
        if ax is None:
            _, ax = plt.subplots(figsize=(6.5, 0.9 + 0.45 * len(df)))
        values = df[metric].astype(float)
        scale, unit, fmt = _PLOT_UNITS.get(metric, (1.0, metric.replace("_", " "), "{:.3g}"))
        shown = values * scale
        colors = ["#888888" if lbl == self.baseline else "#2a7ab9" for lbl in df.index]
        ax.barh(list(df.index), shown.fillna(0.0), color=colors)
        ax.invert_yaxis()
        if metric == "speedup":
            ax.axvline(1.0, color="k", lw=0.8, ls="--", label=f"1x = {self.baseline} (the baseline)")
            ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False, fontsize=8)
        top = float(shown.max()) if shown.notna().any() else 1.0
        for y, v in enumerate(shown):
            ax.annotate("no figure" if math.isnan(v) else " " + fmt.format(v), (0.0 if math.isnan(v) else v, y),
                        va="center", fontsize=9)
        ax.set_xlim(0, top * 1.18 if top > 0 else 1.0)      # room for the values written after the bars
        ax.set_xlabel(unit if metric != "speedup" else f"speedup vs {self.baseline} (x)")
        ax.set_title(self.title, loc="left")
        ax.figure.tight_layout()
        return ax


# how each plottable column is shown: a scale, the axis label with its unit, the value format
_PLOT_UNITS = {
    "speedup": (1.0, "speedup (x)", "{:.2f}x"),
    "median_s": (1e3, "median time per call (ms)", "{:.3g} ms"),
    "items_per_s": (1.0, "items per second", "{:,.0f}/s"),
    "fraction_of_peak_flops": (100.0, "share of this machine's measured peak FLOP/s (%)", "{:.0f}%"),
    "fraction_of_peak_bandwidth": (100.0, "share of this machine's measured bandwidth (%)", "{:.0f}%"),
    "flops_per_s": (1e-9, "GFLOP/s", "{:.3g}"),
    "bytes_per_s": (1e-9, "GB/s", "{:.3g}"),
    "iqr_pct": (1.0, "IQR (% of the median)", "{:.0f}%"),
    "joules_per_item": (1.0, "joules per item (J)", "{:.3g} J"),
    "usd_per_million": (1.0, "USD per million items", "${:.3g}"),
}


def _energy_note(ms: Sequence[Measurement]) -> str:
    """Where the joules came from (each source once), or why there are none."""
    sources = list(dict.fromkeys(m.energy.source + ("" if m.energy.counted else ", integrated from sampled power")
                                 for m in ms if m.energy is not None and m.energy.measured))
    reasons = list(dict.fromkeys(m.energy.reason for m in ms if m.energy is not None and not m.energy.measured))
    if not any(m.energy is not None for m in ms):
        reasons = ["timed without reading energy (energy=False)"]
    text = ("J = mean power over the timed runs x the median time, from " + "; ".join(sources)) if sources else ""
    if reasons:
        text += ("; " if text else "") + "energy not measurable here: " + "; ".join(r for r in reasons if r)
    return text


def _figure(name: str, label: str, key: Any) -> Published:
    try:
        return published(key)
    except (KeyError, TypeError) as e:
        raise ValueError(f"{name}[{label!r}]: {e.args[0] if e.args else e}") from None


@checked(title="text")
def compare(measurements: Sequence[Measurement], baseline: str | None = None, *, title: str = "Comparison",
            published_figures: Mapping[str, str | Published] | None = None, peak_flops: float | None = None,
            peak_bandwidth: float | None = None, setup_s: Mapping[str, float] | None = None,
            price_per_hour: Any = None, energy: bool | None = None, gpus: int = 1) -> Comparison:
    """Build a :class:`Comparison`. ``baseline`` defaults to the first measurement's label.

    ``published_figures`` maps a row label to a key of :func:`gpulab.published` (or a
    :class:`Published`), shown beside that row. ``peak_flops`` / ``peak_bandwidth`` are the
    machine's measured limits (e.g. from :func:`gpulab.machine_limits`). ``setup_s`` maps a row label to a
    one-off cost in seconds (a compile, an export): the table adds it and the break-even call count.
    ``price_per_hour``: USD per hour of the machine (a number), or a key of :func:`gpulab.cost.prices` (a published
    on-demand price, marked as such): the table adds the cost per million items at each row's measured throughput.
    ``gpus``: how many GPUs the measured work ran on; a published price per GPU-hour is paid that many times (the
    table's note says so).
    ``energy``: None shows joules per item when a row's device counter was read; True always; False never.
    """
    ms = rows_arg("measurements", measurements, Measurement, "gl.benchmark")
    pubs = {k: (v if isinstance(v, Published) else _figure("published_figures", k, v))
            for k, v in mapping("published_figures", published_figures or {}, example="{'bf16': 'amp-pytorch'}").items()}
    if setup_s is not None:
        mapping("setup_s", setup_s, example="{'compiled': 12.5}")
    if energy is not None and not isinstance(energy, bool):
        raise TypeError(f"energy must be True, False or None (show the column when measured), got {energy!r}")
    from .cost import gpus_arg, hourly_price

    price = None if price_per_hour is None else hourly_price(price_per_hour)
    gpus = gpus_arg(gpus, price)
    return Comparison(ms, baseline if baseline is not None else getattr(ms[0], "label", ""), title,
                      peak_flops, peak_bandwidth, pubs, dict(setup_s or {}), price, energy, gpus)
