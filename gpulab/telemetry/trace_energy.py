"""Energy in a recorded :class:`~gpulab.telemetry.trace.Trace`: per device over the run, and per marked phase.

A device's ``energy_j`` column is a cumulative counter (NVML's total energy for a GPU, the RAPL packages since the
Monitor started for the host): the energy between two moments is its difference, read between samples by linear
interpolation. A GPU without the counter but with ``power_w`` has its power integrated instead, which is an
estimate of sampled readings (``SAMPLED_POWER``) and marked ``~`` in tables. A device with neither has no figure.

Example:
    >>> import pandas as pd
    >>> from gpulab.telemetry.trace import Mark, Trace
    >>> frame = pd.DataFrame({"t_s": [0.0, 1.0, 2.0, 3.0], "device": ["gpu0"] * 4, "source": ["nvml"] * 4,
    ...                       "energy_j": [100.0, 300.0, 400.0, 500.0]})
    >>> trace = Trace(frame, 1.0, marks=(Mark("train", 0.0, 1.0), Mark("eval", 1.0, 3.0)), duration_s=3.0)
    >>> pe = trace.phase_energy()
    >>> pe.joules("train", "gpu0"), pe.joules("eval", "gpu0")
    (200.0, 200.0)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._format import NA, TableView, fmt_number
from .energy import SAMPLED_POWER

__all__ = ["energy_of", "energy_between", "energy_notes", "PhaseEnergy", "phase_energy", "COUNTER", "INTEGRATED"]

COUNTER, INTEGRATED = "counter", "integrated power"


def _series(f: Any, col: str) -> Any:
    s = f[col].dropna() if col in f else None
    return s if s is not None and len(s) >= 2 else None


def energy_of(f: Any) -> tuple[float | None, str | None]:
    """Joules over a device's frame (indexed by ``t_s``) and how they were had (``COUNTER``, ``INTEGRATED``), or
    ``(None, None)``."""
    import numpy as np

    e = _series(f, "energy_j")
    if e is not None:
        return float(e.iloc[-1] - e.iloc[0]), COUNTER
    p = _series(f, "power_w")
    if p is not None:
        return float(np.trapezoid(p.to_numpy(dtype=float), p.index.to_numpy(dtype=float))), INTEGRATED
    return None, None


def energy_between(f: Any, start: float, end: float, slack_s: float = 0.0) -> float | None:
    """Joules a device used from ``start`` to ``end`` (seconds since the trace began), or None when the span is not
    inside the sampled time, holds no reading of its own (a phase between two samples), or the device has no energy
    figure. A start up to ``slack_s`` before the first sample (a
    phase begun as the Monitor started, before its thread's first reading) is read from that sample, and an end up to
    ``slack_s`` after the last (a phase ended as the Monitor stopped) up to that one."""
    import numpy as np

    e, kind = _series(f, "energy_j"), COUNTER
    if e is None:
        e, kind = _series(f, "power_w"), INTEGRATED
    if e is None:
        return None
    t, v = e.index.to_numpy(dtype=float), e.to_numpy(dtype=float)
    if t[0] - slack_s <= start < t[0]:
        start = float(t[0])
    if t[-1] < end <= t[-1] + slack_s:
        end = float(t[-1])
    if start < t[0] or end > t[-1] or end < start:
        return None
    if not ((t >= start) & (t <= end)).any():      # no reading inside: its joules would be an assumption, not a figure
        return None
    if kind == COUNTER:
        return float(np.interp(end, t, v) - np.interp(start, t, v))
    inside = (t > start) & (t < end)
    ts = np.concatenate([[start], t[inside], [end]])
    ws = np.concatenate([[np.interp(start, t, v)], v[inside], [np.interp(end, t, v)]])
    return float(np.trapezoid(ws, ts))


@dataclass(frozen=True, repr=False)
class PhaseEnergy(TableView):
    """Joules per marked phase and device (immutable): ``joules(phase, device)``; ``to_dataframe()`` for pandas.

    A phase is counted only where the samples cover it (a span before the first or after the last sample has no
    figure); phases of the same name add up.
    """

    phases: tuple[str, ...]
    seconds: tuple[float, ...]
    devices: tuple[str, ...]
    values: tuple[tuple[float | None, ...], ...]          # [phase][device]
    kinds: dict[str, str | None] = field(default_factory=dict)
    unmeasurable: dict[str, str] = field(default_factory=dict)
    title: str = "Energy per phase"

    def joules(self, phase: str, device: str) -> float | None:
        """Joules ``device`` used in ``phase`` (None: not measurable or not covered by samples)."""
        if phase not in self.phases or device not in self.devices:
            raise KeyError(f"no phase {phase!r} / device {device!r}: phases {list(self.phases)}, devices "
                           f"{list(self.devices)}")
        return self.values[self.phases.index(phase)][self.devices.index(device)]

    def to_dataframe(self) -> Any:
        """One row per phase: its seconds and one ``<device>_j`` column per device (NaN where none)."""
        import pandas as pd

        rows = {p: {"seconds": s, **{f"{d}_j": v for d, v in zip(self.devices, vals)}}
                for p, s, vals in zip(self.phases, self.seconds, self.values)}
        return pd.DataFrame.from_dict(rows, orient="index")

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        header = ["phase", "seconds"] + [f"{d} (J)" for d in self.devices]
        rows = []
        for p, s, vals in zip(self.phases, self.seconds, self.values):
            cells = []
            for d, v in zip(self.devices, vals):
                if d in self.unmeasurable:
                    cells.append("not measurable")
                else:
                    cells.append(NA if v is None else ("~" if self.kinds.get(d) == INTEGRATED else "") + fmt_number(v))
            rows.append([p, f"{s:.2f}"] + cells)
        notes = [f"{d} energy not measurable here: {why}" for d, why in self.unmeasurable.items()]
        if any(k == INTEGRATED for k in self.kinds.values()):
            notes.append(f"~ integrated from power readings: {SAMPLED_POWER}")
        if any(v is None for vals in self.values for d, v in zip(self.devices, vals) if d not in self.unmeasurable):
            notes.append(f"{NA}: the phase is not covered by samples (sample more often, or mark longer phases)")
        return header, rows, "; ".join(notes) or "joules from each device's energy counter"


def phase_energy(trace: Any) -> PhaseEnergy:
    """The :class:`PhaseEnergy` of a trace's marked phases (a point mark spans to the next mark)."""
    spans = trace.phase_spans()
    names = list(dict.fromkeys(n for n, _, _ in spans))
    devices = [d for d in trace.devices if d in trace.energy_notes or energy_of(trace.device_frame(d))[1]]
    frames = {d: trace.device_frame(d) for d in devices}
    kinds = {d: energy_of(frames[d])[1] for d in devices}
    values, seconds = [], []
    for name in names:
        mine = [(s, e) for n, s, e in spans if n == name]
        seconds.append(sum(e - s for s, e in mine))
        row = []
        for d in devices:
            parts = [energy_between(frames[d], s, e, trace.interval_s) for s, e in mine] if kinds[d] else [None]
            row.append(None if any(p is None for p in parts) else float(sum(parts)))
        values.append(tuple(row))
    return PhaseEnergy(tuple(names), tuple(seconds), tuple(devices), tuple(values), kinds,
                       {d: w for d, w in trace.energy_notes.items() if d in devices})


def energy_notes(s: Any) -> list[str]:
    """The energy and cost notes under a :class:`~gpulab.telemetry.trace.TraceSummary`."""
    notes = [f"{d.device} energy not measurable here: {d.energy_note}" for d in s.devices if d.energy_note]
    if any(d.energy_source == INTEGRATED for d in s.devices):
        notes.append(f"~ energy integrated from power readings: {SAMPLED_POWER}")
    if any(d.energy_j is not None and d.device == "host" for d in s.devices):
        notes.append("host energy = the CPU packages' RAPL counters (every program on them; DRAM apart)")
    if s.items:
        notes.append(f"per item: over {fmt_number(s.items)} items")
    cost = s.cost_per_million_items
    if cost is not None:
        from ..cost import price_note

        notes.append(f"cost ${cost:.3g} per million items = {price_note(s.price, s.gpus)} x {s.duration_s:.1f} s for "
                     f"{fmt_number(s.items)} items")
    return notes
