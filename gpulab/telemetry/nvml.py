"""NVML (nvidia-ml-py) access: the only module in gpulab that imports ``pynvml``.

Every call goes through :func:`query`, which initialises NVML lazily under a lock, turns
"not supported" / "no permission" / "function not found" into ``None`` (logged once per function),
and shuts NVML down at interpreter exit. With no NVML library (no NVIDIA driver) :func:`status`
says so and every query returns ``None``: a missing metric is data, not an exception. Where the old
standalone ``pynvml`` package shadows nvidia-ml-py's module (its energy counter declared 32-bit), nvidia-ml-py's
own file is loaded; without it, that counter is not read. :func:`status` says which module was found.

Which GPUs a CUDA process sees, in which order, is :func:`device_order`: NVML lists physical GPUs in
PCI order and ignores ``CUDA_VISIBLE_DEVICES``; CUDA honours the variable, orders GPUs fastest-first
unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, and gives a process at most one MIG slice. Devices are matched
by UUID, never by position.

Example:
    >>> from gpulab.telemetry import nvml
    >>> st = nvml.status()
    >>> st.available in (True, False)
    True
"""
from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import sys
import threading
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any, Callable, Mapping

from . import _nvml_binding
from ._nvml_types import DeviceOrder, MemoryInfo, NVMLDevice, PcieLink

__all__ = ["NVMLStatus", "NVMLDevice", "MemoryInfo", "DeviceOrder", "status", "devices", "mig_devices",
           "device_handle", "memory_info", "query", "handle_by_uuid", "shutdown", "visible_devices", "device_order",
           "temperature_c", "cuda_memory_info", "cuda_handle", "first_answer", "gpm_metrics", "clocks_and_bus",
           "PcieLink", "pcie_link"]

log = logging.getLogger("gpulab")

_lock = threading.RLock()
_state: dict[str, Any] = {"lib": None, "initialised": False, "error": None, "tried": False, "binding": None}
_warned: set[str] = set()
_unavailable: set[str] = set()   # calls this driver lacks (v2 memory, TemperatureV): asked once, then skipped
_before_shutdown: list[Callable[[], None]] = []  # e.g. stop running samplers before NVML goes away

# nvml.h's return codes, not pynvml's NVML_ERROR_* names: this module imports without nvidia-ml-py (equal: tested).
NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND, FUNCTION_NOT_FOUND, ARGUMENT_VERSION_MISMATCH = 3, 4, 6, 13, 25
# Codes that mean "this metric is not available here" rather than a failure.
_MISSING_CODES = {NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND}
_MEMORY_V2 = 0x02000028  # nvmlMemory_v2: sizeof(nvmlMemory_v2_t) | 2 << 24


@dataclass(frozen=True)
class NVMLStatus:
    """Whether NVML could be initialised, the driver it talks to, and the ``pynvml`` module it is read through
    (``binding``; ``energy_problem``: why its energy counter is not read, e.g. the old standalone pynvml's 32 bits)."""

    available: bool
    error: str | None = None              # why not, e.g. "NVML Shared Library Not Found"
    driver_version: str | None = None     # e.g. "550.54.15"
    cuda_driver_version: int | None = None  # highest CUDA the driver supports, e.g. 12040 for 12.4
    device_count: int = 0
    binding: str | None = None            # e.g. "nvidia-ml-py 13.615.71"
    energy_problem: str | None = None

    @property
    def cuda_driver(self) -> tuple[int, int] | None:
        """``cuda_driver_version`` as (major, minor), e.g. (12, 4)."""
        v = self.cuda_driver_version
        return None if v is None else (v // 1000, (v % 1000) // 10)


def _load() -> ModuleType:
    """Import the ``pynvml`` module (replaced by a fake in tests): nvidia-ml-py's, or the old standalone package's
    that shadows it (then :func:`_prefer` loads nvidia-ml-py's own file)."""
    import pynvml

    return pynvml


def _prefer(lib: ModuleType) -> ModuleType:
    """``lib``, or nvidia-ml-py's own ``pynvml.py`` where ``lib`` declares a 32-bit energy counter and nvidia-ml-py is
    installed beside it; which module was found, and how, is kept for :func:`status`."""
    _state["binding"] = found = _nvml_binding.describe(lib)
    path = _nvml_binding.nvidia_ml_py_file() if found.problem else None
    spec = importlib.util.spec_from_file_location("gpulab_nvidia_ml_py", path) if path else None
    if spec is None or spec.loader is None:
        return lib
    mod = sys.modules[spec.name] = importlib.util.module_from_spec(spec)      # it looks itself up there
    try:
        spec.loader.exec_module(mod)
    except Exception:          # a broken install: the old module, its energy counter left unread
        sys.modules.pop(spec.name, None)
        return lib
    chosen = _nvml_binding.describe(mod)
    if chosen.problem is None:
        _state["binding"], lib = replace(chosen, note=f"its own file: {found.name} shadows its pynvml module"), mod
    return lib


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
            lib = _prefer(_load())
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


def _call(fn_name: str, *args: Any, **kwargs: Any) -> tuple[Any, int | None]:
    """``(result, None)`` or ``(None, NVML return code)``; code -1 when NVML is unusable or raised oddly."""
    lib = _ensure()
    if lib is None:
        return None, -1
    fn: Callable[..., Any] | None = getattr(lib, fn_name, None)
    if fn is None:
        return None, FUNCTION_NOT_FOUND
    if fn_name == _nvml_binding.ENERGY and _state["binding"] is not None and _state["binding"].problem:
        _once(fn_name, f"not read: {_state['binding'].problem}")     # a 32-bit counter: never a wrong figure
        return None, -1
    try:
        return _text(fn(*args, **kwargs)), None
    except Exception as e:
        code = getattr(e, "value", None)
        if not isinstance(code, int):
            _once(fn_name, f"failed: {e}")
            return None, -1
        return None, code


def query(fn_name: str, *args: Any, default: Any = None, quiet: tuple[int, ...] = (), **kwargs: Any) -> Any:
    """Call ``pynvml.<fn_name>(*args, **kwargs)``; ``default`` when NVML or the metric is unavailable.

    Unsupported metrics are logged once per function name; return codes in ``quiet`` (e.g. ``NOT_FOUND``
    for an empty MIG slot) are expected data and not logged. Other NVML errors are logged once and also
    return ``default``: telemetry must never raise into the learner's code.
    """
    value, code = _call(fn_name, *args, **kwargs)
    if code is None:
        return value
    if code != -1 and code not in quiet:
        _once(fn_name, "not supported here" if code in _MISSING_CODES else f"failed (NVML error {code})")
    return default


def _once(fn_name: str, what: str) -> None:
    if fn_name not in _warned:
        _warned.add(fn_name)
        log.info("NVML %s %s; reported as missing", fn_name, what)


def first_answer(calls: tuple[tuple[str, tuple[Any, ...], dict[str, Any]], ...]) -> Any:
    """The first of several equivalent calls (newest API first) that this driver answers.

    A call the driver or library lacks (function not found, version mismatch, not supported) is
    remembered and not tried again in this process, so a fallback costs one failed call, once.
    """
    for name, args, kwargs in calls:
        key = name + repr(sorted(kwargs))
        if key in _unavailable:
            continue
        value, code = _call(name, *args, **kwargs)
        if code is None:
            return value
        if code in (FUNCTION_NOT_FOUND, ARGUMENT_VERSION_MISMATCH):
            _unavailable.add(key)
            continue
        if code != -1:
            _once(name, "not supported here" if code in _MISSING_CODES else f"failed (NVML error {code})")
        return None
    return None


def status() -> NVMLStatus:
    """Initialise NVML if needed and report whether it works, with driver versions."""
    lib, b = _ensure(), _state["binding"]
    found = {"binding": None if b is None else str(b), "energy_problem": None if b is None else b.problem}
    if lib is None:
        return NVMLStatus(available=False, error=_state["error"], **found)
    return NVMLStatus(True, None, query("nvmlSystemGetDriverVersion"), query("nvmlSystemGetCudaDriverVersion"),
                      query("nvmlDeviceGetCount", default=0), **found)


def memory_info(handle: Any) -> MemoryInfo | None:
    """The memory of the GPU or MIG slice behind ``handle``: the v2 query where the driver has it, else v1.

    Example:
        >>> memory_info(None) is None      # no NVML here, or no such device
        True
    """
    if handle is None:
        return None
    v2 = getattr(_state["lib"], "nvmlMemory_v2", _MEMORY_V2) if _state["lib"] is not None else _MEMORY_V2
    if "memory v2" not in _unavailable:
        m, code = _call("nvmlDeviceGetMemoryInfo", handle, version=v2)
        if code is None:
            return MemoryInfo(int(m.total), int(m.free), int(m.used), int(m.reserved), 2)
        if code not in (FUNCTION_NOT_FOUND, ARGUMENT_VERSION_MISMATCH, NOT_SUPPORTED):
            if code != -1:   # this device failed (e.g. GPU lost): not a reason to stop asking v2 of the others
                _once("nvmlDeviceGetMemoryInfo", f"failed (NVML error {code})")
            return None
        _unavailable.add("memory v2")   # this driver has no v2 query: v1 from now on, asked once per call
    m = query("nvmlDeviceGetMemoryInfo", handle)
    if m is None:
        return None
    return MemoryInfo(int(m.total), int(m.free), int(m.used), None, 1,
                      "NVML v1 memory query (driver before R510): used includes the driver's reserve")


def temperature_c(handle: Any) -> float | None:
    """GPU core temperature in °C (``nvmlDeviceGetTemperatureV``; the deprecated call on older drivers)."""
    t = first_answer((("nvmlDeviceGetTemperatureV", (handle, _TEMP_GPU), {}),
                      ("nvmlDeviceGetTemperature", (handle, _TEMP_GPU), {})))
    return None if t is None else float(t)


def _device(i: int, h: Any) -> NVMLDevice:
    mem, cc = memory_info(h), query("nvmlDeviceGetCudaComputeCapability", h)
    pci, mig = query("nvmlDeviceGetPciInfo", h), query("nvmlDeviceGetMigMode", h)
    return NVMLDevice(i, query("nvmlDeviceGetName", h) or f"GPU {i}", query("nvmlDeviceGetUUID", h) or "",
                      mem.total_bytes if mem is not None else None, tuple(cc) if cc is not None else None,
                      _text(getattr(pci, "busId", None)) if pci is not None else None,
                      bool(mig[0]) if mig is not None else None)


def devices() -> list[NVMLDevice]:
    """Every physical GPU NVML sees, in NVML's (PCI) order; an empty list without NVML."""
    return [_device(i, h) for i in range(status().device_count) for h in [query("nvmlDeviceGetHandleByIndex", i)]
            if h is not None]


def mig_devices(gpu: NVMLDevice) -> list[NVMLDevice]:
    """The MIG slices that exist on ``gpu`` (empty slots are skipped: ``NOT_FOUND`` is normal data)."""
    if not gpu.mig_enabled or gpu.is_mig:
        return []
    h = device_handle(gpu)
    out = []
    for slot in range(query("nvmlDeviceGetMaxMigDeviceCount", h, default=0) or 0):
        mh = query("nvmlDeviceGetMigDeviceHandleByIndex", h, slot, quiet=(NOT_FOUND, 2))
        if mh is None:
            continue
        mem = memory_info(mh)
        out.append(NVMLDevice(
            index=gpu.index, name=query("nvmlDeviceGetName", mh) or f"{gpu.name} MIG slot {slot}",
            uuid=query("nvmlDeviceGetUUID", mh) or "", memory_total_bytes=mem.total_bytes if mem else None,
            compute_capability=gpu.compute_capability, pci_bus_id=gpu.pci_bus_id, mig_enabled=True,
            parent_uuid=gpu.uuid, mig_index=slot))
    return out


def handle_by_uuid(uuid: str) -> Any:
    """The NVML handle of the GPU with this UUID, or None."""
    return query("nvmlDeviceGetHandleByUUID", uuid, quiet=(NOT_FOUND,))


def device_handle(dev: NVMLDevice) -> Any:
    """The NVML handle of a GPU or MIG slice (by UUID; a MIG slice through its card and slot)."""
    if dev.is_mig:
        parent = handle_by_uuid(dev.parent_uuid or "") or query("nvmlDeviceGetHandleByIndex", dev.index)
        if parent is None or dev.mig_index is None:
            return None
        return query("nvmlDeviceGetMigDeviceHandleByIndex", parent, dev.mig_index, quiet=(NOT_FOUND,))
    return (handle_by_uuid(dev.uuid) if dev.uuid else None) or query("nvmlDeviceGetHandleByIndex", dev.index)


def _hex(uuid: str) -> str:
    u = uuid.strip().lower()
    for prefix in ("gpu-", "mig-"):
        if u.startswith(prefix):
            return u[len(prefix):]
    return u


def _torch_uuids() -> list[str] | None:
    """UUIDs of the devices torch has initialised, in CUDA's order (None when CUDA is not up in torch)."""
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_initialized():
            return None
        return [_hex(str(torch.cuda.get_device_properties(i).uuid)) for i in range(torch.cuda.device_count())]
    except Exception:
        return None


def device_order(env: Mapping[str, str] | None = None) -> DeviceOrder:
    """The GPUs (or MIG slice) CUDA processes see, in CUDA's order, mapped to NVML devices by UUID.

    Once torch has initialised CUDA its device UUIDs decide (exact). Otherwise ``CUDA_VISIBLE_DEVICES`` is
    parsed as CUDA does: indices (in CUDA's order), ``GPU-`` UUID prefixes, ``MIG-`` UUIDs, stopping at the
    first entry that matches nothing; a process gets one MIG slice, the first listed. Without the variable
    every whole GPU is seen, plus one slice of a MIG-enabled card.

    Example:
        >>> device_order({}).devices == () or device_order({}).source in ("torch", "nvml")
        True
    """
    env = os.environ if env is None else env
    gpus = devices()
    if not gpus:
        return DeviceOrder((), "nvml")
    slices = {g.uuid: mig_devices(g) for g in gpus if g.mig_enabled}
    every = gpus + [s for ss in slices.values() for s in ss]
    notes: list[str] = []
    uuids = _torch_uuids()
    if uuids is not None:
        by_hex = {_hex(d.uuid): d for d in every}
        found = tuple(by_hex[u] for u in uuids if u in by_hex)
        if len(found) == len(uuids):
            return DeviceOrder(found, "torch")
        notes.append("torch's device UUIDs did not all match NVML's devices")
    pci_pinned = env.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST").strip().upper() == "PCI_BUS_ID"
    ordered, ambiguous = list(gpus), False
    if not pci_pinned and len({g.name for g in gpus}) > 1:
        # CUDA's default order is fastest first, by a heuristic NVML cannot reproduce: the newest architecture
        # first is the usual outcome, but only torch's UUIDs (or CUDA_DEVICE_ORDER=PCI_BUS_ID) make it certain.
        ordered.sort(key=lambda g: g.compute_capability or (0, 0), reverse=True)
        ambiguous = True
        notes.append("different GPU models and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA orders them fastest "
                     "first, which may differ from nvidia-smi's order; set CUDA_DEVICE_ORDER=PCI_BUS_ID before "
                     "CUDA starts to make both agree")
    all_slices = [s for ss in slices.values() for s in ss]
    if all_slices and "CUDA_VISIBLE_DEVICES" not in env:
        first = next(slices[g.uuid][0] for g in ordered if slices.get(g.uuid))
        notes.append(f"MIG is enabled: {len(all_slices)} slice(s) "
                     f"({'; '.join(f'{s.name} {s.uuid}' for s in all_slices)}); a CUDA process uses one slice, "
                     f"here the first it finds: {first.name} {first.uuid}"
                     + ("; set CUDA_VISIBLE_DEVICES to the MIG-… UUID of the one to use (nvidia-smi -L)"
                        if len(all_slices) > 1 else ""))

    def expand(g: NVMLDevice) -> NVMLDevice | None:
        """A MIG-enabled card is used through a slice (its first); a card with no slice gives nothing."""
        return (slices.get(g.uuid) or [None])[0] if g.mig_enabled else g

    spec = env.get("CUDA_VISIBLE_DEVICES")
    tokens = [g.uuid for g in ordered] if spec is None else [t.strip() for t in spec.split(",")]
    out: list[NVMLDevice] = []
    for token in tokens:
        t = token.lower()
        match: NVMLDevice | None = None
        if t.isdigit():
            match = expand(ordered[int(t)]) if int(t) < len(ordered) else None
        elif t.startswith("gpu-"):
            hits = [g for g in gpus if g.uuid.lower().startswith(t)]
            match = expand(hits[0]) if len(hits) == 1 else None
        elif t.startswith("mig-"):
            match = _mig_match(t, slices)
        if match is not None and match.is_mig and any(d.is_mig for d in out):
            notes.append(f"{match.name} ({match.uuid}) is not used: CUDA gives a process one MIG slice, the first")
            continue
        if match is None and spec is None:
            continue
        if match is None:
            notes.append(f"CUDA_VISIBLE_DEVICES entry {token!r} matches no device: CUDA ignores it and "
                         "every entry after it")
            break  # CUDA stops enumerating at the first invalid entry
        if match in out:   # as torch.cuda reads the variable: a device named twice leaves none visible
            notes.append(f"CUDA_VISIBLE_DEVICES names {match.name} ({match.uuid}) twice: no GPU is visible")
            out = []
            break
        out.append(match)
    if spec is not None:
        ambiguous = ambiguous and any(t.strip().isdigit() for t in spec.split(","))
    ambiguous = ambiguous or (spec is None and len(all_slices) > 1)
    return DeviceOrder(tuple(out), "nvml" if spec is None else "env", ambiguous, tuple(notes))


def _mig_match(token: str, slices: dict[str, list[NVMLDevice]]) -> NVMLDevice | None:
    """A MIG slice named as ``MIG-<uuid>`` (R470+) or the older ``MIG-GPU-<uuid>/<gi>/<ci>``."""
    every = [s for ss in slices.values() for s in ss]
    if token.startswith("mig-gpu-"):
        parent, _, rest = token[4:].partition("/")
        gi, _, ci = rest.partition("/")
        for s in slices.get(next((u for u in slices if u.lower() == parent), ""), []):
            h = device_handle(s)
            if (str(query("nvmlDeviceGetGpuInstanceId", h)), str(query("nvmlDeviceGetComputeInstanceId", h))) \
                    == (gi, ci):
                return s
        return None
    hits = [s for s in every if s.uuid.lower().startswith(token)]
    return hits[0] if len(hits) == 1 else None


def visible_devices(env: Mapping[str, str] | None = None) -> list[NVMLDevice]:
    """The NVML devices CUDA processes see, in CUDA's order (see :func:`device_order`)."""
    return list(device_order(env).devices)


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
        _state.update(lib=None, initialised=False, tried=False, error=None, binding=None)


def _reset() -> None:
    """Forget NVML state and logged warnings (the unit tests' fakes start from here)."""
    shutdown()
    _warned.clear()
    _unavailable.clear()


_TEMP_GPU, _CLOCK_SM, _CLOCK_MEM = 0, 1, 2  # NVML_TEMPERATURE_GPU, NVML_CLOCK_SM / _MEM: nvml.h's, as above
_GPM_METRICS_GET_VERSION = 1  # fallback only: the loaded pynvml's NVML_GPM_METRICS_GET_VERSION is read first


def gpm_metrics(sample1: Any, sample2: Any, metric_ids: tuple[int, ...]) -> list[float | None] | None:
    """GPM metrics (e.g. ``NVML_GPM_METRIC_SM_UTIL``) between two GPM samples; a metric NVML could not
    compute is None; None when the call fails. The samples stay the caller's to free."""
    lib = _ensure()
    if lib is None:
        return None
    req = lib.c_nvmlGpmMetricsGet_t()
    req.version = getattr(lib, "NVML_GPM_METRICS_GET_VERSION", _GPM_METRICS_GET_VERSION)
    req.numMetrics = len(metric_ids)
    req.sample1, req.sample2 = sample1, sample2
    for i, metric_id in enumerate(metric_ids):
        req.metrics[i].metricId = metric_id
    got = query("nvmlGpmMetricsGet", req)
    if got is None:
        return None
    return [float(m.value) if getattr(m, "nvmlReturn", 0) == 0 else None for m in got.metrics[: len(metric_ids)]]


def cuda_handle(cuda_index: int) -> Any:
    """The NVML handle of the CUDA device ``cuda_index`` (a MIG slice's own handle), or None."""
    vis = visible_devices()
    return device_handle(vis[cuda_index]) if 0 <= cuda_index < len(vis) else None


def cuda_memory_info(cuda_index: int = 0) -> MemoryInfo | None:
    """NVML's memory figures (as ``nvidia-smi`` shows them) for the CUDA device ``cuda_index``; a MIG slice's own.

    Example:
        >>> cuda_memory_info(0) is None or cuda_memory_info(0).total_bytes > 0
        True
    """
    return memory_info(cuda_handle(cuda_index))


def clocks_and_bus(cuda_index: int) -> tuple[int | None, int | None, int | None]:
    """Max SM clock (MHz), max memory clock (MHz, counted as CUDA's memoryClockRate) and memory bus width (bits)."""
    return tuple(None if h is None else query(fn, h, *a) for h in [cuda_handle(cuda_index)] for fn, *a in (
        ("nvmlDeviceGetMaxClockInfo", _CLOCK_SM), ("nvmlDeviceGetMaxClockInfo", _CLOCK_MEM), ("nvmlDeviceGetMemoryBusWidth",)))


def pcie_link(cuda_index: int = 0) -> PcieLink | None:
    """The PCIe link of the CUDA device ``cuda_index``: the generation and width it can run at (the GPU's and the
    slot's lower), and what it runs at now; None without NVML, or where NVML cannot read the link (a MIG slice, a
    virtual GPU, a driver without the query).

    Example:
        >>> pcie_link(0) is None or pcie_link(0).width >= 1
        True
    """
    h = cuda_handle(cuda_index)
    if h is None:
        return None
    gen, width = query("nvmlDeviceGetMaxPcieLinkGeneration", h), query("nvmlDeviceGetMaxPcieLinkWidth", h)
    if not gen or not width:
        return None
    return PcieLink(int(gen), int(width), query("nvmlDeviceGetCurrPcieLinkGeneration", h),
                    query("nvmlDeviceGetCurrPcieLinkWidth", h))
