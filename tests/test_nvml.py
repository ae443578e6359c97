from __future__ import annotations

import logging

from gpulab.telemetry import nvml


def test_no_nvml_library_here_is_reported_not_raised():
    nvml._reset()
    st = nvml.status()
    assert st.available is False and st.error
    assert nvml.devices() == [] and nvml.query("nvmlDeviceGetCount") is None


def test_fake_nvml_devices_and_versions(fake_nvml):
    fake = fake_nvml(gpus=(("Tesla T4", (7, 5), 16 * 2**30), ("NVIDIA L4", (8, 9), 24 * 2**30)), cuda_driver=12020)
    st = nvml.status()
    assert st.available and st.driver_version == "550.54.15" and st.cuda_driver == (12, 2)
    devs = nvml.devices()
    assert [d.name for d in devs] == ["Tesla T4", "NVIDIA L4"]
    assert devs[1].compute_capability == (8, 9) and devs[0].memory_total_bytes == 16 * 2**30
    assert devs[0].pci_bus_id is None and devs[0].mig_enabled is None  # unsupported -> missing data
    assert fake.calls.count("init") == 1  # initialised lazily, once
    nvml.shutdown()
    assert fake.calls[-1] == "shutdown"


def test_unsupported_metric_logged_once(fake_nvml, caplog):
    fake_nvml()
    h = nvml.query("nvmlDeviceGetHandleByIndex", 0)
    with caplog.at_level(logging.INFO, logger="gpulab"):
        assert nvml.query("nvmlDeviceGetPciInfo", h) is None
        assert nvml.query("nvmlDeviceGetPciInfo", h) is None
    assert len([r for r in caplog.records if "nvmlDeviceGetPciInfo" in r.getMessage()]) == 1


def test_init_failure_becomes_status(fake_nvml):
    fake_nvml(init_error=9)  # DRIVER_NOT_LOADED
    st = nvml.status()
    assert not st.available and st.error
