"""Host metrics through psutil: CPU utilisation (overall and per core), process CPU and RSS, and the
process's torch memory when torch is already imported (CUDA allocated/reserved on GPU).

Example:
    >>> from gpulab.telemetry.host import HostSampler
    >>> s = HostSampler()
    >>> "cpu_util_pct" in s.sample()
    True
"""
from __future__ import annotations

import sys
from typing import Any

__all__ = ["HostSampler", "torch_memory"]


class HostSampler:
    """Reads host metrics; the first ``sample()`` primes psutil's CPU counters (values since then)."""

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self._proc = psutil.Process()
        self.cores = psutil.cpu_count(logical=True) or 1
        psutil.cpu_percent(percpu=True)  # prime: later calls report usage since the previous call
        self._proc.cpu_percent()

    def sample(self) -> dict[str, Any]:
        """One reading: utilisation in percent (of all cores), bytes for memory."""
        ps = self._psutil
        per_core = ps.cpu_percent(percpu=True)
        row: dict[str, Any] = {
            "cpu_util_pct": sum(per_core) / max(len(per_core), 1),
            "process_cpu_pct": min(100.0, self._proc.cpu_percent() / self.cores),  # share of the machine
            "rss_bytes": int(self._proc.memory_info().rss),
            "host_mem_used_bytes": int(ps.virtual_memory().used),
        }
        for i, v in enumerate(per_core):
            row[f"cpu{i}_util_pct"] = v
        return row


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
