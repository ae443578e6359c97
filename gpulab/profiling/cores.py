"""The CPU cores a profiled step had: how many this process may use, how busy the others were while the steps ran,
and the ceilings of the threads the step really ran on.

On a CPU a step's ceilings depend on its threads (``torch.get_num_threads()``), and on a shared machine on the cores
other programs leave it: a multi-threaded operator waits for its slowest thread, whose core another program may
hold. :func:`cpu_use` reads the OS's counters around the profiled steps (idle time, this process's CPU time) to say
how many cores' worth other work used; :func:`step_ceilings` then picks the ceilings the step is judged against
(those of the threads it had) and, on fewer threads than the cores, the whole machine's.

Example:
    >>> from gpulab.profiling.cores import cpu_use, usable_cores
    >>> usable_cores() >= 1
    True
    >>> cpu_use((0.0, 0.0, 0.0), (1.0, 0.5, 1.0), cpus=2)    # 1 s: half a core idle, one core ours
    (0.5, 0.5)
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["usable_cores", "cpu_snapshot", "cpu_use", "StepCeilings", "step_ceilings"]


def usable_cores() -> int:
    """The CPU cores this process may run on: the cores in its affinity mask, at most the machine's physical cores
    (torch's default thread count; hyper-threads add little to matmuls)."""
    import psutil

    physical = psutil.cpu_count(logical=False) or _cpus()
    return max(1, min(_cpus(), physical))


def _affinity() -> list[int] | None:
    """The logical CPUs in this process's affinity mask; None where the OS has no mask (macOS, Windows)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _cpus() -> int:
    """Logical CPUs in this process's affinity mask (all of them where the OS has no mask)."""
    mine = _affinity()
    return len(mine) if mine else os.cpu_count() or 1


def cpu_snapshot() -> tuple[float, float, float] | None:
    """``(now, idle seconds summed over the CPUs this process may run on, this process's CPU seconds)`` from the OS's
    counters; None where the OS has no per-CPU counters."""
    import psutil

    mine = _affinity()
    try:
        per = psutil.cpu_times(percpu=True)
        own = psutil.Process().cpu_times()
    except Exception:   # pragma: no cover - an OS without per-CPU counters
        return None
    cpus = [per[c] for c in mine if c < len(per)] if mine else per
    return (time.perf_counter(), float(sum(t.idle + getattr(t, "iowait", 0.0) for t in cpus)),
            float(own.user + own.system))


def cpu_use(before: tuple[float, float, float] | None, after: tuple[float, float, float] | None,
            cpus: int | None = None) -> tuple[float | None, float | None]:
    """``(idle, others)``: cores' worth of idle time, and of time other work (other programs, this process's
    children such as DataLoader workers) used, between two :func:`cpu_snapshot` calls on ``cpus`` logical CPUs
    (default: this process's); ``(None, None)`` when less than 0.1 s apart (the OS counts in 10 ms ticks)."""
    if before is None or after is None or after[0] - before[0] < 0.1:
        return None, None
    wall = after[0] - before[0]
    idle = max(0.0, (after[1] - before[1]) / wall)
    own = max(0.0, (after[2] - before[2]) / wall)
    n = cpus or _cpus()
    return min(float(n), idle), max(0.0, min(float(n), n - idle - own))


@dataclass(frozen=True)
class StepCeilings:
    """The ceilings a profiled CPU step is judged against (``ceilings``: those of the ``ran_on`` threads it had),
    its ``threads``, the usable ``cores``, and the ``whole`` machine's ceilings when it used fewer threads than the
    cores. ``threads`` is None off a CPU."""

    ceilings: Any
    threads: int | None = None
    cores: int | None = None
    whole: Any = None
    ran_on: int | None = None


def _measured_with(limits: Any) -> int | None:
    return getattr(getattr(limits, "env", None), "threads", None)     # None: ceilings made by hand


def step_ceilings(kind: str, limits: Any, work: Any, others: float | None = None) -> StepCeilings:
    """The :class:`StepCeilings` of a profiled step. Off a CPU, or without the step's work: ``limits`` (measured
    once per process when None; none when False). On a CPU, the ceilings of the threads the step ran on: its
    ``torch.get_num_threads()``, or fewer when other work used ``others`` cores' worth during the steps (the cores
    left, rounded, at least one), measured once per process and thread count (given ``limits`` serve when measured
    with that count). A step on fewer threads than the cores also gets the whole machine's ceilings (``limits``
    when measured with every core), for the gain the rest would give."""
    if limits is False or (limits is None and work is None):
        return StepCeilings(None)
    from ..limits import machine_limits

    if kind != "cpu" or work is None:
        return StepCeilings(machine_limits(kind) if limits is None else limits)
    import torch

    from ..interleaved import threads as with_threads

    threads, cores = torch.get_num_threads(), usable_cores()
    left = cores if others is None else max(1, int(cores - others + 0.5))
    ran_on = min(threads, left)
    given = _measured_with(limits)
    if limits is not None and given in (ran_on, None):
        ceilings = limits
    elif ran_on == threads:
        ceilings = machine_limits(kind)
    else:
        with with_threads(ran_on):
            ceilings = machine_limits(kind)
    whole = None
    if threads < cores:
        if limits is not None and given == cores:
            whole = limits
        else:
            with with_threads(cores):
                whole = machine_limits(kind)
    return StepCeilings(ceilings, threads, cores, whole, ran_on)
