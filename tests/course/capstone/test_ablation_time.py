"""Judging an ablation by time to accuracy (airbench's rule): a change faster per sample that needs more epochs is
trained again with the epochs its gain pays for and judged by the time it takes to the seed loop's accuracy."""
from __future__ import annotations

import math
from types import SimpleNamespace as NS

import pytest

pytest.importorskip("torch")

from gpulab import course  # noqa: E402


def _train(recipe, run, epochs=3):
    """A recipe is its rate (samples/s) and its accuracy after each epoch (the last repeats)."""
    curve = recipe["curve"]
    accs = tuple(curve[min(i, len(curve) - 1)] for i in range(epochs))
    return NS(samples_per_s=recipe["rate"], spread_pct=1.0, test_accuracy=accs[-1], peak_memory_bytes=None,
              flops_per_sample=1e6, epoch_times_s=(2.0,) + (300 / recipe["rate"],) * (epochs - 1),
              epoch_accuracies=accs, epochs=epochs)


BASE = {"rate": 100.0, "curve": (0.90, 0.95, 0.97)}
NEEDS_5 = course.Change("3x, needs 5 epochs", {"rate": 300.0, "curve": (0.80, 0.90, 0.93, 0.96, 0.975)}, updates=True)
apply = lambda r, f: {**r, **f}  # noqa: E731


def test_a_change_that_needs_more_epochs_is_kept_by_time_and_dropped_by_a_fixed_epoch_floor():
    by_time = course.ablate(_train, BASE, [NEEDS_5], apply=apply, epochs=3, judge="time to accuracy",
                            accuracy_tolerance=0.0)
    s = by_time.step(NEEDS_5.label)
    # 3x the samples/s, 5 epochs to the seed loop's 97% against its 3: 3 x 3/5 = 1.8x less time
    assert s.decision == "kept" and s.time_gain == pytest.approx(1.8) and s.gain == pytest.approx(3.0)
    assert "trained again for" in s.reason and "3/5 epochs to 97.0%" in s.reason
    assert by_time.time_to_target("seed loop") == pytest.approx(3 * 3.0)
    assert by_time.time_to_target(NEEDS_5.label) == pytest.approx(5 * 1.0)
    assert by_time.time_ratio_over_baseline == pytest.approx(1.8)
    by_rate = course.ablate(_train, BASE, [NEEDS_5], apply=apply, epochs=3, accuracy_tolerance=0.0)
    assert by_rate.step(NEEDS_5.label).decision == "dropped" and "floor" in by_rate.step(NEEDS_5.label).reason
    assert by_rate.time_ratio_over_baseline is None or not by_rate.by_time


def test_the_retrain_gives_only_the_epochs_its_gain_can_pay_for():
    seen = []

    def train(recipe, run, epochs=3):
        seen.append(epochs)
        return _train(recipe, run, epochs)

    slow_learner = course.Change("1.5x, never there", {"rate": 150.0, "curve": (0.5,)}, updates=True)
    t = course.ablate(train, BASE, [slow_learner], apply=apply, epochs=3, judge="time to accuracy",
                      accuracy_tolerance=0.0)
    # the seed loop, the change, its retrain: at 1.5x it saves time only in under 1.5 x 3 / 1.05 = 4.3 epochs, so
    # it trains again for 4, not the 9 allowed
    assert seen == [3, 3, 4] and t.step(slow_learner.label).decision == "dropped"
    assert "below 97.0% after 4 epochs" in t.step(slow_learner.label).reason
    seen.clear()
    fast = course.Change("10x, never there", {"rate": 1000.0, "curve": (0.5,)}, updates=True)
    course.ablate(train, BASE, [fast], apply=apply, epochs=3, judge="time to accuracy", accuracy_tolerance=0.0,
                  max_epochs=5)
    assert seen == [3, 3, 5]               # its gain could pay for 28 epochs: held to max_epochs
    seen.clear()
    barely = course.Change("1.04x", {"rate": 104.0, "curve": (0.5,)}, updates=True)
    t = course.ablate(train, BASE, [barely], apply=apply, epochs=3, judge="time to accuracy", accuracy_tolerance=0.0)
    assert seen == [3, 3] and "would save time" in t.step("1.04x").reason   # no epoch count could pay: not retrained


def test_later_changes_train_as_long_as_the_recipe_they_change_took():
    seen = []

    def train(recipe, run, epochs=3):
        seen.append(epochs)
        return _train(recipe, run, epochs)

    faster = course.Change("fused", lambda r: {"rate": r["rate"] * 1.3})
    t = course.ablate(train, BASE, [NEEDS_5, faster], apply=apply, epochs=3, judge="time to accuracy",
                      accuracy_tolerance=0.0)
    fused = t.step("fused")          # the same updates: the 5 epochs of the recipe it changed, judged by samples/s
    assert seen[-1] == 5 and fused.decision == "kept" and fused.reason == "1.30x"
    assert fused.same_updates and t.epochs_to_target("fused") == 5 and fused.time_gain == pytest.approx(1.3)
    assert t.time_ratio_over_baseline == pytest.approx(1.8 * 1.3)


def test_a_change_that_leaves_the_updates_alone_is_not_timed_by_a_noisy_curve():
    """Its accuracy curve is the same as its recipe's up to noise: reaching the target an epoch early by luck must not
    count as a gain, nor an unlucky epoch as a loss; its final accuracy is held to the floor (tolerance below)."""
    lucky = course.Change("0.8x, lucky curve", {"rate": 80.0, "curve": (0.96, 0.971, 0.972)})
    unlucky = course.Change("1.3x, unlucky curve", {"rate": 130.0, "curve": (0.90, 0.94, 0.965)})
    broken = course.Change("1.5x, broken", {"rate": 150.0, "curve": (0.5, 0.6, 0.7)})
    t = course.ablate(_train, BASE, [lucky, unlucky, broken], apply=apply, epochs=3, judge="time to accuracy")
    assert t.target_accuracy == pytest.approx(0.97) and t.accuracy_floor == pytest.approx(0.96)
    assert t.step(lucky.label).decision == "dropped" and "slower" in t.step(lucky.label).reason
    assert t.step(unlucky.label).decision == "kept" and t.epochs_to_target(unlucky.label) == 3   # as the seed loop
    assert t.step(broken.label).decision == "dropped" and "below the 96.0% floor" in t.step(broken.label).reason
    assert "same updates" in repr(t)


def test_the_table_shows_time_to_the_target_and_a_diverged_change_is_dropped():
    nan = course.Change("diverges", {"rate": 300.0, "curve": (math.nan,)}, updates=True)
    t = course.ablate(_train, BASE, [nan, NEEDS_5], apply=apply, epochs=3, judge="time to accuracy",
                      accuracy_tolerance=0.0)
    assert t.step("diverges").decision == "dropped" and "diverged" in t.step("diverges").reason
    text = repr(t)
    assert "time to 97.0%" in text and "5 s (5 epochs)" in text and "judged by time to accuracy" in text
    assert "1.8x its time to 97.0%" in text
    df = t.to_dataframe()
    assert df.loc["seed loop", "epochs_to_target"] == 3 and df.loc[NEEDS_5.label, "time_speedup"] == pytest.approx(1.8)
    assert "<table" in t._repr_html_()
    import matplotlib.pyplot as plt

    ax = t.plot()                          # the time ratio drawn beside the samples/s bars
    assert "less time to 97.0%" in ax[0].get_legend().get_texts()[0].get_text()
    plt.close(ax[0].figure)


def test_judging_by_time_says_what_it_needs():
    with pytest.raises(ValueError, match="judge must be one of"):
        course.ablate(_train, BASE, [], apply=apply, epochs=3, judge="fastest")
    with pytest.raises(ValueError, match="needs epochs"):
        course.ablate(_train, BASE, [], apply=apply, judge="time to accuracy")
    with pytest.raises(TypeError, match="epochs keyword"):
        course.ablate(lambda r, run: _train(r, run), BASE, [], apply=apply, epochs=3, judge="time to accuracy")
    with pytest.raises(ValueError, match="max_epochs"):
        course.ablate(_train, BASE, [], apply=apply, epochs=3, judge="time to accuracy", max_epochs=2)
    with pytest.raises(ValueError, match="max_epochs.*only"):
        course.ablate(_train, BASE, [], apply=apply, epochs=3, max_epochs=6)

    def no_curve(recipe, run, epochs=3):
        r = _train(recipe, run, epochs)
        return NS(**{k: v for k, v in vars(r).items() if k != "epoch_accuracies"})

    with pytest.raises(TypeError, match="no epoch_accuracies"):
        course.ablate(no_curve, BASE, [], apply=apply, epochs=3, judge="time to accuracy")

    def bad_curve(recipe, run, epochs=3):
        return NS(**{**vars(_train(recipe, run, epochs)), "epoch_accuracies": (0.5, 97.0)})

    with pytest.raises(ValueError, match="epoch_accuracies"):
        course.ablate(bad_curve, BASE, [], apply=apply, epochs=3, judge="time to accuracy")


def test_train_recipe_reads_the_accuracy_after_every_epoch():
    d = course.digits(2048, 512, download=False)
    run = course.train_recipe(course.Recipe(batch_size=128, lr=4e-3, data="host"), d, epochs=3)
    assert len(run.epoch_accuracies) == 3 and run.epoch_accuracies[-1] == run.test_accuracy
    assert all(0 <= a <= 1 for a in run.epoch_accuracies)
    assert run.epochs_to(0.0) == 1 and run.epochs_to(1.01) is None
