"""How much of DDP's gradient all-reduce ran while the GPU was computing: read from a profiler trace of a few
training steps (GPU only: NCCL's kernels and the backward kernels are both GPU kernels on one timeline).

:func:`comm_overlap` is the arithmetic on kernel intervals (runs anywhere); :func:`profile_comm_overlap` profiles
steps with ``torch.profiler`` (CUDA activity) and applies it. Lesson 07's DDP script calls it on each rank under
NCCL (``--profile-overlap``); on a CPU with gloo the all-reduce runs on CPU threads and there are no GPU kernels to read.

Example:
    >>> from gpulab import course
    >>> kernels = [("volta_sgemm_128x64_nn", 0.0, 100.0), ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 60.0, 140.0)]
    >>> o = course.comm_overlap(kernels)
    >>> round(o.comm_s * 1e6), round(o.overlapped_s * 1e6), o.hidden_share
    (80, 40, 0.5)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ..._check import whole
from ..._spans import merge_spans

__all__ = ["CommOverlap", "comm_overlap", "profile_comm_overlap", "COMM_MARKERS"]

COMM_MARKERS = ("nccl",)     # NCCL's kernels: ncclDevKernel_AllReduce_..., ncclKernel_... (case-insensitive)
_NOT_COMPUTE = ("memcpy", "memset")


@dataclass(frozen=True)
class CommOverlap:
    """Communication kernels against compute kernels on one GPU's timeline (seconds, union of intervals)."""

    comm_s: float                # time at least one communication kernel ran
    compute_s: float             # time at least one compute kernel ran
    overlapped_s: float          # time both ran at once: communication hidden behind compute
    comm_kernels: int
    compute_kernels: int

    @property
    def hidden_share(self) -> float | None:
        """Share of the communication time that overlapped compute (None without communication kernels)."""
        return self.overlapped_s / self.comm_s if self.comm_s > 0 else None

    def __repr__(self) -> str:
        if self.hidden_share is None:
            return f"CommOverlap(no communication kernels among {self.compute_kernels} kernels)"
        return (f"CommOverlap({self.comm_kernels} NCCL kernels for {self.comm_s * 1e3:.2f} ms, "
                f"{self.hidden_share:.0%} of it while compute kernels ran; compute {self.compute_s * 1e3:.2f} ms "
                f"in {self.compute_kernels} kernels)")


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in intervals)


def _intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def comm_overlap(kernels: Iterable[tuple[str, float, float]]) -> CommOverlap:
    """:class:`CommOverlap` from GPU kernels given as ``(name, start_us, end_us)`` (one device's timeline):
    names containing ``"nccl"`` are communication, the rest compute (copies and memsets left out)."""
    comm, compute = [], []
    for name, start, end in kernels:
        if end < start:
            raise ValueError(f"kernel {name!r} ends ({end}) before it starts ({start})")
        low = str(name).lower()
        if any(m in low for m in COMM_MARKERS):
            comm.append((float(start), float(end)))
        elif not any(m in low for m in _NOT_COMPUTE):
            compute.append((float(start), float(end)))
    uc, uk = merge_spans(comm), merge_spans(compute)
    return CommOverlap(_length(uc) / 1e6, _length(uk) / 1e6, _intersection(uc, uk) / 1e6, len(comm), len(compute))


def profile_comm_overlap(step: Callable[[], Any], steps: int = 3, device_index: int | None = None) -> CommOverlap:
    """Profile ``steps`` calls of ``step`` (a DDP training step on a CUDA GPU, warmed up) with
    ``torch.profiler`` (CPU + CUDA activities) and return :func:`comm_overlap` of the GPU kernels it recorded
    on ``device_index`` (default: the current device). Needs a CUDA GPU.

    kineto also copies each ``record_function`` range onto the GPU timeline (``gpu_user_annotation``: the profiler's
    ``ProfilerStep#N``, DDP's ``DistributedDataParallel.forward``, ``nccl:all_reduce``), spanning the range's first
    to last kernel, gaps included: those are no kernels and are left out, or a step's copy would count the whole
    step as compute and every all-reduce as hidden behind it."""
    whole("steps", steps)
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from ...profiling.events import _is_device_work

    if not torch.cuda.is_available():
        raise RuntimeError("profile_comm_overlap needs a CUDA GPU: NCCL's all-reduce and backward are GPU kernels")
    index = torch.cuda.current_device() if device_index is None else int(device_index)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    kernels = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
               if e.device_type == DeviceType.CUDA and e.device_index == index and _is_device_work(e)
               and getattr(e, "activity_type", None) != "gpu_user_annotation"]
    return comm_overlap(kernels)
