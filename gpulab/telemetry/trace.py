"""A recorded :class:`Trace` (a tidy DataFrame: one row per sample and device) and its views:
``plot()``, ``summary()`` (a :class:`TraceSummary`), ``diagnose()``, ``to_csv()``, ``to_tensorboard()``.

Example:
    >>> import pandas as pd
    >>> from gpulab.telemetry.trace import Trace
    >>> frame = pd.DataFrame({"t_s": [0.0, 0.1], "device": ["host", "host"], "source": ["host", "host"],
    ...                       "cpu_util_pct": [90.0, 95.0]})
    >>> Trace(frame, interval_s=0.1).summary().device("host").cpu_util_mean_pct
    92.5
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .._check import flag, path_arg
from .._format import NA, TableView, fmt_bytes, fmt_number, html_table, text_table
from .trace_energy import INTEGRATED, energy_notes, energy_of, energy_why_not, items_arg, phase_energy

__all__ = ["Trace", "Mark", "TraceSummary", "DeviceSummary"]


@dataclass(frozen=True)
class Mark:
    """A named point (``end_s is None``) or phase on the trace's time axis (seconds since start)."""

    name: str
    start_s: float
    end_s: float | None = None


@dataclass(frozen=True)
class DeviceSummary:
    """One device's row of a :class:`TraceSummary`; a metric the device did not report is ``None``.

    The host row fills the CPU fields (``cpu_util_*``: all cores; ``process_cpu_*``: this process, 100 =
    one core) and ``rss_peak_bytes``; a GPU row fills the others (NVML utilisation is the share of time any
    kernel ran; memory is used by all processes). ``energy_j`` is the device's counter over the run (RAPL's
    packages for the host), or its power integrated (``energy_source``); where neither can be read,
    ``energy_note`` says why and there is no figure.
    """

    device: str
    samples: int
    cpu_util_mean_pct: float | None = None
    cpu_util_p95_pct: float | None = None
    process_cpu_mean_pct: float | None = None
    process_cpu_p95_pct: float | None = None
    rss_peak_bytes: int | None = None
    gpu_util_mean_pct: float | None = None
    gpu_util_p95_pct: float | None = None
    mem_used_peak_bytes: int | None = None
    mem_used_peak_pct: float | None = None
    torch_reserved_peak_bytes: int | None = None
    energy_j: float | None = None
    power_mean_w: float | None = None
    temp_max_c: float | None = None
    throttled_s: float | None = None
    sm_active_mean_pct: float | None = None
    tensor_active_mean_pct: float | None = None
    energy_source: str | None = None         # "counter" or "integrated power" (trace_energy.COUNTER / INTEGRATED)
    energy_note: str | None = None           # why there is no energy figure ("not measurable here")
    energy_per_item_j: float | None = None   # energy_j / the items given to summary()

    def metrics(self) -> dict[str, Any]:
        """The reported metrics by name (``samples`` first), missing ones left out."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name != "device" and getattr(self, f.name) is not None}


def _memory_unit(frame: Any) -> tuple[float, str]:
    """MiB below 1 GiB of memory anywhere in ``frame``, else GiB: (bytes per unit, axis label)."""
    cols = [c for c in ("mem_used_bytes", "torch_reserved_bytes", "rss_bytes") if c in frame]
    peak = max((float(frame[c].max()) for c in cols if frame[c].notna().any()), default=0.0)
    return (2.0**20, "memory (MiB)") if peak < 2**30 else (2.0**30, "memory (GiB)")


def _clip(text: str, n: int = 120) -> str:
    return text if len(text) <= n else text[:n - 3] + "..."


def _pct(x: float | None) -> str:
    return NA if x is None else f"{x:.1f}"


def _gib(n: int | None) -> str:
    return NA if n is None else f"{n / 2**30:.2f}"


def _joules(d: DeviceSummary | None, name: str) -> str:
    value = None if d is None else getattr(d, name)
    if value is None:
        return "not measurable" if d is not None and d.energy_note else NA
    return ("~" if d.energy_source == INTEGRATED else "") + (fmt_number(value) if value >= 10 else f"{value:.3g}")


# (header, value of a row, formatter); a column is shown when any device has a value
_SUMMARY_COLUMNS: tuple[tuple[str, Any, Any], ...] = (
    ("util mean %", lambda d: d.cpu_util_mean_pct if d.device == "host" else d.gpu_util_mean_pct, _pct),
    ("util p95 %", lambda d: d.cpu_util_p95_pct if d.device == "host" else d.gpu_util_p95_pct, _pct),
    ("process CPU mean %", lambda d: d.process_cpu_mean_pct, _pct),
    ("mem peak (GiB)", lambda d: d.rss_peak_bytes if d.device == "host" else d.mem_used_peak_bytes, _gib),
    ("mem peak %", lambda d: d.mem_used_peak_pct, _pct),
    ("torch reserved (GiB)", lambda d: d.torch_reserved_peak_bytes, _gib),
    ("power mean (W)", lambda d: d.power_mean_w, lambda x: NA if x is None else f"{x:.0f}"),
    ("energy (J)", lambda d: d if d.energy_j is not None or d.energy_note else None, lambda d: _joules(d, "energy_j")),
    ("J per item", lambda d: d if d.energy_per_item_j is not None or d.energy_note else None,
     lambda d: _joules(d, "energy_per_item_j")),
    ("temp max (°C)", lambda d: d.temp_max_c, lambda x: NA if x is None else f"{x:.0f}"),
    ("throttled (s)", lambda d: d.throttled_s, lambda x: NA if x is None else f"{x:.1f}"),
    ("SM active %", lambda d: d.sm_active_mean_pct, _pct),
    ("tensor active %", lambda d: d.tensor_active_mean_pct, _pct),
)


@dataclass(frozen=True, repr=False)
class TraceSummary(TableView):
    """Per device of a :class:`Trace`: mean and p95 utilisation, peak memory, power, energy, temperature and
    time throttled (immutable). ``to_dataframe()`` gives the raw numbers, one row per device.

    Example:
        >>> import pandas as pd
        >>> from gpulab.telemetry.trace import Trace
        >>> frame = pd.DataFrame({"t_s": [0.0, 0.1], "device": ["host"] * 2, "source": ["host"] * 2,
        ...                       "cpu_util_pct": [90.0, 95.0], "rss_bytes": [2**30, 3 * 2**30]})
        >>> s = Trace(frame, interval_s=0.1, duration_s=0.2).summary()
        >>> s
        Telemetry summary
        device  samples  util mean %  util p95 %  mem peak (GiB)
        ------  -------  -----------  ----------  --------------
        host    2        92.5         94.8        3.00
        0.2 s, every 0.1 s; host: util = CPU (all cores), mem = this process's RSS
        >>> s.device("host").rss_peak_bytes == 3 * 2**30, list(s.to_dataframe().columns)[:2]
        (True, ['samples', 'cpu_util_mean_pct'])
    """

    devices: tuple[DeviceSummary, ...]
    interval_s: float
    duration_s: float
    title: str = "Telemetry summary"
    items: float | None = None     # what the run processed (samples, tokens), given to Trace.summary(items=)
    price: Any = None              # a gpulab.cost.Price, given to Trace.summary(price_per_hour=)
    gpus: int = 1                  # GPUs the run used, given to Trace.summary(gpus=): a GPU-hour price paid per GPU

    @property
    def cost_per_million_items(self) -> float | None:
        """USD per million items: the price for the run's duration over ``items`` (None without both)."""
        if self.price is None or not self.items or self.duration_s <= 0:
            return None
        from ..cost import cost_per_million

        return cost_per_million(self.price.usd_per_hour, self.items / self.duration_s, self.gpus)

    def device(self, name: str) -> DeviceSummary:
        """The row of device ``name`` (``"host"``, ``"gpu0"``, ...)."""
        for d in self.devices:
            if d.device == name:
                return d
        raise KeyError(f"no device {name!r} in the summary; devices: {[d.device for d in self.devices]}")

    def to_dataframe(self) -> Any:
        """One row per device (index), one column per metric (units in the names); missing = NaN."""
        import pandas as pd

        return pd.DataFrame.from_dict({d.device: d.metrics() for d in self.devices}, orient="index")

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        shown = [(h, get, fmt) for h, get, fmt in _SUMMARY_COLUMNS if any(get(d) is not None for d in self.devices)
                 and (h != "J per item" or self.items)]
        header = ["device", "samples"] + [h for h, _, _ in shown]
        rows = [[d.device, str(d.samples)] + [fmt(get(d)) for _, get, fmt in shown] for d in self.devices]
        notes = [f"{self.duration_s:.1f} s, every {self.interval_s:g} s" if self.devices else "no samples"]
        if any(d.device == "host" for d in self.devices):
            notes.append("host: util = CPU (all cores), mem = this process's RSS")
        if any(d.device != "host" for d in self.devices):
            notes.append("GPUs: util = share of time a kernel ran, mem = used by all processes")
        notes += energy_notes(self)
        return header, rows, "; ".join(notes)


@dataclass(frozen=True)
class Trace:
    """What a :class:`~gpulab.Monitor` recorded.

    ``frame`` columns: ``t_s`` (seconds since start), ``wall_time``, ``device`` ("host", "gpu0", ...),
    ``source`` ("host" or "nvml") and one column per metric (units in the name; missing = NaN).

    ``energy_j`` is a cumulative energy counter (NVML's for a GPU, the RAPL packages' for the host); ``energy_notes``
    says, per device, why there is none. ``failed_samples`` counts the readings that raised (psutil or NVML errors)
    and so have no row;
    ``failed_by_device`` splits them by device and ``first_error`` is the first one's text. A trace recorded
    or saved before they existed has none (0, ``{}``, ``None``).
    """

    frame: Any
    interval_s: float
    marks: tuple[Mark, ...] = ()
    duration_s: float = 0.0
    sampler_cpu_s: float = 0.0
    live_cpu_s: float = 0.0       # CPU time spent drawing the live figure (a separate thread)
    notes: tuple[str, ...] = ()
    devices_info: dict[str, str] = field(default_factory=dict)   # "gpu0" -> "NVIDIA A100 (GPU-...)"
    failed_samples: int = 0
    failed_by_device: dict[str, int] = field(default_factory=dict)  # "host" -> 3
    first_error: str | None = None
    energy_notes: dict[str, str] = field(default_factory=dict)   # device -> why its energy is not measurable

    def __post_init__(self) -> None:
        n = self.failed_samples
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
            raise ValueError(f"failed_samples must be a count (an int >= 0), got {n!r}")
        object.__setattr__(self, "failed_samples", int(n))
        if self.failed_by_device and sum(self.failed_by_device.values()) != n:
            raise ValueError(f"failed_by_device {self.failed_by_device!r} must add up to failed_samples={n}: pass "
                             "failed_samples=sum(failed_by_device.values())")

    def _known(self, device: Any) -> None:
        """``device`` checked as one this trace sampled (or tried to): "host", "gpu0", ..."""
        known = sorted(set(self.devices) | set(self.failed_by_device))
        if not isinstance(device, str) or device not in known:
            raise ValueError(f"device={device!r} is not in this trace: its devices are {known}")

    def samples(self, device: str) -> int:
        """Readings of ``device`` that succeeded (its rows)."""
        self._known(device)
        return int((self.frame["device"] == device).sum()) if len(self.frame) else 0

    def failed_share(self, device: str) -> float:
        """The share of ``device``'s readings that failed (0.0 when none was attempted)."""
        self._known(device)
        failed = self.failed_by_device.get(device, 0)
        tried = failed + self.samples(device)
        return failed / tried if tried else 0.0

    # ---- basic facts -------------------------------------------------------------------------
    @property
    def devices(self) -> list[str]:
        return list(dict.fromkeys(self.frame["device"])) if len(self.frame) else []

    @property
    def gpus(self) -> list[str]:
        return [d for d in self.devices if d != "host"]

    @property
    def sampler_overhead_pct(self) -> float:
        """The sampler thread's own CPU time as a percentage of one core over the run."""
        return 100.0 * self.sampler_cpu_s / self.duration_s if self.duration_s > 0 else 0.0

    def device_frame(self, device: str) -> Any:
        """Rows of one device, indexed by ``t_s``, with all-missing columns dropped."""
        self._known(device)
        f = self.frame[self.frame["device"] == device]
        return f.set_index("t_s").dropna(axis=1, how="all")

    def phase_spans(self) -> list[tuple[str, float, float]]:
        """``(name, start_s, end_s)`` of every phase in time order (a point mark lasts until the next mark)."""
        spans = sorted(self.marks, key=lambda m: m.start_s)
        out = []
        for i, m in enumerate(spans):
            end = m.end_s
            if end is None:
                end = spans[i + 1].start_s if i + 1 < len(spans) else self.duration_s
            out.append((m.name, m.start_s, max(m.start_s, end)))
        return out

    def phase_seconds(self) -> dict[str, float]:
        """Total seconds per phase name (phases are marks with an end, or the span to the next mark)."""
        out: dict[str, float] = {}
        for name, start, end in self.phase_spans():
            out[name] = out.get(name, 0.0) + end - start
        return out

    def phase_energy(self) -> Any:
        """Joules per marked phase and device, a :class:`~gpulab.telemetry.trace_energy.PhaseEnergy`."""
        return phase_energy(self)

    # ---- views -------------------------------------------------------------------------------
    def summary(self, items: float | None = None, price_per_hour: Any = None, gpus: int = 1) -> TraceSummary:
        """Per device: mean and p95 utilisation, peak memory, energy (J) and time throttled (s), as a
        :class:`TraceSummary` (``.to_dataframe()`` for pandas). ``items`` (what the run processed: samples, tokens)
        adds joules per item; ``price_per_hour`` (USD per hour, or a key of :func:`gpulab.cost.prices`) the cost per
        million items over the run's duration, a published price per GPU-hour paid for each of ``gpus`` GPUs. A device
        whose readings give no joules (one reading, a counter reset or stuck) is 'not measurable' with why."""
        import numpy as np

        price, items = None, items_arg(items)
        from ..cost import gpus_arg, hourly_price

        if price_per_hour is not None:
            price = hourly_price(price_per_hour)
        gpus = gpus_arg(gpus, price)

        rows = []
        for dev in self.devices:
            f = self.device_frame(dev)
            dt = float(np.median(np.diff(f.index))) if len(f) > 1 else self.interval_s
            r: dict[str, Any] = {}
            if dev == "host":
                for col in ("cpu_util_pct", "process_cpu_pct"):
                    if col in f:
                        r[col.replace("_pct", "_mean_pct")] = float(f[col].mean())
                        r[col.replace("_pct", "_p95_pct")] = float(f[col].quantile(0.95))
                if "rss_bytes" in f:
                    r["rss_peak_bytes"] = int(f["rss_bytes"].max())
            else:
                if "gpu_util_pct" in f:
                    r["gpu_util_mean_pct"] = float(f["gpu_util_pct"].mean())
                    r["gpu_util_p95_pct"] = float(f["gpu_util_pct"].quantile(0.95))
                if "mem_used_bytes" in f:
                    r["mem_used_peak_bytes"] = int(f["mem_used_bytes"].max())
                    if "mem_total_bytes" in f:
                        r["mem_used_peak_pct"] = float(100 * f["mem_used_bytes"].max() / f["mem_total_bytes"].max())
                if "torch_reserved_bytes" in f:
                    r["torch_reserved_peak_bytes"] = int(f["torch_reserved_bytes"].max())
                if "power_w" in f:
                    r["power_mean_w"] = float(f["power_w"].mean())
                if "temp_c" in f:
                    r["temp_max_c"] = float(f["temp_c"].max())
                if "throttled" in f:
                    r["throttled_s"] = float(f["throttled"].fillna(False).astype(bool).sum() * dt)
                for col in ("sm_active_pct", "tensor_active_pct"):
                    if col in f:
                        r[col.replace("_pct", "_mean_pct")] = float(f[col].mean())
            r["energy_j"], r["energy_source"] = energy_of(f)
            if r["energy_j"] is None and (dev in self.energy_notes or energy_why_not(f)):
                r["energy_note"] = self.energy_notes.get(dev) or energy_why_not(f)
            if r["energy_j"] is not None and items:
                r["energy_per_item_j"] = r["energy_j"] / items
            rows.append(DeviceSummary(dev, len(f), **r))
        return TraceSummary(tuple(rows), self.interval_s, self.duration_s, items=items, price=price, gpus=gpus)

    def diagnose(self) -> Any:
        """A verdict with its evidence (see :mod:`gpulab.telemetry.diagnose`)."""
        from .diagnose import diagnose

        return diagnose(self)

    def plot(self, fig: Any = None, tight: bool = True) -> Any:
        """One figure, aligned time axes: utilisation, memory (from 0), and power/temperature when present.
        Phases are shaded, each in its own colour, and named inside the top of the first panel; each panel's
        legend is one row above it. Returns the matplotlib Figure.
        ``tight=False`` uses fixed margins (several times cheaper: the live view redraws this way)."""
        flag("tight", tight)
        if fig is not None and not callable(getattr(fig, "add_subplot", None)):
            raise TypeError(f"fig must be a matplotlib Figure (plt.figure()) or None, got {type(fig).__name__} {fig!r:.40}")
        if fig is None:
            import matplotlib.pyplot as plt

            fig = plt.figure(figsize=(9, 6))
        gpus = self.gpus
        extra = any(c in self.frame for c in ("power_w", "temp_c", "sm_clock_mhz")) and gpus
        n = 3 if extra else 2
        axes = fig.subplots(n, 1, sharex=True) if len(self.frame) else [fig.add_subplot(1, 1, 1)]
        if not len(self.frame):
            axes[0].set_title("no samples yet")
            return fig
        ax_u, ax_m = axes[0], axes[1]
        host = self.device_frame("host") if "host" in self.devices else None
        if host is not None and "cpu_util_pct" in host:
            ax_u.plot(host.index, host["cpu_util_pct"], color="#555555", label="CPU (all cores)")
            if "process_cpu_pct" in host:
                ax_u.plot(host.index, host["process_cpu_pct"], color="#555555", ls=":",
                          label="this process (share of all cores)")
        scale, unit = _memory_unit(self.frame)
        peaks = [0.0]
        for g in gpus:
            f = self.device_frame(g)
            if "gpu_util_pct" in f:
                ax_u.plot(f.index, f["gpu_util_pct"], label=f"{g} util")
            if "tensor_active_pct" in f:
                ax_u.plot(f.index, f["tensor_active_pct"], ls="--", label=f"{g} tensor active")
            for col, ls, what in (("mem_used_bytes", "-", "memory used"), ("torch_reserved_bytes", "--", "torch reserved")):
                if col in f:
                    ax_m.plot(f.index, f[col] / scale, ls=ls, label=f"{g} {what}")
                    peaks.append(float(f[col].max()) / scale)
        if host is not None and "rss_bytes" in host:
            ax_m.plot(host.index, host["rss_bytes"] / scale, color="#555555", label="process RSS (host)")
            peaks.append(float(host["rss_bytes"].max()) / scale)
        ax_u.set_ylabel("utilisation %")
        ax_u.set_ylim(0, 128)                       # the band above 100% holds the phase names
        ax_u.set_yticks(range(0, 101, 25))
        ax_m.set_ylabel(unit)
        ax_m.set_ylim(0, max(peaks) * 1.15 or 1.0)  # from 0: a few MiB of wobble looks flat
        if extra:
            ax_p = axes[2]
            for g in gpus:
                f = self.device_frame(g)
                if "power_w" in f:
                    ax_p.plot(f.index, f["power_w"], label=f"{g} power W")
                if "temp_c" in f:
                    ax_p.plot(f.index, f["temp_c"], ls="--", label=f"{g} temp °C")
                if "throttled" in f and f["throttled"].fillna(False).astype(bool).any():
                    t = f.index[f["throttled"].fillna(False).astype(bool)]
                    ax_p.scatter(t, [0] * len(t), marker="|", color="red", label=f"{g} throttled")
            ax_p.set_ylabel("W / °C")
            ax_p.set_ylim(bottom=0)
        self._draw_marks(axes)
        for ax in axes:
            handles, labels = ax.get_legend_handles_labels()
            if handles:
                ax.legend(handles, labels, fontsize=8, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=len(handles),
                          frameon=False, borderaxespad=0.1, handlelength=1.6, columnspacing=1.0)
            ax.grid(alpha=0.3)
        axes[-1].set_xlabel("seconds")
        source = "GPU (NVML) + host" if gpus else "host only (no NVML)"
        fig.suptitle(f"Telemetry: {source}, every {self.interval_s:g} s, {self.duration_s:.1f} s", fontsize=11)
        if tight:
            fig.tight_layout()
        else:
            fig.subplots_adjust(left=0.08, right=0.97, top=0.9, bottom=0.1, hspace=0.3)
        return fig

    def _draw_marks(self, axes: Any) -> None:
        """Phases shaded on every panel, one colour each, named inside the top of the first; points as lines."""
        colours = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")
        names = list(dict.fromkeys(m.name for m in self.marks))
        lo, hi = axes[0].get_xlim()
        for m in self.marks:
            colour = colours[names.index(m.name) % len(colours)]
            for ax in axes:
                ax.axvline(m.start_s, color=colour, lw=0.9, ls=":" if m.end_s is not None else "--")
                if m.end_s is not None:
                    ax.axvspan(m.start_s, m.end_s, color=colour, alpha=0.1, lw=0)
            x = m.start_s if m.end_s is None else (m.start_s + m.end_s) / 2
            where = (x - lo) / (hi - lo) if hi > lo else 0.5
            ha = "left" if where < 0.15 or m.end_s is None else "right" if where > 0.85 else "center"
            if m.end_s is not None and ha == "left":
                x = m.start_s
            elif m.end_s is not None and ha == "right":
                x = m.end_s
            axes[0].text(x, 114, f" {m.name} ", color=colour, fontsize=10, fontweight="bold", ha=ha, va="center")

    # ---- export ------------------------------------------------------------------------------
    def to_csv(self, path: str | Path) -> Path:
        """Write the tidy frame to ``path`` (CSV); returns the path."""
        path = Path(path_arg("path", path))
        path.parent.mkdir(parents=True, exist_ok=True)
        self.frame.to_csv(path, index=False)
        return path

    def to_tensorboard(self, logdir: str | Path) -> Path:
        """Write every numeric metric as TensorBoard scalars (``telemetry/<device>/<metric>``), step =
        sample number. Uses TensorFlow's summary writer, or torch's when TensorFlow is absent."""
        logdir = Path(path_arg("logdir", logdir))
        numeric = [c for c in self.frame.columns if c not in ("t_s", "wall_time", "device", "source")
                   and self.frame[c].dtype.kind in "fiub"]
        try:
            from .._tf import import_tensorflow

            tf = import_tensorflow()

            writer = tf.summary.create_file_writer(str(logdir))
            with writer.as_default():
                for dev in self.devices:
                    f = self.frame[self.frame["device"] == dev]
                    for step, (_, row) in enumerate(f.iterrows()):
                        for c in numeric:
                            if row[c] == row[c]:  # not NaN
                                tf.summary.scalar(f"telemetry/{dev}/{c}", float(row[c]), step=step)
            writer.flush()
            writer.close()
        except ImportError:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as e:
                raise ImportError("to_tensorboard needs TensorFlow or torch with the tensorboard package: "
                                  "pip install tensorboard") from e
            w = SummaryWriter(str(logdir))
            for dev in self.devices:
                f = self.frame[self.frame["device"] == dev]
                for step, (_, row) in enumerate(f.iterrows()):
                    for c in numeric:
                        if row[c] == row[c]:
                            w.add_scalar(f"telemetry/{dev}/{c}", float(row[c]), step, walltime=row.get("wall_time"))
            w.close()
        return logdir

    # ---- rendering ---------------------------------------------------------------------------
    def _rows(self) -> list[tuple[str, str]]:
        rows = [("duration", f"{self.duration_s:.1f} s, {len(self.frame)} rows, every {self.interval_s:g} s"),
                ("devices", ", ".join(f"{d} ({self.devices_info.get(d, 'host')})" for d in self.devices) or "none"),
                ("sampler cost", f"{self.sampler_overhead_pct:.2f}% of one core")]
        if self.live_cpu_s:
            rows.append(("live figure cost", f"{100 * self.live_cpu_s / max(self.duration_s, 1e-9):.1f}% of one core"))
        for d in self.devices:
            f = self.device_frame(d)
            if d == "host" and "cpu_util_pct" in f:
                rows.append((d, f"CPU mean {f['cpu_util_pct'].mean():.0f}%"
                                + (f", RSS peak {fmt_bytes(f['rss_bytes'].max())}" if "rss_bytes" in f else "")))
            elif "gpu_util_pct" in f:
                rows.append((d, f"util mean {f['gpu_util_pct'].mean():.0f}%"
                                + (f", memory peak {fmt_bytes(f['mem_used_bytes'].max())}" if "mem_used_bytes" in f else "")))
        if self.failed_samples:
            per = ", ".join(f"{d} {n} of {n + self.samples(d)} ({self.failed_share(d):.0%})"
                            for d, n in self.failed_by_device.items())
            rows.append(("failed samples", f"{self.failed_samples}" + (f": {per}" if per else "")
                         + (f"; first: {_clip(self.first_error)}" if self.first_error else "")))
        rows += [("note", n) for n in self.notes]
        return rows

    def __repr__(self) -> str:
        return "Trace\n" + text_table(("", ""), self._rows())

    def _repr_html_(self) -> str:
        return html_table(("", ""), self._rows(), caption="Telemetry trace")
