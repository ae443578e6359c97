"""Profiling: where a training step's time goes, by operator and by phase, with a bottleneck verdict.

:func:`profile` wraps ``torch.profiler`` with a schedule (warm-up steps are not recorded) and returns a
:class:`ProfileSummary`: the top operators by self time on the CPU and on the device, the share of each
step spent in data loading / forward / backward / optimizer (from ``record_function`` ranges such as
:func:`phase`, or PyTorch's own ``enumerate(DataLoader)`` and ``Optimizer.step`` ranges), memory by
operator when asked, the path of a Chrome/Perfetto trace, and whether device events were really
recorded (CUPTI can drop them silently). ``summary.verdict`` turns it into the same kind of
:class:`~gpulab.telemetry.diagnose.Verdict` as ``Monitor.trace.diagnose()``, with the same codes
("input-bound", "launch-bound", ...) and thresholds.

:func:`phase` also emits an NVTX range on CUDA, so the same annotations show in Nsight Systems;
:func:`nsight_commands` gives the ``nsys`` / ``ncu`` command lines for a GPU machine and
:func:`nvtx_capture` marks the region they should record. :func:`tf_profile` runs TensorFlow's
profiler into a TensorBoard log directory.

Example:
    >>> import torch, gpulab as gl
    >>> w = torch.randn(64, 64, requires_grad=True)
    >>> def step():
    ...     with gl.phase("data"):
    ...         x = torch.randn(32, 64)
    ...     with gl.phase("forward"):
    ...         loss = (x @ w).square().mean()
    ...     with gl.phase("backward"):
    ...         loss.backward()
    >>> s = gl.profile(step, steps=3, warmup=1, trace=False)
    >>> sorted(s.phases_s) == ["backward", "data", "forward", "optimizer", "other"]
    True
    >>> s.steps, s.device.kernels is None
    (3, True)
"""
from __future__ import annotations

import contextlib
import math
import os
import re
import statistics
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from ._check import flag, positive, table_rows, whole
from ._format import fmt_bytes, fmt_number, fmt_seconds, html_table, text_table

__all__ = ["phase", "profile", "ProfileSummary", "OpStat", "DeviceCheck", "check_device_events",
           "compare_profiles", "ProfileComparison", "diagnose_profile", "nsight_commands", "NsightCommands",
           "nvtx_capture", "tf_profile", "TFProfile", "PHASES", "TINY_OP_S", "MANY_OPS_PER_STEP"]

# Phase names and the range-name prefixes (lower case) that count as each. The data prefixes are the
# ones Monitor.trace.diagnose() uses for its "data*" phases, plus PyTorch's own DataLoader range.
PHASES: dict[str, tuple[str, ...]] = {
    "data": ("data", "load", "input", "enumerate(dataloader)"),
    "forward": ("forward", "fwd", "loss"),
    "backward": ("backward", "bwd", "autograd::engine::evaluate_function"),
    "optimizer": ("optimizer", "optim"),
}
TINY_OP_S = 20e-6          # an operator call shorter than this is mostly dispatch/launch overhead
MANY_OPS_PER_STEP = 200    # ... and this many of them per step make a step overhead-bound
TINY_KERNEL_S = 10e-6      # a GPU kernel this short does little work for its launch cost
SYNC_CALLS = ("aten::item", "aten::_local_scalar_dense")


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:  # pragma: no cover
        raise ImportError("gpulab.profile needs PyTorch: pip install 'gpulab[torch]'") from e
    return torch


# ----------------------------------------------------------------------------------------------
# annotations
@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Mark a span of a training step (``"data"``, ``"forward"``, ``"backward"``, ``"optimizer"`` or
    any name): a ``record_function`` range for ``torch.profiler`` and, when CUDA is available, an NVTX
    range for Nsight Systems / Nsight Compute. Costs a few microseconds; harmless when not profiling.

    Example:
        >>> import torch, gpulab as gl
        >>> with gl.phase("forward"):
        ...     y = torch.ones(3) * 2
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"phase needs a non-empty name such as 'data' or 'forward', got {name!r}")
    torch = _torch()
    nvtx = torch.cuda.is_available()
    with torch.profiler.record_function(name):
        if nvtx:
            torch.cuda.nvtx.range_push(name)
        try:
            yield
        finally:
            if nvtx:
                torch.cuda.nvtx.range_pop()


def _phase_of(name: str) -> str | None:
    low = name.lower()
    if low.startswith("profilerstep"):
        return None
    if low.startswith("optimizer.zero_grad") or low.startswith("optimizer.step"):
        return "optimizer"
    for ph, prefixes in PHASES.items():
        if low.startswith(prefixes):
            return ph
    return None


# ----------------------------------------------------------------------------------------------
# results
@dataclass(frozen=True)
class OpStat:
    """One operator (or kernel), aggregated over the profiled steps. Times are totals in seconds.

    On CUDA, torch.profiler gives a CPU operator (``aten::mm``) the device time of the kernels it launched
    (``self_device_time_total``/``device_time_total``), and each kernel has its own row with the same time
    as its self device time: a sum over all rows counts every kernel twice. ``device_work`` marks the rows
    whose self device time is the work itself (kernels, copies, memsets: what torch's own "Self CUDA time
    total" sums); :attr:`ProfileSummary.device_time_s` adds up those.
    """

    name: str
    calls: int
    self_cpu_s: float
    cpu_total_s: float
    self_device_s: float | None = None
    device_total_s: float | None = None
    self_cpu_memory_bytes: int | None = None
    self_device_memory_bytes: int | None = None
    device_work: bool = False   # a device row (kernel, memcpy, memset): its device time is counted once


@dataclass(frozen=True)
class DeviceCheck:
    """Did the profiler record device (GPU) events? ``None`` counts when no device was profiled."""

    profiled: bool                 # CUDA activity was requested
    kernels: int | None            # device events recorded (kernels, copies, memsets)
    busy_s: float | None           # union of device event intervals inside the profiled steps
    median_kernel_s: float | None
    note: str

    @property
    def ok(self) -> bool:
        """False only when CUDA was profiled and used but no device event came back."""
        return not (self.profiled and self.kernels == 0 and "not recorded" in self.note)


def _is_device_event(ev: Any) -> bool:
    dt = getattr(ev, "device_type", None)
    dt = dt() if callable(dt) else dt
    return str(dt).rsplit(".", 1)[-1].upper() in ("CUDA", "PRIVATEUSE1", "XPU", "MTIA", "HIP")


def _is_device_work(ev: Any) -> bool:
    """A kernel, memcpy or memset: a device event that is not a ``gpu_user_annotation``. Kineto also puts
    each ``record_function``/:func:`phase` range on the device timeline (device type CUDA,
    ``is_user_annotation`` True) spanning the range's first to last kernel, gaps included: counting those
    would report the GPU busy while it idles between kernels. torch's own table leaves them out of its
    device total the same way (``profiler_util._build_table``)."""
    return _is_device_event(ev) and not getattr(ev, "is_user_annotation", False)


# torch.profiler's averaged rows (FunctionEventAvg) name device figures "device" since torch 2.4
# (pytorch/pytorch#123247) and "cuda" before (self_cuda_time_total, cuda_time_total, self_cuda_memory_usage);
# read the new name, else the old one.
_DEVICE_NAMES = {"self_device_time_total": "self_cuda_time_total", "device_time_total": "cuda_time_total",
                 "self_device_memory_usage": "self_cuda_memory_usage"}


def _device_attr(row: Any, name: str) -> Any:
    """``row.<name>`` under its current or its pre-2.4 spelling (see ``_DEVICE_NAMES``); None when neither
    exists. The old spelling survives in new torch as deprecated properties of FunctionEvent that warn, so
    it is only read when the new one is missing."""
    if hasattr(row, name):
        return getattr(row, name)
    old = _DEVICE_NAMES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return getattr(row, old, None)


def _counts_device_time(row: Any) -> bool:
    """Whether a key_averages row's self device time is device work itself, counted once in a total: a
    device row that is not a user annotation, or a legacy-profiler CPU row (the legacy profiler stores each
    operator's kernel time on the CPU event and has no kernel rows). The rule of torch's table footer."""
    if _is_device_event(row):
        return not getattr(row, "is_user_annotation", False)
    return bool(getattr(row, "is_legacy", False))


def _interval_s(ev: Any) -> tuple[float, float]:
    tr = ev.time_range
    return tr.start / 1e6, tr.end / 1e6


def _union(intervals: Iterable[tuple[float, float]], lo: float | None = None, hi: float | None = None) -> float:
    """Total length covered by ``intervals``, clipped to [lo, hi]."""
    spans = []
    for a, b in intervals:
        if lo is not None:
            a = max(a, lo)
        if hi is not None:
            b = min(b, hi)
        if b > a:
            spans.append((a, b))
    total, end = 0.0, -math.inf
    for a, b in sorted(spans):
        if a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def check_device_events(events: Sequence[Any], profiled: bool, cuda_used: bool,
                        windows: Sequence[tuple[float, float]] = ()) -> DeviceCheck:
    """Count the device events among profiler ``events`` (objects with ``device_type`` and ``time_range``
    in microseconds, like ``torch.autograd.profiler_util.FunctionEvent``) and say whether their absence
    is normal (no device profiled, or the code never touched it) or a recording failure (CUPTI).
    Kernels, copies and memsets count; the device-side copies of annotated ranges
    (``gpu_user_annotation``, ``is_user_annotation`` True) do not.

    Example:
        >>> check_device_events([], profiled=False, cuda_used=False).kernels is None
        True
    """
    if not profiled:
        return DeviceCheck(False, None, None, None, "CPU only: no device was profiled")
    kern = [e for e in events if _is_device_work(e)]
    if not kern:
        if not cuda_used:
            return DeviceCheck(True, 0, 0.0, None, "CUDA was profiled but this code launched no GPU work")
        return DeviceCheck(True, 0, None, None,
                           "device events not recorded although the code used the GPU: CUPTI could not trace "
                           "(libcupti missing or mismatched, another profiler such as nsys/ncu/DCGM attached, or "
                           "no permission). Device columns are empty - do not read them as zero GPU time.")
    spans = [_interval_s(e) for e in kern]
    busy = (sum(_union(spans, a, b) for a, b in windows) if windows else _union(spans))
    med = statistics.median(b - a for a, b in spans)
    return DeviceCheck(True, len(kern), busy, med, f"{len(kern)} device events recorded (CUPTI working)")


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
    step_s: float = field(init=False)     # median wall time of a profiled step (profiler overhead included)
    total_s: float = field(init=False)    # all profiled steps
    # device time over all profiled steps, each kernel/copy counted once (the self device time of the
    # ``device_work`` rows); None when no device time was recorded
    device_time_s: float | None = field(init=False)

    def __post_init__(self) -> None:
        if not self.step_times_s or self.steps != len(self.step_times_s):
            raise ValueError(f"need one time per profiled step, got {len(self.step_times_s)} for {self.steps} steps")
        object.__setattr__(self, "step_s", statistics.median(self.step_times_s))
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
        """The bottleneck :class:`~gpulab.telemetry.diagnose.Verdict` (see :func:`diagnose_profile`)."""
        return diagnose_profile(self)

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
            >>> gl.profile(step, steps=2, warmup=1).trace_ranges().loc[0, "range"]
            'ProfilerStep#1'
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
                f"median step {fmt_seconds(self.step_s)}; {shares}")

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
        return f"{self._head()}\n{text_table(header, rows)}\n{self._foot()}\nVerdict: {self.verdict.verdict}"

    def _repr_html_(self) -> str:
        header, rows = self._op_rows()
        v = self.verdict
        return (html_table(header, rows, caption=self._head(), footer=self._foot())
                + f"<div><b>Verdict: {v.verdict}</b> - {_html_escape(v.findings[0].message) if v.findings else ''}"
                  "</div>")


def _html_escape(s: str) -> str:
    import html

    return html.escape(s)


# ----------------------------------------------------------------------------------------------
# the verdict
def diagnose_profile(summary: ProfileSummary) -> Any:
    """The bottleneck verdict of a profile, with the codes and thresholds of
    :func:`gpulab.telemetry.diagnose.diagnose`:

    - data phases >= 30% of step time -> ``input-bound`` ("62% of step time in data loading");
    - many tiny operator calls (>= 200 per step, median < 20 us), or on a GPU many tiny kernels with the
      device busy < 70% of the step -> ``launch-bound``;
    - host syncs (``.item()``) every step -> a ``host-syncs`` warning;
    - GPU busy >= 70% -> ``healthy``; otherwise on CPU -> ``compute-bound`` (the operators do the work).
    """
    from .telemetry.diagnose import DATA_SHARE, HEALTHY_UTIL_PCT, Finding, Verdict

    s = summary
    f: list[Finding] = []
    verdict = None
    data = s.share("data")
    detail = ", ".join(f"{k} {s.share(k):.0%}" for k in s.phases_s)
    if data >= DATA_SHARE:
        f.append(Finding("warning", "input-bound", f"{data:.0%} of step time in data loading", detail,
                         "prepare data off the critical path: batched/vectorised transforms, DataLoader workers "
                         "with prefetching, cached decoded data, or decoding on the GPU (DALI, lesson 06)"))
        verdict = "input-bound"
    busy = s.device_busy_share
    # On a GPU the host side of every call is short (it only queues a kernel), so only the kernels tell;
    # on a CPU the operators are the work, and many tiny ones mean dispatch overhead dominates.
    tiny_ops = (not s.device.profiled and s.op_calls_per_step >= MANY_OPS_PER_STEP
                and s.median_op_s is not None and s.median_op_s < TINY_OP_S)
    tiny_kernels = (s.device.kernels is not None and s.device.kernels / s.steps >= MANY_OPS_PER_STEP
                    and s.device.median_kernel_s is not None and s.device.median_kernel_s < TINY_KERNEL_S
                    and busy is not None and busy < HEALTHY_UTIL_PCT / 100)
    if tiny_ops or tiny_kernels:
        ev = (f"{s.op_calls_per_step:.0f} operator calls per step, median {fmt_seconds(s.median_op_s)}"
              if tiny_ops else "")
        if tiny_kernels:
            ev = (ev + "; " if ev else "") + (f"{s.device.kernels / s.steps:.0f} kernels per step, median "
                                              f"{fmt_seconds(s.device.median_kernel_s)}, device busy {busy:.0%}")
        f.append(Finding("warning", "launch-bound", "many tiny operations: launch-bound", ev,
                         "vectorise Python loops over items or layers into whole-tensor operations; then larger "
                         "batches, torch.compile or CUDA graphs to cut the per-launch cost"))
        verdict = verdict or "launch-bound"
    if s.syncs_per_step >= 1:
        f.append(Finding("warning" if s.syncs_per_step >= 10 else "info", "host-syncs",
                         f"{s.syncs_per_step:.0f} .item() calls per step (host syncs on a GPU)",
                         "aten::item / aten::_local_scalar_dense calls outside data loading and the optimizer",
                         "on a GPU each one makes the CPU wait for all queued kernels; keep metrics on the device "
                         "and read them once per epoch"))
    if busy is not None:
        if busy >= HEALTHY_UTIL_PCT / 100:
            f.append(Finding("ok", "healthy", f"the GPU is busy {busy:.0%} of the step", s.device.note,
                             "next: more work per kernel (mixed precision, larger batch)"))
            verdict = verdict or "healthy"
        else:
            f.append(Finding("warning", "gpu-idle", f"the GPU is busy only {busy:.0%} of the step", s.device.note,
                             "the host does not feed it fast enough: see the findings above"))
    elif s.device.profiled and not s.device.ok:
        f.append(Finding("warning", "no-device-events", "no GPU events were recorded", s.device.note,
                         "check CUPTI (pip's torch ships it), close other profilers, then profile again"))
    if verdict is None:
        top = ", ".join(f"{o.name} {o.self_cpu_s / max(s.total_s, 1e-12):.0%}" for o in s.ops[:3])
        f.append(Finding("ok", "compute-bound", "the step's time goes to its operators' own work",
                         f"top operators by self CPU time: {top}",
                         "this is the expected end state: speed now comes from less or cheaper math (mixed "
                         "precision, a better kernel, a GPU)"))
        verdict = "compute-bound" if busy is None else "gpu-idle"
    return Verdict(verdict, tuple(f), "torch.profiler")


# ----------------------------------------------------------------------------------------------
# profile()
def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip("-") or "profile"


def _cuda_allocs(torch: Any) -> int:
    """How many allocations the CUDA caching allocator has served so far (to tell whether code used the GPU).
    torch's memory_summary reads "allocation.*"; the memory_stats docs spell it "allocated.*": try both."""
    try:
        stats = torch.cuda.memory_stats()
        return int(stats.get("allocation.all.allocated", stats.get("allocated.all.allocated", 0)))
    except Exception:
        return 0


def profile(fn: Callable[[], Any], steps: int = 5, warmup: int = 1, *, label: str = "profile",
            memory: bool = False, record_shapes: bool = False, trace: bool = True,
            trace_dir: str | os.PathLike[str] = "traces", device: Any = None) -> ProfileSummary:
    """Profile ``fn`` (one training step, no arguments): ``warmup`` calls unrecorded, then ``steps``
    recorded calls, through ``torch.profiler`` with a schedule.

    Annotate the step with :func:`phase` ("data", "forward", "backward", "optimizer") to get the share of
    each; PyTorch's own ``enumerate(DataLoader)`` and ``Optimizer.step`` ranges count without annotation.
    ``memory=True`` records memory by operator (slower). ``trace=True`` writes a Chrome/Perfetto trace
    file into ``trace_dir`` (default ``traces/``, git-ignored). On CUDA the device is profiled too and
    the summary says whether its events were really recorded.
    """
    if not callable(fn):
        raise TypeError(f"profile needs a callable running one step, got {type(fn).__name__}")
    whole("steps", steps)
    whole("warmup", warmup, low=0)
    flag("memory", memory)
    flag("record_shapes", record_shapes)
    flag("trace", trace)
    if not isinstance(label, str) or not label:
        raise TypeError(f"label must be a non-empty string, got {label!r}")
    torch = _torch()
    from torch.profiler import ProfilerActivity, schedule

    from .system import device_kind

    kind = device_kind() if device is None else torch.device(device).type
    cuda = kind == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    # kineto logs VERBOSE 0 .. ERROR 4, USDT 5 (a "profiler_start/stop" pair on every run since torch 2.14);
    # 6 silences them: missing device events are checked and reported by check_device_events instead
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    path: list[str] = []

    def on_ready(prof: Any) -> None:
        if trace:
            d = Path(trace_dir)
            d.mkdir(parents=True, exist_ok=True)
            p = d / f"{_slug(label)}-{os.getpid()}-{time.time_ns()}.pt.trace.json"
            prof.export_chrome_trace(str(p))
            path.append(str(p))

    allocs_before = _cuda_allocs(torch) if cuda else 0
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*warmup.*")   # warmup=0 is a valid choice here
        with torch.profiler.profile(activities=activities, record_shapes=record_shapes, profile_memory=memory,
                                    schedule=schedule(wait=0, warmup=warmup, active=steps, repeat=1),
                                    on_trace_ready=on_ready) as prof:
            for _ in range(warmup + steps):
                fn()
                if cuda:
                    torch.cuda.synchronize()
                prof.step()
    cuda_used = cuda and _cuda_allocs(torch) > allocs_before
    return _summarise(prof, label, kind, steps, warmup, cuda, cuda_used, memory, path[0] if path else None)


def _op_stat(a: Any, cuda: bool, memory: bool) -> OpStat:
    """One ``key_averages()`` row (``FunctionEventAvg``, times in microseconds) as an :class:`OpStat`."""
    is_dev = _is_device_event(a)

    def dev_s(name: str) -> float | None:
        v = _device_attr(a, name) if cuda else None
        return None if v is None else v / 1e6

    mem = _device_attr(a, "self_device_memory_usage") if memory and cuda else None
    return OpStat(a.key, int(a.count), 0.0 if is_dev else a.self_cpu_time_total / 1e6,
                  0.0 if is_dev else a.cpu_time_total / 1e6,
                  dev_s("self_device_time_total"), dev_s("device_time_total"),
                  int(a.self_cpu_memory_usage) if memory else None,
                  None if mem is None else int(mem),
                  device_work=cuda and _counts_device_time(a))


def _summarise(prof: Any, label: str, kind: str, steps: int, warmup: int, cuda: bool, cuda_used: bool,
               memory: bool, trace_path: str | None) -> ProfileSummary:
    events = list(prof.events())
    step_events = [e for e in events if e.name.startswith("ProfilerStep")]
    windows = sorted(_interval_s(e) for e in step_events)
    if not windows:   # pragma: no cover - torch always emits ProfilerStep ranges with a schedule
        raise RuntimeError("the profiler recorded no steps: was fn() called?")
    n = len(windows)
    # phases: the outermost classified ranges, as time intervals, clipped to the step windows
    by_phase: dict[str, list[tuple[float, float]]] = {p: [] for p in PHASES}
    ranges: dict[str, float] = {}
    for e in events:
        if _is_device_event(e) or e.name.startswith("ProfilerStep"):
            continue
        if getattr(e, "is_user_annotation", False):
            a, b = _interval_s(e)
            ranges[e.name] = ranges.get(e.name, 0.0) + (b - a)
        ph = _phase_of(e.name)
        if ph is None:
            continue
        parent, nested = e.cpu_parent, False
        while parent is not None:
            if _phase_of(parent.name) is not None:
                nested = True
                break
            parent = parent.cpu_parent
        if not nested:
            by_phase[ph].append(_interval_s(e))
    phases = {p: sum(_union(iv, a, b) for a, b in windows) for p, iv in by_phase.items()}
    total = sum(b - a for a, b in windows)
    phases["other"] = max(0.0, total - sum(phases.values()))
    # operator calls issued by Python code (an aten op without an aten ancestor), outside data loading
    # (CPU-side input work is judged by the data share); and .item()-style reads outside the optimizer and
    # data loading (Adam's step counters and torchvision's random transforms read CPU scalars: no device sync)
    top_ops = []
    syncs = 0
    for e in events:
        if not e.name.startswith("aten::") or _is_device_event(e):
            continue
        parent, in_aten, ph = e.cpu_parent, False, None
        while parent is not None:
            in_aten = in_aten or parent.name.startswith("aten::")
            ph = ph or _phase_of(parent.name)
            parent = parent.cpu_parent
        if in_aten:
            continue
        if e.name in SYNC_CALLS and ph not in ("optimizer", "data"):
            syncs += 1
        if ph != "data":
            a, b = _interval_s(e)
            top_ops.append(b - a)
    dev = check_device_events(events, cuda, cuda_used, windows)
    ops = [_op_stat(a, cuda, memory) for a in prof.key_averages()
           if not a.key.startswith("ProfilerStep") and not getattr(a, "is_user_annotation", False)]
    ops.sort(key=lambda o: (o.self_cpu_s, o.self_device_s or 0.0), reverse=True)
    if dev.kernels and not any(o.device_work and o.self_device_s is not None for o in ops):
        # events came back but the averaged rows carry no device time this code can read: say so rather
        # than show empty device columns under "CUPTI working"
        dev = replace(dev, note=f"{dev.note}, but this torch's key_averages() rows carry no device time gpulab "
                                "can read (neither self_device_time_total nor self_cuda_time_total on kernel "
                                "rows): device columns are empty - read the trace instead")
    elif dev.profiled and not dev.kernels and any(o.device_work and o.self_device_s for o in ops):
        # torch's GPU fallback (no CUPTI): CUDA events around each operator time it, on the CPU rows
        dev = replace(dev, note=f"{dev.note}; torch's CUDA-event fallback timed each operator instead "
                                "(self device times on the operator rows, no kernel rows)")
    return ProfileSummary(
        label=label, device_kind=kind, steps=n, warmup=warmup,
        step_times_s=tuple(b - a for a, b in windows), phases_s=phases, ops=tuple(ops),
        op_calls_per_step=len(top_ops) / n, median_op_s=statistics.median(top_ops) if top_ops else None,
        syncs_per_step=syncs / n, device=dev, trace_path=trace_path, memory=memory, ranges_s=ranges)


# ----------------------------------------------------------------------------------------------
# before / after
@dataclass(frozen=True)
class ProfileComparison:
    """Profiles of the same step before and after fixes, side by side (per-step figures).

    ``timings`` (label -> seconds per step, measured without the profiler) replace the profiled step
    times in ``speedup``: a profiled step carries the profiler's overhead, more for many tiny operators,
    and a few profiled steps are easily disturbed by other programs.
    """

    summaries: tuple[ProfileSummary, ...]
    baseline: str
    timings: Mapping[str, float] | None = None

    def __post_init__(self) -> None:
        table_rows(self.summaries, ProfileSummary, "gl.profile", self.baseline)
        if self.timings is not None:
            missing = [s.label for s in self.summaries if s.label not in self.timings]
            if missing:
                raise ValueError(f"timings has no entry for {missing}: give one unprofiled time per profile "
                                 f"(labels {[s.label for s in self.summaries]})")
            for label, t in self.timings.items():
                positive(f"timings[{label!r}]", t, unit="seconds")

    def step_s(self, label: str) -> float:
        """Seconds per step of profile ``label``: the unprofiled time if ``timings`` were given."""
        return self.timings[label] if self.timings is not None else self.summary(label).step_s

    def summary(self, label: str) -> ProfileSummary:
        for s in self.summaries:
            if s.label == label:
                return s
        raise KeyError(f"no profile {label!r}; labels: {[s.label for s in self.summaries]}")

    def speedup(self, label: str) -> float:
        """Baseline median step time / this profile's (>1 is faster)."""
        return self.step_s(self.baseline) / self.step_s(label)

    def to_dataframe(self) -> Any:
        import pandas as pd

        rows = []
        for s in self.summaries:
            r = {"profile": s.label, "step_ms": 1e3 * s.step_s}
            if self.timings is not None:
                r["unprofiled_step_ms"] = 1e3 * self.timings[s.label]
            r["speedup"] = self.speedup(s.label)
            r.update({f"{k}_share": s.share(k) for k in s.phases_s})
            r.update({"op_calls_per_step": s.op_calls_per_step, "syncs_per_step": s.syncs_per_step,
                      "device_busy_share": s.device_busy_share, "verdict": s.verdict.verdict,
                      "top_operator": s.ops[0].name if s.ops else None})
            rows.append(r)
        return pd.DataFrame(rows).set_index("profile")

    def _rows(self) -> list[list[str]]:
        out = []
        for s in self.summaries:
            times = [fmt_seconds(s.step_s)] + ([fmt_seconds(self.timings[s.label])] if self.timings is not None else [])
            out.append([s.label, *times, f"{self.speedup(s.label):.2f}x", f"{s.share('data'):.0%}",
                        f"{s.share('forward') + s.share('backward'):.0%}", f"{s.share('optimizer'):.0%}",
                        f"{s.op_calls_per_step:.0f}", s.verdict.verdict])
        return out

    def _header(self) -> tuple[str, ...]:
        times = ("profiled step", "step, no profiler") if self.timings is not None else ("step",)
        return ("profile", *times, "speedup", "data", "fwd+bwd", "optimizer", "op calls/step", "verdict")

    def _footer(self) -> str:
        speed = ("speedup from the steps timed without the profiler" if self.timings is not None
                 else "step and speedup: median profiled step (profiler overhead included)")
        return f"{speed}; data, fwd+bwd, optimizer: shares of the profiled step time"

    def __repr__(self) -> str:
        return (f"Profiles vs {self.baseline!r}\n" + text_table(self._header(), self._rows()) + "\n" + self._footer())

    def _repr_html_(self) -> str:
        return html_table(self._header(), self._rows(), caption=f"Before and after, vs {self.baseline!r}",
                          footer=self._footer())

    def plot(self, ax: Any = None) -> Any:
        """Stacked bars: per-step milliseconds in each phase, one bar per profile."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(7, 3.2))
        names = list(self.summaries[0].phases_s)
        bottom = [0.0] * len(self.summaries)
        labels = [s.label for s in self.summaries]
        for ph in names:
            vals = [1e3 * s.phases_s.get(ph, 0.0) / s.steps for s in self.summaries]
            ax.barh(labels, vals, left=bottom, label=ph)
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.invert_yaxis()
        ax.set_xlabel("ms per step")
        ax.legend(ncol=len(names), fontsize="small", loc="lower right")
        ax.set_title("Where each step's time goes")
        ax.figure.tight_layout()
        return ax.figure


def compare_profiles(summaries: Sequence[ProfileSummary], baseline: str | None = None,
                     timings: Mapping[str, Any] | None = None) -> ProfileComparison:
    """Put profiles side by side: step time, speedup, phase shares, operator calls, verdict.

    ``timings``: label -> the same step timed without the profiler, as seconds or as a
    :class:`~gpulab.Measurement` (e.g. the dict from :func:`gpulab.benchmark_interleaved`); the speedups
    then come from these, free of the profiler's overhead.

    Example:
        >>> import torch, gpulab as gl
        >>> a = gl.profile(lambda: torch.ones(256, 256) @ torch.ones(256, 256), steps=2, label="a", trace=False)
        >>> b = gl.profile(lambda: torch.ones(64, 64) @ torch.ones(64, 64), steps=2, label="b", trace=False)
        >>> gl.compare_profiles([a, b]).baseline
        'a'
    """
    summaries = tuple(summaries)
    if not summaries or not all(isinstance(s, ProfileSummary) for s in summaries):
        raise TypeError("compare_profiles takes a list of ProfileSummary objects from gl.profile")
    if timings is not None:
        if not isinstance(timings, Mapping):
            raise TypeError("timings must be a mapping label -> seconds or Measurement, e.g. the dict from "
                            "gl.benchmark_interleaved({label: step, ...})")
        timings = {k: getattr(v, "median_s", v) for k, v in timings.items()}
    return ProfileComparison(summaries, baseline or summaries[0].label, timings)


# ----------------------------------------------------------------------------------------------
# Nsight
@dataclass(frozen=True)
class NsightCommands:
    """The command lines to profile a script with Nsight Systems (timeline) and Nsight Compute (kernels)."""

    nsys: str
    nsys_stats: str
    ncu: str
    notes: tuple[str, ...]

    def __repr__(self) -> str:
        return "\n".join([f"Nsight Systems:  {self.nsys}", f"  then:          {self.nsys_stats}",
                          f"Nsight Compute:  {self.ncu}"] + [f"- {n}" for n in self.notes])

    def _repr_html_(self) -> str:
        rows = [("Nsight Systems (timeline)", self.nsys), ("summary tables", self.nsys_stats),
                ("Nsight Compute (kernels)", self.ncu)]
        return html_table(("tool", "command"), rows, caption="Run on a GPU machine",
                          footer=" ".join(self.notes))


def nsight_commands(script: str = "train.py", output: str = "gpulab-profile", nvtx_range: str = "forward",
                    kernels: int = 20, capture_range: bool = True) -> NsightCommands:
    """Command lines for a GPU machine. ``capture_range=True`` records only between
    ``cudaProfilerStart``/``Stop`` (see :func:`nvtx_capture`); Nsight Compute profiles ``kernels`` kernels
    inside the NVTX range ``nvtx_range`` (a :func:`phase` name).

    Example:
        >>> import gpulab as gl
        >>> gl.nsight_commands("train.py").nsys.startswith("nsys profile")
        True
    """
    for name, v in (("script", script), ("output", output), ("nvtx_range", nvtx_range)):
        if not isinstance(v, str) or not v or any(c in v for c in "\"'\n"):
            raise ValueError(f"{name} must be a plain non-empty string without quotes, got {v!r}")
    whole("kernels", kernels)
    flag("capture_range", capture_range)
    cap = " --capture-range=cudaProfilerApi --capture-range-end=stop" if capture_range else ""
    nsys = (f"nsys profile --trace=cuda,nvtx,osrt,cudnn,cublas{cap} --output={output} --force-overwrite=true "
            f"python {script}")
    ncu = (f'ncu --nvtx --nvtx-include "{nvtx_range}/" --launch-count {kernels} --set full '
           f"--export {output}-kernels --force-overwrite python {script}")
    notes = ("nsys writes <output>.nsys-rep: open it in the Nsight Systems GUI (File > Open) on any machine.",
             "gl.phase(...) ranges appear as NVTX ranges on the timeline; the trailing '/' in --nvtx-include "
             "selects a push/pop range.",
             "ncu replays each kernel many times (minutes, not seconds): keep --launch-count small.",
             "Profiling GPU counters may need admin rights (ERR_NVGPUCTRPERM): see NVIDIA's "
             "'Permission issue with Performance Counters' page.")
    return NsightCommands(nsys, f"nsys stats {output}.nsys-rep", ncu, notes)


@contextlib.contextmanager
def nvtx_capture(record_shapes: bool = False, cuda: Any = None) -> Iterator[bool]:
    """Mark the region Nsight should record: ``cudaProfilerStart``/``Stop`` around it (for
    ``--capture-range=cudaProfilerApi``) and an NVTX range per PyTorch operator (``emit_nvtx``).
    Yields whether it is active; without CUDA it does nothing and yields False.

    Example:
        >>> import torch, gpulab as gl
        >>> with gl.nvtx_capture() as active:
        ...     _ = torch.ones(2) + 1
        >>> active == torch.cuda.is_available()
        True
    """
    torch = _torch()
    cuda = torch.cuda if cuda is None else cuda
    if not cuda.is_available():
        yield False
        return
    cuda.profiler.start()
    try:
        with torch.autograd.profiler.emit_nvtx(record_shapes=record_shapes):
            yield True
    finally:
        cuda.synchronize()
        cuda.profiler.stop()


# ----------------------------------------------------------------------------------------------
# TensorFlow
@dataclass(frozen=True)
class TFProfile:
    """A TensorFlow profiler run: the TensorBoard log directory, the files written, and the busiest
    host events read back from the trace (when the trace format could be read)."""

    logdir: str
    files: tuple[str, ...]
    steps: int
    top: tuple[tuple[str, int, float], ...]   # (event name, count, total seconds)

    @property
    def command(self) -> str:
        return f"tensorboard --logdir {self.logdir}"

    def to_dataframe(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self.top, columns=["event", "count", "total_s"]).set_index("event")

    def _foot(self) -> str:
        return (f"Open with: pip install tensorboard-plugin-profile, then `{self.command}` -> Profile tab "
                "(trace viewer, op stats, input-pipeline analyzer).")

    def __repr__(self) -> str:
        rows = [(n[:60], str(c), fmt_seconds(t / self.steps)) for n, c, t in self.top[:8]]
        return (f"TensorFlow profile of {self.steps} steps in {self.logdir} ({len(self.files)} files)\n"
                + text_table(("host event", "count", "time/step (incl. children)"), rows) + "\n" + self._foot())

    def _repr_html_(self) -> str:
        rows = [(n[:60], str(c), fmt_seconds(t / self.steps)) for n, c, t in self.top[:8]]
        return html_table(("host event", "count", "time/step (incl. children)"), rows,
                          caption=f"TensorFlow profile of {self.steps} steps in {self.logdir}", footer=self._foot())


def _xplane_top(path: str, n: int = 20) -> tuple[tuple[str, int, float], ...]:
    """Aggregate the host plane of an ``.xplane.pb`` trace: (name, count, seconds) by total time."""
    try:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2
    except ImportError:  # pragma: no cover - layout of TF's protobufs moved
        return ()
    space = xplane_pb2.XSpace()
    space.ParseFromString(Path(path).read_bytes())
    agg: dict[str, list[float]] = {}
    for plane in space.planes:
        if not plane.name.startswith("/host:"):
            continue
        meta = {k: v.display_name or v.name for k, v in plane.event_metadata.items()}
        for line in plane.lines:
            for ev in line.events:
                name = meta.get(ev.metadata_id, str(ev.metadata_id))
                a = agg.setdefault(name, [0, 0.0])
                a[0] += 1
                a[1] += ev.duration_ps / 1e12
    top = sorted(agg.items(), key=lambda kv: kv[1][1], reverse=True)[:n]
    return tuple((k, int(v[0]), float(v[1])) for k, v in top)


def tf_profile(fn: Callable[[], Any], steps: int = 5, warmup: int = 1,
               logdir: str | os.PathLike[str] = "traces/tf") -> TFProfile:
    """Run ``fn`` (one TensorFlow/Keras training step) ``warmup`` times, then ``steps`` times under
    ``tf.profiler.experimental`` with one ``Trace`` per step, writing a TensorBoard log to ``logdir``.

    Example (TensorFlow takes seconds to import, so the doctest only checks the argument guard):
        >>> import gpulab as gl
        >>> gl.tf_profile("not a step")
        Traceback (most recent call last):
        ...
        TypeError: tf_profile needs a callable running one step, got str
    """
    if not callable(fn):
        raise TypeError(f"tf_profile needs a callable running one step, got {type(fn).__name__}")
    whole("steps", steps)
    whole("warmup", warmup, low=0)
    from ._tf import import_tensorflow

    tf = import_tensorflow()

    for _ in range(warmup):
        fn()
    logdir = str(logdir)
    before = set(Path(logdir).rglob("*")) if Path(logdir).exists() else set()
    tf.profiler.experimental.start(logdir)
    try:
        for i in range(steps):
            with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
                fn()
    finally:
        tf.profiler.experimental.stop()
    files = sorted(str(p) for p in set(Path(logdir).rglob("*")) - before if p.is_file())
    planes = [p for p in files if p.endswith(".xplane.pb")]
    top = _xplane_top(planes[-1]) if planes else ()
    return TFProfile(logdir, tuple(files), steps, top)
