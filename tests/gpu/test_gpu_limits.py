"""gl.machine_limits on CUDA per dtype against the datasheet, TF32 against fp32, the per-process cache, and
pinned vs pageable host-to-device copies."""
from __future__ import annotations

import time

import pytest

import gpulab as gl
from gpulab import course

SIZES = [2048, 4096]
COPY_BYTES = 1 << 28          # 256 MiB each way: far beyond any GPU's L2 cache
TIMER_SLACK = 1.02            # a best-of time may read a little short of the truth; a datasheet peak is a hard cap
DATASHEET = {"float32": "fp32_flops", "float16": "fp16_tensor_flops", "bfloat16": "bf16_tensor_flops"}


def _bf16_on_tensor_cores() -> bool:
    import torch

    from gpulab.rehearsal import compute_capability

    return compute_capability() >= (8, 0) and torch.cuda.is_bf16_supported()   # a rehearsed T4 (--as t4): no bf16


def _dtypes() -> list[str]:
    return ["float32", "float16"] + (["bfloat16"] if _bf16_on_tensor_cores() else [])


@pytest.fixture(scope="module")
def limits():
    """Measured once for this module, from scratch, with TF32 off (the fp32 ceiling must be true fp32)."""
    with course.tf32(False):
        return gl.machine_limits("cuda", dtypes=_dtypes(), sizes=SIZES, copy_bytes=COPY_BYTES, min_run_time=0.2,
                                 refresh=True)


def test_each_dtype_ceiling_is_positive_and_under_the_datasheet(limits, spec, figure):
    assert limits.dtypes == sorted(_dtypes(), key=["float32", "bfloat16", "float16", "float64"].index), (
        f"asked for {_dtypes()}, measured {limits.dtypes}")
    for dtype in _dtypes():
        peak = limits.peak_flops(dtype)
        sheet = getattr(spec, DATASHEET[dtype]) if spec is not None else None
        figure(f"matmul_ceiling_{dtype}", peak / 1e12, "TFLOP/s", datasheet=None if sheet is None else sheet / 1e12,
               note=f"fastest torch.mm over n = {SIZES}" + ("" if spec else "; no datasheet for this GPU"))
        assert peak > 0, f"the {dtype} ceiling is {peak}"
        if sheet is not None:
            assert peak <= sheet * TIMER_SLACK, (
                f"measured {dtype} ceiling {peak / 1e12:.1f} TFLOP/s exceeds the {spec.name} datasheet's "
                f"{sheet / 1e12:.1f} TFLOP/s: the timing does not wait for the GPU, or the FLOPs are miscounted"
                + (" (was TF32 on during the fp32 run?)" if dtype == "float32" else ""))
    bw = limits.bandwidth_bytes_per_s
    figure("copy_bandwidth", bw / 1e9, "GB/s", datasheet=None if spec is None else spec.bandwidth_bytes_per_s / 1e9,
           note=f"device-to-device copy of {COPY_BYTES >> 20} MiB, read + write counted")
    assert bw > 0
    if spec is not None:
        assert bw <= spec.bandwidth_bytes_per_s * TIMER_SLACK, (
            f"measured copy bandwidth {bw / 1e9:.0f} GB/s exceeds the {spec.name} datasheet's "
            f"{spec.bandwidth_bytes_per_s / 1e9:.0f} GB/s (a copy that fits in L2, or bytes counted twice?)")


def test_tf32_ceiling_beats_fp32_on_ampere_and_newer(limits, spec, figure):
    import torch

    if not course.tf32_supported("cuda"):
        pytest.skip(f"TF32 needs compute capability 8.0 or newer; this GPU is sm_"
                    f"{''.join(map(str, torch.cuda.get_device_capability()))}")
    before = course.tf32_flags()
    with course.tf32(True):
        tf32 = max(m.flops / m.min_s for m in (gl.limits.measure_matmul(n, "float32", device="cuda", min_run_time=0.2)
                                               for n in SIZES))
    fp32 = limits.peak_flops("float32")
    sheet = None if spec is None or spec.tf32_tensor_flops is None else spec.tf32_tensor_flops
    figure("matmul_ceiling_tf32", tf32 / 1e12, "TFLOP/s", datasheet=None if sheet is None else sheet / 1e12,
           note=f"fp32 torch.mm with TF32 on (set_float32_matmul_precision('high')); fp32 without: "
                f"{fp32 / 1e12:.1f} TFLOP/s")
    assert tf32 > fp32, (f"with TF32 on, fp32 matmuls should run on the tensor cores: {tf32 / 1e12:.1f} TFLOP/s "
                         f"is not above the fp32 ceiling {fp32 / 1e12:.1f} TFLOP/s")
    if sheet is not None:
        assert tf32 <= sheet * TIMER_SLACK, (
            f"TF32 ceiling {tf32 / 1e12:.1f} TFLOP/s exceeds the {spec.name} datasheet's {sheet / 1e12:.1f} TFLOP/s")
    assert course.tf32_flags() == before, (
        f"course.tf32 did not restore PyTorch's TF32 switches: {before} before, {course.tf32_flags()} after")


def test_machine_limits_is_remembered_for_cuda_and_cuda_index(limits):
    import torch

    index = f"cuda:{torch.cuda.current_device()}"
    for device in ("cuda", index):
        t0 = time.perf_counter()
        with course.tf32(False):                 # the TF32 setting the ceilings were measured with
            again = gl.machine_limits(device, dtypes=_dtypes(), sizes=SIZES, copy_bytes=COPY_BYTES)
        took = time.perf_counter() - t0
        same_numbers = ({d: again.peak_flops(d) for d in again.dtypes}
                        == {d: limits.peak_flops(d) for d in limits.dtypes})
        assert again is limits, (
            f"gl.machine_limits({device!r}) measured again ({took:.2f} s, same ceilings: {same_numbers}) instead of "
            f"returning the ceilings measured for 'cuda' in this process: 'cuda' and {index!r} are the same GPU and "
            "must share one cache entry")


def test_pinned_host_to_device_copies_are_at_least_as_fast_as_pageable(spec, figure):
    nbytes = 64 * 2**20
    pageable = gl.transfer.measure_transfer(nbytes, pinned=False, device="cuda", min_run_time=0.3)
    pinned = gl.transfer.measure_transfer(nbytes, pinned=True, device="cuda", min_run_time=0.3)
    link = None
    if spec is not None and spec.architecture in gl.streams._LINK:
        link = gl.published(gl.streams._LINK[spec.architecture])
    for name, m in (("h2d_pageable", pageable), ("h2d_pinned", pinned)):
        figure(name, m.bytes_per_s / 1e9, "GB/s", datasheet=None if link is None else link.low,
               note=f"{m.label}; median of {m.runs} copies" + ("" if link is None else f"; link: {link.key}"))
        assert m.bytes_per_s and m.bytes_per_s > 0, f"{m.label}: no bandwidth measured"
    assert pinned.bytes_per_s >= 0.9 * pageable.bytes_per_s, (
        f"pinned copies ran at {pinned.bytes_per_s / 1e9:.1f} GB/s, below 90% of pageable ones "
        f"({pageable.bytes_per_s / 1e9:.1f} GB/s): page-locked memory saves the driver's staging copy and should "
        "never be slower")
