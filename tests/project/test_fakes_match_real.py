"""The fakes the GPU-only paths are tested against cannot drift from the real libraries: every NVML function
the fake offers exists in nvidia-ml-py with the same parameters, every NVML call and constant in gpulab is
pynvml's, and the fake torch.cuda objects only offer what torch.cuda has, with its parameter names."""
from __future__ import annotations

import ast
import inspect
import pathlib
import re
import types

import pynvml
import pytest
import torch

from support import fake_nvml
from gpulab.telemetry import gpu, nvml

GPULAB = pathlib.Path(nvml.__file__).resolve().parents[1]


def _fake_functions(module: types.ModuleType) -> dict[str, object]:
    return {k: v for k, v in vars(module).items() if k.startswith("nvml") and callable(v)}


@pytest.mark.parametrize("machine", sorted(fake_nvml.MACHINES))
def test_every_fake_nvml_function_has_pynvmls_signature(machine):
    fake = fake_nvml.make_module(fake_nvml.MACHINES[machine]())
    fns = _fake_functions(fake)
    assert len(fns) >= 30
    for name, fn in fns.items():
        assert hasattr(pynvml, name), f"the fake offers {name}, which nvidia-ml-py does not have"
        real, mine = inspect.signature(getattr(pynvml, name)), inspect.signature(fn)
        assert [(p.name, p.kind, p.default) for p in mine.parameters.values()] == \
            [(p.name, p.kind, p.default) for p in real.parameters.values()], f"{name}{mine} != pynvml {name}{real}"


def test_fake_errors_and_structs_are_pynvmls():
    fake = fake_nvml.make_module(fake_nvml.t4_colab())
    h = fake.nvmlDeviceGetHandleByIndex(0)
    assert isinstance(fake.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2), pynvml.c_nvmlMemory_v2_t)
    assert isinstance(fake.nvmlDeviceGetMemoryInfo(h), pynvml.c_nvmlMemory_t)
    assert isinstance(fake.nvmlDeviceGetUtilizationRates(h), pynvml.c_nvmlUtilization_t)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetMigMode(h)            # a T4 has no MIG


def _nvml_calls() -> set[tuple[str, str, int]]:
    """Every "nvml…" function name gpulab passes to nvml.query / first_answer, with file and line."""
    out = set()
    for path in GPULAB.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and re.fullmatch(r"nvml(Device|System|Gpm|Unit|Vgpu)\w+", node.value):
                out.add((node.value, path.name, node.lineno))
    return out


def test_every_nvml_function_gpulab_calls_exists_in_pynvml():
    calls = _nvml_calls()
    assert len({c[0] for c in calls}) >= 25
    missing = sorted(f"{f}:{line} {name}" for name, f, line in calls if not hasattr(pynvml, name))
    assert not missing, f"gpulab calls NVML functions nvidia-ml-py does not have: {missing}"


def test_gpulabs_nvml_constants_are_pynvmls():
    assert (nvml.NOT_SUPPORTED, nvml.NO_PERMISSION, nvml.NOT_FOUND, nvml.FUNCTION_NOT_FOUND,
            nvml.ARGUMENT_VERSION_MISMATCH) == (
        pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_NO_PERMISSION, pynvml.NVML_ERROR_NOT_FOUND,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    assert nvml._MEMORY_V2 == pynvml.nvmlMemory_v2 and nvml._TEMP_GPU == pynvml.NVML_TEMPERATURE_GPU
    assert nvml._GPM_METRICS_GET_VERSION == pynvml.NVML_GPM_METRICS_GET_VERSION
    assert (gpu._CLOCK_SM, gpu._CLOCK_MEM) == (pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM)
    assert (gpu._PCIE_TX, gpu._PCIE_RX) == (pynvml.NVML_PCIE_UTIL_TX_BYTES, pynvml.NVML_PCIE_UTIL_RX_BYTES)
    assert (gpu._GPM_SM_UTIL, gpu._GPM_TENSOR_UTIL) == (pynvml.NVML_GPM_METRIC_SM_UTIL,
                                                        pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL)
    reasons = {pynvml.nvmlClocksEventReasonGpuIdle: "gpu_idle",
               pynvml.nvmlClocksEventReasonApplicationsClocksSetting: "applications_clocks",
               pynvml.nvmlClocksEventReasonSwPowerCap: "sw_power_cap",
               pynvml.nvmlClocksEventReasonHwSlowdown: "hw_slowdown",
               pynvml.nvmlClocksEventReasonSyncBoost: "sync_boost",
               pynvml.nvmlClocksEventReasonSwThermalSlowdown: "sw_thermal",
               pynvml.nvmlClocksEventReasonHwThermalSlowdown: "hw_thermal",
               pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown: "hw_power_brake",
               pynvml.nvmlClocksEventReasonDisplayClockSetting: "display_clocks"}
    assert gpu.THROTTLE_REASONS == reasons
    # the fields gpulab reads off NVML's structs
    assert {"total", "free", "used", "reserved", "version"} <= {f for f, _ in pynvml.c_nvmlMemory_v2_t._fields_}
    assert {"gpu", "memory"} <= {f for f, _ in pynvml.c_nvmlUtilization_t._fields_}
    assert {"pid", "usedGpuMemory"} <= {f for f, _ in pynvml.c_nvmlProcessInfo_t._fields_}
    assert {"isSupportedDevice"} <= {f for f, _ in pynvml.c_nvmlGpmSupport_t._fields_}
    assert {"version", "numMetrics", "sample1", "sample2", "metrics"} <= \
        {f for f, _ in pynvml.c_nvmlGpmMetricsGet_t._fields_}
    assert {"metricId", "nvmlReturn", "value"} <= {f for f, _ in pynvml.c_nvmlGpmMetric_t._fields_}


def test_fake_torch_cuda_objects_offer_only_real_torch_cuda_api():
    from support.fake_cuda import fake_cuda as _fake_cuda

    fake = _fake_cuda()
    for name, fn in vars(fake).items():
        if name == "calls":
            continue
        assert hasattr(torch.cuda, name), f"fake torch.cuda.{name} does not exist in torch.cuda"
        if callable(fn):
            real = [p.name for p in inspect.signature(getattr(torch.cuda, name)).parameters.values()]
            mine = [p.name for p in inspect.signature(fn).parameters.values()]
            assert mine == real[: len(mine)], f"torch.cuda.{name}{tuple(real)} vs fake {tuple(mine)}"
    for name, fn in vars(fake.memory).items():
        real = getattr(torch.cuda.memory, name)
        mine = inspect.signature(fn).parameters
        assert all(p.kind == p.VAR_KEYWORD or p.name in inspect.signature(real).parameters for p in mine.values())


def test_the_fake_trace_files_host_side_is_what_torch_exports(tmp_path):
    """tests/support/fake_trace.py writes what kineto exports: checked against a real export of a profiled CPU step (its
    top-level keys, the step ranges' and operators' fields); the device side follows kineto's output_json.cpp."""
    import json

    from support import fake_trace

    w = torch.randn(16, 16, requires_grad=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                schedule=torch.profiler.schedule(wait=0, warmup=1, active=2, repeat=1),
                                on_trace_ready=lambda p: p.export_chrome_trace(str(tmp_path / "real.json"))) as prof:
        for _ in range(3):
            (torch.randn(4, 16) @ w).sum().backward()
            prof.step()
    real = json.loads((tmp_path / "real.json").read_text())
    fake = fake_trace.host_bound().document()
    # the fake writes no top-level key torch does not (distributedInfo: only with a process group, as here)
    assert set(fake) - {"distributedInfo"} <= set(real) and "distributedInfo" not in real
    assert real["schemaVersion"] == fake["schemaVersion"] and isinstance(real["baseTimeNanoseconds"], int)

    def shape(events, cat, name=None):
        e = next(e for e in events if e.get("cat") == cat and (name is None or e["name"].startswith(name)))
        return {k for k in e if k != "args"} | {f"args.{k}" for k in e.get("args", {})}

    for cat, name in (("user_annotation", "ProfilerStep#"), ("cpu_op", "aten::mm")):
        assert shape(fake["traceEvents"], cat, name) <= shape(real["traceEvents"], cat, name), (cat, name)
    steps = [e["name"] for e in real["traceEvents"] if e.get("cat") == "user_annotation"]
    assert steps and all(re.fullmatch(r"ProfilerStep#\d+", s) for s in steps)
