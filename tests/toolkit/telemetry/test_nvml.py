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


# ---- recorded machines: memory v2, MIG, order, GPM, older drivers --------------------------------------
GiB, MiB = 2**30, 2**20


def test_memory_v2_keeps_the_driver_reserve_apart(fake_nvml):
    fake_nvml(machine="t4_colab")
    mem = nvml.memory_info(nvml.device_handle(nvml.devices()[0]))
    # what nvidia-smi shows on an idle Colab T4: 0 MiB used of 15360 MiB, 257 MiB reserved by the driver
    assert (mem.version, mem.used_bytes, mem.reserved_bytes, mem.total_bytes) == (2, 0, 257 * MiB, 15360 * MiB)
    assert mem.free_bytes == mem.total_bytes - mem.reserved_bytes - mem.used_bytes and not mem.note


def test_memory_falls_back_to_v1_once_with_a_note(fake_nvml):
    fake = fake_nvml(machine="old_driver", memory_v2=False, temperature_v=False)
    h = nvml.device_handle(nvml.devices()[0])
    mem = nvml.memory_info(h)
    assert mem.version == 1 and mem.reserved_bytes is None and "reserve" in mem.note
    assert mem.used_bytes == 3 * GiB + 300 * MiB          # v1 folds the reserve into "used"
    calls = []
    real_get = fake.nvmlDeviceGetMemoryInfo
    fake.nvmlDeviceGetMemoryInfo = lambda handle, version=None: calls.append(version) or real_get(handle, version)
    nvml.memory_info(h)
    assert calls == [None]                                 # the missing v2 call is not asked again
    assert nvml.temperature_c(h) == 60 and "deprecated temperature" in fake.calls   # old driver: old call


def test_a_lost_gpu_does_not_hide_the_others_memory(fake_nvml):
    fake = fake_nvml(gpus=(("Tesla T4", (7, 5), 16 * GiB), ("Tesla T4", (7, 5), 16 * GiB)), memory_v2=False)
    fake.gpus[0].lost_at = -1                            # GPU 0 fell off the bus; GPU 1 is fine
    lost, ok = (nvml.query("nvmlDeviceGetHandleByIndex", i) for i in (0, 1))
    assert nvml.memory_info(lost) is None
    assert nvml.memory_info(ok).total_bytes == 16 * GiB  # still read (v1 on this driver)


def test_temperature_uses_the_current_call(fake_nvml):
    fake = fake_nvml(machine="h100_gpm")
    assert nvml.temperature_c(nvml.device_handle(nvml.devices()[0])) == 60
    assert "deprecated temperature" not in fake.calls


def test_mig_slices_their_memory_and_empty_slots_are_quiet(fake_nvml, caplog):
    fake_nvml(machine="a100_mig")
    (card,) = nvml.devices()
    with caplog.at_level(logging.INFO, logger="gpulab"):
        slices = nvml.mig_devices(card)
    assert [s.mig_index for s in slices] == [0, 2]                    # slots 1, 3-6 are empty: NOT_FOUND
    assert not [r for r in caplog.records if "MigDeviceHandle" in r.getMessage()]
    assert slices[0].name == "NVIDIA A100-SXM4-40GB MIG 3g.20gb" and slices[0].memory_total_bytes == 19968 * MiB
    assert slices[1].uuid == "MIG-a1b2c3d4-0002-5e6f-7a8b-9c0d1e2f3a4b" and slices[1].parent_uuid == card.uuid
    mem = nvml.memory_info(nvml.device_handle(slices[1]))
    assert mem.total_bytes == 9856 * MiB and mem.used_bytes == 11 * MiB   # the slice's own memory, not the card's

    pinned = nvml.device_order({"CUDA_VISIBLE_DEVICES": "MIG-a1b2c3d4-0002-5e6f-7a8b-9c0d1e2f3a4b"})
    assert [d.uuid for d in pinned.devices] == [slices[1].uuid] and not pinned.ambiguous
    unset = nvml.device_order({})
    assert unset.devices == (slices[0],) and unset.ambiguous        # two slices: which one CUDA uses is a choice
    assert any("MIG-a1b2c3d4-0002" in n and "CUDA_VISIBLE_DEVICES" in n for n in unset.notes)
    assert any("here the first it finds: NVIDIA A100-SXM4-40GB MIG 3g.20gb MIG-a1b2c3d4-0001" in n
               for n in unset.notes)


def test_mixed_gpus_order_is_flagged_until_pinned(fake_nvml):
    fake_nvml(machine="mixed")
    assert [d.name for d in nvml.devices()] == ["Tesla T4", "NVIDIA RTX A6000"]          # NVML: PCI order
    guess = nvml.device_order({})
    assert guess.ambiguous and [d.name for d in guess.devices] == ["NVIDIA RTX A6000", "Tesla T4"]
    assert any("CUDA_DEVICE_ORDER=PCI_BUS_ID" in n for n in guess.notes)
    pinned = nvml.device_order({"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0"})
    assert not pinned.ambiguous and [d.name for d in pinned.devices] == ["Tesla T4"]
    by_uuid = nvml.device_order({"CUDA_VISIBLE_DEVICES": "GPU-8b8b"})
    assert not by_uuid.ambiguous and [d.name for d in by_uuid.devices] == ["NVIDIA RTX A6000"]


def test_torch_uuids_decide_once_cuda_is_up(fake_nvml, monkeypatch):
    import torch

    fake_nvml(machine="mixed")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    uuids = ["7a7a7a7a-0000-1111-2222-333333333333", "8b8b8b8b-0000-1111-2222-333333333333"]  # T4 first
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: type("P", (), {"uuid": uuids[i]})())
    order = nvml.device_order({})
    assert order.source == "torch" and not order.ambiguous
    assert [d.name for d in order.devices] == ["Tesla T4", "NVIDIA RTX A6000"]


def test_torch_maps_a_mig_slice_by_its_uuid(fake_nvml, monkeypatch):
    import torch

    fake_nvml(machine="a100_mig")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    props = type("P", (), {"uuid": "a1b2c3d4-0002-5e6f-7a8b-9c0d1e2f3a4b"})()
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    (dev,) = nvml.visible_devices()
    assert dev.is_mig and dev.name.endswith("2g.10gb")
    assert nvml.cuda_memory_info(0).total_bytes == 9856 * MiB


def test_a_failed_gpm_reading_frees_its_sample(fake_nvml):
    from gpulab.telemetry.gpu import GPUSampler

    fake = fake_nvml(machine="h100_gpm")
    s = GPUSampler(nvml.devices()[0])
    s.sample(0.0)
    s.sample(0.1)
    assert s.gpm and len(fake.freed) == 1
    fake.gpus[0].gpm = False                     # nvmlGpmSampleGet now fails (e.g. a driver hiccup)
    s.sample(0.2)
    assert len(fake.allocated) == 3 and fake.allocated[2] in fake.freed
    s.close()
    assert all(any(a is f for f in fake.freed) for a in fake.allocated)   # nothing leaked


def test_the_fake_carries_pynvmls_own_constants():
    """The fake hands out the real module's constants, clock event reasons under both names included."""
    import pynvml

    from support.fake_nvml import make_module

    fake = make_module()
    for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason", "NVML_ERROR_", "NVML_CLOCK_"):
        names = [n for n in dir(pynvml) if n.startswith(prefix) and type(getattr(pynvml, n)) is int]
        assert names and all(getattr(fake, n) == getattr(pynvml, n) for n in names), prefix
    assert fake.nvmlMemory_v2 == pynvml.nvmlMemory_v2


# ---- which pynvml module: nvidia-ml-py's, not the old standalone package's 32-bit energy counter ---------------------
OLD_PYNVML = '''"""A stand-in for the standalone pynvml 8.0.4 (pynvml/__init__.py + nvml.py), its energy call as it was published."""
from ctypes import byref, c_uint

__version__ = "8.0.4"


def get_func_pointer(name):
    return lambda handle, ref: 0            # NVML writes 64 bits; only these 32 are read back


def check_return(ret):
    return ret


def nvmlDeviceGetTotalEnergyConsumption(handle):
    c_mJoules = c_uint()
    fn = get_func_pointer("nvmlDeviceGetTotalEnergyConsumption")
    ret = fn(handle, byref(c_mJoules))
    check_return(ret)
    return c_mJoules.value
'''


def _old_pynvml(tmp_path, machine=None):
    """The old standalone package's module (a ``pynvml/`` folder), its NVML calls the fake's except the energy call,
    which is the old one's source."""
    import importlib.util

    from support import fake_nvml

    folder = tmp_path / "pynvml"
    folder.mkdir()
    (folder / "__init__.py").write_text(OLD_PYNVML)
    spec = importlib.util.spec_from_file_location("old_pynvml", folder / "__init__.py")
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    fake = fake_nvml.make_module(machine)
    for k, v in vars(fake).items():
        if (k.startswith(("nvml", "NVML", "c_nvml")) or k in ("gpus", "ticks", "calls")) \
                and k != "nvmlDeviceGetTotalEnergyConsumption":
            setattr(old, k, v)
    return old


def test_nvidia_ml_pys_module_declares_a_64_bit_counter_and_is_used():
    import pynvml

    from gpulab.telemetry import _nvml_binding

    nvml._reset()
    found = _nvml_binding.describe(pynvml)
    assert _nvml_binding.energy_bits(pynvml) == 64 and found.problem is None
    assert found.name.startswith("nvidia-ml-py ") and nvml.status().binding == found.name
    assert nvml.status().energy_problem is None


def test_the_old_standalone_pynvml_is_passed_over_for_nvidia_ml_pys_own_file(tmp_path, monkeypatch):
    """Both packages install a module called pynvml, and the old package's folder shadows nvidia-ml-py's file: gpulab
    loads nvidia-ml-py's own file instead, and says which it found."""
    from gpulab.telemetry import _nvml_binding

    old = _old_pynvml(tmp_path)
    assert _nvml_binding.energy_bits(old) == 32
    nvml._reset()
    monkeypatch.setattr(nvml, "_load", lambda: old)
    st = nvml.status()                    # nvidia-ml-py's module: NVML itself may be missing here (no driver)
    assert st.binding.startswith("nvidia-ml-py ") and "the standalone pynvml package 8.0.4 shadows" in st.binding
    assert st.energy_problem is None and nvml._state["lib"] is not old
    nvml._reset()


def test_with_only_the_old_pynvml_its_energy_counter_is_not_read(tmp_path, monkeypatch, pretend_gpus, caplog):
    """Without nvidia-ml-py the old module is used for everything but its 32-bit energy counter: the query gives
    None (never its clamped 0 J), status() says why and what to install, and an EnergyMeter integrates power."""
    from gpulab.telemetry import _nvml_binding, energy

    old = _old_pynvml(tmp_path)
    nvml._reset()
    energy._PERIODS.clear()
    monkeypatch.setattr(nvml, "_load", lambda: old)
    monkeypatch.setattr(_nvml_binding, "nvidia_ml_py_file", lambda: None)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    st = nvml.status()
    assert st.available and st.binding.startswith("the standalone pynvml package 8.0.4")
    assert "32-bit" in st.energy_problem and "pip install -U nvidia-ml-py" in st.energy_problem
    h = nvml.query("nvmlDeviceGetHandleByIndex", 0)
    with caplog.at_level(logging.INFO, logger="gpulab"):
        assert old.nvmlDeviceGetTotalEnergyConsumption(h) == 0         # what the old module would have given
        assert nvml.query("nvmlDeviceGetTotalEnergyConsumption", h) is None
    assert any("32-bit" in r.getMessage() for r in caplog.records)
    pretend_gpus(3)
    with energy.EnergyMeter("cuda:0") as meter:
        import time

        time.sleep(0.2)
    e = meter.energy
    assert e.measured and not e.counted and "32-bit" in e.source       # power integrated, and why
    nvml._reset()
