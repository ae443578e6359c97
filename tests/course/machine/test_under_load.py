"""course.clocks_under_load: NVML sampled at 20 Hz *during* a sustained load (a fake T4 that reaches its 70 W cap
and lowers its clocks a few samples in), not read once after it from a card already idle."""
from __future__ import annotations

import time

from support import fake_nvml as fake_nvml_module
import pytest
import torch

from gpulab import course


def _t4_reaching_its_cap(fake_nvml, monkeypatch):
    """A Colab T4: boost clock (1590 MHz) and no reason for its first 3 samples, then 945 MHz at its power cap."""
    fake = fake_nvml(machine="t4_colab")
    gpu = fake.gpus[0]
    gpu.sm_clock_at = lambda t: 1590 if t < 3 else 945
    gpu.reasons_at = lambda t: 0 if t < 3 else fake_nvml_module.SW_POWER_CAP
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    return fake


def test_the_samples_inside_the_load_give_the_clocks_it_ran_at(fake_nvml, pretend_gpus, monkeypatch):
    _t4_reaching_its_cap(fake_nvml, monkeypatch)
    calls = []
    load = course.clocks_under_load(lambda: calls.append(time.sleep(0.005)), seconds=1.0, device="cuda",
                                    label="a long fp16 matmul")
    assert load.gpu == "Tesla T4" and load.calls == len(calls) - 1 >= 50       # the warm-up call is not counted
    assert load.samples >= 10 and load.seconds == pytest.approx(1.0, abs=0.2)
    assert load.sm_clock_mhz == 945 and load.max_sm_clock_mhz == 1590             # the median: most samples capped
    assert load.power_limit_w == 70 and load.power_w is not None
    share = dict(load.reasons)["sw_power_cap"]
    assert 0.5 < share < 1.0                                                       # not in the first samples
    clocks = load.clocks
    assert clocks.available and clocks.reasons == ["sw_power_cap"] and clocks.power_capped
    assert clocks.clock_share == pytest.approx(945 / 1590) and "during a long fp16 matmul" in clocks.when
    assert load.energy_j is not None and load.energy_j > 0                          # the counter advanced meanwhile
    assert load.rate(2e9) == pytest.approx(2e9 * load.calls / load.seconds)
    assert "945 MHz of 1,590" in repr(load) and "<table" in load._repr_html_()
    share_of_peak = course.explain_share(24e12, "Tesla T4", "fp16", clocks=clocks)
    assert share_of_peak.cause == "power-cap" or "power" in share_of_peak.explanation


def test_off_a_gpu_nothing_runs_and_it_says_why():
    ran = []
    load = course.clocks_under_load(lambda: ran.append(1), seconds=5, device="cpu")
    assert ran == [] and load.samples == 0 and not load.clocks.available
    assert "NVML reads NVIDIA GPUs only" in repr(load)
    with pytest.raises(ValueError, match="nothing to plot"):
        load.plot()


@pytest.mark.parametrize("kw,match", [(dict(work=None), "work must be a callable"),
                                      (dict(seconds=0), "seconds must be"), (dict(seconds=True), "seconds must be"),
                                      (dict(label=3), "label must be"), (dict(device="tpu"), "device")])
def test_bad_arguments_are_refused_by_name(kw, match):
    args = dict(work=lambda: None, seconds=1.0, device="cpu") | kw
    with pytest.raises((TypeError, ValueError), match=match):
        course.clocks_under_load(args.pop("work"), **args)
