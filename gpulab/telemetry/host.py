"""Host metrics through psutil: CPU utilisation (overall and per core), process CPU and RSS, and the
process's torch memory when torch is already imported (CUDA allocated/reserved on GPU).

CPU percentages are averages over the time since the previous reading. A reading taken less than
``MIN_CPU_WINDOW_S`` after the previous one (the first reading right after priming, above all) has no
window to average over, so it leaves them out instead of reporting a meaningless 0 % or 100 %.

Example:
    >>> import time
    >>> from gpulab.telemetry.host import HostSampler
    >>> s = HostSampler()                      # starts the CPU window
    >>> time.sleep(0.05)
    >>> row = s.sample()
    >>> 0.0 <= row["cpu_util_pct"] <= 100.0, row["rss_bytes"] > 0
    (True, True)
"""
from __future__ import annotations

import sys
import time
from typing import Any

__all__ = ["HostSampler", "torch_memory", "busy_pct", "MIN_CPU_WINDOW_S"]

# The kernel counts CPU time in clock ticks of 10 ms (USER_HZ = 100): a shorter window reads 0 % or 100 %.
MIN_CPU_WINDOW_S = 0.02


class HostSampler:
    """Reads host metrics. Creating it records the CPU counters; each ``sample()`` reports CPU use since the
    previous CPU reading, or leaves the CPU percentages out when that was under ``MIN_CPU_WINDOW_S`` ago.

    The machine's percentages come from this object's own counters (``psutil.cpu_times``), not from
    ``psutil.cpu_percent``, whose memory of the previous call is kept per thread: primed in the thread that
    creates the sampler, it would read 0 % on the first call from the Monitor's sampling thread.
    """

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self._proc = psutil.Process()
        self.cores = psutil.cpu_count(logical=True) or 1
        self.energy_j: Any = None        # a callable giving the CPU's joules so far (the Monitor's RAPL meter), or None
        self.energy_lost: str | None = None   # why the energy counter stopped answering mid-run (then no energy_j)
        self._started = time.monotonic()
        self.prime()

    def prime(self) -> None:
        """Start the CPU window now: the next ``sample()`` reports CPU use from this moment on."""
        self._times = self._psutil.cpu_times(percpu=True)
        self._proc.cpu_percent()         # per object (not per thread): later calls report use since the previous
        self._cpu_at = time.monotonic()

    def sample(self) -> dict[str, Any]:
        """One reading: utilisation in percent (of all cores), bytes for memory."""
        ps = self._psutil
        row: dict[str, Any] = {}
        now = time.monotonic()
        per_core: list[float] = []
        if now - self._cpu_at >= MIN_CPU_WINDOW_S:
            times = ps.cpu_times(percpu=True)
            per_core = [busy_pct(a, b) for a, b in zip(self._times, times)]
            self._times, self._cpu_at = times, now
            row["cpu_util_pct"] = sum(per_core) / max(len(per_core), 1)
            row["process_cpu_pct"] = min(100.0, self._proc.cpu_percent() / self.cores)  # share of the machine
        row["rss_bytes"] = int(self._proc.memory_info().rss)
        row["host_mem_used_bytes"] = int(ps.virtual_memory().used)
        if self.energy_j is not None:
            try:                          # an optional reading: it never takes the CPU and memory rows down with it
                row["energy_j"] = float(self.energy_j())
            except Exception as e:
                self.energy_j = None
                self.energy_lost = (f"the CPU's energy counter stopped answering after {now - self._started:.1f} s "
                                    f"({type(e).__name__}: {e}): energy from then on is not measurable here")
        for i, v in enumerate(per_core):
            row[f"cpu{i}_util_pct"] = v
        return row


def busy_pct(before: Any, after: Any) -> float:
    """How busy a core was between two ``psutil.cpu_times`` readings, in percent: the time not idle (nor waiting
    for I/O) over all the time counted (guest time is already inside user and nice time, so it is not added twice).

    Example:
        >>> from collections import namedtuple
        >>> T = namedtuple("T", "user system idle")
        >>> busy_pct(T(10.0, 5.0, 85.0), T(13.0, 6.0, 91.0))
        40.0
    """
    def total(t: Any) -> float:
        return sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)

    def idle(t: Any) -> float:
        return t.idle + getattr(t, "iowait", 0.0)

    span = total(after) - total(before)
    if span <= 0:
        return 0.0
    busy = (total(after) - idle(after)) - (total(before) - idle(before))
    return min(100.0, max(0.0, 100.0 * busy / span))


def torch_memory() -> dict[int, dict[str, int]]:
    """Per CUDA device index: torch's allocated and reserved bytes. Empty unless this process has
    already imported torch and initialised CUDA (never imports or initialises anything itself)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    try:
        if not torch.cuda.is_initialized():
            return {}
        return {i: {"torch_allocated_bytes": int(torch.cuda.memory_allocated(i)),
                    "torch_reserved_bytes": int(torch.cuda.memory_reserved(i))}
                for i in range(torch.cuda.device_count())}
    except Exception:  # a broken CUDA context must not stop sampling
        return {}
