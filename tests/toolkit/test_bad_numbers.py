"""Numbers that make no sense are refused with an error naming the parameter (the first items of the
hardening sweep): a thread count past the CPUs, NaN/inf/zero/negative times in an Amdahl fit, a NaN redraw
interval."""
from __future__ import annotations

import math
import os

import pytest

import gpulab as gl


def _cpus():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@pytest.mark.parametrize("n", [10**6, 1000, _cpus() + 1])
def test_benchmark_refuses_more_threads_than_cpus(n):
    with pytest.raises(ValueError, match=f"num_threads={n} is more than the {_cpus()} CPUs"):
        gl.benchmark(lambda: None, num_threads=n, min_run_time=0.01)


def test_benchmark_leaves_the_thread_count_as_it_was():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    gl.benchmark(lambda: sum(range(100)), num_threads=1, min_run_time=0.01, warn_noisy=False)
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("workers, times, match", [
    ([1, 2], [1.0, math.nan], "times_s"), ([1, 2], [1.0, math.inf], "times_s"), ([1, 2], [1.0, 0.0], "times_s"),
    ([1, 2], [1.0, -0.5], "times_s"), ([1, 2.5], [1.0, 0.6], "workers"), ([0, 2], [1.0, 0.6], "workers"),
    ([True, 2], [1.0, 0.6], "workers")])
def test_fit_amdahl_refuses_meaningless_numbers(workers, times, match):
    with pytest.raises(ValueError, match=match):
        gl.fit_amdahl(workers, times)


@pytest.mark.parametrize("value", [math.nan, math.inf, 0.5])
def test_monitor_refuses_a_redraw_interval_that_would_spin(value):
    with pytest.raises(ValueError, match="live_every_s"):
        gl.Monitor(live_every_s=value)


def test_memory_inputs_that_make_no_sense():
    pytest.importorskip("torch")
    import torch

    with pytest.raises(TypeError, match="budget_bytes must be a whole number of bytes"):
        with gl.memory_budget("1GiB"):
            pass
    with pytest.raises(TypeError, match="budget_bytes must be a whole number of bytes"):
        with gl.memory_budget(1.5 * gl.GiB):
            pass
    with pytest.raises(ValueError, match="max_trials"):
        gl.find_max_batch_size(lambda n: torch.ones(n).sum(), budget=gl.MiB, max_trials=0)
    with pytest.raises(TypeError, match="budget must be a whole number of bytes"):
        gl.find_max_batch_size(lambda n: torch.ones(n).sum(), budget=1.5 * gl.MiB)
    with pytest.raises(ValueError, match="context_bytes"):
        gl.estimate(lambda: torch.nn.Linear(4, 4), lambda n: torch.randn(n, 4), 8, context_bytes=-1)


def test_check_batches_refuses_a_nan_tolerance():
    np = pytest.importorskip("numpy")
    x = np.zeros((2, 3, 4, 4), np.float32)
    with pytest.raises(ValueError, match="atol"):
        gl.data.check_batches((x, [0, 1]), (x, [0, 1]), atol=math.nan)


def test_torchrun_command_refuses_a_text_of_arguments():
    with pytest.raises(TypeError, match=r"shlex.split\('--steps 5'\)"):
        gl.torchrun_command("train.py", "--steps 5", check_script=False)
    assert gl.torchrun_command("train.py", ["--steps", 5], check_script=False, python="python")[-2:] == ["--steps", "5"]


def test_checks_leave_legitimate_values_alone():
    """What the argument checks must still accept: a device value computed later (None), a dtype name the limits
    never measured (a query, not an error), a GPU index as a device."""
    assert gl.by_device(cpu=1024, cuda=None) in (1024, None)
    assert gl.by_device(cpu=[1, 2], cuda=None, mps=[1]) in ([1, 2], None, [1])
    with pytest.raises(TypeError, match="cuda='big' is a str but cpu=1 is a int"):
        gl.by_device(cpu=1, cuda="big")
    limits = gl.machine_limits(dtypes=["float32"], sizes=[64], copy_bytes=1 << 20, min_run_time=0.02)
    assert limits.has("float32") and not limits.has("int64") and not limits.has("uint8")
    from gpulab._check import device_arg

    assert device_arg("device", "cpu") == "cpu" and device_arg("device", 0, here=False) == 0
