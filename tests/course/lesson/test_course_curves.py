"""Published throughput curves beside a measured sweep: the knee of a curve, and two precisions on one plot."""
from __future__ import annotations

import pytest

import gpulab as gl
from gpulab import course


def _m(batch: int, seconds: float, peak: int) -> gl.Measurement:
    """A Measurement with fixed times: ``batch`` items per call in ``seconds``, ``peak`` bytes of memory."""
    return gl.Measurement(label=f"batch {batch}", times_s=(seconds,) * 5, number_per_run=1, device="cpu",
                          num_threads=2, env=gl.timing.environment("cpu"), backend="test", warmup=0, items=batch,
                          peak_memory_bytes=peak)


def test_the_knee_of_a_published_curve_moves_with_precision():
    fp32 = course.published_curve("resnet50-t4-fp32-batch-1-to-256")
    mixed = course.published_curve("resnet50-t4-batch-1-to-256")
    assert course.curve_knee(fp32).batch == 16 and course.curve_knee(mixed).batch == 32
    assert course.curve_knee(fp32, threshold=1.0).batch == 64      # the FP32 curve tops out at batch 64
    rising = course.curve_knee([(8, 2.0), (1, 1.0)])                   # unsorted points are sorted first
    assert rising.batch is None and rising.last == 8 and not rising.flattened
    with pytest.raises(ValueError, match="points"):
        course.curve_knee([])
    with pytest.raises(ValueError, match="threshold"):
        course.curve_knee(fp32, threshold=1.5)


def test_a_sweep_plots_several_published_curves():
    ms = [_m(1, 1 / 100, 100), _m(2, 2 / 180, 150), _m(4, 4 / 300, 250), _m(8, 8 / 320, 450)]
    s = course.BatchSweep(tuple(ms))
    curves = {"mixed": course.published_curve("resnet50-t4-batch-1-to-256"),
              "FP32": course.published_curve("resnet50-t4-fp32-batch-1-to-256")}
    ax = s.plot(published=curves)
    labels = [line.get_label() for line in ax.get_lines()]
    assert "mixed" in labels and "FP32" in labels
    fp32_line = next(line for line in ax.get_lines() if line.get_label() == "FP32")
    assert max(fp32_line.get_ydata()) == pytest.approx(100) and len(fp32_line.get_xdata()) == 9
    one = s.plot(published=curves["mixed"], published_label="T4")           # a single curve as before
    assert "T4" in [line.get_label() for line in one.get_lines()]
