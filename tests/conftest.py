"""Shared fixtures: a fake NVML with the real nvidia-ml-py API's shape, and fabricated system facts."""
from __future__ import annotations

import types
from dataclasses import replace

import pytest

import matplotlib

matplotlib.use("Agg")


class FakeNVMLError(Exception):
    """Shaped like pynvml.NVMLError: carries the NVML return code in ``.value``."""

    def __init__(self, value: int):
        super().__init__(value)
        self.value = value


def make_fake_pynvml(gpus=(("NVIDIA A100-SXM4-40GB", (8, 0), 40 * 2**30),), driver="550.54.15",
                     cuda_driver=12040, init_error=None):
    """A module object offering the nvidia-ml-py functions gpulab calls, with their return shapes."""
    m = types.ModuleType("pynvml")
    m.NVMLError = FakeNVMLError
    m.calls = []

    def nvmlInit():
        m.calls.append("init")
        if init_error:
            raise FakeNVMLError(init_error)

    def nvmlShutdown():
        m.calls.append("shutdown")

    def handle(i):
        if not 0 <= i < len(gpus):
            raise FakeNVMLError(2)  # INVALID_ARGUMENT
        return ("handle", i)

    def not_supported(*_):
        raise FakeNVMLError(3)  # NVML_ERROR_NOT_SUPPORTED

    m.nvmlInit = nvmlInit
    m.nvmlShutdown = nvmlShutdown
    m.nvmlSystemGetDriverVersion = lambda: driver.encode()  # some versions return bytes
    m.nvmlSystemGetCudaDriverVersion = lambda: cuda_driver
    m.nvmlDeviceGetCount = lambda: len(gpus)
    m.nvmlDeviceGetHandleByIndex = handle
    m.nvmlDeviceGetName = lambda h: gpus[h[1]][0]
    m.nvmlDeviceGetUUID = lambda h: f"GPU-0000000{h[1]}-aaaa-bbbb-cccc-dddddddddddd"
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=gpus[h[1]][2], used=0, free=gpus[h[1]][2])
    m.nvmlDeviceGetCudaComputeCapability = lambda h: gpus[h[1]][1]
    m.nvmlDeviceGetPciInfo = not_supported
    # nvmlDeviceGetMigMode deliberately absent: an older library without the function
    return m


@pytest.fixture
def fake_nvml(monkeypatch):
    """Install a fake pynvml into gpulab.telemetry.nvml; yields a factory to customise it."""
    from gpulab.telemetry import nvml

    def install(**kwargs):
        fake = make_fake_pynvml(**kwargs)
        nvml._reset()
        monkeypatch.setattr(nvml, "_load", lambda: fake)
        return fake

    yield install
    nvml._reset()


@pytest.fixture
def cpu_info():
    """A fabricated SystemInfo of a healthy CPU-only machine with torch, TF and no NVML."""
    from gpulab.system import FrameworkInfo, SystemInfo

    return SystemInfo(
        captured_at="2026-01-01T00:00:00+00:00", python="3.11.7", os="Linux", cpu_model="Test CPU",
        physical_cores=2, logical_cpus=2, cpu_flags=("avx2", "avx512f"), ram_bytes=8 * 2**30, torch_threads=2,
        gpus=(), nvml_available=False, nvml_error="NVML Shared Library Not Found", driver_version=None,
        cuda_driver_version=None,
        frameworks=(FrameworkInfo("torch", True, "2.14.1", None, detail={"gloo": True}),
                    FrameworkInfo("tensorflow", True, "2.21.0", None, detail={"package": "tensorflow-cpu"})),
        env={}, colab=False,
    )


@pytest.fixture
def gpu_info(cpu_info):
    """A fabricated healthy single-A100 machine (driver CUDA 12.4, torch built for 12.4)."""
    from gpulab.system import FrameworkInfo, GPUInfo

    return replace(
        cpu_info, gpus=(GPUInfo(0, "NVIDIA A100-SXM4-40GB", "GPU-1", 40 * 2**30, (8, 0)),), nvml_available=True,
        nvml_error=None, driver_version="550.54.15", cuda_driver_version=12040,
        frameworks=(FrameworkInfo("torch", True, "2.5.1+cu124", "12.4", "9.1.0", 1,
                                  detail={"devices": ["NVIDIA A100-SXM4-40GB"], "nccl": True, "gloo": True}),
                    FrameworkInfo("tensorflow", True, "2.21.0", "12.5.1", "9", 1, detail={"package": "tensorflow"})),
    )
