"""The terminal view of ``python -m gpulab monitor``, laid out like ``nvidia-smi dmon``: a header naming each
column with its unit (repeated every ``header_every`` lines), then one line per device per interval, each ending
with the processes that matter there (on a GPU those holding its memory, on the host the busiest on its CPUs).

Example:
    >>> from gpulab.telemetry.dmon import Dmon
    >>> view = Dmon(processes=0, host_mem_total_bytes=16 * 2**30)
    >>> print(view.header()[0])
    # time s  dev    util %  top core %  mem used / total GiB  power W  temp C  sm MHz  processes
    >>> row = {"t_s": 1.0, "device": "host", "cpu_util_pct": 52.5, "cpu0_util_pct": 5.0, "cpu1_util_pct": 100.0,
    ...        "host_mem_used_bytes": 6 * 2**30}
    >>> print(view.lines([row])[-1])
         1.0  host     52.5       100.0            6.0 / 16.0        -       -       -
"""
from __future__ import annotations

import re
from typing import Any, Callable

from .._check import whole

__all__ = ["Dmon", "HEADER_EVERY", "gpu_handles"]

HEADER_EVERY = 20          # nvidia-smi dmon repeats its header too, so it stays in sight while lines scroll by
_COLUMNS = (("# time s", 8), ("dev", 5), ("util %", 6), ("top core %", 10), ("mem used / total GiB", 20),
            ("power W", 7), ("temp C", 6), ("sm MHz", 6))
_CORE = re.compile(r"cpu\d+_util_pct$")
_GIB = 2**30


def _cell(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    return format(value, fmt)


class Dmon:
    """Turns a :class:`~gpulab.telemetry.Monitor`'s rows into lines of text (use ``lines`` as its ``on_sample``
    through a printer). ``gpu_handles`` maps "gpu0", ... to NVML handles, for the processes on each GPU;
    ``processes`` is how many processes each line names (0: none); ``interval`` (seconds) sets the time's decimals.
    A tick whose host reading has no CPU percentages yet (the first, straight after the sampler started its CPU
    window) is left out: every line covers a real interval.
    """

    def __init__(self, processes: int = 3, gpu_handles: dict[str, Any] | None = None,
                 header_every: int = HEADER_EVERY, host_mem_total_bytes: int | None = None,
                 top: Callable[[int], tuple[Any, ...]] | None = None,
                 gpu_processes: Callable[[Any], tuple[Any, ...] | None] | None = None, interval: float = 1.0) -> None:
        self.processes = whole("processes", processes, low=0)
        self.header_every = whole("header_every", header_every)
        self._time = ".1f" if interval >= 0.1 else ".2f" if interval >= 0.01 else ".3f"
        self._handles = dict(gpu_handles or {})
        self._printed = 0
        self._names: dict[int, str] = {}
        if host_mem_total_bytes is None:
            import psutil

            host_mem_total_bytes = int(psutil.virtual_memory().total)
        self._host_total = host_mem_total_bytes
        if top is None and processes:
            from .processes import TopProcesses

            top = TopProcesses()
        self._top = top
        if gpu_processes is None:
            from .processes import gpu_processes as listing

            gpu_processes = lambda handle: listing(handle, self._names)  # noqa: E731 - names cached per pid
        self._gpu_processes = gpu_processes

    @staticmethod
    def header() -> list[str]:
        """The column names with their units."""
        return ["  ".join(name.rjust(w) if i > 1 else name.ljust(w) if i else name for i, (name, w)
                          in enumerate(_COLUMNS)) + "  processes"]

    @staticmethod
    def legend(cores: int | None = None) -> str:
        """What the columns mean for the host and for a GPU."""
        machine = f"{cores} cores" if cores else "cores"
        return (f"# host: util = CPU over all {machine}, top core = the busiest one, mem = the machine's; processes: "
                "the busiest, in % of one core\n# gpuN: util = NVML's GPU utilisation; processes: those holding its "
                "memory")

    def lines(self, rows: list[dict[str, Any]]) -> list[str]:
        """The lines for one tick of the Monitor (header lines included when it is time to repeat them)."""
        host = next((r for r in rows if r.get("device") == "host"), None)
        if host is not None and host.get("cpu_util_pct") is None:
            return []                                           # the first tick: no CPU window behind it yet
        out: list[str] = []
        for r in rows:
            if self._printed % self.header_every == 0:
                out.extend(self.header())
            self._printed += 1
            out.append(self._host(r) if r.get("device") == "host" else self._gpu(r))
        return out

    def _host(self, r: dict[str, Any]) -> str:
        cores = [v for k, v in r.items() if _CORE.match(k) and v is not None]
        used = r.get("host_mem_used_bytes")
        mem = f"{_cell(None if used is None else used / _GIB, '.1f')} / {self._host_total / _GIB:.1f}"
        procs = self._top(self.processes) if self._top is not None and self.processes else ()
        return self._join(r, _cell(r.get("cpu_util_pct"), ".1f"), _cell(max(cores) if cores else None, ".1f"),
                          mem, "-", "-", "-", ", ".join(map(str, procs)))

    def _gpu(self, r: dict[str, Any]) -> str:
        used, total = r.get("mem_used_bytes"), r.get("mem_total_bytes")
        mem = (f"{_cell(None if used is None else used / _GIB, '.1f')} / "
               f"{_cell(None if total is None else total / _GIB, '.1f')}")
        tail = "THROTTLED  " if r.get("throttled") else ""
        if self.processes:
            listed = self._gpu_processes(self._handles.get(r.get("device", "")))
            if listed is not None:
                shown = ", ".join(map(str, listed[:self.processes])) or "none"
                more = len(listed) - self.processes
                tail += shown + (f", +{more} more" if more > 0 else "")
        return self._join(r, _cell(r.get("gpu_util_pct"), ".1f"), "-", mem, _cell(r.get("power_w"), ".1f"),
                          _cell(r.get("temp_c"), ".0f"), _cell(r.get("sm_clock_mhz"), ".0f"), tail)

    def _join(self, r: dict[str, Any], *cells: str) -> str:
        values = (_cell(r.get("t_s"), self._time), str(r.get("device", "?")), *cells[:6])
        text = "  ".join(v.ljust(w) if i == 1 else v.rjust(w) for i, (v, (_, w)) in enumerate(zip(values, _COLUMNS)))
        return (text + "  " + cells[6]).rstrip()


def gpu_handles() -> dict[str, Any]:
    """NVML handles of the GPUs a :class:`~gpulab.telemetry.Monitor` records, by its names ("gpu0", ...), in the
    same order; empty without NVML."""
    from . import nvml

    if not nvml.status().available:
        return {}
    return {f"gpu{i}": nvml.device_handle(d) for i, d in enumerate(nvml.device_order().devices)}
