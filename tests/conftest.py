"""Shared fixtures: a fake NVML built from the real nvidia-ml-py (``fake_nvml``; ``scripted``, its three-GPU machine;
each clears the GPU energy counters' periods gpulab remembers, so they are measured on the fake),
a RAPL package whose counter runs at a chosen power (``package_at``), and fabricated system facts."""
from __future__ import annotations

from dataclasses import replace

import os
import shutil

import pytest

import matplotlib

matplotlib.use("Agg")


def pytest_configure(config):
    """Without an NVIDIA GPU, Triton kernels run in its interpreter, which must be chosen before anything imports
    Triton (torchvision does). gl.setup() does this in a notebook; here it is done once for the whole session, so
    that any test file, or any one test, runs on its own as it does within the suite."""
    if shutil.which("nvidia-smi") is None:
        os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture
def fake_nvml(monkeypatch):
    """Install a fake pynvml (tests/support/fake_nvml.py: real structs, errors and constants) into
    gpulab.telemetry.nvml; yields a factory. ``fake_nvml(gpus=((name, cc, bytes), ...))`` builds plain GPUs
    (PCI info NotSupported, no nvmlDeviceGetMigMode, as an older library); ``fake_nvml(machine="a100_mig")``
    a recorded machine (see ``fake_nvml.MACHINES``); other keywords go to ``fake_nvml.make_module``."""
    from support import fake_nvml as fakes
    from gpulab.telemetry import energy, nvml

    def install(gpus=(("NVIDIA A100-SXM4-40GB", (8, 0), 40 * 2**30),), machine=None, driver="550.54.15",
                cuda_driver=12040, **kwargs):
        if machine is not None:
            fake = fakes.make_module(fakes.MACHINES[machine](), driver=driver, cuda_driver=cuda_driver, **kwargs)
        else:
            kwargs = {"pci_info": False, "mig_mode": False, **kwargs}
            fake = fakes.make_module(fakes.machine_from_tuples(gpus), driver=driver, cuda_driver=cuda_driver,
                                     **kwargs)
        nvml._reset()
        energy._PERIODS.clear()           # each GPU's counter period is measured again on the new fake
        monkeypatch.setattr(nvml, "_load", lambda: fake)
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
        return fake

    yield install
    nvml._reset()
    energy._PERIODS.clear()


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


@pytest.fixture
def pretend_gpus(monkeypatch):
    """Device arguments are checked against the GPUs this process sees (``gpulab._check.device_arg``): a test
    that fakes CUDA's calls also pretends the GPUs are there. One GPU by default; ``pretend_gpus(2)`` for more."""
    import torch

    def install(n=1):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    install()
    return install


@pytest.fixture
def scripted(monkeypatch):
    """The real nvml.py running against the scripted three-GPU NVML (tests/support/fake_nvml.py), in NVML's PCI order."""
    from support import fake_nvml

    from gpulab.telemetry import energy, nvml

    fake = fake_nvml.make_module()
    nvml._reset()
    energy._PERIODS.clear()
    monkeypatch.setattr(nvml, "_load", lambda: fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")   # three GPU models: pin CUDA's order to NVML's
    yield fake
    nvml._reset()
    energy._PERIODS.clear()


RAPL_WRAP = 262_143_328_850     # a package's max_energy_range_uj as Intel servers report it


@pytest.fixture
def package_at(tmp_path, monkeypatch):
    """One RAPL package in a sysfs-shaped folder whose counter runs at ``watts`` (driven by the clock), wrapping at
    ``wrap``, with a power limit of ``limit_w`` where given; gpulab's default powercap folder points there. Returns the
    folder."""
    import time

    from gpulab.telemetry import rapl
    from gpulab.telemetry.rapl import RaplZone

    root = tmp_path / "powercap"

    def install(watts: float = 40.0, wrap: int = RAPL_WRAP, start_uj: int = 0, limit_w: float | None = None):
        zone = root / "intel-rapl:0"
        zone.mkdir(parents=True)
        (zone / "name").write_text("package-0\n")
        (zone / "energy_uj").write_text("0\n")
        (zone / "max_energy_range_uj").write_text(f"{wrap}\n")
        if limit_w is not None:             # the package's power limit, as Intel's powercap gives it
            (zone / "constraint_0_power_limit_uw").write_text(f"{int(limit_w * 1e6)}\n")
        t0 = time.monotonic()
        monkeypatch.setattr(RaplZone, "read_uj",
                            lambda self: int(start_uj + watts * 1e6 * (time.monotonic() - t0)) % self.max_range_uj)
        monkeypatch.setattr(rapl, "POWERCAP", str(root))
        return root

    return install
