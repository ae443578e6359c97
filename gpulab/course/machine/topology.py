"""The machine under a CPU timer (appendix A1): physical cores and SMT siblings, the clock and who sets it, the cores
this process may run on, and pinning it to one of them.

What moves a CPU timing besides the code: two threads on SMT siblings of one core share its execution units (a second
"core" that adds far less than a core); a clock that the operating system scales with load (the ``powersave``
governor, turbo) makes the first runs slower than the rest; and a process that the scheduler moves between cores
finds cold caches. Pinning the process to one core (``os.sched_setaffinity``) removes the last; warm-up runs and the
median remove most of the second.

Example:
    >>> from gpulab import course
    >>> t = course.cpu_topology()
    >>> t.logical >= t.physical >= 1 and len(t.affinity) >= 1
    True
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..._check import whole
from ..._format import html_table, text_table

__all__ = ["CPUTopology", "cpu_topology", "pinned"]

SYS_CPU = Path("/sys/devices/system/cpu")
_said: set[str] = set()


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


@dataclass(frozen=True)
class CPUTopology:
    """What the timer runs on: ``physical`` cores and ``logical`` CPUs (more logical than physical: SMT siblings),
    ``smt`` as the kernel reports it (``on``, ``off``, ``notsupported``, or None where unreadable), the clock now and
    its range in MHz (None where the OS does not say, as in most VMs), the frequency ``governor``, the CPUs this
    process may run on (``affinity``) and the threads PyTorch uses."""

    physical: int
    logical: int
    smt: str | None
    mhz: float | None
    min_mhz: float | None
    max_mhz: float | None
    governor: str | None
    affinity: tuple[int, ...]
    torch_threads: int | None

    @property
    def siblings_per_core(self) -> float:
        return self.logical / self.physical if self.physical else 1.0

    def _rows(self) -> list[tuple[str, str]]:
        unknown = "not reported here (usual in a VM)"
        clock = (f"{self.mhz:,.0f} MHz now" if self.mhz else unknown) + (
            f", range {self.min_mhz:,.0f}-{self.max_mhz:,.0f} MHz" if self.min_mhz and self.max_mhz else "")
        smt = (f"{self.siblings_per_core:g} logical CPUs per core (SMT {self.smt or 'on'}): siblings share a core's units"
               if self.logical > self.physical else f"one logical CPU per core (SMT {self.smt or 'off'})")
        return [("cores", f"{self.physical} physical, {self.logical} logical"), ("SMT", smt), ("clock", clock),
                ("frequency governor", self.governor or unknown),
                ("this process may run on", f"CPUs {', '.join(map(str, self.affinity))}"),
                ("PyTorch threads", "torch not installed" if self.torch_threads is None else str(self.torch_threads))]

    def __repr__(self) -> str:
        return "CPU topology\n" + text_table(["", "this machine"], self._rows())

    def _repr_html_(self) -> str:
        return html_table(["", "this machine"], self._rows(), caption="CPU topology")


def cpu_topology() -> CPUTopology:
    """The machine's cores, SMT, clock and governor, and this process's affinity (see :class:`CPUTopology`)."""
    import psutil

    logical = psutil.cpu_count() or os.cpu_count() or 1
    physical = psutil.cpu_count(logical=False) or logical
    freq = None
    with contextlib.suppress(Exception):
        freq = psutil.cpu_freq()
    affinity = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else tuple(range(logical))
    try:
        import torch

        torch_threads: int | None = torch.get_num_threads()
    except ImportError:
        torch_threads = None
    return CPUTopology(int(physical), int(logical), _read(SYS_CPU / "smt" / "control"),
                       float(freq.current) if freq and freq.current else None,
                       float(freq.min) if freq and freq.min else None, float(freq.max) if freq and freq.max else None,
                       _read(SYS_CPU / "cpu0" / "cpufreq" / "scaling_governor"), affinity, torch_threads)


@contextlib.contextmanager
def pinned(cpu: int) -> Iterator[int | None]:
    """This process runs only on logical CPU ``cpu`` inside the block (``os.sched_setaffinity``), and on the CPUs it
    had before afterwards, even when the block raises. Yields ``cpu``; where the system cannot pin a process (macOS,
    Windows) the block runs unpinned, says so once, and yields None."""
    cpu = whole("cpu", cpu, low=0)
    if not hasattr(os, "sched_setaffinity"):
        if "pin" not in _said:
            _said.add("pin")
            print("this system cannot pin a process to a core (no os.sched_setaffinity): timing unpinned")
        yield None
        return
    allowed = os.sched_getaffinity(0)
    if cpu not in allowed:
        raise ValueError(f"cpu={cpu} is not one this process may run on: {sorted(allowed)}")
    os.sched_setaffinity(0, {cpu})
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, allowed)
