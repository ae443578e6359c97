"""gpulab.precision: float formats, the precision choice per device (fabricated GPUs and CPUs), and the
fp16 underflow demonstration with and without a GradScaler."""
from __future__ import annotations

import doctest
from dataclasses import replace

import pytest
import torch

import gpulab as gl
from gpulab import course
import gpulab.precision
import gpulab.course.training.precision
from gpulab.system import GPUInfo


def test_doctests():
    assert doctest.testmod(gpulab.precision).failed == 0 and doctest.testmod(gpulab.course.training.precision).failed == 0


def test_float_formats_match_torch_finfo():
    df = course.float_formats()
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
        fi = torch.finfo(dtype)
        assert df.loc[name, "largest"] == pytest.approx(fi.max)
        assert df.loc[name, "smallest normal"] == pytest.approx(fi.tiny)
        assert df.loc[name, "epsilon"] == pytest.approx(fi.eps)
        assert df.loc[name, "bits"] == fi.bits
    assert df.loc["fp16", "smallest subnormal"] == 2.0**-24 == gpulab.course.training.precision.FP16_SMALLEST_SUBNORMAL
    assert torch.tensor(df.loc["fp16", "smallest subnormal"] / 2, dtype=torch.float16).item() == 0.0


@pytest.mark.parametrize("gpu,precision,policy,scaler", [
    ("Tesla T4", "fp16", "mixed_float16", True), ("V100 SXM2", "fp16", "mixed_float16", True),
    ("NVIDIA A100-SXM4-40GB", "bf16", "mixed_bfloat16", False), ("NVIDIA L4", "bf16", "mixed_bfloat16", False),
    ("H100 SXM", "bf16", "mixed_bfloat16", False)])
def test_choice_for_named_gpus(gpu, precision, policy, scaler):
    c = gl.choose_precision(gpu=gpu)
    assert (c.precision, c.keras_policy, c.needs_scaler) == (precision, policy, scaler)
    assert c.fast_hardware is True and "cuda" in c.device
    assert c.autocast_dtype == (torch.bfloat16 if precision == "bf16" else torch.float16)
    assert precision in repr(c) and "<table" in c._repr_html_()


def test_choice_from_fabricated_system_info(cpu_info, gpu_info):
    a100 = gl.choose_precision(gpu_info)
    assert a100.precision == "bf16" and "A100" in a100.device
    t4 = replace(gpu_info, gpus=(GPUInfo(0, "Tesla T4", "GPU-2", 15 * 2**30, (7, 5)),))
    assert gl.choose_precision(t4).precision == "fp16"
    old = replace(gpu_info, gpus=(GPUInfo(0, "Tesla P100", "GPU-3", 16 * 2**30, (6, 0)),))
    assert gl.choose_precision(old).fast_hardware is False
    # CPUs: bf16 always; how fast depends on AMX / AVX512-BF16
    assert gl.choose_precision(cpu_info).fast_hardware is False
    assert gl.choose_precision(replace(cpu_info, cpu_flags=("avx512f", "avx512_bf16"))).fast_hardware is None
    amx = gl.choose_precision(replace(cpu_info, cpu_flags=("avx512_bf16", "amx_tile", "amx_bf16")))
    assert amx.precision == "bf16" and amx.fast_hardware is True and not amx.needs_scaler


def test_a_cpu_with_amx_fp16_is_not_told_it_has_no_fast_fp16_path(cpu_info):
    from gpulab.precision import cpu_fp16_path

    granite = replace(cpu_info, cpu_flags=("avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16"))
    assert cpu_fp16_path(granite.cpu_flags)[0] is True
    assert cpu_fp16_path(("avx512f", "avx512_fp16"))[0] is None          # Sapphire Rapids' vectors: measure
    assert cpu_fp16_path(cpu_info.cpu_flags)[0] is False
    for info in (granite, cpu_info, replace(cpu_info, cpu_flags=("avx512f", "avx512_bf16"))):
        c = gl.choose_precision(info)
        assert c.precision == "bf16" and "no fast fp16" not in c.reason     # bf16 stays the choice, said truthfully
    assert "fp16 would be fast too" in gl.choose_precision(granite).reason
    assert "no fast fp16" not in (gl.choose_precision.__doc__ or "")
    with pytest.raises(TypeError):
        cpu_fp16_path("amx_fp16")
    assert "amx_fp16" in gl.system._CPU_FLAGS                           # read from /proc/cpuinfo and torch's cpuid


def test_choice_bad_input():
    with pytest.raises(TypeError):
        gl.choose_precision("T4")           # a string is not a SystemInfo: pass gpu="T4"
    with pytest.raises(TypeError):
        gl.choose_precision(gpu=75)
    with pytest.raises(KeyError):
        gl.choose_precision(gpu="Voodoo 2")


def test_choice_for_this_machine_is_usable():
    c = gl.choose_precision()
    assert c.precision in ("bf16", "fp16")
    course.TrainConfig(precision=c.precision)   # what lessons pass on


def test_gradient_underflow_loses_small_gradients_without_a_scaler():
    torch.manual_seed(0)
    model = course.models.mlp(hidden=64)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    r = course.gradient_underflow(model, course.models.example_batch("mlp", 16), loss_weight=1e-5)
    assert r.lost_fraction["fp32"] == 0.0
    assert r.lost_fraction["fp16, no scaler"] > 0.5 > r.lost_fraction["fp16 + GradScaler"]
    assert r.relative_error["fp16 + GradScaler"] < 0.05 < r.relative_error["fp16, no scaler"]
    assert r.below_fp16_subnormal > 0.5 and not any(r.overflow.values())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())   # model untouched
    assert all(p.grad is None for p in model.parameters())
    assert "GradScaler" in repr(r) and "<table" in r._repr_html_()
    assert list(r.to_dataframe().index) == r.variants
    ax = r.plot()
    assert ax.get_xlabel().startswith("log2")


def test_gradient_underflow_reports_overflow_with_a_huge_scale():
    torch.manual_seed(0)
    r = course.gradient_underflow(course.models.mlp(hidden=32), course.models.example_batch("mlp", 8), loss_scale=2.0**40)
    assert r.overflow["fp16 + GradScaler"] and r.relative_error["fp16 + GradScaler"] == float("inf")


def test_gradient_underflow_bad_input():
    model, batch = course.models.mlp(hidden=16), course.models.example_batch("mlp", 4)
    with pytest.raises(ValueError, match="loss_weight"):
        course.gradient_underflow(model, batch, loss_weight=0)
    with pytest.raises(ValueError, match="loss_scale"):
        course.gradient_underflow(model, batch, loss_scale=float("nan"))
    with pytest.raises(TypeError, match="inputs, targets"):
        course.gradient_underflow(model, batch[0])


def test_keras_step_times_validates_before_starting_a_process():
    with pytest.raises(ValueError, match="unknown Keras policies"):
        course.keras_step_times(("mixed_fp8",))
    with pytest.raises(TypeError):
        course.keras_step_times("float32")
    with pytest.raises(ValueError, match="runs"):
        course.keras_step_times(runs=0)


def test_keras_cnn_policy_and_float32_output():
    keras = pytest.importorskip("keras")
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = course.keras_cnn()
        assert model.layers[0].compute_dtype == "bfloat16" and model.layers[0].variable_dtype == "float32"
        assert model.layers[-1].compute_dtype == "float32"
    finally:
        keras.mixed_precision.set_global_policy("float32")
    with pytest.raises(ValueError):
        course.keras_cnn(width=0)


@pytest.mark.slow
def test_keras_step_times_in_a_fresh_process():
    pytest.importorskip("keras")
    times = course.keras_step_times(("float32", "mixed_bfloat16"), batch_size=16, runs=2,
                                env={"TF_ENABLE_ONEDNN_OPTS": "1"})
    assert set(times) == {"float32", "mixed_bfloat16"} and all(t > 0 for t in times.values())
