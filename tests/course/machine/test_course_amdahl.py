"""course.serial_parallel_step: the arithmetic of Amdahl's law from the measured parts, and the GPU path
(faked: this machine has no GPU): the one-thread runs stay on the CPU with one thread, the device runs are
synchronised on the device, and every step reads the matmul's result on the host."""
from __future__ import annotations

import types

import pytest
import torch

from gpulab import course
from gpulab.course.machine import amdahl as amdahl_mod
from gpulab.roofline import amdahl_speedup


def test_real_cpu_run_is_consistent():
    s = course.serial_parallel_step(64, device="cpu", min_run_time=0.02)
    assert 0.0 <= s.parallel_fraction <= 1.0
    assert s.predicted_speedup == pytest.approx(float(amdahl_speedup(s.parallel_fraction,
                                                                     max(1.0, s.parallel_speedup))))
    assert "one CPU thread" in repr(s) and s._repr_html_().startswith("<")


def test_fractions_and_predictions():
    s = course.SerialParallelStep("cuda:0", 2048, serial_s=0.01, parallel_one_s=0.09, parallel_device_s=0.0009,
                                  step_one_s=0.1, step_device_s=0.011, noisy=False)
    assert s.parallel_fraction == pytest.approx(0.9)
    assert s.parallel_speedup == pytest.approx(100)
    assert s.max_speedup == pytest.approx(10)
    assert s.predicted_speedup == pytest.approx(1 / (0.1 + 0.9 / 100))
    assert s.step_speedup == pytest.approx(0.1 / 0.011)
    assert s.fit().parallel_fraction == pytest.approx(0.9)


def test_gpu_path_is_synchronised_and_keeps_the_baseline_on_one_cpu_thread(monkeypatch, pretend_gpus):
    calls = []
    times = {"matmul, 1 thread": 0.09, "python probe": 0.002, "serial part": 0.01, "step, 1 thread": 0.1,
             "matmul on cuda": 0.0009, "step on cuda": 0.011}

    def fake_benchmark(fn, *args, label, device, num_threads=None, **kw):
        fn(*args)                                      # the timed function really runs once
        calls.append((label, str(device), num_threads))
        return types.SimpleNamespace(min_s=times[label], noisy=False)

    reads = []

    class DeviceTensor:
        """Stands for a CUDA tensor: the host reading an element is what waits for the GPU."""

        def __init__(self, t):
            self.t = t

    real_mm = torch.mm

    def mm(a, b):
        if isinstance(a, DeviceTensor):
            reads.append("queued")
            return _Result(real_mm(a.t, b.t))
        return real_mm(a, b)

    class _Result:
        def __init__(self, t):
            self.t = t

        def __getitem__(self, idx):
            return self

        def __float__(self):
            reads.append("read on host")
            return float(self.t[0, 0])

    monkeypatch.setattr(amdahl_mod, "benchmark", fake_benchmark)
    monkeypatch.setattr(amdahl_mod, "_to_device", lambda t, device: DeviceTensor(t))
    monkeypatch.setattr(torch, "mm", mm)
    s = course.serial_parallel_step(16, device="cuda")
    assert ("matmul, 1 thread", "cpu", 1) in calls and ("step, 1 thread", "cpu", 1) in calls
    assert ("matmul on cuda", "cuda", None) in calls and ("step on cuda", "cuda", None) in calls
    assert reads and reads.count("queued") == reads.count("read on host")   # every device matmul is read back
    assert s.parallel_fraction == pytest.approx(0.9) and s.parallel_speedup == pytest.approx(100)


def test_bad_arguments():
    with pytest.raises(ValueError, match="n must"):
        course.serial_parallel_step(0)
    with pytest.raises(ValueError, match="serial_share"):
        course.serial_parallel_step(8, serial_share=1.5)
