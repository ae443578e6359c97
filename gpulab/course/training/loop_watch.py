"""Loops watched under a :class:`gpulab.Monitor`, one phase each, with the mean utilisation of each phase: the
device's (a GPU's, from NVML) or, without one, the CPU's over all cores.

Example:
    >>> import time
    >>> from gpulab import course
    >>> w = course.watch_loops({"busy": lambda: sum(range(20_000)), "waiting": lambda: time.sleep(0.01)}, 0.3,
    ...                        interval=0.05)
    >>> [p.name for p in w.phases], w.phase("busy").calls > 0
    (['busy', 'waiting'], True)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..._check import positive
from ..._format import html_table, text_table

__all__ = ["watch_loops", "LoopWatch", "PhaseUse", "phase_utilisation"]


@dataclass(frozen=True)
class PhaseUse:
    """One phase of a :class:`LoopWatch`: how many calls of its loop ran, for how long, and the mean utilisation
    (``None`` when no sample fell inside it)."""

    name: str
    calls: int
    seconds: float
    util_pct: float | None


def phase_utilisation(trace: Any) -> tuple[str, dict[str, float | None]]:
    """``(metric, {phase: mean utilisation %})`` of a :class:`~gpulab.Trace`: the first GPU's utilisation when
    NVML sampled one, else the CPU's over all cores.

    Example:
        >>> import pandas as pd
        >>> from gpulab.telemetry.trace import Trace, Mark
        >>> f = pd.DataFrame({"t_s": [0.0, 0.1, 0.2, 0.3], "device": ["host"] * 4, "source": ["host"] * 4,
        ...                   "cpu_util_pct": [100.0, 90.0, 20.0, 30.0]})
        >>> phase_utilisation(Trace(f, 0.1, marks=(Mark("a", 0.0, 0.2), Mark("b", 0.2, 0.4))))
        ('CPU utilisation (all cores)', {'a': 95.0, 'b': 25.0})
    """
    if not hasattr(trace, "device_frame") or not hasattr(trace, "marks"):
        raise TypeError(f"trace must be a gpulab Trace (e.g. mon.trace), got {type(trace).__name__}")
    util, metric = None, "CPU utilisation (all cores)"
    for g in trace.gpus:
        f = trace.device_frame(g)
        if "gpu_util_pct" in f:
            util, metric = f["gpu_util_pct"], f"GPU utilisation ({g})"
            break
    if util is None:
        host = trace.device_frame("host") if "host" in trace.devices else None
        util = host["cpu_util_pct"] if host is not None and "cpu_util_pct" in host else None
    out: dict[str, float | None] = {}
    for m in trace.marks:
        inside = None if util is None or m.end_s is None else util[(util.index >= m.start_s) & (util.index < m.end_s)]
        part = () if inside is None else inside.dropna()
        out[m.name] = float(part.mean()) if len(part) else None
    return metric, out


@dataclass(frozen=True)
class LoopWatch:
    """Loops run one after the other under a Monitor (from :func:`watch_loops`): the trace and, per phase, its
    calls and mean utilisation (``metric`` says which: a GPU's, or the CPU's over all cores)."""

    trace: Any
    phases: tuple[PhaseUse, ...]
    metric: str

    def phase(self, name: str) -> PhaseUse:
        for p in self.phases:
            if p.name == name:
                return p
        raise KeyError(f"no phase {name!r}; phases: {[p.name for p in self.phases]}")

    def lowest(self, *names: str, margin_pct: float = 5.0) -> str | None:
        """The phase (among ``names``, default all) with the lowest mean utilisation, ``"about equal"`` when the
        next lowest is within ``margin_pct`` points of it, None without samples."""
        if isinstance(margin_pct, bool) or not isinstance(margin_pct, (int, float)) or not 0 <= margin_pct < 100:
            raise ValueError(f"margin_pct must be a number of points from 0 to 100, got {margin_pct!r}")
        chosen = [self.phase(n) for n in names] if names else list(self.phases)
        ranked = sorted((p.util_pct, p.name) for p in chosen if p.util_pct is not None)
        if not ranked:
            return None
        return "about equal" if len(ranked) > 1 and ranked[1][0] - ranked[0][0] <= margin_pct else ranked[0][1]

    def to_dataframe(self) -> Any:
        """One row per phase: calls, seconds, mean utilisation %."""
        import pandas as pd

        return pd.DataFrame([{"phase": p.name, "calls": p.calls, "seconds": p.seconds, "util_pct": p.util_pct}
                             for p in self.phases]).set_index("phase")

    def plot(self, fig: Any = None) -> Any:
        """The trace's figure (:meth:`gpulab.Trace.plot`), phases shaded and named. Returns the Figure."""
        return self.trace.plot(fig=fig)

    def _rows(self) -> list[list[str]]:
        return [[p.name, str(p.calls), f"{p.seconds:.1f} s", "N/A" if p.util_pct is None else f"{p.util_pct:.0f}%"]
                for p in self.phases]

    def _header(self) -> tuple[str, ...]:
        return ("phase", "calls", "time", f"mean {self.metric}")

    def __repr__(self) -> str:
        return f"Loops under a Monitor ({self.metric})\n" + text_table(self._header(), self._rows())

    def _repr_html_(self) -> str:
        return html_table(self._header(), self._rows(), caption=f"Loops under a Monitor ({self.metric})")


def watch_loops(loops: Mapping[str, Callable[[], Any]], seconds: float, *, device: Any = None,
                interval: float = 0.1, live: bool = False, live_every_s: float = 1.0) -> LoopWatch:
    """Run each loop of ``loops`` (``{phase name: fn}``) again and again for about ``seconds``, one after the other,
    under a :class:`gpulab.Monitor` that marks each as a phase (``live=True`` redraws its figure as it runs);
    ``device``'s queued work is waited for after each call. Returns a :class:`LoopWatch`."""
    from ...telemetry.sampler import Monitor
    from ...timing import repeat_for

    if not isinstance(loops, Mapping) or not loops:
        raise TypeError("loops must be a non-empty dict of phase name -> callable, e.g. {'naive': lambda: epoch(32)}")
    for name, fn in loops.items():
        if not isinstance(name, str) or not callable(fn):
            raise TypeError(f"loops must map phase names (text) to callables, got {name!r}: {type(fn).__name__}")
    positive("seconds", seconds, unit="seconds")
    calls: dict[str, int] = {}
    with Monitor(interval=interval, live=live, live_every_s=live_every_s) as mon:
        for name, fn in loops.items():
            with mon.phase(name):
                calls[name] = repeat_for(seconds, fn, device=device)
    trace = mon.trace
    metric, util = phase_utilisation(trace)
    spans = trace.phase_seconds()
    return LoopWatch(trace, tuple(PhaseUse(n, calls[n], spans.get(n, 0.0), util.get(n)) for n in loops), metric)
