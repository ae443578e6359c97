"""Lesson 12's ablation held to the seed loop: accuracy against the seed on every row, one-off costs with their
break-even, precision changes tried again after the batch grew, MFU two ways over two peaks, and a measured
challenge that refuses a copied row."""
from __future__ import annotations

import math
from types import SimpleNamespace as NS

import pytest

torch = pytest.importorskip("torch")

from gpulab import course  # noqa: E402
from gpulab.course.capstone.ablation import Ablation, AblationStep, Change, ablate  # noqa: E402
from gpulab.course.capstone.mfu import MFU, datasheet_peak, mfu_report  # noqa: E402


def _apply(r, f):
    return {**r, **f}


def test_every_row_shows_its_accuracy_against_the_seed_and_drift_cannot_add_up():
    # each change costs 0.4 points and doubles the speed: against the change before, all three would pass a
    # 1-point tolerance; against the seed loop's floor (its lowest seed less 1 point), the third falls below it
    acc = {1: 0.980, 2: 0.976, 4: 0.972, 8: 0.968}
    train = lambda r, run: NS(samples_per_s=100.0 * r["b"], spread_pct=1.0, test_accuracy=acc[r["b"]],  # noqa: E731
                              peak_memory_bytes=None, flops_per_sample=1e6, epoch_times_s=(2.0, 1.0, 1.0))
    t = ablate(train, {"b": 1}, [Change("x2", {"b": 2}), Change("x4", {"b": 4}), Change("x8", {"b": 8})],
               apply=_apply, accuracy_tolerance=0.01)
    assert [s.decision for s in t.steps] == ["baseline", "kept", "kept", "dropped"]
    assert "below the 97.0% floor" in t.step("x8").reason
    assert t.accuracy_vs_baseline("x4") == pytest.approx(-0.008)
    header, rows, _ = t._columns()
    col = header.index("accuracy vs seed loop")
    assert [r[col] for r in rows] == ["0.0 pt", "-0.4 pt", "-0.8 pt", "-1.2 pt"]
    assert t.to_dataframe().loc["x8", "accuracy_vs_baseline"] == pytest.approx(-0.012)


def test_a_one_off_cost_is_counted_with_its_wall_time_and_break_even():
    # the compiled recipe runs epochs in 0.5 s instead of 1 s, but its first epoch costs 10.5 s: 10 s one-off
    # (less the 0.2 s start-up the current recipe pays too), paid back after 9.8 / 0.5 = 19.6 epochs
    times = {False: (1.2, 1.0, 1.0), True: (10.5, 0.5, 0.5)}
    train = lambda r, run: NS(samples_per_s=1000.0 / times[r["c"]][1], spread_pct=1.0, test_accuracy=0.98,  # noqa: E731
                              peak_memory_bytes=None, flops_per_sample=1e6, epoch_times_s=times[r["c"]])
    t = ablate(train, {"c": False}, [Change("compile", {"c": True}, one_off=True)], apply=_apply)
    s = t.step("compile")
    assert s.decision == "kept" and s.wall_s == pytest.approx(11.5)
    assert s.one_off_s == pytest.approx(9.8) and s.break_even_epochs == pytest.approx(19.6)
    assert "paid back after 20 epochs" in s.reason
    header, rows, foot = t._columns()
    assert header[header.index("one-off") + 1] == "pays back after" and rows[1][header.index("wall, all epochs")] == "11.5 s"
    assert "pays back after = one-off / time saved per epoch" in foot
    # a one-off change that gains nothing per epoch never pays back
    slow = lambda r, run: NS(samples_per_s=1000.0, spread_pct=1.0, test_accuracy=0.98,  # noqa: E731
                             peak_memory_bytes=None, flops_per_sample=1e6, epoch_times_s=times[r["c"]][:1] + (1.0, 1.0))
    t2 = ablate(slow, {"c": False}, [Change("compile", {"c": True}, one_off=True)], apply=_apply)
    assert math.isinf(t2.step("compile").break_even_epochs) and "never paid back" in t2.step("compile").reason
    # a change without a one-off cost shows no such columns
    assert "one-off" not in ablate(train, {"c": False}, [Change("compile", {"c": True})], apply=_apply)._columns()[0]


def test_precision_changes_are_tried_again_after_the_later_changes(monkeypatch):
    import gpulab.course.capstone.torch_ablation as ct

    d = course.digits(256, 32, download=False)
    monkeypatch.setattr(ct, "_fused_adam_works", lambda dev: False)
    changes = course.torch_changes(d, device="cpu")
    labels = [c.label for c in changes]
    low = [c for c in changes if c.label.endswith("autocast") and c.available]
    if low:       # a CPU with bf16 instructions: bf16 comes back after the larger batch, before the disk branch
        again = next(c for c in changes if c.retry_of == low[0].label)
        assert labels.index(again.label) > labels.index("larger batch that fits") and again.fields == low[0].fields
    assert changes[-1].branch
    keras = course.keras_changes(device="cpu")
    assert keras[-1].retry_of == keras[2].label and keras[-1].fields == keras[2].fields


def _rates(rate):
    return lambda r, run: NS(samples_per_s=rate[(r["p"], r["b"])], spread_pct=1.0, test_accuracy=0.98,
                             peak_memory_bytes=None, flops_per_sample=1e6)


def test_ablate_retries_a_dropped_change_once_a_later_change_was_kept():
    # p16 is slower at batch 1 but 2x faster at batch 8: dropped first, kept on the second pass
    rate = {("fp32", 1): 100.0, ("p16", 1): 90.0, ("fp32", 8): 800.0, ("p16", 8): 1600.0}
    changes = [Change("p16", {"p": "p16"}), Change("batch 8", {"b": 8}),
               Change("p16, again", {"p": "p16"}, retry_of="p16")]
    t = ablate(_rates(rate), {"p": "fp32", "b": 1}, changes, apply=_apply)
    assert [s.decision for s in t.steps] == ["baseline", "dropped", "kept", "kept"]
    assert t.final.params == {"p": "p16", "b": 8}
    # nothing kept since it was dropped: the same recipe, not tried again
    slow = {**rate, ("fp32", 8): 100.0}
    t = ablate(_rates(slow), {"p": "fp32", "b": 1}, changes, apply=_apply)
    assert (t.steps[-1].decision, t.steps[-1].reason) == (
        "not tried", "nothing was kept since 'p16' was dropped: the same recipe")
    # kept in the first pass: nothing to retry
    fast = {("fp32", 1): 100.0, ("p16", 1): 200.0, ("p16", 8): 1600.0}
    t = ablate(_rates(fast), {"p": "fp32", "b": 1}, changes, apply=_apply)
    assert t.steps[-1].reason == "'p16' was kept in the first pass"


def test_mfu_two_counts_over_two_peaks_in_the_recipes_precision(monkeypatch):
    m = MFU("final", "batch 256", 1e5, 1.598e6, 397_510, "tf32", 8e13, 1.56e14, "A100 TF32")
    assert m.mfu("counted", "measured") == pytest.approx(1.598e11 / 8e13)
    assert m.mfu("6N", "datasheet") == pytest.approx(2.38506e11 / 1.56e14)
    assert m.overcount == pytest.approx(2_385_060 / 1_598_000)
    header, rows, foot = m._columns()
    assert header[3:] == ["of the measured TF32 peak", "of the datasheet TF32 peak"] and len(rows) == 2
    assert "6N" in rows[1][0] and "Kaplan" in foot
    with pytest.raises(ValueError, match="convention"):
        m.mfu("8N", "measured")
    # the datasheet figure follows the precision: TF32 tensor cores for a TF32 recipe, none for a CPU
    assert datasheet_peak("cpu", "tf32")[0] is None
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda dev=None: "NVIDIA A100-SXM4-40GB")
    assert datasheet_peak("cuda:0", "tf32")[0] == 156e12 and datasheet_peak("cuda:0", "float32")[0] == 19.5e12
    assert datasheet_peak("cuda:0", "bfloat16")[0] == 312e12
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda dev=None: "Tesla T4")
    assert datasheet_peak("cuda:0", "tf32") == (None, "none: the T4 datasheet lists no TF32 tensor-core peak")
    # the report reads the row's own ceiling (a TF32 row: the TF32 one) and counts the model's parameters
    row = AblationStep("tf32", "tf32", {}, "kept", samples_per_s=1e5, flops_per_sample=1.598e6,
                       ceiling_dtype="tf32", ceiling_flops=8e13)
    t = Ablation("t", (AblationStep("seed loop", "", {}, "baseline", samples_per_s=1e3, flops_per_sample=1.598e6,
                                    ceiling_dtype="float32", ceiling_flops=1.5e13), row), device="cuda:0")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda dev=None: "NVIDIA A100-SXM4-40GB")
    r = mfu_report(t, model=course.seed_model())
    assert (r.precision, r.params, r.measured_peak_flops, r.datasheet_peak_flops) == ("tf32", 397_510, 8e13, 156e12)
    with pytest.raises(TypeError, match="table"):
        mfu_report("table", model=1)
    with pytest.raises(TypeError, match="model"):
        mfu_report(t, model="mlp")


def test_the_challenge_refuses_a_copied_row_and_a_slow_recipe():
    d = course.digits(512, 64, download=False)
    final = course.Recipe(batch_size=128, lr=4e-3, data="host")
    seed = course.train_recipe(course.Recipe(data="host"), d, epochs=2)
    steps = (AblationStep("seed loop", "", course.Recipe().params(), "baseline", samples_per_s=seed.samples_per_s,
                          test_accuracy=seed.test_accuracy, accuracies=(seed.test_accuracy,)),
             AblationStep("batch 128", "", final.params(), "kept", samples_per_s=1.0, test_accuracy=0.9))
    table = Ablation("t", steps, device="cpu", epochs=2)
    with pytest.raises(AssertionError, match="copied"):
        course.recipe_challenge("mine", final, d, baseline=table.baseline, epochs=2, not_from=table)
    with pytest.raises(AssertionError, match=r"\[x\]"):        # the seed's own recipe is not 5x faster than itself
        course.recipe_challenge("mine", course.Recipe(data="host"), d, baseline=seed, not_from=table, compare_s=0.1)
    with pytest.raises(TypeError, match="not_from"):
        course.recipe_challenge("mine", final, d, baseline=seed, not_from="table")


def test_the_challenge_target_comes_from_the_final_recipe_timed_as_the_learners_will_be():
    """Lesson 12's target: the square root of the final recipe's speedup over the first loop, both recipes' steps
    timed in turn now (as recipe_challenge times the learner's), not the ablation's epoch throughputs, which a busy
    moment can inflate (one CPU run of the lesson read 91.6x there, and half of it failed a recipe 13.4x as fast)."""
    d = course.digits(512, 64, download=False)
    steps = (AblationStep("seed loop", "", course.Recipe().params(), "baseline", samples_per_s=1.0,
                          test_accuracy=0.9, accuracies=(0.9,)),
             AblationStep("batch 128", "", course.Recipe(batch_size=128, lr=4e-3, data="host").params(), "kept",
                          samples_per_s=500.0, test_accuracy=0.9))
    table = Ablation("t", steps, device="cpu", epochs=2)
    target = course.challenge_target(table, d, compare_s=0.1)
    assert target.interleaved and target.epochs_speedup == 500.0 and 1.0 < target.final_speedup < 500.0
    assert target.speedup == round(target.final_speedup ** 0.5, 2) and "timed in turn" in repr(target)
    assert course.challenge_target(table).speedup == round(500 ** 0.5, 2)          # without data: the epochs' ratio
    with pytest.raises(TypeError, match="data"):
        course.challenge_target(table, "digits")
