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

__all__ = ["NVMLStatus", "NVMLDevice", "status", "devices", "query", "handle_by_uuid", "shutdown"]

log = logging.getLogger("gpulab")

_lock = threading.RLock()
_state: dict[str, Any] = {"lib": None, "initialised": False, "error": None, "tried": False}
_warned: set[str] = set()

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
        atexit.register(shutdown)
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
