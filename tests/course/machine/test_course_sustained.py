"""Lesson 00's sustained rates: each card's published achievable share, the clocks and power limit read through a
fake NVML built on the real nvidia-ml-py, and the measured share of the datasheet explained from both."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from support import fake_nvml as fakes
import gpulab as gl
from gpulab import course


def test_every_compared_card_has_an_achievable_figure_with_its_source():
    for name, key, share in (("T4", "t4-fp16-sustained", 24 / 65), ("A100 40GB SXM", "mamf-a100", 0.859),
                             ("H100 SXM", "mamf-h100", 0.801)):
        a = course.achievable(name)
        assert a.figure.key == key and a.share == pytest.approx(share) and a.figure.url.startswith("https://")
        assert a.flops == pytest.approx(share * (65e12 if name == "T4" else gl.gpu_spec(name).bf16_tensor_flops))
    assert course.achievable("Tesla T4").precision == "fp16" and course.achievable("H100 SXM").precision == "bf16"
    assert "forums.developer.nvidia.com" in course.achievable("T4").figure.url
    assert "24 TFLOP/s sustained (37%" in repr(course.achievable("T4"))
    with pytest.raises(ValueError, match="no published sustained"):
        course.achievable("V100 SXM2")
    with pytest.raises(TypeError):
        course.achievable(4)


def _t4_at_its_power_limit(monkeypatch, *, reasons, clock, power_mw):
    gpus = fakes.t4_colab()
    gpus[0].reasons_at, gpus[0].sm_clock_at = (lambda t: reasons), (lambda t: clock)
    fake = fakes.make_module(gpus)      # the fake_nvml fixture resets gpulab's NVML state after the test
    from gpulab.telemetry import nvml

    nvml._reset()
    monkeypatch.setattr(nvml, "_load", lambda: fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(fake, "nvmlDeviceGetPowerUsage", lambda h: power_mw)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    return fake


def test_a_t4_at_its_power_cap_is_read_and_explained(fake_nvml, monkeypatch):
    _t4_at_its_power_limit(monkeypatch, reasons=fakes.SW_POWER_CAP, clock=1110, power_mw=69_600)
    c = course.gpu_clocks("cuda:0")
    assert (c.gpu, c.when, c.sm_clock_mhz, c.max_sm_clock_mhz, c.power_w, c.power_limit_w) == \
        ("Tesla T4", "now", 1110, 1590, 69.6, 70)
    assert c.reasons == ["sw_power_cap"] and c.power_capped is True and c.slowed_by == []
    assert "SM clock 1,110 MHz of 1,590 MHz max (70%)" in repr(c) and "70 W limit" in repr(c)
    assert course.gpu_clocks().gpu == "Tesla T4"            # the default device is the GPU there
    s = course.explain_share(24.5e12, "Tesla T4", "fp16", clocks=c)
    assert s.cause == "power-cap" and s.share == pytest.approx(24.5 / 65)
    assert "70 W power limit" in s.explanation and "**38%**" in s.explanation and "1.02x" in s.explanation


def test_heat_is_told_apart_from_the_power_cap(fake_nvml, monkeypatch):
    _t4_at_its_power_limit(monkeypatch, reasons=fakes.HW_THERMAL | fakes.SW_POWER_CAP, clock=800,
                           power_mw=60_000)
    c = course.gpu_clocks("cuda:0")
    assert c.slowed_by == ["hw_thermal"]
    s = course.explain_share(15e12, "Tesla T4", "fp16", clocks=c)
    assert s.cause == "heat" and "hw_thermal" in s.explanation and "below it" in s.explanation


def test_full_clocks_and_no_cap_fall_back_to_the_published_figure(fake_nvml, monkeypatch):
    _t4_at_its_power_limit(monkeypatch, reasons=0, clock=1590, power_mw=40_000)
    c = course.gpu_clocks("cuda:0")
    assert c.power_capped is False and c.clock_share == 1.0 and "reasons: none" in repr(c)
    assert course.explain_share(24e12, "Tesla T4", "fp16", clocks=c).cause == "as-published"
    assert course.explain_share(10e12, "Tesla T4", "fp16", clocks=c).cause == "below-published"
    assert course.explain_share(40e12, "Tesla T4", "fp16", clocks=c).cause == "above-published"


def test_no_gpu_says_so_in_one_line(fake_nvml):
    c = course.gpu_clocks("cpu")
    assert not c.available and len(repr(c).splitlines()) == 1 and repr(c).startswith("No GPU to read")
    m = gl.benchmark(lambda: None, device="cpu", min_run_time=0.01, warn_noisy=False)
    after = course.gpu_clocks(after=m)
    assert not after.available and "cpu" in repr(after)
    with pytest.raises(TypeError, match="Measurement"):
        course.gpu_clocks(after=3)


def test_the_reading_right_after_a_timed_run_comes_from_the_measurement():
    m = gl.benchmark(lambda: None, device="cpu", min_run_time=0.01, warn_noisy=False)
    hot = replace(m, device="cuda:0", label="matmul 8192 float16",
                  env=replace(m.env, device_name="Tesla T4"),
                  gpu_state={"sm_clock_mhz_before": 1590, "sm_clock_mhz": 1050, "max_sm_clock_mhz": 1590,
                             "power_w": 70.1, "power_limit_w": 70.0, "throttle_reasons": fakes.SW_POWER_CAP})
    c = course.gpu_clocks(after=hot)
    assert c.when == "right after matmul 8192 float16" and c.sm_clock_mhz == 1050 and c.power_capped
    assert course.explain_share(23e12, c.gpu, "fp16", clocks=c).cause == "power-cap"


def test_an_unknown_card_or_format_has_no_datasheet_to_compare():
    s = course.explain_share(12e12, "NVIDIA A10G", "fp16")
    assert s.share is None and s.cause == "no-figure" and "no fp16 datasheet peak" in s.explanation
    t4_bf16 = course.explain_share(5e12, "T4", "bf16")
    assert t4_bf16.share is None and t4_bf16.achievable is None
    v100 = course.explain_share(90e12, "V100 SXM2", "fp16")
    assert v100.share == pytest.approx(90 / 125) and v100.cause == "no-figure"


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), True, "24e12", None])
def test_bad_rates_are_refused(bad):
    with pytest.raises(ValueError, match="measured_flops"):
        course.explain_share(bad, "T4", "fp16")


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="precision"):
        course.explain_share(1e12, "T4", "fp32")
    with pytest.raises(TypeError, match="gpu"):
        course.explain_share(1e12, None, "fp16")
    with pytest.raises(TypeError, match="clocks"):
        course.explain_share(1e12, "T4", "fp16", clocks={"sm_clock_mhz": 1})
    with pytest.raises(ValueError, match="device"):
        course.gpu_clocks("tpu")


def test_the_fp32_resnet50_curve_sits_beside_the_mixed_precision_one():
    fp32 = course.published_curve("resnet50-t4-fp32-batch-1-to-256")
    mixed = course.published_curve("resnet50-t4-batch-1-to-256")
    assert fp32[0] == (1, 98.0) and fp32[-1] == (256, 415.0) and max(v for _, v in fp32) == 428.0
    knee = lambda curve: next(b for b, v in curve if v >= 0.9 * max(x for _, x in curve))   # noqa: E731
    assert knee(fp32) == 16 and knee(mixed) == 32           # the knee moves with the precision
    p = gl.published("resnet50-t4-fp32-batch-1-to-256")
    assert p.url == gl.published("resnet50-t4-batch-1-to-256").url and "FP32" in p.hardware
