"""gpulab.batching: the batch sweep (real and from fixed measurements), the learning-rate scaling helpers,
and training at a batch size (deterministic, and the linear rule doing its job on a small problem)."""
from __future__ import annotations

import math

import pytest
import torch

import gpulab as gl
from gpulab import course


def _m(batch: int, seconds: float, peak: int | None = None, flops: float | None = None) -> gl.Measurement:
    """A Measurement with fixed times: ``batch`` items per call in ``seconds``."""
    return gl.Measurement(label=f"batch {batch}", times_s=(seconds,) * 5, number_per_run=1, device="cpu",
                          num_threads=2, env=gl.timing.environment("cpu"), backend="test", warmup=0, items=batch,
                          flops=flops, peak_memory_bytes=peak)


def test_sweep_measures_each_batch_and_its_memory():
    layer = torch.nn.Linear(32, 256)
    xs = {n: torch.randn(n, 32) for n in (1, 8, 64)}
    sweep = course.batch_sweep(lambda n: layer(xs[n]), [64, 1, 8], min_run_time=0.02, warmup=1,
                           flops_per_item=2 * 32 * 256, peak_flops=1e12)
    assert sweep.batch_sizes == (1, 8, 64)                     # sorted
    assert sweep.measurement(8).items == 8 and sweep.measurement(8).flops == 8 * 2 * 32 * 256
    # the step allocates exactly its output: batch x 256 fp32 values
    assert [sweep.measurement(n).peak_memory_bytes for n in (1, 8, 64)] == [1024, 8 * 1024, 64 * 1024]
    assert sweep.memory_per_item_bytes == pytest.approx(1024) and abs(sweep.fixed_memory_bytes) < 1e-6
    df = sweep.to_dataframe()
    assert list(df.index) == [1, 8, 64] and df["pct_of_peak_flops"].notna().all()
    assert sweep.knee in (*sweep.batch_sizes, None) and sweep.best in sweep.batch_sizes
    with pytest.raises(KeyError, match="measured"):
        sweep.measurement(2)


def test_knee_best_and_speedup_from_fixed_measurements():
    # items/s: 100, 180, 300, 320
    ms = [_m(1, 1 / 100, 100), _m(2, 2 / 180, 150), _m(4, 4 / 300, 250), _m(8, 8 / 320, 450, flops=8e9)]
    s = course.BatchSweep(tuple(reversed(ms)), peak_flops=1e11)
    assert s.best == 8 and s.knee == 4                          # 300 >= 0.9 * 320
    assert course.BatchSweep(tuple(ms), threshold=1.0).knee is None     # only the last batch reaches 100%: rising
    assert str(course.BatchSweep(tuple(ms), threshold=1.0).knee_info) == "no knee up to batch 8: still rising"
    assert s.speedup(8) == pytest.approx(3.2) and s.speedup(8, over=4) == pytest.approx(320 / 300)
    assert s.memory_per_item_bytes == pytest.approx(50) and s.fixed_memory_bytes == pytest.approx(50)
    df = s.to_dataframe()
    # 8e9 FLOPs at 40 steps/s = 320 GFLOP/s beats the 100 GFLOP/s "peak": the ceiling is raised, not exceeded
    assert df.loc[8, "pct_of_peak_flops"] == pytest.approx(100) and s.flops_ceiling == pytest.approx(3.2e11)
    assert "ceiling raised from the measured 100 GFLOP/s" in repr(s) and "'batch 8'" in s.ceiling_note
    assert course.BatchSweep(tuple(ms), peak_flops=1e12).to_dataframe().loc[8, "pct_of_peak_flops"] == \
        pytest.approx(100 * 8e9 * 40 / 1e12)
    assert math.isnan(df.loc[1, "pct_of_peak_flops"]) or df.loc[1, "pct_of_peak_flops"] is None
    text = repr(s)
    assert text.startswith("Batch sweep on cpu: best 8") and "knee 4" in text and len(text.splitlines()) <= 10
    assert "<table" in s._repr_html_() and "BUSY" not in text
    busy = course.BatchSweep(tuple(ms), others_cpu_pct=47.0)
    assert "BUSY MACHINE: other programs used 47% of the CPU" in repr(busy)
    ax = s.plot(published=[(1, 79.0), (8, 652.0), (256, 1198.0)], published_label="T4")
    assert ax.get_xscale() == "log" and len(ax.figure.axes) == 2   # memory on a twin axis


def test_long_sweeps_print_in_ten_lines():
    s = course.BatchSweep(tuple(_m(2**i, 2**i / (100 * (i + 1))) for i in range(12)))
    assert len(repr(s).splitlines()) <= 10


@pytest.mark.parametrize("ms,match", [
    ((), "at least one"),
    ((_m(1, 0.1), _m(1, 0.2)), "unique"),
    ((gl.Measurement("x", (0.1,), 1, "cpu", 1, gl.timing.environment("cpu"), "t", 0),), "items="),
])
def test_sweep_rejects_bad_measurements(ms, match):
    with pytest.raises(ValueError, match=match):
        course.BatchSweep(ms)


def test_sweep_rejects_bad_arguments():
    with pytest.raises(ValueError, match="threshold"):
        course.BatchSweep((_m(1, 0.1),), threshold=0)
    with pytest.raises(TypeError, match="callable"):
        course.batch_sweep(3, [1])
    with pytest.raises(ValueError, match="empty"):
        course.batch_sweep(lambda n: n, [])
    with pytest.raises(ValueError, match=">= 1"):
        course.batch_sweep(lambda n: n, [0, 1])
    with pytest.raises(TypeError, match="whole number"):
        course.batch_sweep(lambda n: n, [1.5])
    with pytest.raises(TypeError, match="whole number"):
        course.batch_sweep(lambda n: n, [True])
    with pytest.raises(ValueError, match="unique"):
        course.batch_sweep(lambda n: n, [2, 2])
    with pytest.raises(ValueError, match="peak_flops"):
        course.batch_sweep(lambda n: n, [1], peak_flops=-1.0)


def test_scale_lr_and_warmup():
    assert course.scale_lr(0.1, 256, 8192) == pytest.approx(3.2)
    assert course.scale_lr(0.1, 256, 1024, rule="sqrt") == pytest.approx(0.2)
    assert course.scale_lr(0.1, 256, 64) == pytest.approx(0.025)
    with pytest.raises(ValueError, match="rule"):
        course.scale_lr(0.1, 256, 512, rule="cubic")
    with pytest.raises(ValueError, match="base_lr"):
        course.scale_lr(0.0, 256, 512)
    with pytest.raises(TypeError, match="batch"):
        course.scale_lr(0.1, 256, 512.0)
    assert [course.warmup_factor(s, 4) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert course.warmup_factor(0, 0) == 1.0
    assert course.warmup_factor(0, 2, start=0.5) == pytest.approx(0.75) and course.warmup_factor(1, 2, start=0.5) == 1.0
    for bad in (dict(step=-1, warmup_steps=2), dict(step=0, warmup_steps=-2), dict(step=0, warmup_steps=2, start=2)):
        with pytest.raises(ValueError):
            course.warmup_factor(**bad)


def test_train_at_batch_size_is_deterministic_and_counts_steps():
    data = course.models.example_batch("mlp", 200, seed=1)
    a = course.train_at_batch_size(course.models.mlp, data, batch_size=64, lr=0.05, epochs=2, warmup_steps=3)
    b = course.train_at_batch_size(course.models.mlp, data, batch_size=64, lr=0.05, epochs=2, warmup_steps=3)
    assert a.epoch_losses == b.epoch_losses and a.accuracy == b.accuracy
    assert a.steps == 2 * math.ceil(200 / 64) and a.items == 400 and a.items_per_s > 0
    assert a.label == "batch 64, lr 0.05, warm-up 3"
    row = a.to_dict()
    assert row["optimizer_steps"] == 8 and row["final_loss"] == a.epoch_losses[-1]
    assert "BatchRun" in repr(a) and "<table" in a._repr_html_()


def test_linear_scaling_rule_recovers_the_small_batch_result():
    train = course.models.example_batch("mlp", 2048, seed=1)
    small = course.train_at_batch_size(course.models.mlp, train, 32, 0.01, epochs=6)
    big_same_lr = course.train_at_batch_size(course.models.mlp, train, 512, 0.01, epochs=6)
    big_scaled = course.train_at_batch_size(course.models.mlp, train, 512, course.scale_lr(0.01, 32, 512), epochs=6)
    # same epochs, 16x fewer steps: at the small batch's rate the big batch barely learns; scaled, it does
    assert big_scaled.epoch_losses[-1] < 0.7 * big_same_lr.epoch_losses[-1]
    assert small.epoch_losses[-1] < big_same_lr.epoch_losses[-1]
    assert small.steps == 16 * big_scaled.steps


@pytest.mark.parametrize("kwargs,error", [
    (dict(batch_size=0), ValueError), (dict(lr=-1.0), ValueError), (dict(epochs=0), ValueError),
    (dict(warmup_steps=-1), ValueError), (dict(momentum=1.0), ValueError), (dict(make_model=None), TypeError),
    (dict(data=torch.ones(3)), TypeError),
    (dict(data=(torch.ones(3, 784), torch.zeros(2, dtype=torch.long))), ValueError),
])
def test_train_at_batch_size_rejects_bad_input(kwargs, error):
    args = dict(make_model=course.models.mlp, data=course.models.example_batch("mlp", 8), batch_size=4, lr=0.1)
    args.update(kwargs)
    with pytest.raises(error):
        course.train_at_batch_size(**args)


# ---------------------------------------------------------------------------------------------- interleaved timing
def test_interleaved_rounds_rotate_and_have_equal_runs(monkeypatch, pretend_gpus):
    import gpulab.interleaved as interleaved

    calls, syncs = [], []
    monkeypatch.setattr(interleaved, "synchronize", lambda dev: syncs.append(dev))
    monkeypatch.setattr(interleaved, "environment", lambda dev: gl.timing.environment("cpu"))   # no GPU to name here
    fns = {k: (lambda k=k: calls.append(k)) for k in "abc"}
    ms = gl.benchmark_interleaved(fns, warmup=0, min_rounds=3, max_rounds=3, block_s=1e-12, device="cuda:0",
                                  items={"a": 1, "b": 2, "c": 4}, flops=10.0)
    assert calls == list("abc") + list("abc") + list("bca") + list("cab")     # calibration, then rotating rounds
    assert all(d == "cuda:0" for d in syncs) and len(syncs) == 2 * 12          # synchronised around every block
    assert list(ms) == ["a", "b", "c"] and {m.runs for m in ms.values()} == {3}
    assert ms["c"].items == 4 and ms["a"].flops == 10.0 and ms["b"].backend == "interleaved rounds"


def test_interleaved_repeats_short_calls_within_a_block():
    ms = gl.benchmark_interleaved({"tiny": lambda: None}, min_run_time=0.05, block_s=0.002)
    assert ms["tiny"].number_per_run > 1 and ms["tiny"].median_s < 1e-3


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(fns={}), TypeError, "non-empty mapping"),
    (dict(fns={"a": 3}), TypeError, "callable"),
    (dict(fns={"": lambda: None}), TypeError, "non-empty strings"),
    (dict(min_run_time=0), ValueError, "min_run_time"),
    (dict(min_rounds=0), ValueError, "min_rounds"),
    (dict(min_rounds=5, max_rounds=2), ValueError, "max_rounds"),
    (dict(items={"zzz": 1}), ValueError, "unknown label"),
    (dict(items=-1), ValueError, "positive finite number"),
    (dict(block_s=0), ValueError, "block_s"),
])
def test_interleaved_rejects_bad_input(kwargs, error, match):
    args = dict(fns={"a": lambda: None}, min_run_time=0.01)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        gl.benchmark_interleaved(**args)


def test_doctests():
    import doctest

    import gpulab.course.training.batching
    import gpulab.interleaved

    assert doctest.testmod(gpulab.course.training.batching).failed == 0 and doctest.testmod(gpulab.interleaved).failed == 0


def test_cpu_contention_counts_other_programs_only(monkeypatch):
    import gpulab.interleaved as interleaved

    readings = iter([(10.0, 5.0, 0.0), (12.0, 7.0, 1.0),      # 2 CPU s busy, all of them ours: 0%
                     (10.0, 5.0, 0.0), (13.0, 6.0, 1.0)])     # 3 CPU s busy, 1 ours: 2 of 2 cores x 1 s
    monkeypatch.setattr(interleaved, "_cpu_times", lambda: next(readings))
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    with gl.interleaved.cpu_contention() as own:
        pass
    with gl.interleaved.cpu_contention() as other:
        pass
    assert own.others_pct == 0.0 and not own.busy and "Quiet machine" in repr(own)
    assert other.others_pct == 100.0 and other.busy and "Busy machine" in other._repr_html_()
    assert "running" in repr(gl.interleaved.Contention(2)) and gl.interleaved.Contention(2).busy is None


def test_cpu_contention_sees_another_process():
    import subprocess
    import sys
    import time

    spinner = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 3: pass"])
    try:
        time.sleep(0.3)
        with gl.interleaved.cpu_contention() as load:
            time.sleep(1.0)                         # we sleep; the spinner burns one core
    finally:
        spinner.kill()
        spinner.wait()
    assert load.others_pct >= 0.5 * 100 / load.cores and load.elapsed_s >= 1.0
