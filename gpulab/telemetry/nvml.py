"""NVML (nvidia-ml-py) access: the only module in gpulab that imports ``pynvml``.

Every call goes through :func:`query`, which initialises NVML lazily under a lock, turns
"not supported" / "no permission" / "function not found" into ``None`` (logged once per function),
and shuts NVML down at interpreter exit. With no NVML library (no NVIDIA driver) :func:`status`
says so and every query returns ``None``: a missing metric is data, not an exception.

Example:
    >>> from gpulab.telemetry import nvml
    >>> st = nvml.status()
    >>> st.available in (True, False)
    True
"""
from __future__ import annotations

import atexit
import logging
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

__all__ = ["NVMLStatus", "NVMLDevice", "status", "devices", "query", "handle_by_uuid", "shutdown",
           "visible_devices", "GPUSampler", "THROTTLE_REASONS", "SLOWDOWN_MASK", "throttle_names"]

log = logging.getLogger("gpulab")

_lock = threading.RLock()
_state: dict[str, Any] = {"lib": None, "initialised": False, "error": None, "tried": False}
_warned: set[str] = set()
_before_shutdown: list[Callable[[], None]] = []  # e.g. stop running samplers before NVML goes away

# NVML return codes that mean "this metric is not available here" rather than a failure.
_MISSING_CODES = {3, 4, 13}  # NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND


@dataclass(frozen=True)
class NVMLStatus:
    """Whether NVML could be initialised, and the driver it talks to."""

    available: bool
    error: str | None = None              # why not, e.g. "NVML Shared Library Not Found"
    driver_version: str | None = None     # e.g. "550.54.15"
    cuda_driver_version: int | None = None  # highest CUDA the driver supports, e.g. 12040 for 12.4
    device_count: int = 0

    @property
    def cuda_driver(self) -> tuple[int, int] | None:
        """``cuda_driver_version`` as (major, minor), e.g. (12, 4)."""
        v = self.cuda_driver_version
        return None if v is None else (v // 1000, (v % 1000) // 10)


@dataclass(frozen=True)
class NVMLDevice:
    """Static facts about one physical GPU, in NVML's order (which ignores CUDA_VISIBLE_DEVICES)."""

    index: int
    name: str
    uuid: str
    memory_total_bytes: int | None
    compute_capability: tuple[int, int] | None
    pci_bus_id: str | None = None
    mig_enabled: bool | None = None


def _load() -> ModuleType:
    """Import nvidia-ml-py's ``pynvml`` module (replaced by a fake in tests)."""
    import pynvml  # nvidia-ml-py

    return pynvml


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def _ensure() -> ModuleType | None:
    """Initialise NVML once; return the module or None when NVML cannot be used."""
    with _lock:
        if _state["initialised"]:
            return _state["lib"]
        if _state["tried"]:
            return None
        _state["tried"] = True
        try:
            lib = _load()
            lib.nvmlInit()
        except ImportError as e:
            _state["error"] = f"nvidia-ml-py is not installed ({e})"
            return None
        except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            _state["error"] = str(e) or type(e).__name__
            return None
        _state.update(lib=lib, initialised=True, error=None)
        atexit.register(_at_exit)
        return lib


def query(fn_name: str, *args: Any, default: Any = None) -> Any:
    """Call ``pynvml.<fn_name>(*args)``; ``default`` when NVML or the metric is unavailable.

    Unsupported metrics are logged once per function name. Other NVML errors are logged once
    and also return ``default``: telemetry must never raise into the learner's code.
    """
    lib = _ensure()
    if lib is None:
        return default
    fn: Callable[..., Any] | None = getattr(lib, fn_name, None)
    if fn is None:
        _once(fn_name, "not in this nvidia-ml-py")
        return default
    try:
        return _text(fn(*args))
    except Exception as e:
        code = getattr(e, "value", None)
        _once(fn_name, "not supported here" if code in _MISSING_CODES else f"failed: {e}")
        return default


def _once(fn_name: str, what: str) -> None:
    if fn_name not in _warned:
        _warned.add(fn_name)
        log.info("NVML %s %s; reported as missing", fn_name, what)


def status() -> NVMLStatus:
    """Initialise NVML if needed and report whether it works, with driver versions."""
    lib = _ensure()
    if lib is None:
        return NVMLStatus(available=False, error=_state["error"])
    return NVMLStatus(
        available=True,
        driver_version=query("nvmlSystemGetDriverVersion"),
        cuda_driver_version=query("nvmlSystemGetCudaDriverVersion"),
        device_count=query("nvmlDeviceGetCount", default=0),
    )


def devices() -> list[NVMLDevice]:
    """Every GPU NVML sees (an empty list without NVML)."""
    out: list[NVMLDevice] = []
    for i in range(status().device_count):
        h = query("nvmlDeviceGetHandleByIndex", i)
        if h is None:
            continue
        mem = query("nvmlDeviceGetMemoryInfo", h)
        cc = query("nvmlDeviceGetCudaComputeCapability", h)
        pci = query("nvmlDeviceGetPciInfo", h)
        mig = query("nvmlDeviceGetMigMode", h)
        out.append(NVMLDevice(
            index=i,
            name=query("nvmlDeviceGetName", h) or f"GPU {i}",
            uuid=query("nvmlDeviceGetUUID", h) or "",
            memory_total_bytes=int(mem.total) if mem is not None else None,
            compute_capability=tuple(cc) if cc is not None else None,
            pci_bus_id=_text(getattr(pci, "busId", None)) if pci is not None else None,
            mig_enabled=bool(mig[0]) if mig is not None else None,
        ))
    return out


def handle_by_uuid(uuid: str) -> Any:
    """The NVML handle of the GPU with this UUID (how CUDA device order is mapped), or None."""
    return query("nvmlDeviceGetHandleByUUID", uuid)


def before_shutdown(callback: Callable[[], None]) -> None:
    """Run ``callback`` at interpreter exit before NVML is shut down (samplers stop first)."""
    if callback not in _before_shutdown:
        _before_shutdown.append(callback)


def _at_exit() -> None:
    for cb in list(_before_shutdown):
        try:
            cb()
        except Exception:  # pragma: no cover - best effort at exit
            pass
    shutdown()


def shutdown() -> None:
    """Shut NVML down (registered at exit; safe to call twice)."""
    with _lock:
        if _state["initialised"]:
            try:
                _state["lib"].nvmlShutdown()
            except Exception:  # pragma: no cover - best effort at exit
                pass
        _state.update(lib=None, initialised=False, tried=False, error=None)


def _reset() -> None:
    """Forget NVML state and logged warnings (the unit tests' fakes start from here)."""
    shutdown()
    _warned.clear()


# ----------------------------------------------------------------------------------------------
# Clock event ("throttle") reasons, from nvml.h's nvmlClocksEventReason* bit masks.
THROTTLE_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
    0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clocks",
}
# Reasons that mean the GPU ran slower than it could have (idle and user clock settings do not count).
SLOWDOWN_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80

_CLOCK_SM, _CLOCK_MEM, _TEMP_GPU, _PCIE_TX, _PCIE_RX = 1, 2, 0, 0, 1  # nvmlClockType_t, sensors, counters
_GPM_SM_UTIL, _GPM_TENSOR_UTIL = 2, 5  # NVML_GPM_METRIC_SM_UTIL, NVML_GPM_METRIC_ANY_TENSOR_UTIL
PCIE_PERIOD_S = 1.0  # nvmlDeviceGetPcieThroughput measures over 20 ms per call: read it at most once a second


def throttle_names(mask: int | None) -> list[str]:
    """Names of the clock event reasons set in ``mask``, e.g. ``["sw_power_cap", "hw_thermal"]``."""
    if not mask:
        return []
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


def visible_devices(env: dict[str, str] | None = None) -> list[NVMLDevice]:
    """The NVML devices CUDA processes see, in CUDA's order, mapped by UUID.

    NVML ignores ``CUDA_VISIBLE_DEVICES``; CUDA honours it. When torch has initialised CUDA, its
    device UUIDs decide; otherwise the variable is parsed like CUDA does (indices or UUID prefixes,
    stopping at the first entry that matches nothing). Without the variable, NVML's order is used.
    """
    import os
    import sys

    devs = devices()
    if not devs:
        return []
    by_uuid = {d.uuid.lower(): d for d in devs}
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            out = []
            for i in range(torch.cuda.device_count()):
                u = str(torch.cuda.get_device_properties(i).uuid).lower()
                u = u if u.startswith("gpu-") else "gpu-" + u
                if u in by_uuid:
                    out.append(by_uuid[u])
            if out:
                return out
    except Exception:
        pass
    env = os.environ if env is None else env
    spec = env.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return devs
    out = []
    for token in (t.strip() for t in spec.split(",")):
        match = None
        if token.isdigit():
            match = devs[int(token)] if int(token) < len(devs) else None
        elif token.lower().startswith("gpu-"):
            hits = [d for d in devs if d.uuid.lower().startswith(token.lower())]
            match = hits[0] if len(hits) == 1 else None
        if match is None or match in out:
            break  # CUDA stops enumerating at the first invalid entry
        out.append(match)
    return out


class GPUSampler:
    """Samples one GPU's metrics through :func:`query`; a metric NVML cannot give is ``None``.

    GPM metrics (SM and tensor-core activity) are read on Hopper and later when the driver supports them;
    they need two consecutive GPM samples, so the first reading has none.
    """

    def __init__(self, device: NVMLDevice) -> None:
        self.device = device
        self.handle = query("nvmlDeviceGetHandleByUUID", device.uuid) if device.uuid else None
        if self.handle is None:
            self.handle = query("nvmlDeviceGetHandleByIndex", device.index)
        self._last_pcie = -1e9
        self._pcie: tuple[int | None, int | None] = (None, None)
        self._gpm_prev: Any = None
        support = query("nvmlGpmQueryDeviceSupport", self.handle)
        self.gpm = bool(getattr(support, "isSupportedDevice", 0))
        self.mig_count = 0
        if device.mig_enabled:
            self.mig_count = query("nvmlDeviceGetMaxMigDeviceCount", self.handle, default=0) or 0

    def sample(self, now: float) -> dict[str, Any]:
        h = self.handle
        util = query("nvmlDeviceGetUtilizationRates", h)
        mem = query("nvmlDeviceGetMemoryInfo", h)
        power_mw = query("nvmlDeviceGetPowerUsage", h)
        energy_mj = query("nvmlDeviceGetTotalEnergyConsumption", h)
        reasons = query("nvmlDeviceGetCurrentClocksEventReasons", h)
        if reasons is None:
            reasons = query("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        if now - self._last_pcie >= PCIE_PERIOD_S:
            self._last_pcie = now
            self._pcie = (query("nvmlDeviceGetPcieThroughput", h, _PCIE_TX),
                          query("nvmlDeviceGetPcieThroughput", h, _PCIE_RX))
        tx, rx = self._pcie
        row: dict[str, Any] = {
            "gpu_util_pct": _num(getattr(util, "gpu", None)),
            "mem_util_pct": _num(getattr(util, "memory", None)),
            "mem_used_bytes": _int(getattr(mem, "used", None)),
            "mem_total_bytes": _int(getattr(mem, "total", None)),
            "power_w": None if power_mw is None else power_mw / 1000.0,
            "energy_j": None if energy_mj is None else energy_mj / 1000.0,
            "temp_c": _num(query("nvmlDeviceGetTemperature", h, _TEMP_GPU)),
            "sm_clock_mhz": _num(query("nvmlDeviceGetClockInfo", h, _CLOCK_SM)),
            "mem_clock_mhz": _num(query("nvmlDeviceGetClockInfo", h, _CLOCK_MEM)),
            "pcie_tx_bytes_per_s": None if tx is None else tx * 1024.0,
            "pcie_rx_bytes_per_s": None if rx is None else rx * 1024.0,
            "throttle_reasons": _int(reasons),
            "throttled": None if reasons is None else bool(reasons & SLOWDOWN_MASK),
        }
        if self.gpm:
            row.update(self._gpm())
        if self.mig_count:
            used = 0
            for i in range(self.mig_count):
                mh = query("nvmlDeviceGetMigDeviceHandleByIndex", h, i)
                mm = query("nvmlDeviceGetMemoryInfo", mh) if mh is not None else None
                used += int(getattr(mm, "used", 0) or 0)
            row["mig_mem_used_bytes"] = used
        return row

    def close(self) -> None:
        """Free the GPM sample kept between readings."""
        if self._gpm_prev is not None:
            query("nvmlGpmSampleFree", self._gpm_prev)
            self._gpm_prev = None

    def _gpm(self) -> dict[str, Any]:
        lib = _ensure()
        sample = query("nvmlGpmSampleAlloc")
        if lib is None or sample is None or query("nvmlGpmSampleGet", self.handle, sample) is None:
            return {}
        prev, self._gpm_prev = self._gpm_prev, sample
        if prev is None:
            return {}
        try:
            req = lib.c_nvmlGpmMetricsGet_t()
            req.version = getattr(lib, "NVML_GPM_METRICS_GET_VERSION", 1)
            req.numMetrics = 2
            req.sample1, req.sample2 = prev, sample
            req.metrics[0].metricId, req.metrics[1].metricId = _GPM_SM_UTIL, _GPM_TENSOR_UTIL
            got = query("nvmlGpmMetricsGet", req)
        finally:
            query("nvmlGpmSampleFree", prev)
        if got is None:
            return {}
        ok = lambda m: float(m.value) if getattr(m, "nvmlReturn", 0) == 0 else None
        return {"sm_active_pct": ok(got.metrics[0]), "tensor_active_pct": ok(got.metrics[1])}


def _num(v: Any) -> float | None:
    return None if v is None else float(v)


def _int(v: Any) -> int | None:
    return None if v is None else int(v)


def clock_state(cuda_index: int = 0) -> dict[str, Any] | None:
    """SM clock and clock-event reasons of the CUDA device ``cuda_index`` now (None without NVML).

    Example:
        >>> clock_state(0) is None or "sm_clock_mhz" in clock_state(0)
        True
    """
    vis = visible_devices()
    if not 0 <= cuda_index < len(vis):
        return None
    h = handle_by_uuid(vis[cuda_index].uuid) or query("nvmlDeviceGetHandleByIndex", vis[cuda_index].index)
    if h is None:
        return None
    reasons = query("nvmlDeviceGetCurrentClocksEventReasons", h)
    if reasons is None:
        reasons = query("nvmlDeviceGetCurrentClocksThrottleReasons", h)
    return {"sm_clock_mhz": _num(query("nvmlDeviceGetClockInfo", h, _CLOCK_SM)), "throttle_reasons": _int(reasons)}
