"""gpulab.devicequery: a deviceQuery for Python. The fake CUDA device properties carry only attribute names the
real torch._C._CudaDeviceProperties has (or that gpulab reads as optional because torch 2.5 lacks them), and the
fake NVML is tests/support/fake_nvml.py (checked against pynvml by test_fakes_match_real.py)."""
from __future__ import annotations

import types

import pytest
import torch

from gpulab import devicequery as dq
from gpulab.reference import gpu_spec
from gpulab.telemetry import nvml

REAL = {a for a in dir(torch._C._CudaDeviceProperties) if not a.startswith("_")}
GiB = 2**30
T4_BYTES = 15360 * 2**20    # what NVML and nvidia-smi report for a T4 (ECC on), not the datasheet's 16 GB

# A Tesla T4 as torch 2.14 reports it (values as the CUDA samples' deviceQuery prints them on a T4).
T4 = dict(name="Tesla T4", major=7, minor=5, multi_processor_count=40, total_memory=15835660288, warp_size=32,
          max_threads_per_multi_processor=1024, max_threads_per_block=1024, regs_per_multiprocessor=65536,
          shared_memory_per_block=49152, shared_memory_per_block_optin=65536, shared_memory_per_multiprocessor=65536,
          L2_cache_size=4194304, clock_rate=1590000, memory_clock_rate=5001000, memory_bus_width=256,
          uuid="GPU-0000000-aaaa-bbbb-cccc-dddddddddddd", is_integrated=0, is_multi_gpu_board=0, gcnArchName="NA")
# The same card through torch 2.5.1, which has none of the optional attributes.
T4_TORCH25 = {k: v for k, v in T4.items() if k not in dq.TORCH_OPTIONAL}


def _props(attrs: dict) -> types.SimpleNamespace:
    """Fake device properties; every attribute must exist in the real class or be one gpulab treats as optional."""
    drift = set(attrs) - REAL - dq.TORCH_OPTIONAL
    assert not drift, f"the fake offers attributes torch._C._CudaDeviceProperties lacks: {sorted(drift)}"
    return types.SimpleNamespace(**attrs)


@pytest.fixture
def fake_cuda(monkeypatch):
    """Pretend torch sees CUDA devices with the given properties (only real torch.cuda functions are replaced)."""
    def install(*devices: dict):
        props = [_props(d) for d in devices]
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: len(props))
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props[device or 0])
        return props
    return install


# ---- the fakes cannot drift from torch -------------------------------------------------------------------------
def test_every_attribute_read_exists_in_torch_or_is_documented_optional():
    assert dq.TORCH_OPTIONAL <= dq.TORCH_ATTRIBUTES
    missing = dq.TORCH_ATTRIBUTES - REAL
    assert missing <= dq.TORCH_OPTIONAL, f"read but neither in this torch nor optional: {sorted(missing - dq.TORCH_OPTIONAL)}"
    if "clock_rate" in REAL:      # a torch that has the newer attributes has every optional one: no typos
        assert dq.TORCH_OPTIONAL <= REAL
    else:                         # torch 2.5: the optional ones are exactly the ones it lacks
        assert not dq.TORCH_OPTIONAL & REAL
    assert {"name", "major", "minor", "multi_processor_count", "total_memory"} <= REAL


def test_only_declared_attributes_are_read(fake_cuda, fake_nvml, monkeypatch):
    fake_nvml(gpus=(("Tesla T4", (7, 5), T4_BYTES),))
    read: list[str] = []

    class Spy:
        def __getattr__(self, attr):
            read.append(attr)
            return T4.get(attr)

    fake_cuda(T4)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: Spy())
    dq.device_query(0)
    assert read and set(read) <= dq.TORCH_ATTRIBUTES, sorted(set(read) - dq.TORCH_ATTRIBUTES)


def test_nvml_constants_and_functions_are_pynvmls():
    import pynvml

    assert (nvml._CLOCK_SM, nvml._CLOCK_MEM) == (pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM)
    assert callable(pynvml.nvmlDeviceGetMaxClockInfo) and callable(pynvml.nvmlDeviceGetMemoryBusWidth)


# ---- a CUDA device (faked) -------------------------------------------------------------------------------------
def test_t4_shaped_device_reads_through_torch(fake_cuda, fake_nvml):
    fake = fake_nvml(gpus=(("Tesla T4", (7, 5), T4_BYTES),))
    fake_cuda(T4)
    r = dq.device_query()
    t4 = r.local
    assert t4 is r.devices[0] and t4.measured and [d.name for d in r.devices[1:]] == ["T4", "A100 40GB SXM", "H100 SXM"]
    assert (t4.name, t4.compute_capability, t4.sms, t4.max_threads_per_sm, t4.max_warps_per_sm) == \
        ("Tesla T4", (7, 5), 40, 1024, 32)
    assert t4.max_resident_threads == 40 * 1024
    assert t4.sm_clock_hz == 1.59e9 and t4.memory_clock_hz == 5.001e9 and t4.memory_bus_width_bits == 256
    assert round(t4.bandwidth_bytes_per_s / 1e9) == 320                 # 5001 MHz x 2 x 256 bit / 8
    assert t4.published_bandwidth_bytes_per_s == gpu_spec("Tesla T4").bandwidth_bytes_per_s
    assert t4.sources["sm_clock_hz"] == "torch" and t4.sources["bandwidth_bytes_per_s"] == "derived"
    assert t4.sources["shared_memory_per_block_optin_bytes"] == "torch" and "NVML" not in t4.source
    assert not any(c for c in fake.calls if c != "init")                 # torch had it all: NVML never asked
    text = repr(r)
    assert "Tesla T4 (this GPU)" in text and "320 GB/s" in text and "5001 MHz" in text and "4 MiB" in text
    assert len(text.splitlines()) <= 22 and "beside published" in r.note


def test_torch_25_properties_are_completed_by_nvml_and_the_cc_table(fake_cuda, fake_nvml):
    fake_nvml(gpus=(("Tesla T4", (7, 5), T4_BYTES),))
    fake_cuda(T4_TORCH25)
    t4 = dq.device_query(compare=()).local
    assert (t4.sm_clock_hz, t4.memory_clock_hz, t4.memory_bus_width_bits) == (1.59e9, 5.001e9, 256)
    assert {t4.sources[k] for k in ("sm_clock_hz", "memory_clock_hz", "memory_bus_width_bits")} == {"NVML"}
    assert round(t4.bandwidth_bytes_per_s / 1e9) == 320 and "NVML" in t4.source
    # what neither torch 2.5 nor NVML says comes from the guide's table for 7.5, labelled as published
    assert (t4.max_threads_per_block, t4.shared_memory_per_block_bytes, t4.shared_memory_per_block_optin_bytes,
            t4.shared_memory_per_sm_bytes) == (1024, 48 * 1024, 64 * 1024, 64 * 1024)
    assert t4.sources["max_threads_per_block"].startswith("published: CUDA C++ Programming Guide")
    assert t4.sources["sms"] == "torch"


def test_torch_25_without_nvml_leaves_clocks_missing(fake_cuda):
    nvml._reset()     # no NVML library on this machine: every query answers None
    fake_cuda(dict(T4_TORCH25, name="Some Future GPU", major=12, minor=7))
    d = dq.device_query(compare=()).local
    assert d.sm_clock_hz is None and d.memory_bus_width_bits is None and d.bandwidth_bytes_per_s is None
    assert d.published_bandwidth_bytes_per_s is None and d.max_threads_per_block is None   # cc 12.7: not in table
    assert d.sms == 40 and "bandwidth_bytes_per_s" not in d.sources
    assert "N/A" in repr(dq.device_query(compare=()))


def test_device_index_and_torch_device(fake_cuda, fake_nvml):
    fake_nvml(gpus=(("Tesla T4", (7, 5), T4_BYTES), ("NVIDIA H100 80GB HBM3", (9, 0), 80 * GiB)))
    h100 = dict(T4, name="NVIDIA H100 80GB HBM3", major=9, minor=0, multi_processor_count=132,
                max_threads_per_multi_processor=2048, clock_rate=1980000, memory_clock_rate=2619000,
                memory_bus_width=5120, L2_cache_size=50 * 2**20)
    fake_cuda(T4, h100)
    for device in (1, "cuda:1", torch.device("cuda", 1)):
        d = dq.device_query(device, compare=()).local
        assert d.name == "NVIDIA H100 80GB HBM3" and d.max_resident_threads == 132 * 2048
        assert round(d.bandwidth_bytes_per_s / 1e9) == 3352 and "cuda:1" in d.source
    with pytest.raises(ValueError, match="cuda:5.*2 CUDA device"):
        dq.device_query("cuda:5")


# ---- published figures ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["T4", "A100 40GB SXM", "A100 80GB SXM", "H100 SXM"])
def test_published_bandwidth_matches_the_datasheet_within_1pct(name):
    d = dq.published_device(name)
    spec = gpu_spec(name)
    assert d.name == spec.name and not d.measured and d.url
    assert abs(d.bandwidth_bytes_per_s / spec.bandwidth_bytes_per_s - 1) < 0.01
    assert d.published_bandwidth_bytes_per_s == spec.bandwidth_bytes_per_s
    assert d.compute_capability == spec.compute_capability and d.memory_bytes == spec.memory_bytes
    assert d.max_warps_per_sm * d.warp_size == d.max_threads_per_sm
    assert all(s == "derived" or s.startswith("published: ") for s in d.sources.values())


def test_published_figures_per_compute_capability():
    t4, a100, h100 = (dq.published_device(n) for n in ("Tesla T4", "NVIDIA A100-SXM4-40GB", "H100 SXM"))
    assert (t4.sms, t4.l2_bytes, t4.max_threads_per_sm, t4.shared_memory_per_sm_bytes) == (40, 4 * 2**20, 1024, 65536)
    assert (a100.sms, a100.l2_bytes, a100.max_threads_per_sm, a100.shared_memory_per_block_optin_bytes) == \
        (108, 40 * 2**20, 2048, 163 * 1024)
    assert (h100.sms, h100.l2_bytes, h100.shared_memory_per_sm_bytes, h100.memory_clock_hz) == \
        (132, 50 * 2**20, 228 * 1024, 2.619e9)
    assert dq.published_device("A100 80GB SXM").memory_clock_hz == 1.593e9


# ---- no GPU, bad input -----------------------------------------------------------------------------------------
def test_no_cuda_gpu_gives_published_figures_and_says_so(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    r = dq.device_query()
    assert r.local is None and [d.name for d in r.devices] == ["T4", "A100 40GB SXM", "H100 SXM"]
    assert r.note == "no CUDA GPU here: published figures only" and r.note in repr(r)
    assert dq.device_query("cuda").local is None


def test_cpu_never_touches_cuda(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("device='cpu' must not ask CUDA")
    monkeypatch.setattr(torch.cuda, "is_available", boom)
    r = dq.device_query("cpu", compare="H100 SXM")
    assert r.local is None and [d.name for d in r.devices] == ["H100 SXM"] and "cpu" in r.note


@pytest.mark.parametrize("compare, match", [(("A100",), "'A100'.*known: T4, A100 40GB SXM"),
                                            (("L4",), "'L4'"), (("T4", "NVIDIA A10G"), "'NVIDIA A10G'")])
def test_unknown_gpu_in_compare_is_named(compare, match):
    with pytest.raises(ValueError, match=match):
        dq.device_query("cpu", compare=compare)


@pytest.mark.parametrize("device, error", [(1.5, TypeError), (True, TypeError), ([0], TypeError), (-1, ValueError),
                                           ("gpu", ValueError), ("cuda:x", ValueError), ("cpu:0", ValueError)])
def test_bad_device_is_named(device, error):
    with pytest.raises(error, match="device"):
        dq.device_query(device)


def test_bad_compare_types():
    with pytest.raises(TypeError, match="compare"):
        dq.device_query("cpu", compare=(1,))
    with pytest.raises(TypeError, match="compare"):
        dq.device_query("cpu", compare=5)


def test_duplicates_collapse_and_report_renders():
    r = dq.device_query("cpu", compare=("T4", "Tesla T4", "A100 80GB SXM"))
    assert [d.name for d in r.devices] == ["T4", "A100 80GB SXM"] and len(r) == 2
    html = r._repr_html_()
    assert "<table" in html and "CUDA C++ Programming Guide" in html and "whitepaper" in html
    df = r.to_dataframe()
    assert list(df["device"]) == ["T4", "A100 80GB SXM"] and df.loc[1, "memory_clock_hz"] == 1.593e9
    assert df.loc[0, "compute_capability"] == "7.5" and df.loc[0, "max_resident_threads"] == 40960
    assert "DeviceQuery(T4" in repr(r.devices[0]) and "<table" in r.devices[0]._repr_html_()


def test_command_line(capsys):
    from gpulab.__main__ import main

    assert main(["devicequery", "--device", "cpu", "--compare", "Tesla T4,H100 SXM"]) == 0
    out = capsys.readouterr().out
    assert "H100 SXM" in out and "3,352 GB/s" in out and "published figures only" in out
    with pytest.raises(SystemExit):
        main(["devicequery", "--device", "cpu", "--compare", "A100"])


def test_without_torch_published_figures_and_the_install_hint(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)      # import torch now raises ImportError
    r = dq.device_query()
    assert r.local is None and len(r) == 3 and "pip install torch torchvision (the 'gpulab[torch]' extra)" in r.note
