"""The checks of lessons 00 and 01's exercises: each passes the reference answer and fails on a wrong one."""
from __future__ import annotations

import re

import pytest

from support import fake_nvml as fakes
from gpulab import course
from gpulab.course.machine import roofline_exercises
from gpulab.roofline import amdahl_speedup


# ---- lesson 00 ----------------------------------------------------------------------------------------------
def right_intensity(batch, width, nbytes):
    return 2 * batch * width * width / (nbytes * (width * width + 2 * batch * width))


def test_linear_intensity_check_passes_the_right_formula_and_fails_wrong_ones():
    assert "4 cases right" in repr(course.check_linear_intensity(right_intensity))
    assert "not answered" in repr(course.check_linear_intensity(None))
    wrong = [lambda b, w, n: 2 * b * w * w / (4 * (w * w + 2 * b * w)),      # fp32 bytes for every format
             lambda b, w, n: 2 * b * w * w / (n * w * w),                     # the weights only
             lambda b, w, n: b * w * w / (n * (w * w + 2 * b * w)),           # a multiply-add counted as one FLOP
             lambda b, w, n: 0.5]                                            # batch 1's value for every batch
    for fn in wrong:
        with pytest.raises(AssertionError, match="Linear layer intensity"):
            course.check_linear_intensity(fn)
    with pytest.raises(TypeError):
        course.check_linear_intensity(3.0)


def test_linear_work_counts_what_flop_counter_counts():
    flops, moved = course.linear_work(64, 512)
    assert flops == 2 * 64 * 512 * 512 and moved == 4 * (512 * 512 + 2 * 64 * 512)
    assert course.linear_work(8, 256, "bfloat16")[1] == 2 * (256 * 256 + 2 * 8 * 256)


def test_compute_bound_batch_is_the_first_power_of_two_past_the_ridge():
    for ridge, width, nbytes in ((12.0, 4096, 4), (200.6, 8192, 2), (1.0, 64, 4), (0.4, 512, 4)):
        b = course.compute_bound_batch(ridge, width, nbytes)
        assert right_intensity(b, width, nbytes) >= ridge
        assert b == 1 or right_intensity(b // 2, width, nbytes) < ridge
    assert course.compute_bound_batch(200.6, 8192, 2) == 256
    assert course.compute_bound_batch(1024.0, 4096, 4) is None        # past width / bytes: never compute-bound
    with pytest.raises(ValueError, match="ridge"):
        course.compute_bound_batch(0, 4096, 4)
    with pytest.raises(ValueError, match="width"):
        course.compute_bound_batch(1.0, 0, 4)


def test_an_off_by_one_batch_fails_the_ridge_check():
    want = [course.compute_bound_batch(25.0, 4096, 4), course.compute_bound_batch(200.6, 8192, 2)]
    assert repr(course.check("ridge", want, want, rtol=0)).startswith("[ok]")
    for wrong in ([want[0] // 2, want[1]], [want[0], want[1] * 2], [4096 * 6, 3 * 200]):
        with pytest.raises(AssertionError):
            course.check("ridge", wrong, want, rtol=0)


@pytest.mark.parametrize("p", [0.3, 0.83, 0.95, 0.999])
def test_speedup_needed_reaches_the_share_of_the_ceiling(p):
    s = course.speedup_needed(p, 0.9)
    assert amdahl_speedup(p, s) == pytest.approx(0.9 / (1 - p))
    with pytest.raises(AssertionError):      # the ceiling itself, or Amdahl at a fixed 1,000x, are wrong answers
        course.check("speedup needed", 1 / (1 - p), s, rtol=0.02)


def test_speedup_needed_refuses_fractions_outside_zero_one():
    for bad in (0, 1, 1.5, -0.1, True, "0.9"):
        with pytest.raises(ValueError):
            course.speedup_needed(bad)
        with pytest.raises(ValueError):
            course.speedup_needed(0.5, bad)


# ---- lesson 01 ----------------------------------------------------------------------------------------------
def test_cuda_visible_follows_gpulabs_device_order_on_four_gpus(fake_nvml, monkeypatch):
    from gpulab.telemetry import nvml

    four = [fakes.GPU("Tesla T4", f"GPU-{i}{i}{i}{i}0000-0000-0000-0000-000000000000", (7, 5), 15 * fakes.GIB,
                      f"00000000:0{i + 1}:00.0") for i in range(4)]
    fake = fakes.make_module(four)
    nvml._reset()                                   # the fake_nvml fixture resets again after the test
    monkeypatch.setattr(nvml, "_load", lambda: fake)
    monkeypatch.setattr(nvml, "_torch_uuids", lambda: None)   # CUDA not started: the variable decides
    for value in (*course.VISIBLE_CASES, None, "0,0", "3,x,1"):
        env = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
        seen = nvml.device_order(env).devices
        assert course.cuda_visible(value, 4) == tuple(d.index for d in seen), value


def test_visible_check_passes_the_rule_and_fails_a_guess():
    right = {v: course.cuda_visible(v, 4) for v in course.VISIBLE_CASES}
    assert "5 cases right" in repr(course.check_visible(right))
    assert "not answered" in repr(course.check_visible(None))
    for v, guess in (("1,7,2", (1, 2)), ("0,2,-1,1", (0, 2, 1)), ("3,1", (1, 3)), ("", (0, 1, 2, 3))):
        with pytest.raises(AssertionError, match=re.escape(repr([v]))):
            course.check_visible({**right, v: guess})
    with pytest.raises(AssertionError, match="no answer"):
        course.check_visible({"": ()})


def test_kernel_check_follows_the_doctor_and_fails_a_wrong_list():
    right = [course.kernels_run_on(a, "T4") for a in course.ARCH_CASES]
    assert right == [True, True, False, False, True, False]
    assert "6 cases right" in repr(course.check_kernels(right))
    for i in range(len(right)):
        with pytest.raises(AssertionError, match="wrong for"):
            course.check_kernels([not r if j == i else r for j, r in enumerate(right)])
    with pytest.raises(AssertionError, match="give 6 answers"):
        course.check_kernels([True] * 5)
    with pytest.raises(AssertionError, match="give 6 answers"):
        course.check_kernels(["yes"] * 6)
    assert course.kernels_run_on(["sm_90", "compute_90"], "H100 SXM")
    with pytest.raises(TypeError):
        course.kernels_run_on("sm_75", "T4")


def test_clock_event_reasons_are_read_from_nvidia_smi():
    text = course.nvidia_smi(["-q", "-d", "PERFORMANCE"], which=lambda _: None).text
    assert course.active_reasons(text) == ["SW Power Cap"] and course.slowdown_reasons(text) == []
    assert set(course.CLOCK_EVENT_REASONS) >= {"Idle", "SW Power Cap", "HW Slowdown", "SW Thermal Slowdown"}
    old = text.replace("Clocks Event Reasons", "Clocks Throttle Reasons").replace(
        "HW Thermal Slowdown           : Not Active", "HW Thermal Slowdown           : Active")
    assert course.slowdown_reasons(old) == ["HW Thermal Slowdown"]


def test_slowdown_reader_check_fails_readers_that_fit_one_report():
    assert "7 reports right" in repr(course.check_slowdown_reader(course.slowdown_reasons))
    text = course.nvidia_smi(["-q", "-d", "PERFORMANCE"], which=lambda _: None).text
    wrong = [lambda t: [],                                                   # right for the shown report only
             course.active_reasons,                                          # every Active reason, the cap too
             lambda t: [r for r in course.CLOCK_EVENT_REASONS if r + " " in t and "Slowdown" in r],   # ignores state
             lambda t: [line.split(":")[0].strip() for line in t.splitlines()
                        if "Active" in line and "Slowdown" in line]]          # "Not Active" counted as Active
    for fn in wrong:
        with pytest.raises(AssertionError, match="slowdown reasons"):
            course.check_slowdown_reader(fn, text)
    assert "not answered" in repr(course.check_slowdown_reader(None))
    # a report without reason lines (an error message) is replaced by the illustration
    assert "7 reports right" in repr(course.check_slowdown_reader(course.slowdown_reasons, "NVIDIA-SMI has failed"))
