"""Lesson 12's time, energy and cost: per-epoch joules in train_recipe (a fake RAPL counter, and the "not
measurable" path of a machine without one), the ablation's J per sample and $ per 1M samples columns, the fp32 vs
16-bit table and the results card's energy and cost lines."""
from __future__ import annotations

import importlib.util
import math
import re
import time
from dataclasses import replace
from types import SimpleNamespace as NS

import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("torchvision") is None:
    pytest.skip("torchvision is not installed", allow_module_level=True)

from gpulab import course  # noqa: E402
from gpulab.course.capstone import torch_ablation as capstone_torch  # noqa: E402
from gpulab.course.capstone.ablation_table import Ablation, AblationStep  # noqa: E402
from gpulab.course.capstone.recipe_run import RecipeRun  # noqa: E402
from gpulab.course.lesson import step_energy  # noqa: E402
from gpulab.telemetry import energy, rapl  # noqa: E402

NUMBER = re.compile(r"\d")


@pytest.fixture(scope="module")
def small():
    return course.digits(n_train=2048, n_test=128, download=False)


@pytest.fixture
def no_counter(monkeypatch, tmp_path):
    """A machine without RAPL (this CI's VM, made certain)."""
    monkeypatch.setattr(rapl, "POWERCAP", str(tmp_path / "no-powercap"))


def _run(precision: str, seconds: float, joules: float | None = None, n: int = 1000) -> RecipeRun:
    e = (joules, joules) if joules is not None else (None, None)
    return RecipeRun(course.Recipe(precision=precision), "cpu", 2, n, (seconds, seconds), (), 0.9, None, 1e6,
                     epoch_joules=e, energy_reason=None if joules is not None else "no RAPL counter",
                     energy_source="RAPL package counters (package-0)" if joules is not None else "")


# ---- per-epoch energy in train_recipe -------------------------------------------------------------------
def test_train_recipe_reads_each_epochs_joules_from_the_counter(small, package_at):
    package_at(watts=50.0)
    r = course.train_recipe(course.Recipe(batch_size=32, data="host"), small, epochs=3, device="cpu")
    assert len(r.epoch_joules) == 3 and r.energy_reason is None and "RAPL" in r.energy_source
    for j, t in zip(r.epoch_joules, r.epoch_times_s):
        assert j == pytest.approx(50.0 * t, rel=0.05, abs=0.05)      # watts x the epoch's wall time
    steady = sum(r.epoch_joules[1:]) / 2
    assert r.joules_per_epoch == pytest.approx(steady)
    assert r.joules_per_sample == pytest.approx(steady / r.samples_per_epoch)
    assert "per sample" in repr(r) and "RAPL" in r._repr_html_()


def test_train_recipe_without_a_counter_says_why_and_holds_no_number(small, no_counter):
    r = course.train_recipe(course.Recipe(batch_size=64, data="host"), small, epochs=2, device="cpu")
    assert r.epoch_joules == (None, None) and r.joules_per_sample is None and r.joules_per_epoch is None
    assert "powercap" in r.energy_reason
    line = [ln for ln in repr(r).splitlines() if ln.startswith("energy")][0]
    assert "not measurable here" in line


class _ShortGPUEpochs:
    """What ``EnergyMeter("cuda:0")`` gives for epochs of tens of ms (an H100's fast recipes): every window refused as
    too short for NVML's counter. Records when each window was opened and closed."""

    windows: list = []

    def __init__(self, device):
        self.windows.clear()

    def start(self):
        self.t0 = time.perf_counter()
        return self

    def stop(self):
        called = time.perf_counter()
        time.sleep(0.05)                 # a counter read, or the first window's period probe: not the epoch's time
        self.windows.append((self.t0, called))
        return energy.Energy("cuda:0", called - self.t0, None, "", energy.too_short_for_the_gpu_counter("windows"))


def test_epochs_too_short_for_a_gpu_counter_are_charged_a_block_of_the_same_steps(small, monkeypatch):
    """On a GPU an epoch of tens of ms is under ten of NVML's ~100 ms counter periods, so each epoch's window is
    refused as too short. train_recipe then charges every epoch the mean power of a block of the same training steps
    run alone at lr 0 (lesson 04's way: step_energy.block_energy, BLOCK_S seconds), and says so. The meter reads stay
    outside the epoch times."""
    blocks = []

    def block(step, device, seconds, how):
        for _ in range(40):                      # more than an epoch of 32 steps: the data path starts over
            step()
        blocks.append((device, seconds, how))
        return energy.Energy(device, seconds, 250.0 * seconds, f"NVML energy counter (the whole board); {how}")

    monkeypatch.setattr(energy, "EnergyMeter", _ShortGPUEpochs)
    monkeypatch.setattr(step_energy, "block_energy", block)
    r = course.train_recipe(course.Recipe(batch_size=64, data="host", schedule="cosine"), small, epochs=3,
                            device="cpu")
    assert blocks == [("cuda:0", step_energy.BLOCK_S, step_energy.EPOCHS_ALONE)] and step_energy.BLOCK_S >= 5
    assert r.energy_reason is None and "run back to back" in r.energy_source and "lr 0" in r.energy_source
    windows = _ShortGPUEpochs.windows
    assert [j for j in r.epoch_joules] == pytest.approx([250.0 * (end - t0) for t0, end in windows])
    assert r.joules_per_sample == pytest.approx(sum(r.epoch_joules[1:]) / 2 / r.samples_per_epoch)
    assert all(t <= end - t0 for t, (t0, end) in zip(r.epoch_times_s, windows))    # the reads are not the epoch's
    assert "per sample" in repr(r) and "not measurable" not in repr(r)


def test_a_block_that_cannot_run_leaves_the_short_epochs_unmeasured_with_both_reasons(small, monkeypatch):
    monkeypatch.setattr(energy, "EnergyMeter", _ShortGPUEpochs)
    monkeypatch.setattr(step_energy, "block_energy", lambda *a: (_ for _ in ()).throw(RuntimeError("no copy")))
    r = course.train_recipe(course.Recipe(batch_size=64, data="host"), small, epochs=2, device="cpu")
    assert r.joules_per_sample is None and energy.TOO_SHORT in r.energy_reason and "no copy" in r.energy_reason


def test_short_epochs_on_the_fake_nvml_are_charged_the_blocks_mean_power(scripted, pretend_gpus, monkeypatch):
    """The fake H100's counter advances every 20 ms at 300 W (NVML's: about every 100 ms): epoch windows of 30 ms
    are refused for their length, and a block of the step run alone through gl.benchmark gives their power."""
    from gpulab.telemetry.energy import EnergyMeter

    pretend_gpus(3)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    scripted.gpus[0].watts, scripted.gpus[0].energy_period_s = 300.0, 0.02
    meter, epochs = EnergyMeter("cuda:0"), []
    for _ in range(3):
        meter.start()
        time.sleep(0.03)
        epochs.append(meter.stop())
    assert all(e.joules is None and energy.TOO_SHORT in e.reason for e in epochs)
    charged = step_energy.charge_short_windows(epochs, lambda: time.sleep(0.002), seconds=0.5)
    for e, window in zip(charged, epochs):
        assert e.measured and e.seconds == window.seconds and e.watts == pytest.approx(300.0, rel=0.15)
    assert "NVML energy counter" in charged[0].source and step_energy.EPOCHS_ALONE in charged[0].source


def test_joules_per_sample_uses_the_epochs_after_the_first():
    r = replace(_run("fp32", 1.0, 2.0), epoch_joules=(10.0, 2.0, 4.0), epoch_times_s=(3.0, 1.0, 1.0))
    assert r.joules_per_epoch == 3.0 and r.joules_per_sample == 3.0 / 1000
    assert replace(r, epoch_joules=(10.0, None, 4.0)).joules_per_sample is None


# ---- the ablation's columns ----------------------------------------------------------------------------
def _steps(joules: tuple[float | None, float | None]) -> tuple[AblationStep, ...]:
    note = "RAPL package counters (package-0)" if joules[0] is not None else "no RAPL counter here"
    return (AblationStep("seed loop", "batch 32", {}, "baseline", samples_per_s=1000.0, joules_per_sample=joules[0],
                         energy_note=note),
            AblationStep("batch 256", "batch 256", {}, "kept", "8x", samples_per_s=8000.0, joules_per_sample=joules[1],
                         energy_note=note),
            AblationStep("TF32 matmuls", "", {}, "not available", "needs a GPU"))


def test_ablation_shows_joules_and_cost_per_sample_from_its_steps():
    t = Ablation("demo", _steps((0.002, 0.0004)), price=0.36)
    header, rows, footer = t._columns()
    j, c = header.index("mJ per sample"), header.index("$ per 1M samples")
    assert [r[j] for r in rows] == ["2", "0.4", "N/A"]
    assert t.cost_per_million("seed loop") == pytest.approx(0.1) and rows[1][c] == "0.0125" and rows[2][c] == "N/A"
    assert "from RAPL package counters" in footer and "$0.36 per hour: your price" in footer
    df = t.to_dataframe()
    assert df.loc["batch 256", "joules_per_sample"] == 0.0004
    assert df.loc["seed loop", "usd_per_million"] == pytest.approx(0.1) and math.isnan(df.loc["TF32 matmuls",
                                                                                               "usd_per_million"])
    big = Ablation("demo", _steps((0.5, 0.2)))
    assert "J per sample" in big._columns()[0] and "$ per 1M samples" not in big._columns()[0]


def test_ablation_without_a_counter_says_not_measurable_and_shows_no_number():
    t = Ablation("demo", _steps((None, None)), price=0.1)
    header, rows, footer = t._columns()
    j = header.index("J per sample")
    assert [r[j] for r in rows[:2]] == ["not measurable", "not measurable"]
    assert not any(NUMBER.search(r[j]) for r in rows)
    assert "energy not measurable here: no RAPL counter here" in footer
    assert rows[0][header.index("$ per 1M samples")] == "0.0278"      # the cost needs only the price and samples/s


def test_ablate_carries_each_runs_energy_and_price(small, no_counter, tmp_path):
    train = lambda r, run: course.train_recipe(r, small, epochs=2, device="cpu")   # noqa: E731
    t = course.ablate(train, course.Recipe(data="host"), [course.Change("batch 128", {"batch_size": 128})],
                      apply=lambda r, f: replace(r, **f), price_per_hour=0.10)
    assert t.price.usd_per_hour == 0.10 and all(s.joules_per_sample is None for s in t.steps)
    assert all("powercap" in s.energy_note for s in t.steps)
    header, rows, footer = t._columns()
    assert {r[header.index("J per sample")] for r in rows} == {"not measurable"}
    for r in rows:
        assert float(r[header.index("$ per 1M samples")]) == pytest.approx(
            0.10 / 3600 / t.step(r[0].rstrip(" *")).samples_per_s * 1e6, rel=0.01)
    lines = dict(course.energy_headline(t))
    energy = [v for k, v in lines.items() if k.startswith("energy")][0]
    cost = [v for k, v in lines.items() if k.startswith("cost")][0]
    assert energy == f"not measurable here: {t.baseline.energy_note}"     # the reason, and no figure
    assert "$0.10 per hour" in cost and cost.startswith("$")
    card = course.results_card("card", [t], headline=course.energy_headline(t), folder=tmp_path)
    md = card.markdown
    assert "not measurable here" in md and "| energy per sample:" in md and "$ per 1M samples" in md


def test_energy_headline_with_joules_and_without_a_price():
    lines = course.energy_headline(Ablation("demo", _steps((0.002, 0.0004))))
    assert lines[0] == ("energy per sample: seed loop / batch 256",
                        "2 mJ / 0.4 mJ (RAPL package counters (package-0))")
    assert lines[1][1].startswith("no hourly price")
    with pytest.raises(TypeError, match="ablation table"):
        course.energy_headline("table")


def test_torch_ablation_passes_the_price_through(small, monkeypatch):
    seen = {}
    monkeypatch.setattr(capstone_torch, "torch_changes", lambda *a, **k: [])

    def fake_ablate(*a, **k):
        seen.update(k)
        return Ablation("t", _steps((None, None)))
    monkeypatch.setattr(capstone_torch, "ablate", fake_ablate)
    course.torch_ablation(small, device="cpu", price_per_hour=0.25, accuracy_seeds=0)
    assert seen["price_per_hour"] == 0.25
    with pytest.raises(ValueError, match="price_per_hour"):
        course.torch_ablation(small, device="cpu", price_per_hour=-1.0)


# ---- fp32 vs 16-bit ------------------------------------------------------------------------------------
def test_precision_cost_sets_time_joules_and_cost_side_by_side():
    t = course.precision_cost(_run("fp32", 2.0, 100.0), _run("bf16", 1.0, 40.0), price_per_hour=3.6)
    assert t.time_ratio == 0.5 and t.energy_ratio == pytest.approx(0.4)
    assert t.cost_per_epoch("fp32") == pytest.approx(0.002) and t.joules_per_epoch("bf16") == 40.0
    header, rows, footer = t._columns()
    assert header == ["precision", "time per epoch", "J per epoch", "J per sample", "$ per epoch", "test accuracy"]
    assert rows[0][:5] == ["fp32", "2 s", "100 J", "0.1 J", "$0.002"]
    assert rows[2][:5] == ["bf16 / fp32", "0.50x", "0.40x", "0.40x", "0.50x"]
    assert "joules from RAPL" in footer and "$3.60 per hour" in footer


def test_precision_cost_without_a_counter_or_a_price():
    t = course.precision_cost(_run("fp32", 2.0), _run("fp16", 1.0))
    header, rows, footer = t._columns()
    assert "$ per epoch" not in header and t.energy_ratio is None
    assert [r[2] for r in rows] == ["not measurable"] * 3
    assert "energy not measurable here: no RAPL counter" in footer and "no hourly price" in footer
    assert "<table" in t._repr_html_()


@pytest.mark.parametrize("args, error, match", [
    (("run", _run("bf16", 1.0)), TypeError, "fp32_run"),
    ((_run("bf16", 1.0), _run("bf16", 1.0)), ValueError, "fp32_run must be trained"),
    ((_run("fp32", 1.0), _run("fp32", 1.0)), ValueError, "16-bit"),
    ((_run("fp32", 1.0), _run("bf16", 1.0, n=10)), ValueError, "same data"),
    ((_run("fp32", 1.0), replace(_run("bf16", 1.0), epoch_times_s=())), ValueError, "no epoch"),
])
def test_precision_cost_rejects_what_it_cannot_compare(args, error, match):
    with pytest.raises(error, match=match):
        course.precision_cost(*args)


def test_compare_precisions_trains_both_and_prices_them(small, no_counter):
    t = course.compare_precisions(course.Recipe(batch_size=128, data="host"), small, device="cpu",
                                  price_per_hour=0.10)
    assert [r.recipe.precision for r in t.runs] == ["fp32", "bf16"]
    header, rows, _ = t._columns()
    assert {r[header.index("J per epoch")] for r in rows} == {"not measurable"}
    assert rows[0][header.index("$ per epoch")].startswith("$")
    with pytest.raises(TypeError, match="recipe"):
        course.compare_precisions(NS(precision="fp32"), small, device="cpu")
