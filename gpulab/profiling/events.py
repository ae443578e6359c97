"""Profiler events: phase ranges, operator statistics, and whether device events were really recorded."""
from __future__ import annotations

import contextlib
import statistics
import warnings
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

from .._check import install_hint
from .._spans import covered, merge_spans

__all__ = ['phase', 'OpStat', 'DeviceCheck', 'check_device_events', 'PHASES', 'TINY_OP_S', 'MANY_OPS_PER_STEP', 'TINY_KERNEL_S', 'SYNC_CALLS', 'KERNEL_GAP_S', 'LONG_OP_S', 'idle_split']


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
LONG_OP_S = 50e-6          # an operator call this long does real work: its own speed, not dispatch, sets the pace
KERNEL_GAP_S = 20e-6       # an idle gap this short between two kernels is launch latency, not the host
SYNC_CALLS = ("aten::item", "aten::_local_scalar_dense")


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:  # pragma: no cover
        raise ImportError(f"gpulab.profile needs PyTorch: {install_hint('torch')}") from e
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
    # the device's idle time inside the profiled steps, split as HolisticTraceAnalysis does: short gaps
    # between back-to-back kernels (launch latency) vs long gaps where the device waited for the host to
    # queue work; of those, the gaps that began while the host sat in a sync (.item()) call
    idle_between_kernels_s: float | None = None
    idle_host_s: float | None = None
    idle_after_sync_s: float | None = None

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
    return covered(intervals, lo, hi)


def idle_split(kernels: Sequence[tuple[float, float]], windows: Sequence[tuple[float, float]],
               syncs: Sequence[tuple[float, float]] = ()) -> tuple[float, float, float]:
    """The device's idle time inside ``windows`` (step intervals, seconds), from its busy ``kernels``
    intervals: ``(between_kernels_s, host_s, after_sync_s)``. A gap shorter than ``KERNEL_GAP_S`` between
    two kernels is launch latency; any other gap (before the first kernel, after the last, or long) is
    time the device waited for the host; ``after_sync_s`` is the part of that which began while the host
    sat in one of the ``syncs`` (host sync call intervals): the queue drained, then the host had to
    issue the next work before the device could go on.

    Example:
        >>> idle_split([(0.0, 1.0), (1.000005, 2.0), (3.0, 4.0)], [(0.0, 4.0)], syncs=[(1.5, 2.1)])
        (5e-06, 1.0, 1.0)
    """
    between = host = after_sync = 0.0
    for lo, hi in windows:
        busy = merge_spans((max(a, lo), min(b, hi)) for a, b in kernels if min(b, hi) > max(a, lo))
        edges = [lo] + [x for ab in busy for x in ab] + [hi]
        for i in range(0, len(edges), 2):
            a, b = edges[i], edges[i + 1]
            if b <= a:
                continue
            inner = 0 < i < len(edges) - 2
            if inner and b - a < KERNEL_GAP_S:
                between += b - a
                continue
            host += b - a
            if any(sa <= a <= sb + KERNEL_GAP_S for sa, sb in syncs):
                after_sync += b - a
    return round(between, 12), round(host, 12), round(after_sync, 12)


def check_device_events(events: Sequence[Any], profiled: bool, cuda_used: bool,
                        windows: Sequence[tuple[float, float]] = (),
                        syncs: Sequence[tuple[float, float]] = ()) -> DeviceCheck:
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
    between, host, after_sync = idle_split(spans, windows, syncs) if windows else (None, None, None)
    return DeviceCheck(True, len(kern), busy, med, f"{len(kern)} device events recorded (CUPTI working)",
                       between, host, after_sync)
