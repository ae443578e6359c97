"""Energy and cost in lessons 01 and 04: training runs carry the joules of their timed steps (a fake RAPL counter),
the comparison table shows joules and cost per item (or "not measurable" with no number), the price arithmetic, and
lesson 01's exercise check and power contrast."""
from __future__ import annotations

import time

import pytest
import torch

import gpulab as gl
from gpulab import course
from gpulab.course.lesson.step_energy import StepEnergy
from gpulab.telemetry import rapl
from gpulab.telemetry.energy import TOO_SHORT, Energy


def _runs():
    runs = {}
    for p in ("fp32", "bf16"):
        torch.manual_seed(0)
        m = course.models.mlp(hidden=32)
        runs[p] = (m, torch.optim.SGD(m.parameters(), lr=0.05), course.TrainConfig(precision=p))
    return runs


def _batches(step):
    return course.models.example_batch("mlp", 16, seed=step)


# ---- training runs carry their energy --------------------------------------------------------------------------
def test_interleaved_runs_carry_the_joules_of_their_timed_steps(package_at):
    package_at(watts=50.0)
    res = course.train_interleaved(_runs(), _batches, steps=6)
    for r in res.values():
        e = r.energy
        assert e.measured and "RAPL" in e.source and e.counted
        assert e.seconds == pytest.approx(sum(r.steady_times_s), rel=0.5, abs=0.02)   # steady steps only
        assert e.watts == pytest.approx(50.0, rel=0.1)
        assert r.joules_per_item == pytest.approx(e.watts * r.median_step_s / r.items_per_step)
    table = course.compare_runs(res, baseline="fp32", price_per_hour=0.10)
    text = repr(table)
    assert "J per item" in text and "energy vs fp32" in text and "$ per 1M items" in text and "RAPL" in text
    df = table.to_dataframe()
    assert df.loc["fp32", "energy_ratio"] == pytest.approx(1.0)
    assert df.loc["bf16", "energy_ratio"] == pytest.approx(res["bf16"].joules_per_item / res["fp32"].joules_per_item)
    assert "energy" in repr(res["fp32"])


def test_train_carries_its_energy(package_at):
    package_at(watts=30.0)
    m = course.models.mlp(hidden=32)
    r = course.train(m, torch.optim.SGD(m.parameters(), lr=0.1), _batches, steps=4,
                     config=course.TrainConfig(progress=False))
    assert r.energy.measured and r.energy.watts == pytest.approx(30.0, rel=0.1)


def test_not_measurable_runs_have_no_number_but_keep_the_cost(monkeypatch, tmp_path):
    monkeypatch.setattr(rapl, "POWERCAP", str(tmp_path / "none"))
    res = course.train_interleaved(_runs(), _batches, steps=3)
    assert all(r.energy.joules is None and r.joules_per_item is None for r in res.values())
    table = course.compare_runs(res, price_per_hour=0.10)
    text = repr(table)
    assert "not measurable" in text and "energy not measurable here" in text and "$ per 1M items" in text
    df = table.to_dataframe()
    assert df["joules_per_item"].isna().all() and df["usd_per_million"].notna().all()
    assert "J per item" not in repr(course.compare_runs([_result("a", 0.1)]))   # energy not read: no column


def _result(label, step_s, energy=None, items=100):
    return course.TrainResult(label, (2.0, 1.0), (step_s, step_s), items, None, course.TrainConfig(), 0,
                              energy=energy)


def test_price_and_energy_arithmetic():
    a = _result("fp32", 0.2, Energy("cuda:0", 10.0, 3000.0, "NVML energy counter"))     # 300 W
    b = _result("bf16", 0.1, Energy("cuda:0", 10.0, 2500.0, "NVML energy counter"))     # 250 W
    t = course.compare_runs([a, b], price_per_hour=3.6)                                  # $0.001 per second
    assert t.joules_per_item("fp32") == pytest.approx(300 * 0.2 / 100)
    assert t.joules_per_item("bf16") == pytest.approx(250 * 0.1 / 100)
    assert t.energy_ratio("bf16") == pytest.approx(25 / 60)
    assert t.cost_per_million("fp32") == pytest.approx(0.001 * 0.2 / 100 * 1e6)
    assert t.cost_per_million("bf16") == pytest.approx(t.cost_per_million("fp32") / 2)
    text = repr(t)
    assert "$2" in text and "$1" in text and "0.42x" in text
    key = gl.cost.prices().prices[0].key                                                # a dated published price
    published = course.compare_runs([a, b], price_per_hour=key)
    assert published.price.date and published.cost_per_million("fp32") == pytest.approx(
        published.price.usd_per_hour / 3600 * 0.2 / 100 * 1e6)


def test_bad_prices_raise_clearly():
    a = _result("fp32", 0.2)
    with pytest.raises(ValueError, match="price_per_hour"):
        course.compare_runs([a], price_per_hour=-1.0)
    with pytest.raises(TypeError, match="price_per_hour"):
        course.compare_runs([a], price_per_hour=[1])


def test_step_energy_reads_nothing_after_a_missing_figure(monkeypatch, tmp_path):
    meter = StepEnergy("cpu", rapl_root=tmp_path / "none")
    calls = []
    real = meter._meter.start
    monkeypatch.setattr(meter._meter, "start", lambda: calls.append(1) or real())
    for _ in range(4):
        meter.start()
        meter.stop()
    assert len(calls) == 1 and meter.total(skip=1).joules is None and "RAPL" in meter.total().reason
    assert "no energy counter" in StepEnergy("xpu:0").total().reason


# ---- lesson 01: the exercise and the power contrast -------------------------------------------------------------
def test_energy_exercise_passes_the_counter_difference_and_fails_wrong_answers():
    ex = course.example_energy_trace()
    assert "made-up numbers" in repr(ex) and "not a measurement" in repr(ex)
    f = ex.counter()
    phase = next(m for m in ex.trace.marks if m.name == ex.phase)
    right = f.loc[phase.end_s, "energy_j"] - f.loc[phase.start_s, "energy_j"]
    assert "right" in repr(course.check_energy_reading(right, right / ex.samples, ex))
    assert "not answered" in repr(course.check_energy_reading(None, None, ex))
    assert "not answered" in repr(course.check_energy_reading(right, None, ex))
    with pytest.raises(AssertionError, match="since the driver loaded"):
        course.check_energy_reading(f.loc[phase.end_s, "energy_j"], None, ex)      # the raw counter
    whole = f["energy_j"].iloc[-1] - f["energy_j"].iloc[0]
    with pytest.raises(AssertionError, match="energy of the compute phase"):
        course.check_energy_reading(whole, None, ex)                                 # the whole recording
    with pytest.raises(AssertionError, match="joules per sample"):
        course.check_energy_reading(right, right / 1000, ex)                          # wrong sample count
    with pytest.raises(TypeError, match="example_energy_trace"):
        course.check_energy_reading(right, None, "trace")


def test_power_contrast_measured_and_not(package_at, tmp_path, monkeypatch):
    package_at(watts=20.0)
    with gl.timer("sleep", "cpu") as idle:
        time.sleep(0.2)
    with gl.timer("busy", "cpu") as busy:
        n = gl.timing.repeat_for(0.2, lambda: sum(range(1000)))
    c = course.power_contrast(idle, busy, n)
    assert c.ratio == pytest.approx(1.0, rel=0.15) and c.joules_per_item == pytest.approx(busy.energy.joules / n)
    assert "mean power" in repr(c) and "not measurable" not in repr(c)
    monkeypatch.setattr(rapl, "POWERCAP", str(tmp_path / "none"))
    with gl.timer("sleep", "cpu") as idle:
        time.sleep(0.01)
    c = course.power_contrast(idle, busy, n)
    assert c.ratio is None and "energy not measurable here" in repr(c) and "not measurable" in c._repr_html_()
    with pytest.raises(ValueError, match="busy_items"):
        course.power_contrast(idle, busy, 0)
    with pytest.raises(TypeError, match="gl.timer"):
        course.power_contrast("idle", busy, 3)


# ---- a GPU's counter (the fake NVML): joules per step window, and the note on steps shorter than its updates ----

def test_gpu_step_windows_read_nvml_and_short_steps_give_no_figure(scripted, pretend_gpus):
    """NVML's counter advances in steps (100 ms measured on an H200), and so does the fake's, here every 20 ms at
    200 W. Each of a window's readings is up to one step stale (an H200's interleaved fp32/bf16 steps of 20 ms once
    read 0.17x the joules per item at 1.47x the speed), so steps under ten of the GPU's measured periods give no
    figure, with the reason; steps of 250 ms read the power."""
    pretend_gpus(3)
    scripted.gpus[0].watts, scripted.gpus[0].energy_period_s = 200.0, 0.02

    def steps(seconds, n=3):
        meter = StepEnergy("cuda:0")
        for _ in range(n):
            meter.start()
            time.sleep(seconds)
            meter.stop()
        return meter.total(skip=1)

    short = steps(0.02)
    assert short.joules is None and TOO_SHORT in short.reason and "gl.benchmark" in short.reason
    assert "measured over" in short.reason and "10 updates" in short.reason
    a, b = _result("fp32", 0.02, short), _result("bf16", 0.01, short)
    text = repr(course.compare_runs([a, b], price_per_hour=2.0))
    assert "not measurable" in text and "nvml-energy-window" in text and "2.00x" in text   # the time still compares
    long = steps(0.25)
    assert long.measured and "NVML energy counter" in long.source and long.watts == pytest.approx(200.0, rel=0.25)
    assert "nvml-energy-window" not in repr(course.compare_runs([_result("fp32", 0.25, long)]))


def test_a_copied_step_does_the_same_work_and_leaves_the_run_untouched():
    from gpulab.course.lesson.loop import copied_step

    torch.manual_seed(0)
    model = course.models.mlp(hidden=32)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    step = copied_step(model, opt, course.TrainConfig(), course.models.example_batch("mlp", 8))
    assert float(step()) > 0 and float(step()) > 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters())) and not opt.state   # the run: untouched


def test_block_energy_reads_one_long_window_and_says_how(package_at):
    from gpulab.course.lesson.step_energy import ALONE, block_energy

    package_at(watts=30.0)
    e = block_energy(lambda: sum(range(1000)), "cpu", seconds=0.3)
    assert e.measured and ALONE in e.source and e.watts == pytest.approx(30.0, rel=0.3)


def test_short_gpu_steps_get_a_block_of_the_step_alone(monkeypatch):
    """A GPU run whose steps are too short for NVML's counter is charged the mean power of a block of its step run
    alone (the fake block below stands for gl.benchmark on the GPU); other reasons are left as they are."""
    from gpulab.course.lesson import step_energy as se
    from gpulab.course.lesson import loop as tr
    from gpulab.telemetry.energy import too_short_for_the_gpu_counter

    class Meter:
        def __init__(self, e):
            self.e = e

        def total(self, skip=0):
            return self.e

    calls = []
    monkeypatch.setattr(tr, "block_energy", lambda step, device, seconds: calls.append((device, seconds)) or Energy(
        device, seconds, 300.0 * seconds, f"NVML energy counter (the whole board); {se.ALONE}"))
    model = course.models.mlp(hidden=16)
    args = (model, torch.optim.SGD(model.parameters(), lr=0.1), course.TrainConfig(), course.models.example_batch("mlp", 4))
    short = Energy("cuda:0", 0.2, None, "", too_short_for_the_gpu_counter("steps"))
    e = tr.run_energy(Meter(short), 1, [0.01] * 10, *args)
    assert calls == [("cuda:0", se.BLOCK_S)] and e.watts == pytest.approx(300.0)
    r = _result("bf16", 0.01, e)
    assert r.joules_per_item == pytest.approx(300.0 * 0.01 / r.items_per_step)
    assert "each step run alone" in repr(course.compare_runs([r]))
    other = Energy("cuda:0", 0.2, None, "", "NVML is not available (no driver)")
    assert tr.run_energy(Meter(other), 1, [0.01] * 10, *args) is other and len(calls) == 1
    read = Energy("cuda:0", 3.0, 900.0, "NVML energy counter (the whole board)")       # steps of 0.3 s, read
    assert tr.run_energy(Meter(read), 1, [0.3] * 10, *args) is read and len(calls) == 1          # alone: kept
    assert tr.run_energy(Meter(read), 1, [0.3] * 10, *args, interleaved=True).watts == pytest.approx(300.0)
    assert len(calls) == 2                                     # in turn with other runs: a block of the step alone
    assert tr.run_energy(Meter(read), 1, [1.5] * 10, *args, interleaved=True) is read        # long enough


def test_a_busy_block_no_hungrier_than_idle_is_explained_not_subtracted():
    from types import SimpleNamespace as NS

    idle = NS(label="sleep", elapsed_s=1.0, energy=Energy("cpu", 1.0, 50.0, "RAPL package counters"))
    busy = NS(label="matmuls", elapsed_s=1.0, energy=Energy("cpu", 1.0, 48.0, "RAPL package counters"))
    text = course.power_contrast(idle, busy, 10).summary()
    assert "no more than the device drew doing nothing" in text and "-" not in text.split(":")[0]
