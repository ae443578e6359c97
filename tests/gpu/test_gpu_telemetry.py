"""gl.Monitor on a CUDA GPU while matmuls run: the NVML columns of the GPU's rows are recorded and filled."""
from __future__ import annotations

import importlib.util

import pytest

import gpulab as gl

BUSY_S = 1.5


@pytest.fixture(scope="module")
def watched():
    """A Monitor trace of a matmul loop on the current GPU, with that GPU's row name and NVML device."""
    import torch

    if importlib.util.find_spec("pynvml") is None:
        pytest.skip("nvidia-ml-py is not installed, so Monitor records host metrics only: pip install nvidia-ml-py")
    from gpulab.telemetry import nvml

    status = nvml.status()
    if not status.available:
        pytest.skip(f"NVML could not be initialised ({status.error}): Monitor records host metrics only")
    index = torch.cuda.current_device()
    buf = {"a": torch.randn(4096, 4096, device="cuda")}
    torch.cuda.synchronize()
    with gl.Monitor(interval=0.05) as mon:
        calls = gl.timing.repeat_for(BUSY_S, lambda: buf["a"] @ buf["a"], device="cuda")
    order = nvml.device_order()
    yield {"trace": mon.trace, "gpu": f"gpu{index}", "device": order.devices[index], "index": index, "calls": calls,
           "tensor_bytes": buf["a"].numel() * buf["a"].element_size()}
    buf.clear()
    torch.cuda.empty_cache()


def test_monitor_records_the_gpu_row(watched):
    t = watched["trace"]
    assert watched["calls"] > 0
    assert watched["gpu"] in t.gpus, (f"Monitor recorded rows for {t.gpus} (devices {t.devices}), not for the current "
                                      f"CUDA device {watched['gpu']}; notes: {t.notes}")
    assert t.samples(watched["gpu"]) >= 5, (
        f"{t.samples(watched['gpu'])} samples of {watched['gpu']} in {BUSY_S} s at 0.05 s intervals; "
        f"failed readings: {t.failed_by_device}, first error: {t.first_error}")
    assert t.failed_by_device.get(watched["gpu"], 0) == 0, f"NVML readings failed: {t.first_error}"


def test_nvml_columns_are_present_and_filled(watched, spec, figure):
    t, gpu, dev = watched["trace"], watched["gpu"], watched["device"]
    frame = t.device_frame(gpu)
    columns = ["mem_used_bytes", "torch_allocated_bytes", "torch_reserved_bytes"]
    if not dev.is_mig:        # per-card figures: NVML gives none for a MIG slice
        columns += ["sm_clock_mhz", "throttle_reasons", "throttled", "power_w", "gpu_util_pct"]
    from gpulab.telemetry import nvml

    memory = nvml.cuda_memory_info(watched["index"])
    if memory is not None and memory.version == 2:
        columns.append("mem_reserved_bytes")                 # the v2 query splits the driver's reserve out
    missing = [c for c in columns if c not in frame.columns or frame[c].isna().all()]
    assert not missing, (f"no {gpu} sample has a value for {missing} (NVML answered NotSupported or NoPermission, or "
                         f"the sampler never asked); columns with values: {sorted(frame.columns)}; notes: {t.notes}")
    assert frame["mem_used_bytes"].max() >= watched["tensor_bytes"], (
        f"NVML says {frame['mem_used_bytes'].max():.0f} bytes used while a {watched['tensor_bytes']}-byte tensor lives")
    assert frame["mem_used_bytes"].max() >= frame["torch_reserved_bytes"].max(), (
        "NVML's used memory (every process, contexts included) should cover PyTorch's reserved memory")
    if dev.is_mig:
        pytest.skip(f"{gpu} is a MIG slice: clocks, throttle reasons, power and utilisation are per card and NVML does "
                    "not report them per slice (memory checked)")
    assert frame["gpu_util_pct"].max() > 0, f"the GPU looked idle during {BUSY_S} s of back-to-back matmuls"
    assert frame["sm_clock_mhz"].max() > 0 and frame["power_w"].max() > 0, frame[["sm_clock_mhz", "power_w"]].describe()
    figure("monitor_sm_clock", float(frame["sm_clock_mhz"].mean()), "MHz",
           note="mean SM clock under 4096^2 fp32 matmuls")
    figure("monitor_power", float(frame["power_w"].mean()), "W", datasheet=None if spec is None else spec.tdp_w,
           note="mean board power under matmuls (datasheet: TDP)")
    figure("monitor_gpu_util", float(frame["gpu_util_pct"].mean()), "%",
           note=f"NVML utilisation; throttled in {100 * frame['throttled'].fillna(False).astype(bool).mean():.0f}% of "
                f"samples; Monitor verdict: {t.diagnose().verdict}")


def test_lesson_00s_clocks_are_sampled_while_the_16_bit_matmul_runs(cuda, figure):
    """course.clocks_under_load (lessons 00 and 04): a 16-bit matmul back to back for 3 s, NVML sampled at 20 Hz
    inside its span: the samples are there, the clock within the card's maximum, the power near or under its limit,
    the energy counter advanced, and the GPUClocks handed to explain_share come from the load."""
    import torch

    from gpulab import course

    if importlib.util.find_spec("pynvml") is None:
        pytest.skip("nvidia-ml-py is not installed: NVML cannot be sampled (pip install nvidia-ml-py)")
    dtype = gl.choose_precision().autocast_dtype
    a = torch.randn(8192, 8192, device=cuda).to(dtype)
    load = course.clocks_under_load(lambda: a @ a, seconds=3, device=cuda, label="8192x8192 16-bit matmuls")
    if load.gpu is None:
        pytest.skip(load.reason)
    assert load.samples >= 20 and load.calls > 0, load
    assert load.sm_clock_mhz is not None and 0 < load.sm_clock_mhz <= load.max_sm_clock_mhz, load
    if load.power_w is not None and load.power_limit_w:
        assert load.power_w <= 1.1 * load.power_limit_w, load
    clocks = load.clocks
    assert clocks.available and "during 8192x8192" in clocks.when, clocks
    rate = load.rate(2 * 8192**3)
    figure("under_load_sm_clock", load.sm_clock_mhz, "MHz", datasheet=load.max_sm_clock_mhz,
           note=f"median of {load.samples} samples during 3 s of 16-bit matmuls at {rate / 1e12:.0f} TFLOP/s; "
                f"reasons: {dict(load.reasons)}")
    if load.power_w is not None:
        figure("under_load_power", load.power_w, "W", datasheet=load.power_limit_w,
               note="median board power during the load (datasheet column: the enforced limit)")
