"""A fake NVML built from the real nvidia-ml-py, for tests on machines without a GPU.

What cannot drift, because it *is* the real library's: the structs returned (``c_nvmlMemory_t``,
``c_nvmlMemory_v2_t``, ``c_nvmlUtilization_t``, ``c_nvmlGpmSupport_t``, ``c_nvmlGpmMetricsGet_t``, …),
the error class (``pynvml.NVMLError(code)`` → ``NVMLError_NotSupported`` …) and every constant. What is
checked against it by ``tests/project/test_fakes_match_real.py``: every ``nvml*`` function here exists in pynvml
with the same parameters and defaults.

Machines are recorded shapes of real ones (names, compute capabilities, memory, MIG slots, GPM) with
scripted readings, one per sample ("tick": each utilisation read advances a GPU's tick). The energy counter is the
exception: like NVML's, it advances with time, in steps ``energy_period_s`` apart (100 ms, as measured on an
H200), each step adding ``watts`` x the period, however often it is read.

* ``SCRIPTED``: an H100 (every metric incl. GPM; thermal slowdown on ticks 5-8), a T4 (PCIe NotSupported; the GPU
  is lost from tick 10 on), an A100 in MIG mode (two slices, five empty slots);
* ``T4_COLAB``, ``A100_MIG``, ``H100_GPM``, ``MIXED`` (an RTX A6000 and a T4: CUDA's order ambiguous),
  ``OLD_DRIVER`` (a V100 on a driver without the v2 memory query or nvmlDeviceGetTemperatureV).
"""
from __future__ import annotations

import ctypes
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable

import pynvml as real  # nvidia-ml-py: the structs, errors and constants the fake hands out

GIB, MIB = 2**30, 2**20
NOT_SUPPORTED, INVALID_ARGUMENT, GPU_IS_LOST, NOT_FOUND, FUNCTION_NOT_FOUND = (
    real.NVML_ERROR_NOT_SUPPORTED, real.NVML_ERROR_INVALID_ARGUMENT, real.NVML_ERROR_GPU_IS_LOST,
    real.NVML_ERROR_NOT_FOUND, real.NVML_ERROR_FUNCTION_NOT_FOUND)
HW_THERMAL = real.nvmlClocksEventReasonHwThermalSlowdown
SW_POWER_CAP = real.nvmlClocksEventReasonSwPowerCap
NVMLError = real.NVMLError


@dataclass
class Slice:
    """One MIG device (a GPU instance with one compute instance)."""

    uuid: str
    profile: str          # e.g. "3g.20gb"
    total: int
    used: int
    gi: int
    ci: int = 0


@dataclass
class GPU:
    name: str
    uuid: str
    cc: tuple[int, int]
    total: int
    pci_bus_id: str
    used: int = 2 * GIB                     # allocated by processes (v2 "used")
    reserved: int = 0                       # kept by driver/firmware (v2 "reserved")
    busy: tuple[int, int] = (30, 10)        # utilisation: gpu %, memory %
    gpm: bool = False
    mig: list[Slice | None] | None = None   # None: MIG off; a list of slots (None = empty slot): MIG on
    unsupported: frozenset[str] = frozenset()
    lost_at: int | None = None              # tick from which the GPU is lost (GPU_IS_LOST)
    used_at: Callable[[int], int] | None = None
    processes: list[tuple[int, int | None]] = field(default_factory=list)
    reasons_at: Callable[[int], int] | None = None     # clock event reasons per tick (default: the scripted ones)
    sm_clock_at: Callable[[int], int] | None = None    # SM clock (MHz) per tick
    watts: float = 350.0                    # board power: the power reading's base, and what the energy counter adds
    energy_period_s: float = 0.1            # the energy counter advances in steps this far apart (monotonic time)


def _uuid(c: str) -> str:
    return f"GPU-{c * 8}-{c * 4}-{c * 4}-{c * 4}-{c * 12}"


def scripted_machine() -> list[GPU]:
    return [
        GPU("NVIDIA H100 80GB HBM3", _uuid("a"), (9, 0), 80 * GIB, "00000000:01:00.0", busy=(95, 40), gpm=True,
            reserved=512 * MIB, used_at=lambda t: (10 + t) * GIB),
        GPU("Tesla T4", _uuid("b"), (7, 5), 15 * GIB, "00000000:02:00.0",   # a T4 reads power and energy (Turing)
            unsupported=frozenset({"nvmlDeviceGetPcieThroughput"}), lost_at=10, watts=35.0),
        GPU("NVIDIA A100-SXM4-40GB", _uuid("c"), (8, 0), 40 * GIB, "00000000:03:00.0",
            mig=[Slice("MIG-11111111-2222-3333-4444-555555555555", "3g.20gb", 20 * GIB, 1 * GIB, gi=1),
                 Slice("MIG-66666666-7777-8888-9999-000000000000", "1g.5gb", 5 * GIB, 2 * GIB, gi=9),
                 None, None, None, None, None]),
    ]


def t4_colab() -> list[GPU]:
    return [GPU("Tesla T4", "GPU-4f1e2d3c-0b9a-8877-6655-443322110000", (7, 5), 15360 * MIB, "00000000:00:04.0",
                used=0, reserved=257 * MIB, watts=35.0)]


def a100_mig() -> list[GPU]:
    return [GPU("NVIDIA A100-SXM4-40GB", "GPU-5d7e9c1a-2b3c-4d5e-6f70-8192a3b4c5d6", (8, 0), 40 * GIB,
                "00000000:07:00.0", reserved=0,
                mig=[Slice("MIG-a1b2c3d4-0001-5e6f-7a8b-9c0d1e2f3a4b", "3g.20gb", 19968 * MIB, 13 * MIB, gi=2),
                     None, Slice("MIG-a1b2c3d4-0002-5e6f-7a8b-9c0d1e2f3a4b", "2g.10gb", 9856 * MIB, 11 * MIB, gi=3),
                     None, None, None, None])]


def h100_gpm() -> list[GPU]:
    return [GPU("NVIDIA H100 80GB HBM3", "GPU-0c1d2e3f-4a5b-6c7d-8e9f-a0b1c2d3e4f5", (9, 0), 81559 * MIB,
                "00000000:19:00.0", gpm=True, reserved=543 * MIB, used=4 * GIB)]


def mixed() -> list[GPU]:
    """PCI order puts the older, slower T4 first; CUDA's default (fastest first) most likely does not."""
    return [GPU("Tesla T4", "GPU-7a7a7a7a-0000-1111-2222-333333333333", (7, 5), 15 * GIB, "00000000:3b:00.0"),
            GPU("NVIDIA RTX A6000", "GPU-8b8b8b8b-0000-1111-2222-333333333333", (8, 6), 48 * GIB, "00000000:af:00.0")]


def old_driver() -> list[GPU]:
    return [GPU("Tesla V100-SXM2-16GB", "GPU-9c9c9c9c-0000-1111-2222-333333333333", (7, 0), 16 * GIB,
                "00000000:00:1e.0", used=3 * GIB, reserved=300 * MIB)]


MACHINES = {"scripted": scripted_machine, "t4_colab": t4_colab, "a100_mig": a100_mig, "h100_gpm": h100_gpm,
            "mixed": mixed, "old_driver": old_driver}


def reading(gpu: GPU, index: int, tick: int) -> dict:
    """The scripted state of a GPU at sample ``tick``."""
    return {
        "power_mw": int(gpu.watts * 1000) + 1000 * tick,
        "temp": 60 + tick,
        "sm_clock": gpu.sm_clock_at(tick) if gpu.sm_clock_at else 1500 if gpu.gpm and 5 <= tick <= 8 else 1980,
        "mem_clock": 2619,
        "reasons": gpu.reasons_at(tick) if gpu.reasons_at else HW_THERMAL if gpu.gpm and 5 <= tick <= 8 else 0,
        "pcie_kb": (1000 * (tick + 1), 2000 * (tick + 1)),
    }


# Max SM clock (MHz), max memory clock (MHz) and memory bus width (bits) of recorded cards, as NVML reports them
# (nvmlDeviceGetMaxClockInfo, nvmlDeviceGetMemoryBusWidth); a card not listed answers NotSupported.
MAX_CLOCKS_AND_BUS = {"Tesla T4": (1590, 5001, 256), "NVIDIA A100-SXM4-40GB": (1410, 1215, 5120),
                      "NVIDIA A100-SXM4-80GB": (1410, 1593, 5120), "NVIDIA H100 80GB HBM3": (1980, 2619, 5120)}


# PCIe link (generation, lanes) of recorded cards, as NVML's max link queries report them in their usual servers
# (nvmlDeviceGetMaxPcieLinkGeneration / ...Width; the current link reads the same under load); a card not listed
# answers NotSupported.
PCIE_LINKS = {"Tesla T4": (3, 16), "NVIDIA A100-SXM4-40GB": (4, 16), "NVIDIA A100-SXM4-80GB": (4, 16),
              "NVIDIA H100 80GB HBM3": (5, 16)}


# Enforced power limit (W) of recorded cards at their defaults (nvmlDeviceGetEnforcedPowerLimit answers in mW).
POWER_LIMITS_W = {"Tesla T4": 70, "NVIDIA A100-SXM4-40GB": 400, "NVIDIA A100-SXM4-80GB": 400,
                  "NVIDIA H100 80GB HBM3": 700}


ENERGY_AT_LOAD_MJ = 1_000_000      # the energy counter's value when the fake is made (mJ since "driver load")


class Handle:
    def __init__(self, index: int, mig: int | None = None):
        self.index, self.mig = index, mig

    def __repr__(self) -> str:
        return f"Handle({self.index}, mig={self.mig})"


def real_constants() -> dict[str, int]:
    """Every integer constant of the real pynvml (``NVML_*``, ``nvml*``), by name."""
    return {k: v for k, v in vars(real).items() if k.startswith(("NVML_", "nvml")) and type(v) is int}


def make_module(gpus: list[GPU] | None = None, *, driver: str = "570.86.15", cuda_driver: int = 12080,
                init_error: int | None = None, memory_v2: bool = True, temperature_v: bool = True,
                pci_info: bool = True, mig_mode: bool = True) -> types.ModuleType:
    """A pynvml-shaped module over ``gpus`` (default: the three-GPU ``SCRIPTED`` machine).

    ``memory_v2=False``/``temperature_v=False`` model a driver older than those calls (the library
    raises FUNCTION_NOT_FOUND); ``pci_info=False`` makes PCI info NotSupported; ``mig_mode=False``
    leaves nvmlDeviceGetMigMode out, as an old nvidia-ml-py would.
    """
    gpus = scripted_machine() if gpus is None else gpus
    m = types.ModuleType("pynvml")
    m.NVMLError = real.NVMLError
    m.__dict__.update(real_constants())   # NVML_*, nvmlClocksEventReason* / ThrottleReason*, nvmlMemory_v2, ...
    m.c_nvmlGpmMetricsGet_t = real.c_nvmlGpmMetricsGet_t
    m.gpus, m.ticks, m.calls, m.freed, m.allocated = gpus, [0] * len(gpus), [], [], []
    m.t0 = time.monotonic()                       # the energy counters' clock starts with the "driver"
    m.energy = [[0, ENERGY_AT_LOAD_MJ] for _ in gpus]   # per GPU: counter steps taken, millijoules

    def gpu_of(h: Any) -> GPU:
        if not isinstance(h, Handle) or not 0 <= h.index < len(gpus):
            raise real.NVMLError(INVALID_ARGUMENT)
        g = gpus[h.index]
        if g.lost_at is not None and m.ticks[h.index] > g.lost_at:
            raise real.NVMLError(GPU_IS_LOST)
        return g

    def whole(h: Any, fn: str) -> GPU:
        g = gpu_of(h)
        if h.mig is not None or fn in g.unsupported:
            raise real.NVMLError(NOT_SUPPORTED)
        return g

    def now(h: Handle) -> dict:
        return reading(gpus[h.index], h.index, max(m.ticks[h.index] - 1, 0))

    def used(g: GPU, h: Handle) -> int:
        return g.used_at(max(m.ticks[h.index] - 1, 0)) if g.used_at else g.used

    # ---- system and handles ----
    def nvmlInit():
        m.calls.append("init")
        if init_error:
            raise real.NVMLError(init_error)

    def nvmlShutdown():
        m.calls.append("shutdown")

    def nvmlSystemGetDriverVersion():
        return driver.encode()   # some nvidia-ml-py versions return bytes

    def nvmlSystemGetCudaDriverVersion():
        return cuda_driver

    def nvmlDeviceGetCount():
        return len(gpus)

    def nvmlDeviceGetHandleByIndex(index):
        if not 0 <= index < len(gpus):
            raise real.NVMLError(INVALID_ARGUMENT)
        return Handle(index)

    def nvmlDeviceGetHandleByUUID(uuid):
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        for i, g in enumerate(gpus):
            if g.uuid == uuid:
                return Handle(i)
        raise real.NVMLError(NOT_FOUND)

    def nvmlDeviceGetName(handle):
        g = gpu_of(handle)
        return g.name if handle.mig is None else f"{g.name} MIG {g.mig[handle.mig].profile}"

    def nvmlDeviceGetUUID(handle):
        g = gpu_of(handle)
        return (g.uuid if handle.mig is None else g.mig[handle.mig].uuid).encode()

    def nvmlDeviceGetCudaComputeCapability(handle):
        return gpu_of(handle).cc

    def nvmlDeviceGetPciInfo(handle):
        g = gpu_of(handle)
        if not pci_info:
            raise real.NVMLError(NOT_SUPPORTED)
        return types.SimpleNamespace(busId=g.pci_bus_id.encode())

    def nvmlDeviceGetMigMode(device):
        g = gpu_of(device)
        if g.mig is None and g.cc < (8, 0):
            raise real.NVMLError(NOT_SUPPORTED)
        on = int(g.mig is not None)
        return [on, on]

    def nvmlDeviceGetMaxMigDeviceCount(device):
        g = gpu_of(device)
        return len(g.mig) if g.mig is not None else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(device, index):
        g = gpu_of(device)
        if g.mig is None or not 0 <= index < len(g.mig):
            raise real.NVMLError(INVALID_ARGUMENT)
        if g.mig[index] is None:
            raise real.NVMLError(NOT_FOUND)           # an empty slot: normal on a partitioned card
        return Handle(device.index, mig=index)

    def nvmlDeviceGetGpuInstanceId(device):
        return gpu_of(device).mig[device.mig].gi

    def nvmlDeviceGetComputeInstanceId(device):
        return gpu_of(device).mig[device.mig].ci

    # ---- metrics ----
    def nvmlDeviceGetUtilizationRates(handle):
        g = gpu_of(handle)
        if handle.mig is not None:
            raise real.NVMLError(NOT_SUPPORTED)
        m.ticks[handle.index] += 1          # one utilisation read per sample: the script advances
        if g.mig is not None:
            raise real.NVMLError(NOT_SUPPORTED)
        if g.lost_at is not None and m.ticks[handle.index] > g.lost_at:
            raise real.NVMLError(GPU_IS_LOST)
        u = real.c_nvmlUtilization_t()
        u.gpu, u.memory = g.busy
        return u

    def nvmlDeviceGetMemoryInfo(handle, version=None):
        g = gpu_of(handle)
        if handle.mig is not None:
            s = g.mig[handle.mig]
            total, use, res = s.total, s.used, 0
        else:
            total, use, res = g.total, used(g, handle), g.reserved
        if version:
            if not memory_v2:
                raise real.NVMLError(FUNCTION_NOT_FOUND)   # the library finds no nvmlDeviceGetMemoryInfo_v2
            if version != real.nvmlMemory_v2:
                raise real.NVMLError(real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
            mem = real.c_nvmlMemory_v2_t()
            mem.version, mem.total, mem.reserved, mem.used, mem.free = version, total, res, use, total - res - use
            return mem
        mem = real.c_nvmlMemory_t()
        mem.total, mem.used, mem.free = total, use + res, total - res - use   # v1: used includes the reserve
        return mem

    def nvmlDeviceGetComputeRunningProcesses(handle):
        g = gpu_of(handle)
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=b, gpuInstanceId=0xFFFFFFFF,
                                      computeInstanceId=0xFFFFFFFF) for pid, b in g.processes]

    def nvmlDeviceGetPowerUsage(handle):
        return now(handle)["power_mw"] if whole(handle, "nvmlDeviceGetPowerUsage") else None

    def nvmlDeviceGetEnforcedPowerLimit(handle):
        g = whole(handle, "nvmlDeviceGetEnforcedPowerLimit")
        if g.name not in POWER_LIMITS_W:
            raise real.NVMLError(NOT_SUPPORTED)
        return POWER_LIMITS_W[g.name] * 1000

    def nvmlDeviceGetTotalEnergyConsumption(handle):
        g = whole(handle, "nvmlDeviceGetTotalEnergyConsumption")
        state = m.energy[handle.index]         # steps since the last read are charged at the GPU's watts now
        steps = int((time.monotonic() - m.t0) // g.energy_period_s)
        state[1] += max(0, steps - state[0]) * int(round(g.watts * g.energy_period_s * 1000))
        state[0] = max(state[0], steps)
        return state[1]

    def nvmlDeviceGetTemperatureV(handle, sensor, version=real.nvmlTemperature_v1):
        if not temperature_v:
            raise real.NVMLError(FUNCTION_NOT_FOUND)
        whole(handle, "nvmlDeviceGetTemperatureV")
        if sensor != real.NVML_TEMPERATURE_GPU:
            raise real.NVMLError(INVALID_ARGUMENT)
        return now(handle)["temp"]

    def nvmlDeviceGetTemperature(handle, sensor):
        m.calls.append("deprecated temperature")
        whole(handle, "nvmlDeviceGetTemperature")
        if sensor != real.NVML_TEMPERATURE_GPU:
            raise real.NVMLError(INVALID_ARGUMENT)
        return now(handle)["temp"]

    def nvmlDeviceGetClockInfo(handle, type):  # noqa: A002 - pynvml's parameter name
        whole(handle, "nvmlDeviceGetClockInfo")
        return now(handle)["sm_clock" if type == real.NVML_CLOCK_SM else "mem_clock"]

    def nvmlDeviceGetMaxClockInfo(handle, type):  # noqa: A002 - pynvml's parameter name
        g = whole(handle, "nvmlDeviceGetMaxClockInfo")
        if g.name not in MAX_CLOCKS_AND_BUS or type not in (real.NVML_CLOCK_SM, real.NVML_CLOCK_MEM):
            raise real.NVMLError(NOT_SUPPORTED)
        return MAX_CLOCKS_AND_BUS[g.name][0 if type == real.NVML_CLOCK_SM else 1]

    def nvmlDeviceGetMemoryBusWidth(device):
        g = whole(device, "nvmlDeviceGetMemoryBusWidth")
        if g.name not in MAX_CLOCKS_AND_BUS:
            raise real.NVMLError(NOT_SUPPORTED)
        return MAX_CLOCKS_AND_BUS[g.name][2]

    def pcie(h: Any, fn: str, part: int) -> int:
        g = whole(h, fn)
        if g.name not in PCIE_LINKS:
            raise real.NVMLError(NOT_SUPPORTED)
        return PCIE_LINKS[g.name][part]

    def nvmlDeviceGetMaxPcieLinkGeneration(handle):
        return pcie(handle, "nvmlDeviceGetMaxPcieLinkGeneration", 0)

    def nvmlDeviceGetMaxPcieLinkWidth(handle):
        return pcie(handle, "nvmlDeviceGetMaxPcieLinkWidth", 1)

    def nvmlDeviceGetCurrPcieLinkGeneration(handle):
        return pcie(handle, "nvmlDeviceGetCurrPcieLinkGeneration", 0)

    def nvmlDeviceGetCurrPcieLinkWidth(handle):
        return pcie(handle, "nvmlDeviceGetCurrPcieLinkWidth", 1)

    def nvmlDeviceGetCurrentClocksEventReasons(handle):
        whole(handle, "nvmlDeviceGetCurrentClocksEventReasons")
        return now(handle)["reasons"]

    def nvmlDeviceGetPcieThroughput(device, counter):
        whole(device, "nvmlDeviceGetPcieThroughput")
        return now(device)["pcie_kb"][counter]

    # ---- GPM (Hopper+): samples, and metrics computed between two of them ----
    def nvmlGpmQueryDeviceSupport(device):
        g = gpu_of(device)
        s = real.c_nvmlGpmSupport_t()
        s.version, s.isSupportedDevice = real.NVML_GPM_SUPPORT_VERSION, int(g.gpm and device.mig is None)
        return s

    def nvmlGpmSampleAlloc():
        # a real c_nvmlGpmSample_t (a pointer), distinct per sample, as NVML's allocation would be
        s = ctypes.pointer(real.struct_c_nvmlGpmSample_t())
        m.allocated.append(s)
        return s

    def nvmlGpmSampleGet(device, gpmSample):
        g = gpu_of(device)
        if not isinstance(gpmSample, real.c_nvmlGpmSample_t):
            raise real.NVMLError(INVALID_ARGUMENT)
        if not g.gpm:
            raise real.NVMLError(NOT_SUPPORTED)
        return gpmSample

    def nvmlGpmSampleFree(gpmSample):
        m.freed.append(gpmSample)

    def nvmlGpmMetricsGet(metricsGet):
        if metricsGet.version != real.NVML_GPM_METRICS_GET_VERSION:
            raise real.NVMLError(real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        if metricsGet.sample1 is None or metricsGet.sample2 is None:
            raise real.NVMLError(INVALID_ARGUMENT)
        values = {real.NVML_GPM_METRIC_SM_UTIL: 88.0, real.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 61.5}
        for i in range(metricsGet.numMetrics):
            metricsGet.metrics[i].value = values.get(metricsGet.metrics[i].metricId, 0.0)
        return metricsGet

    fns = {k: v for k, v in locals().items() if k.startswith("nvml") and callable(v)}
    if not mig_mode:
        fns.pop("nvmlDeviceGetMigMode")
    for k, v in fns.items():
        setattr(m, k, v)
    return m


def machine_from_tuples(gpus) -> list[GPU]:
    """GPUs from ``(name, compute capability, total bytes)`` tuples (the simple conftest factory)."""
    return [GPU(n, f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd", cc, total, f"00000000:{i + 1:02x}:00.0", used=0)
            for i, (n, cc, total) in enumerate(gpus)]
