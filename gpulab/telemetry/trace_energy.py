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

__all__ = ["energy_of", "energy_why_not", "energy_between", "energy_notes", "items_arg", "PhaseEnergy", "phase_energy",
           "COUNTER", "INTEGRATED"]

COUNTER, INTEGRATED = "counter", "integrated power"


def _frame(f: Any) -> Any:
    import pandas as pd

    if not isinstance(f, pd.DataFrame):
        raise TypeError(f"f must be one device's frame of a Trace (trace.device_frame('gpu0')), got "
                        f"{type(f).__name__} {f!r:.60}")
    return f


def _readings(f: Any, col: str) -> tuple[Any, str | None]:
    """A column's readings (missing ones, NaN, left out) and why they give no figure (None when they do): fewer than
    two, a reading that is infinite, a counter that went backwards or never advanced, a power below 0 W."""
    import numpy as np

    s = f[col].dropna() if col in f else None
    if s is None or not len(s):
        return None, None
    what = "energy counter" if col == "energy_j" else "power readings"
    v = s.to_numpy(dtype=float)
    if len(s) < 2:
        return None, f"one reading of its {what}: a window needs two"
    if not np.isfinite(v).all():
        return None, f"its {what} hold an infinite value, which is no reading"
    if col == "energy_j" and (np.diff(v) < 0).any():
        i = int(np.argmax(np.diff(v) < 0))
        return None, (f"its energy counter went backwards (from {v[i]:.6g} J to {v[i + 1]:.6g} J at "
                      f"{s.index[i + 1]:.2f} s): it was reset, so differences of it are no figure")
    if col == "energy_j" and v[-1] == v[0]:
        return None, (f"its energy counter did not advance over {s.index[-1] - s.index[0]:.2f} s of samples: a counter "
                      "that does not count gives no figure")
    if col == "power_w" and (v < 0).any():
        return None, f"its power readings go below 0 W ({v.min():.3g} W), which is no power"
    return s, None


def _series(f: Any, col: str) -> Any:
    return _readings(f, col)[0]


def energy_why_not(f: Any) -> str | None:
    """Why a device's frame gives no joules (None when :func:`energy_of` gives a figure, or when the frame has no
    energy counter nor power readings at all).

    Example:
        >>> import pandas as pd
        >>> f = pd.DataFrame({"energy_j": [5.0, 5.0]}, index=pd.Index([0.0, 1.0], name="t_s"))
        >>> energy_of(f), energy_why_not(f)
        ((None, None), 'its energy counter did not advance over 1.00 s of samples: a counter that does not count gives no figure')
    """
    if energy_of(f)[0] is not None:
        return None
    return _readings(f, "energy_j")[1] or _readings(f, "power_w")[1]


def energy_of(f: Any) -> tuple[float | None, str | None]:
    """Joules over a device's frame (indexed by ``t_s``) and how they were had (``COUNTER``, ``INTEGRATED``), or
    ``(None, None)`` (:func:`energy_why_not` says why): never a zero, a negative or an infinite figure."""
    import numpy as np

    _frame(f)
    e, broken = _readings(f, "energy_j")
    if e is not None:
        return float(e.iloc[-1] - e.iloc[0]), COUNTER
    if broken:                  # a counter that gives no figure is said so, not replaced by an estimate from power
        return None, None
    p = _series(f, "power_w")
    if p is not None:
        joules = float(np.trapezoid(p.to_numpy(dtype=float), p.index.to_numpy(dtype=float)))
        return (joules, INTEGRATED) if joules > 0 else (None, None)
    return None, None


def items_arg(items: Any) -> float | None:
    """``items`` (what a run processed: samples, tokens) checked: None, or a finite number > 0 (not a bool, not a
    text)."""
    import math
    import numbers

    if items is None:
        return None
    if isinstance(items, bool) or not isinstance(items, numbers.Real):
        raise TypeError(f"items must be the number of items the run processed (a number > 0) or None, got "
                        f"{type(items).__name__} {items!r:.60}")
    if not math.isfinite(items) or items <= 0:
        raise ValueError(f"items must be the number of items the run processed (a finite number > 0), got {items!r}")
    return items


def energy_between(f: Any, start: float, end: float, slack_s: float = 0.0) -> float | None:
    """Joules a device used from ``start`` to ``end`` (seconds since the trace began), or None when the span is not
    inside the sampled time, holds no reading of its own (a phase between two samples), or the device has no energy
    figure. A start up to ``slack_s`` before the first sample (a
    phase begun as the Monitor started, before its thread's first reading) is read from that sample, and an end up to
    ``slack_s`` after the last (a phase ended as the Monitor stopped) up to that one. A counter that did not advance
    within the span gives None too (never a measured 0 J)."""
    import math
    import numbers

    import numpy as np

    _frame(f)
    for name, x in (("start", start), ("end", end), ("slack_s", slack_s)):
        if isinstance(x, bool) or not isinstance(x, numbers.Real):
            raise TypeError(f"{name} must be seconds since the trace began (a number), got {type(x).__name__} {x!r:.40}")
        if not math.isfinite(x) or (name == "slack_s" and x < 0):
            raise ValueError(f"{name} must be a finite number of seconds{' >= 0' if name == 'slack_s' else ''}, "
                             f"got {x!r}")
    if end < start:
        raise ValueError(f"end ({end!r} s) is before start ({start!r} s): pass the span in time order")
    return _between(f, start, end, slack_s)[0]


_UNCOVERED = "not covered by samples"


def _between(f: Any, start: float, end: float, slack_s: float) -> tuple[float | None, str | None]:
    """:func:`energy_between`'s joules, and why there are none (:data:`_UNCOVERED` where the samples miss the span)."""
    import numpy as np

    (e, broken), kind = _readings(f, "energy_j"), COUNTER
    if e is None and broken is None:
        (e, broken), kind = _readings(f, "power_w"), INTEGRATED
    if e is None:
        return None, broken or "no energy counter nor power readings"
    t, v = e.index.to_numpy(dtype=float), e.to_numpy(dtype=float)
    if t[0] - slack_s <= start < t[0]:
        start = float(t[0])
    if t[-1] < end <= t[-1] + slack_s:
        end = float(t[-1])
    if start < t[0] or end > t[-1]:
        return None, _UNCOVERED
    if not ((t >= start) & (t <= end)).any():      # no reading inside: its joules would be an assumption, not a figure
        return None, _UNCOVERED
    if end == start:
        return None, "the phase lasts 0 s"
    if kind == COUNTER:
        joules = float(np.interp(end, t, v) - np.interp(start, t, v))
    else:
        inside = (t > start) & (t < end)
        ts = np.concatenate([[start], t[inside], [end]])
        ws = np.concatenate([[np.interp(start, t, v)], v[inside], [np.interp(end, t, v)]])
        joules = float(np.trapezoid(ws, ts))
    if joules <= 0:                                # a counter that did not advance in the span: no figure
        return None, f"its {'energy counter' if kind == COUNTER else 'power'} did not advance within the phase"
    return joules, None


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
    why: dict[tuple[str, str], str] = field(default_factory=dict)   # (phase, device) -> why no joules, beyond coverage

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
        notes += [f"{NA} for {p} on {d}: {why}" for (p, d), why in self.why.items() if d not in self.unmeasurable]
        if any(v is None and (p, d) not in self.why for p, vals in zip(self.phases, self.values)
               for d, v in zip(self.devices, vals) if d not in self.unmeasurable):
            notes.append(f"{NA}: the phase is not covered by samples (sample more often, or mark longer phases)")
        if not self.devices:
            notes.append("no device of this trace has energy readings (no samples, no counter nor power): energy per "
                         "phase is not measurable here")
        return header, rows, "; ".join(notes) or "joules from each device's energy counter"


def phase_energy(trace: Any) -> PhaseEnergy:
    """The :class:`PhaseEnergy` of a trace's marked phases (a point mark spans to the next mark). A device whose
    readings give no figure (one reading, a counter reset or stuck) is listed as not measurable, with why."""
    if not callable(getattr(trace, "phase_spans", None)) or not hasattr(trace, "energy_notes"):
        raise TypeError(f"trace must be a gpulab Trace (Monitor(...).trace), got {type(trace).__name__} {trace!r:.60}")
    spans = trace.phase_spans()
    names = list(dict.fromkeys(n for n, _, _ in spans))
    frames = {d: trace.device_frame(d) for d in trace.devices}
    broken = {d: why for d, f in frames.items() if d not in trace.energy_notes and (why := energy_why_not(f))}
    devices = [d for d in trace.devices if d in trace.energy_notes or d in broken or energy_of(frames[d])[1]]
    kinds = {d: energy_of(frames[d])[1] for d in devices}
    values, seconds, why = [], [], {}
    for name in names:
        mine = [(s, e) for n, s, e in spans if n == name]
        seconds.append(sum(e - s for s, e in mine))
        row = []
        for d in devices:
            parts = [_between(frames[d], s, e, trace.interval_s) for s, e in mine] if kinds[d] else [(None, None)]
            lost = [w for j, w in parts if j is None]
            if lost and lost[0] not in (None, _UNCOVERED):
                why[(name, d)] = lost[0]
            row.append(None if lost else float(sum(j for j, _ in parts)))
        values.append(tuple(row))
    unmeasurable = {d: w for d, w in trace.energy_notes.items() if d in devices}
    return PhaseEnergy(tuple(names), tuple(seconds), tuple(devices), tuple(values), kinds, {**unmeasurable, **broken},
                       why=why)


def energy_notes(s: Any) -> list[str]:
    """The energy and cost notes under a :class:`~gpulab.telemetry.trace.TraceSummary`."""
    notes = [f"{d.device} energy not measurable here: {d.energy_note}" for d in s.devices if d.energy_note]
    if any(d.energy_source == INTEGRATED for d in s.devices):
        notes.append(f"~ energy integrated from power readings: {SAMPLED_POWER}")
    if any(d.energy_j is not None and d.device == "host" for d in s.devices):
        notes.append("host energy = the CPU packages' RAPL counters (every program on them; DRAM apart)")
    if s.items:
        notes.append(f"per item: over {fmt_number(s.items)} items")
        if not any(d.energy_j is not None or d.energy_note for d in s.devices):
            notes.append("J per item not measurable here: " + ("the trace has no samples" if not s.devices else
                                                               "no device has an energy counter or power readings"))
    cost = s.cost_per_million_items
    if cost is None and s.price is not None:
        notes.append("cost per million items not measurable: " + (
            "pass items= (the number of items the run processed)" if not s.items else "the trace has no duration"))
    if cost is not None:
        from ..cost import price_note

        notes.append(f"cost ${cost:.3g} per million items = {price_note(s.price, s.gpus)} x {s.duration_s:.1f} s for "
                     f"{fmt_number(s.items)} items")
    return notes
