"""ProfileSummary: what profile() recorded, as tables, and its bottleneck verdict."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._check import whole
from .._format import fmt_bytes, fmt_number, fmt_seconds, html_table, text_table
from .events import DeviceCheck, OpStat

__all__ = ['ProfileSummary']


@dataclass(frozen=True)
class ProfileSummary:
    """What :func:`profile` recorded over ``steps`` steps (after ``warmup`` unrecorded ones).

    ``phases_s``: seconds per phase summed over the steps (data, forward, backward, optimizer, other);
    ``ops``: every operator, sorted by self CPU time; ``device``: the :class:`DeviceCheck`;
    ``trace_path``: the Chrome/Perfetto trace (open it at https://ui.perfetto.dev).
    """

    label: str
    device_kind: str
    steps: int
    warmup: int
    step_times_s: tuple[float, ...]
    phases_s: dict[str, float]
    ops: tuple[OpStat, ...]
    op_calls_per_step: float            # operator calls issued by Python code (not their children), data excluded
    median_op_s: float | None           # median duration of those calls
    syncs_per_step: float               # .item()-style reads that make the host wait for the device
    device: DeviceCheck
    trace_path: str | None = None
    memory: bool = False
    ranges_s: dict[str, float] = field(default_factory=dict)   # every record_function range, total seconds
    op_time_s: float = 0.0        # host time inside the operators Python called (data phase excluded), all steps
    long_op_time_s: float = 0.0   # ... of it, inside calls of LONG_OP_S or longer (the operators doing real work)
    sync_s: float = 0.0           # host time inside sync calls (.item()) outside optimizer and data, all steps
    work: Any = None              # gpulab.work.Work of one step (counted in the first warm-up call), or None
    limits: Any = None            # the MachineLimits the verdict compares the step with, or None
    kept_graph: tuple[int, int] | None = None   # (tensors, bytes) of a step's graph still alive steps later
    # seconds per operator class over the profiled steps (gpulab.profiling.attribution): host self time on a CPU,
    # device time on a GPU; empty for a summary made by hand
    op_classes_s: dict[str, float] = field(default_factory=dict)
    # when device events were recorded: seconds of the device's time per phase over the profiled steps, each kernel
    # in the phase of the device's copy of its range (gpulab.profiling.attribution.device_phases), "device idle"
    # its own row; the attribution's phases then. ``phases_s`` stays the host's view (the input-bound verdict asks
    # how long the host waited for data)
    device_phases_s: dict[str, float] = field(default_factory=dict)
    # on a CPU: the threads the step ran with (torch.get_num_threads()), the cores this process may use, and the
    # ceilings of all of them when the step used fewer (measured by gl.profile; None otherwise)
    threads: int | None = None
    cores: int | None = None
    whole_machine: Any = None
    idle_cores: float | None = None    # cores' worth of idle CPU time during the profiled steps (CPU only)
    other_cores: float | None = None   # ... and of CPU time other work (other programs, child processes) used
    # wall time of a profiled step (profiler overhead included): the median on a CPU; the mean when a GPU was
    # profiled, whose steps are host-side windows of a loop that never waits for the device until its last step
    step_s: float = field(init=False)
    total_s: float = field(init=False)    # all profiled steps
    # device time over all profiled steps, each kernel/copy counted once (the self device time of the
    # ``device_work`` rows); None when no device time was recorded
    device_time_s: float | None = field(init=False)

    def __post_init__(self) -> None:
        if not self.step_times_s or self.steps != len(self.step_times_s):
            raise ValueError(f"need one time per profiled step, got {len(self.step_times_s)} for {self.steps} steps")
        object.__setattr__(self, "step_s", statistics.fmean(self.step_times_s) if self.device.profiled
                           else statistics.median(self.step_times_s))
        object.__setattr__(self, "total_s", float(sum(self.step_times_s)))
        work = [o.self_device_s for o in self.ops if o.device_work and o.self_device_s is not None]
        object.__setattr__(self, "device_time_s", float(sum(work)) if work else None)

    def share(self, name: str) -> float:
        """Share of the profiled step time spent in phase ``name`` (0..1)."""
        if name not in self.phases_s:
            raise KeyError(f"unknown phase {name!r}; phases: {list(self.phases_s)}")
        return self.phases_s[name] / self.total_s if self.total_s > 0 else 0.0

    @property
    def device_busy_share(self) -> float | None:
        d = self.device
        return None if d.busy_s is None or not d.kernels or self.total_s <= 0 else d.busy_s / self.total_s

    @property
    def verdict(self) -> Any:
        """The bottleneck :class:`~gpulab.telemetry.diagnose.Verdict`, grounded in the measured ceilings
        (see :func:`gpulab.profiling.verdict.diagnose_profile`)."""
        from .verdict import diagnose_profile

        return diagnose_profile(self)

    @property
    def attribution(self) -> Any:
        """Where the step's time goes, by phase and by operator class, before any roofline
        (:class:`~gpulab.profiling.attribution.Attribution`): on a GPU both are the device's time
        (:attr:`device_phases_s`), on a CPU the host's."""
        from .attribution import Attribution

        if self.device_phases_s:
            basis, phases = "device time", self.device_phases_s
        else:
            basis = "device time, phases by host ranges" if self.device.kernels else "host self time"
            phases = self.phases_s
        return Attribution(self.total_s, self.steps, basis, tuple(phases.items()), tuple(self.op_classes_s.items()))

    @property
    def roofline(self) -> Any:
        """The step against the machine's ceilings (:class:`~gpulab.profiling.verdict.StepRoofline`), or
        None when the work was not counted (``warmup=0``) or no ceilings were given (``limits=False``)."""
        from .verdict import step_roofline

        return step_roofline(self.work, self.limits, self.step_s)

    def top(self, n: int = 10, by: str = "self_cpu") -> Any:
        """The ``n`` heaviest operators as a DataFrame, per step; ``by`` is "self_cpu" or "self_device"."""
        if by not in ("self_cpu", "self_device"):
            raise ValueError(f"by must be 'self_cpu' or 'self_device', got {by!r}")
        df = self.to_dataframe()
        col = f"{by}_ms_per_step"
        if col not in df or df[col].isna().all():
            raise ValueError(f"no {by.replace('_', ' ')} times recorded ({self.device.note})")
        return df.sort_values(col, ascending=False).head(n)

    def to_dataframe(self) -> Any:
        """Every operator, per profiled step: calls, self/total CPU ms, self/total device ms, memory.

        On a GPU an operator row (``aten::mm``) shows the device time of the kernels it launched and each
        kernel has its own row (``device_work`` True) with the same time: sum ``self_device_ms_per_step``
        over the ``device_work`` rows only. ``self_device_pct`` is a share of :attr:`device_time_s`, which
        counts each kernel once (an operator and its kernel each show the same share, as in torch's table).
        """
        import pandas as pd

        n = self.steps
        total_self = sum(o.self_cpu_s for o in self.ops) or 1.0
        total_dev = self.device_time_s
        rows = []
        for o in self.ops:
            r = {"operator": o.name, "calls_per_step": o.calls / n, "self_cpu_ms_per_step": 1e3 * o.self_cpu_s / n,
                 "self_cpu_pct": 100 * o.self_cpu_s / total_self, "cpu_total_ms_per_step": 1e3 * o.cpu_total_s / n,
                 "self_device_ms_per_step": None if o.self_device_s is None else 1e3 * o.self_device_s / n,
                 "self_device_pct": (None if o.self_device_s is None or not total_dev
                                     else 100 * o.self_device_s / total_dev),
                 "device_total_ms_per_step": None if o.device_total_s is None else 1e3 * o.device_total_s / n,
                 "device_work": o.device_work}
            if self.memory:
                r["self_cpu_memory_bytes_per_step"] = (None if o.self_cpu_memory_bytes is None
                                                       else o.self_cpu_memory_bytes / n)
                r["self_device_memory_bytes_per_step"] = (None if o.self_device_memory_bytes is None
                                                          else o.self_device_memory_bytes / n)
            rows.append(r)
        return pd.DataFrame(rows).set_index("operator") if rows else pd.DataFrame()

    def trace_ranges(self, step: int = 0) -> Any:
        """The annotated ranges (``record_function``/:func:`phase`, DataLoader's own) of profiled step
        ``step``, read from the trace file, as a DataFrame: name, start (ms into the step) and duration (ms).

        The trace is parsed inside this call and dropped: a notebook variable holding a trace's hundreds of
        thousands of events would slow down every later garbage collection, and with it what is measured next.

        Example:
            >>> import torch, gpulab as gl
            >>> def step():
            ...     with gl.phase("forward"):
            ...         torch.ones(64, 64).sum()
            >>> gl.profile(step, steps=2, warmup=1).trace_ranges().loc[0, "range"]   # the warm-up ran unprofiled
            'ProfilerStep#0'
        """
        import json

        import pandas as pd

        whole("step", step, low=0)
        if step >= self.steps:
            raise ValueError(f"step must be below the {self.steps} profiled steps, got {step}")
        if self.trace_path is None or not Path(self.trace_path).is_file():
            raise FileNotFoundError(f"no trace file for profile {self.label!r} ({self.trace_path!r}): "
                                    "profile again with trace=True")
        with open(self.trace_path) as f:
            ranges = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "user_annotation" and "dur" in e]
        steps = sorted((e for e in ranges if e["name"].startswith("ProfilerStep")), key=lambda e: e["ts"])
        if len(steps) <= step:
            raise ValueError(f"the trace {self.trace_path} holds {len(steps)} steps, not step {step}")
        first, end = steps[step]["ts"], steps[step]["ts"] + steps[step]["dur"]
        rows = [{"range": e["name"][:60], "starts at (ms)": (e["ts"] - first) / 1e3, "lasts (ms)": e["dur"] / 1e3}
                for e in sorted(ranges, key=lambda e: e["ts"]) if first <= e["ts"] < end]
        return pd.DataFrame(rows).round(3)

    def phase_table(self) -> Any:
        """Per-step seconds and share of step time for each phase, as a DataFrame."""
        import pandas as pd

        return pd.DataFrame({"ms_per_step": {k: 1e3 * v / self.steps for k, v in self.phases_s.items()},
                             "share": {k: self.share(k) for k in self.phases_s}})

    # ---- rendering ---------------------------------------------------------------------------
    def _head(self) -> str:
        shares = ", ".join(f"{k} {self.share(k):.0%}" for k in self.phases_s if self.phases_s[k] > 0)
        return (f"Profile {self.label!r} on {self.device_kind}: {self.steps} steps after {self.warmup} warm-up, "
                f"{'mean' if self.device.profiled else 'median'} step {fmt_seconds(self.step_s)}; {shares}")

    def _op_rows(self, n: int = 8) -> tuple[list[str], list[list[str]]]:
        dev = self.device.kernels
        header = ["operator", "calls/step", "self CPU/step", "% self CPU"]
        if dev:
            header.append("self device/step")
        if self.memory:
            header.append("self CPU mem/step")
        rows = []
        total_self = sum(o.self_cpu_s for o in self.ops) or 1.0
        for o in self.ops[:n]:
            r = [o.name[:60], fmt_number(o.calls / self.steps), fmt_seconds(o.self_cpu_s / self.steps),
                 f"{100 * o.self_cpu_s / total_self:.1f}%"]
            if dev:
                r.append(fmt_seconds(None if o.self_device_s is None else o.self_device_s / self.steps))
            if self.memory:
                r.append(fmt_bytes(None if o.self_cpu_memory_bytes is None else o.self_cpu_memory_bytes / self.steps))
            rows.append(r)
        return header, rows

    def _foot(self) -> str:
        ops = (f"{self.op_calls_per_step:.0f} operator calls per step"
               + (f" (median {fmt_seconds(self.median_op_s)})" if self.median_op_s is not None else "")
               + (f", {self.syncs_per_step:.0f} .item() calls per step" if self.syncs_per_step else ""))
        trace = f"trace: {self.trace_path}" if self.trace_path else "no trace file written"
        dev = ("" if self.device_time_s is None else
               f" Device time {fmt_seconds(self.device_time_s / self.steps)} per step (each kernel once; an "
               "operator's self device time repeats its kernels').")
        return f"{ops}. Device: {self.device.note}.{dev} {trace}"

    def __repr__(self) -> str:
        header, rows = self._op_rows()
        v = self.verdict
        head = next((f.message for f in v.findings if f.code == v.verdict), "")
        where = (f"\nWhere the time goes: {self.attribution.summary()}" if self.op_classes_s else "")
        return (f"{self._head()}\n{text_table(header, rows)}\n{self._foot()}{where}\nVerdict: {v.verdict}"
                + (f": {head}" if head else ""))

    def _repr_html_(self) -> str:
        header, rows = self._op_rows()
        v = self.verdict
        return (html_table(header, rows, caption=self._head(), footer=self._foot())
                + f"<div><b>Verdict: {v.verdict}</b> - {_html_escape(v.findings[0].message) if v.findings else ''}"
                  "</div>")


def _html_escape(s: str) -> str:
    import html

    return html.escape(s)
