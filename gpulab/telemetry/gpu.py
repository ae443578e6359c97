"""One GPU's live metrics through NVML: :class:`GPUSampler` (what :class:`~gpulab.telemetry.Monitor` records),
clock-event ("throttle") reasons, and the clock state :func:`gpulab.benchmark` records around a run.
Heat and hardware protection count as a slowdown; the software power cap is how a card runs at its power limit.

Every NVML call goes through :func:`gpulab.telemetry.nvml.query`; nothing here imports ``pynvml``.

Example:
    >>> from gpulab.telemetry.gpu import throttle_names
    >>> throttle_names(0x40 | 0x4)
    ['sw_power_cap', 'hw_thermal']
"""
from __future__ import annotations

from typing import Any

from .nvml import (NVMLDevice, cuda_handle, device_handle, first_answer, gpm_metrics, memory_info, mig_devices,
                   query, temperature_c)

__all__ = ["GPUSampler", "THROTTLE_REASONS", "SLOWDOWN_MASK", "POWER_CAP_MASK", "PCIE_PERIOD_S", "throttle_names",
           "slowdown_names", "clock_state"]


# ----------------------------------------------------------------------------------------------
# Clock event ("throttle") reasons: nvml.h's nvmlClocksEventReason* bits (pynvml's nvmlClocksEventReason* and
# the older nvmlClocksThrottleReason* constants have the same values).
# Kept here, not read from pynvml: traces and reports decode them where nvidia-ml-py is not installed (equal to
# pynvml's from 12.535 on: tests/project/test_fakes_match_real.py).
GPU_IDLE, APPLICATIONS_CLOCKS, SW_POWER_CAP, HW_SLOWDOWN, SYNC_BOOST = 0x1, 0x2, 0x4, 0x8, 0x10
SW_THERMAL, HW_THERMAL, HW_POWER_BRAKE, DISPLAY_CLOCKS = 0x20, 0x40, 0x80, 0x100
THROTTLE_REASONS = {
    GPU_IDLE: "gpu_idle", APPLICATIONS_CLOCKS: "applications_clocks", SW_POWER_CAP: "sw_power_cap",
    HW_SLOWDOWN: "hw_slowdown", SYNC_BOOST: "sync_boost", SW_THERMAL: "sw_thermal", HW_THERMAL: "hw_thermal",
    HW_POWER_BRAKE: "hw_power_brake", DISPLAY_CLOCKS: "display_clocks",
}
# Reasons that mean the GPU ran slower than it is built to: heat, or hardware protection (HW slowdown, the
# external power brake). Idle and user clock settings do not count, and neither does the software power cap:
# a card at its power limit runs the clocks its power budget allows, which is how a T4 (70 W) runs nearly any
# real load and how an H100 runs large matmuls. That is information (POWER_CAP_MASK), not a fault.
SLOWDOWN_MASK = HW_SLOWDOWN | SW_THERMAL | HW_THERMAL | HW_POWER_BRAKE
POWER_CAP_MASK = SW_POWER_CAP

_CLOCK_SM, _CLOCK_MEM, _PCIE_TX, _PCIE_RX = 1, 2, 0, 1  # NVML_CLOCK_SM/MEM, NVML_PCIE_UTIL_TX/RX_BYTES
_GPM_SM_UTIL, _GPM_TENSOR_UTIL = 2, 5  # NVML_GPM_METRIC_SM_UTIL, NVML_GPM_METRIC_ANY_TENSOR_UTIL
PCIE_PERIOD_S = 1.0  # nvmlDeviceGetPcieThroughput measures over 20 ms per call: read it at most once a second


def throttle_names(mask: int | None) -> list[str]:
    """Names of the clock event reasons set in ``mask``, e.g. ``["sw_power_cap", "hw_thermal"]``."""
    if not mask:
        return []
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


def slowdown_names(mask: int | None) -> list[str]:
    """Names of the reasons in ``mask`` that count as a slowdown (thermal or hardware; not the power cap).

    Example:
        >>> slowdown_names(0x4), slowdown_names(0x4 | 0x40)
        ([], ['hw_thermal'])
    """
    return throttle_names((mask or 0) & SLOWDOWN_MASK)


def _reasons(h: Any) -> int | None:
    return first_answer((("nvmlDeviceGetCurrentClocksEventReasons", (h,), {}),
                   ("nvmlDeviceGetCurrentClocksThrottleReasons", (h,), {})))


class GPUSampler:
    """Samples one GPU's (or MIG slice's) metrics through :func:`query`; what NVML cannot give is ``None``.

    Memory comes from the v2 query where the driver has it (``mem_used_bytes`` as ``nvidia-smi`` shows it,
    ``mem_reserved_bytes`` apart). GPM metrics (SM and tensor-core activity) are read on Hopper and later when
    the driver supports them; they need two consecutive GPM samples, so the first reading has none. A MIG
    slice reports its own memory; utilisation, power and clocks are per card and NVML does not give them.
    """

    def __init__(self, device: NVMLDevice) -> None:
        self.device = device
        self.handle = device_handle(device)
        self._last_pcie = -1e9
        self._pcie: tuple[int | None, int | None] = (None, None)
        self._gpm_prev: Any = None
        support = None if device.is_mig else query("nvmlGpmQueryDeviceSupport", self.handle)
        self.gpm = bool(getattr(support, "isSupportedDevice", 0))
        self.slices = mig_devices(device) if device.mig_enabled and not device.is_mig else []

    def sample(self, now: float) -> dict[str, Any]:
        h = self.handle
        util = None if self.device.is_mig else query("nvmlDeviceGetUtilizationRates", h)
        mem = memory_info(h)
        row: dict[str, Any] = {
            "mem_used_bytes": None if mem is None else mem.used_bytes,
            "mem_reserved_bytes": None if mem is None else mem.reserved_bytes,
            "mem_total_bytes": None if mem is None else mem.total_bytes,
        }
        if self.device.is_mig:
            return row
        power_mw = query("nvmlDeviceGetPowerUsage", h)
        energy_mj = query("nvmlDeviceGetTotalEnergyConsumption", h)
        reasons = _reasons(h)
        if now - self._last_pcie >= PCIE_PERIOD_S:
            self._last_pcie = now
            self._pcie = (query("nvmlDeviceGetPcieThroughput", h, _PCIE_TX),
                          query("nvmlDeviceGetPcieThroughput", h, _PCIE_RX))
        tx, rx = self._pcie
        row.update({
            "gpu_util_pct": _num(getattr(util, "gpu", None)),
            "mem_util_pct": _num(getattr(util, "memory", None)),
            "power_w": None if power_mw is None else power_mw / 1000.0,
            "energy_j": None if energy_mj is None else energy_mj / 1000.0,
            "temp_c": temperature_c(h),
            "sm_clock_mhz": _num(query("nvmlDeviceGetClockInfo", h, _CLOCK_SM)),
            "mem_clock_mhz": _num(query("nvmlDeviceGetClockInfo", h, _CLOCK_MEM)),
            "pcie_tx_bytes_per_s": None if tx is None else tx * 1024.0,
            "pcie_rx_bytes_per_s": None if rx is None else rx * 1024.0,
            "throttle_reasons": _int(reasons),
            "throttled": None if reasons is None else bool(reasons & SLOWDOWN_MASK),
        })
        if self.gpm:
            row.update(self._gpm())
        if self.slices:
            used = [memory_info(device_handle(s)) for s in self.slices]
            row["mig_mem_used_bytes"] = sum(m.used_bytes for m in used if m is not None)
        return row

    def close(self) -> None:
        """Free the GPM sample kept between readings."""
        if self._gpm_prev is not None:
            query("nvmlGpmSampleFree", self._gpm_prev)
            self._gpm_prev = None

    def _gpm(self) -> dict[str, Any]:
        sample = query("nvmlGpmSampleAlloc")
        if sample is None:
            return {}
        if query("nvmlGpmSampleGet", self.handle, sample) is None:
            query("nvmlGpmSampleFree", sample)   # a failed reading must not leak its sample
            return {}
        prev, self._gpm_prev = self._gpm_prev, sample
        if prev is None:
            return {}
        try:
            values = gpm_metrics(prev, sample, (_GPM_SM_UTIL, _GPM_TENSOR_UTIL))
        finally:
            query("nvmlGpmSampleFree", prev)
        return {} if values is None else {"sm_active_pct": values[0], "tensor_active_pct": values[1]}


def _num(v: Any) -> float | None:
    return None if v is None else float(v)


def _int(v: Any) -> int | None:
    return None if v is None else int(v)


def clock_state(cuda_index: int = 0) -> dict[str, Any] | None:
    """SM clock (now and the card's maximum), clock-event reasons, power draw and the enforced power limit of the
    CUDA device ``cuda_index`` now (None without NVML; a value NVML cannot give is None).

    Example:
        >>> clock_state(0) is None or "sm_clock_mhz" in clock_state(0)
        True
    """
    h = cuda_handle(cuda_index)
    if h is None:
        return None
    power_mw, limit_mw = query("nvmlDeviceGetPowerUsage", h), query("nvmlDeviceGetEnforcedPowerLimit", h)
    return {"sm_clock_mhz": _num(query("nvmlDeviceGetClockInfo", h, _CLOCK_SM)),
            "max_sm_clock_mhz": _num(query("nvmlDeviceGetMaxClockInfo", h, _CLOCK_SM)),
            "throttle_reasons": _int(_reasons(h)),
            "power_w": None if power_mw is None else power_mw / 1000.0,
            "power_limit_w": None if limit_mw is None else limit_mw / 1000.0}
