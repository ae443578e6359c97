"""A scripted NVML with the real nvidia-ml-py module's shape, for tests on machines without a GPU.

Same function names and argument order, the same return structures (fields ``gpu``/``memory``,
``total``/``free``/``used``, GPM ``c_nvmlGpmMetricsGet_t``), and ``NVMLError`` carrying the NVML return
code in ``.value``. Three GPUs replay a script of readings, one per sample:

* gpu 0, "NVIDIA H100 80GB HBM3": every metric incl. GPM; a thermal slowdown on ticks 5-8;
* gpu 1, "Tesla T4": power and PCIe NotSupported; the GPU is lost from tick 10 on (utilisation raises);
* gpu 2, "NVIDIA A100-SXM4-40GB" in MIG mode: utilisation NotSupported, two MIG instances.
"""
from __future__ import annotations

import types

NOT_SUPPORTED, INVALID_ARGUMENT, GPU_IS_LOST, NOT_FOUND = 3, 2, 15, 6
HW_THERMAL, SW_POWER_CAP, GPU_IDLE = 0x40, 0x4, 0x1
GIB = 2**30


class NVMLError(Exception):
    def __init__(self, value: int):
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {3: "Not Supported", 15: "GPU is lost", 2: "Invalid Argument", 6: "Not Found"}.get(self.value, "Unknown")


class Handle:
    def __init__(self, index: int, mig: int | None = None):
        self.index, self.mig = index, mig

    def __repr__(self) -> str:
        return f"Handle({self.index}, mig={self.mig})"


GPUS = [
    {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-aaaaaaaa-0000-0000-0000-000000000000", "cc": (9, 0),
     "total": 80 * GIB, "gpm": True, "mig": False},
    {"name": "Tesla T4", "uuid": "GPU-bbbbbbbb-1111-1111-1111-111111111111", "cc": (7, 5),
     "total": 15 * GIB, "gpm": False, "mig": False},
    {"name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-cccccccc-2222-2222-2222-222222222222", "cc": (8, 0),
     "total": 40 * GIB, "gpm": False, "mig": True},
]


def reading(gpu: int, tick: int) -> dict:
    """The scripted state of ``gpu`` at sample ``tick``."""
    busy = 95 if gpu == 0 else 30
    return {
        "util": (busy, 40 if gpu == 0 else 10),
        "used": (10 + tick) * GIB if gpu == 0 else 2 * GIB,
        "power_mw": 350_000 + 1000 * tick,
        "energy_mj": 1_000_000 + 35_000 * tick,       # 350 W x 0.1 s per tick
        "temp": 60 + tick,
        "sm_clock": 1500 if gpu == 0 and 5 <= tick <= 8 else 1980,
        "mem_clock": 2619,
        "reasons": HW_THERMAL if gpu == 0 and 5 <= tick <= 8 else 0,
        "pcie_kb": (1000 * (tick + 1), 2000 * (tick + 1)),
    }


def make_module() -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError
    m.NVML_GPM_METRICS_GET_VERSION = 1
    m.ticks = [0, 0, 0]
    m.calls = []
    m.freed = []

    def tick(h: Handle) -> int:
        return m.ticks[h.index]

    def need(h):
        if not isinstance(h, Handle):
            raise NVMLError(INVALID_ARGUMENT)
        return h

    def init():
        m.calls.append("init")

    m.nvmlInit = init
    m.nvmlShutdown = lambda: m.calls.append("shutdown")
    m.nvmlSystemGetDriverVersion = lambda: b"570.86.15"
    m.nvmlSystemGetCudaDriverVersion = lambda: 12080
    m.nvmlDeviceGetCount = lambda: len(GPUS)

    def by_index(i):
        if not 0 <= i < len(GPUS):
            raise NVMLError(INVALID_ARGUMENT)
        return Handle(i)

    def by_uuid(uuid):
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        for i, g in enumerate(GPUS):
            if g["uuid"] == uuid:
                return Handle(i)
        raise NVMLError(NOT_FOUND)

    m.nvmlDeviceGetHandleByIndex = by_index
    m.nvmlDeviceGetHandleByUUID = by_uuid
    m.nvmlDeviceGetName = lambda h: GPUS[need(h).index]["name"]
    m.nvmlDeviceGetUUID = lambda h: GPUS[need(h).index]["uuid"].encode()
    m.nvmlDeviceGetCudaComputeCapability = lambda h: GPUS[need(h).index]["cc"]
    m.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=f"00000000:{need(h).index + 1:02x}:00.0".encode())
    m.nvmlDeviceGetMigMode = lambda h: [int(GPUS[need(h).index]["mig"]), int(GPUS[need(h).index]["mig"])]

    def utilization(h):
        need(h)
        if h.mig is not None:
            raise NVMLError(NOT_SUPPORTED)
        t = m.ticks[h.index]
        m.ticks[h.index] += 1          # one utilisation read per sample: the script advances
        if GPUS[h.index]["mig"]:
            raise NVMLError(NOT_SUPPORTED)
        if h.index == 1 and t >= 10:
            raise NVMLError(GPU_IS_LOST)
        gpu, mem = reading(h.index, t)["util"]
        return types.SimpleNamespace(gpu=gpu, memory=mem)

    def memory(h):
        need(h)
        if h.mig is not None:
            return types.SimpleNamespace(total=20 * GIB, used=(h.mig + 1) * GIB, free=20 * GIB - (h.mig + 1) * GIB)
        g = GPUS[h.index]
        used = reading(h.index, max(tick(h) - 1, 0))["used"]
        return types.SimpleNamespace(total=g["total"], used=used, free=g["total"] - used)

    def scripted(key, unsupported_on=()):
        def fn(h, *args):
            need(h)
            if h.index in unsupported_on:
                raise NVMLError(NOT_SUPPORTED)
            return reading(h.index, max(tick(h) - 1, 0))[key]
        return fn

    m.nvmlDeviceGetUtilizationRates = utilization
    m.nvmlDeviceGetMemoryInfo = memory
    m.nvmlDeviceGetPowerUsage = scripted("power_mw", unsupported_on=(1,))
    m.nvmlDeviceGetTotalEnergyConsumption = scripted("energy_mj", unsupported_on=(1,))
    m.nvmlDeviceGetTemperature = lambda h, sensor: scripted("temp")(h)
    m.nvmlDeviceGetClockInfo = lambda h, kind: scripted("sm_clock" if kind == 1 else "mem_clock")(h)
    m.nvmlDeviceGetCurrentClocksEventReasons = scripted("reasons")

    def pcie(h, counter):
        need(h)
        if h.index == 1:
            raise NVMLError(NOT_SUPPORTED)
        return reading(h.index, max(tick(h) - 1, 0))["pcie_kb"][counter]

    m.nvmlDeviceGetPcieThroughput = pcie
    m.nvmlDeviceGetMaxMigDeviceCount = lambda h: 2 if GPUS[need(h).index]["mig"] else 0
    m.nvmlDeviceGetMigDeviceHandleByIndex = lambda h, i: Handle(need(h).index, mig=i)

    # GPM (Hopper+): samples, and metrics computed between two of them
    m.nvmlGpmQueryDeviceSupport = lambda h: types.SimpleNamespace(version=1,
                                                                   isSupportedDevice=int(GPUS[need(h).index]["gpm"]))
    m.nvmlGpmSampleAlloc = lambda: types.SimpleNamespace(tick=None)

    def sample_get(h, s):
        need(h)
        if not GPUS[h.index]["gpm"]:
            raise NVMLError(NOT_SUPPORTED)
        s.tick = tick(h)
        return s

    class Metric:
        def __init__(self):
            self.metricId, self.nvmlReturn, self.value = 0, 0, 0.0

    class MetricsGet:  # c_nvmlGpmMetricsGet_t
        def __init__(self):
            self.version, self.numMetrics, self.sample1, self.sample2 = 0, 0, None, None
            self.metrics = [Metric() for _ in range(8)]

    def metrics_get(req):
        if req.version != 1 or req.sample1 is None or req.sample2 is None:
            raise NVMLError(INVALID_ARGUMENT)
        for metric in req.metrics[: req.numMetrics]:
            metric.value = {2: 88.0, 5: 61.5}.get(metric.metricId, 0.0)
        return req

    m.c_nvmlGpmMetricsGet_t = MetricsGet
    m.nvmlGpmSampleGet = sample_get
    m.nvmlGpmMetricsGet = metrics_get
    m.nvmlGpmSampleFree = lambda s: m.freed.append(s)
    return m
