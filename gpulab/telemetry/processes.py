"""The processes that matter on a machine: those holding memory on each GPU (NVML's running-process lists) and
the busiest on the host's CPUs (psutil), as the terminal monitor (``python -m gpulab monitor``) shows them.

NVML names processes by the host's pid. Inside a container the pid may be unknown here: its name is then "?".
Some drivers (and Windows' WDDM mode) do not report a process's GPU memory: ``used_bytes`` is then None.

Example:
    >>> from gpulab.telemetry.processes import TopProcesses, gpu_processes
    >>> gpu_processes(None) is None                # no NVML here, or no such device
    True
    >>> top = TopProcesses()                       # primes psutil's counters: the first call has no window
    >>> top(3)
    ()
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from .nvml import first_answer

__all__ = ["GPUProcess", "HostProcess", "gpu_processes", "TopProcesses", "process_name"]

# NVML_VALUE_NOT_AVAILABLE as an unsigned long long: what older nvidia-ml-py versions hand back for usedGpuMemory
# where the driver does not report it (newer ones turn it into None).
_NOT_AVAILABLE_ULL = 2**64 - 1


@dataclass(frozen=True)
class GPUProcess:
    """One process on a GPU: ``kind`` is "C" (compute: CUDA), "G" (graphics) or "C+G"."""

    pid: int
    name: str
    used_bytes: int | None
    kind: str = "C"

    def __str__(self) -> str:
        mem = "-" if self.used_bytes is None else f"{self.used_bytes / 2**30:.1f} GiB"
        return f"{self.pid} {self.name} {mem}" + ("" if self.kind == "C" else f" ({self.kind})")


@dataclass(frozen=True)
class HostProcess:
    """One process on the host: ``cpu_pct`` is its CPU use since the previous look, in % of one core (as ``top``)."""

    pid: int
    name: str
    cpu_pct: float

    def __str__(self) -> str:
        return f"{self.pid} {self.name} {self.cpu_pct:.0f}%"


def process_name(pid: int) -> str:
    """The name of process ``pid`` on this machine, or "?" when it is not visible here (another pid namespace)."""
    import psutil

    try:
        return psutil.Process(pid).name() or "?"
    except (psutil.Error, OSError, ValueError):
        return "?"


def _used(value: Any) -> int | None:
    if value is None:
        return None
    try:
        v = int(value)
    except (TypeError, ValueError):
        return None
    return None if v < 0 or v >= _NOT_AVAILABLE_ULL else v


def gpu_processes(handle: Any, names: dict[int, str] | None = None) -> tuple[GPUProcess, ...] | None:
    """The compute and graphics processes on the GPU (or MIG slice) behind the NVML ``handle``, largest memory
    first; None when NVML cannot list them (no NVML, no permission, not supported). ``names`` caches names by pid.
    """
    if handle is None:
        return None
    compute = first_answer((("nvmlDeviceGetComputeRunningProcesses", (handle,), {}),        # v3 structs
                            ("nvmlDeviceGetComputeRunningProcesses_v2", (handle,), {})))    # older drivers
    graphics = first_answer((("nvmlDeviceGetGraphicsRunningProcesses", (handle,), {}),
                             ("nvmlDeviceGetGraphicsRunningProcesses_v2", (handle,), {})))
    if compute is None and graphics is None:
        return None
    found: dict[int, tuple[int | None, str]] = {}
    for kind, listed in (("C", compute or ()), ("G", graphics or ())):
        for p in listed:
            pid = getattr(p, "pid", None)
            if not isinstance(pid, int):
                continue
            used = _used(getattr(p, "usedGpuMemory", None))
            if pid in found:
                before, was = found[pid]
                found[pid] = (before if used is None else max(before or 0, used), was if was == kind else "C+G")
            else:
                found[pid] = (used, kind)
    cache = {} if names is None else names
    out = []
    for pid, (used, kind) in found.items():
        if pid not in cache:
            cache[pid] = process_name(pid)
        out.append(GPUProcess(pid, cache[pid], used, kind))
    return tuple(sorted(out, key=lambda p: (-(p.used_bytes or 0), p.pid)))


class TopProcesses:
    """The processes using the most CPU on this machine, leaving out this process (the monitor itself).

    psutil reports a process's CPU use since the previous look at it, so a process is first primed and reported
    from the next call on (the first call returns nothing). ``min_period_s`` bounds the cost: a call sooner than
    that after the previous look returns the previous answer instead of reading every process again.
    """

    def __init__(self, exclude: tuple[int, ...] = (), min_period_s: float = 0.5) -> None:
        import psutil

        self._psutil = psutil
        self._exclude = {os.getpid(), *exclude}
        self._procs: dict[int, Any] = {}
        self._last: tuple[HostProcess, ...] = ()
        self._at = -1e9
        self.min_period_s = float(min_period_s)
        self._look()

    def _look(self) -> list[tuple[float, Any]]:
        ps = self._psutil
        self._at = time.monotonic()
        pids = set(ps.pids()) - self._exclude
        for gone in set(self._procs) - pids:
            del self._procs[gone]
        busy = []
        for pid in pids:
            p = self._procs.get(pid)
            try:
                if p is None:
                    p = self._procs[pid] = ps.Process(pid)
                    p.cpu_percent()                       # prime: this one reports from the next look on
                    continue
                busy.append((p.cpu_percent(), p))
            except (ps.Error, OSError):
                self._procs.pop(pid, None)
        return busy

    def __call__(self, n: int = 3) -> tuple[HostProcess, ...]:
        """The ``n`` busiest processes since the previous look (those above 0 % only)."""
        if time.monotonic() - self._at < self.min_period_s:
            return self._last[:n]
        busy = sorted((b for b in self._look() if b[0] > 0), key=lambda b: -b[0])
        out = []
        for pct, p in busy[:n]:
            try:
                name = p.name() or "?"
            except (self._psutil.Error, OSError):
                name = "?"
            out.append(HostProcess(p.pid, name, float(pct)))
        self._last = tuple(out)
        return self._last
