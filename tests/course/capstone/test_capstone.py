"""Lesson 12's scaffolding: the digits, the seed loop as a Recipe, the ablation driver and its table, the
step's own matmul ceiling, the measured challenge and the results card."""
from __future__ import annotations

import importlib
import importlib.util
import math
from types import SimpleNamespace as NS

import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("torchvision") is None:    # not importorskip: importing torchvision imports Triton,
    pytest.skip("torchvision is not installed", allow_module_level=True)   # before test_kernels picks its mode

import gpulab as gl  # noqa: E402
from gpulab import course  # noqa: E402
from gpulab.limits import step_matmul_ceiling  # noqa: E402
from dataclasses import replace  # noqa: E402
from gpulab.course.capstone.ablation import AblationStep  # noqa: E402


@pytest.fixture(scope="module")
def small():
    return course.digits(n_train=640, n_test=200, download=False)


class FakeRun:
    """Records what train_recipe logs (the tracking run's log_metrics)."""

    def __init__(self):
        self.points = []

    def log_metrics(self, mapping, step):
        for k, v in mapping.items():
            assert math.isfinite(v), (k, v)
            self.points.append((k, step, v))


# ---- data ---------------------------------------------------------------------------------------
def test_digits_stand_in_has_mnist_shapes_and_is_seeded(small):
    assert small.source == "synthetic" and "download=False" in small.note
    assert tuple(small.train_x.shape) == (640, 28, 28) and small.train_x.dtype == torch.uint8
    assert small.train_y.dtype == torch.int64 and set(small.train_y.tolist()) <= set(range(10))
    again = course.digits(n_train=640, n_test=200, download=False)
    assert torch.equal(again.train_x, small.train_x) and torch.equal(again.test_y, small.test_y)
    assert not torch.equal(small.train_x[:200], small.test_x)          # test images are other images
    assert "640 images" in repr(small) and "<table" in small._repr_html_()


@pytest.mark.parametrize("kwargs, match", [({"n_train": 0}, "n_train"), ({"n_test": -1}, "n_test"),
                                           ({"seed": -1}, "seed"), ({"timeout_s": 0}, "timeout_s")])
def test_digits_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        course.digits(download=False, **kwargs)


def test_per_sample_dataset_matches_the_whole_tensor_conversion(small):
    from torchvision import transforms

    ds = course.PerSampleDigits(small.train_x, small.train_y, transforms.ToTensor())
    x, y = ds[7]
    assert torch.allclose(x.reshape(-1), course.to_features(small.train_x[7:8])[0]) and y == int(small.train_y[7])
    with pytest.raises(ValueError, match="differ in length"):
        course.PerSampleDigits(small.train_x, small.train_y[:3])


def test_digits_on_disk_are_the_same_images(small, tmp_path):
    from torchvision import transforms
    from torchvision.datasets import ImageFolder

    from gpulab.course.capstone.recipe import _grey

    root = course.digits_on_disk(small, tmp_path / "d")
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == [str(c) for c in range(10)]
    files = ImageFolder(str(root), transform=transforms.ToTensor(), loader=_grey)
    assert len(files) == small.n_train
    x, label = files[0]
    i = int(files.samples[0][0].rsplit("/", 1)[1].split(".")[0])
    assert label == int(small.train_y[i]) and torch.allclose(x.reshape(-1), course.to_features(small.train_x[i:i + 1])[0])
    mtime = (root / ".complete").stat().st_mtime_ns
    assert course.digits_on_disk(small, root) == root and (root / ".complete").stat().st_mtime_ns == mtime  # once


# ---- the recipe and its training run ------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, error", [({"batch_size": 0}, ValueError), ({"data": "gpu"}, ValueError),
                                           ({"lr": float("nan")}, ValueError), ({"lr": -1e-3}, ValueError),
                                           ({"precision": "fp8"}, ValueError), ({"pin_memory": "yes"}, TypeError),
                                           ({"workers": -1}, ValueError), ({"optimizer": "sgd"}, ValueError)])
def test_recipe_rejects_bad_fields(kwargs, error):
    with pytest.raises(error):
        course.Recipe(**kwargs)


def test_the_default_recipe_is_the_seed_loop():
    r = course.Recipe()
    assert (r.batch_size, r.lr, r.data, r.precision, r.optimizer, r.log_every) == (32, 1e-3, "per-sample", "fp32",
                                                                                    "default", 100)
    assert "batch 32" in r.describe() and r.params()["data"] == "per-sample"


@pytest.mark.parametrize("recipe", [course.Recipe(log_every=5), course.Recipe(batch_size=64, data="host", precision="bf16",
                                                                              optimizer="foreach")])
def test_train_recipe_reports_what_it_did(small, recipe):
    run = FakeRun()
    r = course.train_recipe(recipe, small, epochs=2, run=run)
    steps_per_epoch = math.ceil(small.n_train / recipe.batch_size)
    assert r.samples_per_epoch == small.n_train and len(r.epoch_times_s) == 2
    assert len(r.chunk_rates) == 1 and len(r.chunk_rates[0]) >= 4 and r.samples_per_s > 0
    assert r.spread_pct is None          # one timed epoch: nothing to compare it with
    # at least the fp32 weights and their gradients (the last step's set to None first: the measured step makes its own)
    assert 0.0 <= r.test_accuracy <= 1.0 and r.peak_memory_bytes > 397_510 * 8
    # forward (2 matmuls) + backward (weight gradients of both layers, input gradient of the second)
    assert r.flops_per_sample == 2 * (784 * 500 + 500 * 10) * 2 + 2 * 500 * 10
    assert r.losses[-1][0] == 2 * steps_per_epoch
    logged = {k for k, _, _ in run.points}
    assert {"epoch_time_s", "samples_per_s", "test_accuracy", "samples_per_s_timed"} <= logged
    if recipe.log_every == 5:
        assert [s for k, s, _ in run.points if k == "loss"][:2] == [5, 10]
    assert "RecipeRun" in repr(r) and "<table" in r._repr_html_()


def test_train_recipe_learns_the_task(small):
    r = course.train_recipe(course.Recipe(batch_size=32, data="host"), small, epochs=3)
    assert r.test_accuracy > 0.5, r          # 10 classes: chance is 10%
    assert len(r.chunk_rates) == 2 and r.spread_pct is not None and r.spread_pct >= 0


def test_train_recipe_rejects_what_a_cpu_cannot_do_and_bad_arguments(small):
    with pytest.raises(ValueError, match="tf32"):
        course.train_recipe(course.Recipe(data="host", tf32=True), small, epochs=1, device="cpu")
    with pytest.raises(ValueError, match="cuda_graphs"):
        course.train_recipe(course.Recipe(data="host", cuda_graphs=True), small, epochs=1, device="cpu")
    with pytest.raises(TypeError, match="course.Recipe"):
        course.train_recipe({"batch_size": 32}, small)
    with pytest.raises(ValueError, match="epochs"):
        course.train_recipe(course.Recipe(), small, epochs=0)


# ---- the ablation ------------------------------------------------------------------------------------
def fake_train(rates, accuracy=None, spread=1.0):
    def train(recipe, run):
        b = recipe["b"]
        return NS(samples_per_s=rates[b], spread_pct=spread, test_accuracy=(accuracy or {}).get(b, 0.9),
                  peak_memory_bytes=1000 * b, flops_per_sample=1e6)
    return train


def apply(r, f):
    return {**r, **f}


def test_ablate_keeps_what_helps_and_says_why_not_otherwise():
    changes = [course.Change("b2", {"b": 2}), course.Change("b3 slower", {"b": 3}),
               course.Change("b4 inaccurate", {"b": 4}), course.Change("b5 noise", {"b": 5}),
               course.Change("tf32", {"b": 9}, available=False, why_not="no GPU"),
               course.Change("disk", {"b": 6}, branch=True)]
    rates = {1: 100.0, 2: 300.0, 3: 200.0, 4: 900.0, 5: 303.0, 6: 30.0}
    t = course.ablate(fake_train(rates, {4: 0.8}), {"b": 1}, changes, apply=apply)
    decisions = {s.label: (s.decision, s.reason) for s in t.steps}
    assert decisions["seed loop"][0] == "baseline" and decisions["b2"] == ("kept", "3.00x")
    assert decisions["b3 slower"] == ("dropped", "0.67x: slower")
    assert decisions["b4 inaccurate"] == ("dropped", "3.00x, but 80.0% accurate, below the 89.0% floor")
    assert decisions["b5 noise"][0] == "dropped" and "within the noise" in decisions["b5 noise"][1]
    assert decisions["tf32"] == ("not available", "no GPU")
    assert decisions["disk"][0] == "branch" and decisions["disk"][1].startswith("0.10x the final recipe")
    assert [s.label for s in t.steps][-1] == "disk"                      # branches come last
    assert t.final.label == "b2" and t.ratio_over_baseline == 3.0 and t.kept == ("b2",)
    # lesson 12's challenge asks for the square root of the gain the learner's own ablation reached, on every device
    assert course.challenge_target(t).speedup == 1.73 and "3.0x" in repr(course.challenge_target(t))
    assert course.ChallengeTarget(17.1).speedup == 4.14 and course.ChallengeTarget(0.8).speedup == 1.0
    assert course.ChallengeTarget(100.0, share=0.75).speedup == pytest.approx(31.62)
    with pytest.raises(ValueError):
        course.challenge_target(t, share=0)
    with pytest.raises(TypeError):
        course.challenge_target(3.0)
    assert t.step("b3 slower").gain == pytest.approx(200 / 300)
    assert "b4 inaccurate" in repr(t) and "<table" in t._repr_html_()
    df = t.to_dataframe()
    assert df.loc["b2", "speedup"] == 3.0 and math.isnan(df.loc["tf32", "samples_per_s"])


def test_ablate_holds_every_change_to_the_baselines_floor_so_losses_cannot_add_up():
    """Each change loses 0.8 points against the one before: within 1 point of the current recipe every time, but
    the second is 1.6 points below the seed loop. Only the first may be kept."""
    rates = {1: 100.0, 2: 200.0, 4: 400.0, 8: 800.0}
    accs = {1: 0.98, 2: 0.972, 4: 0.964, 8: 0.956}
    changes = [course.Change(f"b{b}", {"b": b}) for b in (2, 4, 8)]
    t = course.ablate(fake_train(rates, accs), {"b": 1}, changes, apply=apply)
    assert [s.decision for s in t.steps] == ["baseline", "kept", "dropped", "dropped"]
    assert t.accuracy_floor == pytest.approx(0.97) and "below the 97.0% floor" in t.step("b4").reason
    assert t.final.test_accuracy >= t.accuracy_floor


def test_ablate_measures_the_baselines_run_to_run_spread_and_floors_at_its_lowest():
    rates = {1: 100.0, 2: 200.0}
    seeds = {1: 0.975, 2: 0.99}             # the seed loop at seeds 1 and 2: its own run says 0.985
    calls = []

    def rerun(recipe, seed):
        calls.append((recipe, seed))
        return seeds[seed]

    t = course.ablate(fake_train(rates, {1: 0.985, 2: 0.966}), {"b": 1}, [course.Change("b2", {"b": 2})],
                      apply=apply, rerun=rerun, accuracy_seeds=2)
    assert calls == [({"b": 1}, 1), ({"b": 1}, 2)]
    assert t.baseline.accuracies == (0.985, 0.975, 0.99) and t.accuracy_floor == pytest.approx(0.965)
    assert t.step("b2").decision == "kept"          # 0.966: 1.9 points below the lucky 0.985, above the floor
    assert "96.5% (1.0 points below the lowest of the seed loop's 3 seeds, 97.5%-99.0%)" in repr(t)
    with pytest.raises(ValueError, match="accuracy_seeds"):
        course.ablate(fake_train(rates), {"b": 1}, [], apply=apply, rerun=rerun, accuracy_seeds=-1)
    with pytest.raises(TypeError, match="rerun"):
        course.ablate(fake_train(rates), {"b": 1}, [], apply=apply, rerun=0.9)


def test_cosine_schedule_warms_up_decays_to_zero_and_trains(small):
    f = [course.cosine_factor(s, 100, warmup_steps=5) for s in range(100)]
    assert f[0] == pytest.approx(0.2) and f[4] == 1.0 and max(f) == 1.0 and f[-1] == pytest.approx(0.0, abs=1e-12)
    assert all(a >= b for a, b in zip(f[4:], f[5:]))                     # never rises after the warm-up
    assert course.cosine_factor(100, 100, 5) == f[0]                      # a longer run starts the cycle again
    for bad in ({"warmup_steps": 100}, {"warmup_steps": -1}, {"warmup_steps": 2.5}):
        with pytest.raises(ValueError, match="warmup_steps"):
            course.cosine_factor(0, 100, **bad)
    with pytest.raises(ValueError, match="schedule"):
        course.Recipe(schedule="linear")
    cos = course.Recipe(batch_size=64, lr=8e-3, data="host", schedule="cosine", log_every=1)
    r = course.train_recipe(cos, small, epochs=2)
    flat = course.train_recipe(replace(cos, schedule="constant"), small, epochs=2)
    assert r.losses[0] == flat.losses[0] and r.losses[1:] != flat.losses[1:]   # same start, then the schedule acts
    assert r.test_accuracy > 0.25 and "lr 0.008 cosine" in cos.describe()      # it learns (chance: 10%)


def test_ablate_tries_alternatives_until_one_is_kept():
    rates = {1: 100.0, 8: 800.0, 4: 400.0, 2: 200.0}
    bigger = course.Change("larger batch", lambda r: [(f"batch {b}", {"b": b}) for b in (8, 4, 2)])
    t = course.ablate(fake_train(rates, {8: 0.5}), {"b": 1}, [bigger], apply=apply)
    assert [(s.label, s.decision) for s in t.steps] == [("seed loop", "baseline"), ("larger batch: batch 8", "dropped"),
                                                         ("larger batch: batch 4", "kept")]
    empty = course.Change("larger batch", lambda r: [], why_not="none faster")
    t = course.ablate(fake_train(rates), {"b": 1}, [empty], apply=apply)
    assert (t.steps[-1].decision, t.steps[-1].reason) == ("not tried", "none faster")


def test_ablation_shares_never_exceed_the_ceiling():
    t = course.ablate(fake_train({1: 100.0, 2: 300.0}), {"b": 1}, [course.Change("b2", {"b": 2})], apply=apply,
                      ceiling=lambda r: ("float32", 2e8))               # 300 samples/s x 1 MFLOP = 3e8 > 2e8
    assert t.share_of_ceiling("b2") == 1.0 and t.share_of_ceiling("seed loop") == pytest.approx(1 / 3)
    assert t.ceiling_notes and "ceiling raised" in t.ceiling_notes[0]


@pytest.mark.parametrize("kwargs, match", [({"accuracy_tolerance": 1.5}, "accuracy_tolerance"),
                                           ({"min_gain": -0.1}, "min_gain")])
def test_ablate_rejects_bad_rules(kwargs, match):
    with pytest.raises(ValueError, match=match):
        course.ablate(fake_train({1: 1.0}), {"b": 1}, [], apply=apply, **kwargs)
    with pytest.raises(TypeError, match="Change"):
        course.ablate(fake_train({1: 1.0}), {"b": 1}, [{"b": 2}], apply=apply)


def test_torch_changes_say_what_a_cpu_cannot_do(small):
    changes = {c.label: c for c in course.torch_changes(small, device="cpu")}
    assert not changes["pinned memory, non_blocking copies"].available
    assert not changes["data on the device"].available and not changes["TF32 matmuls"].available
    assert not changes["torch.compile"].available and "compile_on_cpu" in changes["torch.compile"].why_not
    assert not changes["CUDA graphs (torch.compile, mode='reduce-overhead')"].available
    with_compile = {c.label: c for c in course.torch_changes(small, device="cpu", compile_on_cpu=True)}
    assert with_compile["torch.compile"].available
    assert changes["data on disk: DataLoader with workers"].branch


def test_torch_ablation_runs_end_to_end(small):
    t = course.torch_ablation(small, epochs=2, device="cpu", disk_images=128)
    assert t.baseline.label == "seed loop" and t.baseline.decision == "baseline"
    assert {s.decision for s in t.steps} <= {"baseline", "kept", "dropped", "not available", "not tried", "branch"}
    assert t.steps[-1].decision == "branch" and t.steps[-1].test_accuracy is None   # the disk branch: timing only
    assert len(t.baseline.accuracies) == 3 and t.baseline.accuracies[0] == t.baseline.test_accuracy
    # judged by time to the seed loop's accuracy: the lowest of its seeds, every kept change reached it
    assert t.by_time and t.target_accuracy == pytest.approx(min(t.baseline.accuracies))
    assert t.accuracy_floor == pytest.approx(t.target_accuracy - 0.01)
    for s in t.steps:
        assert s.decision != "kept" or t.epochs_to_target(s.label) is not None
        assert s.decision != "kept" or s.test_accuracy >= t.accuracy_floor
    assert t.time_ratio_over_baseline > 0 and "time to" in repr(t)
    for s in t.steps:
        share = t.share_of_ceiling(s.label)
        assert share is None or 0 < share <= 1.0
    assert t.ratio_over_baseline > 0 and "128 image files" in repr(t)


# ---- the step's own matmuls -------------------------------------------------------------------------
def test_step_matmul_ceiling_records_forward_and_backward_matmuls():
    c = course.recipe_ceiling(course.Recipe(batch_size=64, precision="bf16"), min_run_time=0.05)
    assert c.ops == ("addmm bf16 64x784 @ 784x500", "addmm bf16 64x500 @ 500x10", "mm bf16 64x10 @ 10x500",
                     "mm bf16 10x64 @ 64x500", "mm bf16 500x64 @ 64x784")
    assert c.flops == 64 * (2 * (784 * 500 + 500 * 10) * 2 + 2 * 500 * 10) and c.flops_per_s > 0
    assert "StepMatmuls" in repr(c)
    with pytest.raises(ValueError, match="no matmul"):
        step_matmul_ceiling(lambda: torch.ones(3).sum())
    with pytest.raises(TypeError, match="callable"):
        step_matmul_ceiling(42)


# ---- the challenge and the card ---------------------------------------------------------------------
def test_recipe_challenge_passes_fails_and_waits(small):
    seed = course.train_recipe(course.Recipe(data="host"), small, epochs=2)
    assert isinstance(course.recipe_challenge("x", None, small, baseline=seed), course.NotAnswered)
    ok = course.recipe_challenge("x", course.Recipe(batch_size=64, data="host"), small, baseline=seed, speedup=0.01,
                                 accuracy_tolerance=0.99)
    assert ok.passed and "[ok]" in repr(ok)
    with pytest.raises(AssertionError, match="target 1000x"):
        course.recipe_challenge("x", course.Recipe(data="host"), small, baseline=seed, speedup=1000)
    with pytest.raises(TypeError, match="baseline"):
        course.recipe_challenge("x", course.Recipe(), small, baseline=3.0)
    with pytest.raises(TypeError, match="course.Recipe"):
        course.recipe_challenge("x", {"batch_size": 64}, small, baseline=seed)


def test_recipe_challenge_floors_at_the_seed_loops_lowest_seed(small):
    """The same rule as the ablation: a recipe within the tolerance of the seed loop's lowest seed passes, even when
    the seed loop's own run drew a lucky seed."""
    mine = course.Recipe(batch_size=64, data="host")
    got = course.train_recipe(mine, small, epochs=2).test_accuracy        # deterministic: the challenge's run
    lucky = AblationStep("seed loop", "", {}, "baseline", samples_per_s=1.0, test_accuracy=got + 0.03,
                         accuracies=(got + 0.03, got + 0.005, got + 0.02))
    ok = course.recipe_challenge("x", mine, small, baseline=lucky, speedup=0.01, epochs=2)
    assert ok.passed and ok.accuracy_floor == pytest.approx(got - 0.005) and "over 3 seeds" in repr(ok)
    strict = replace(lucky, accuracies=(got + 0.03, got + 0.02))
    with pytest.raises(AssertionError, match="below the .* floor"):
        course.recipe_challenge("x", mine, small, baseline=strict, speedup=0.01, epochs=2)


def test_results_card_writes_markdown_and_html(tmp_path):
    t = course.ablate(fake_train({1: 100.0, 2: 300.0}), {"b": 1}, [course.Change("b2", {"b": 2})], apply=apply)
    card = course.results_card("My card", [t], headline=[("speedup", "3.0x")], folder=tmp_path)
    assert card.markdown_path == tmp_path / "my-card.md" and card.html_path.read_text().startswith("<!doctype html>")
    text = card.markdown_path.read_text()
    assert "# My card" in text and "| speedup | 3.0x |" in text and "| b2 | 300 |" in text and "Measured " in text
    with pytest.raises(ValueError, match="title"):
        course.results_card(" ", [t], folder=tmp_path)
    with pytest.raises(TypeError, match="gpulab tables"):
        course.results_card("x", [42], folder=tmp_path)


# ---- tracking ----------------------------------------------------------------------------------------
def test_tracked_ablation_lands_in_mlflow_and_tensorboard_with_telemetry(small, tmp_path):
    pytest.importorskip("mlflow")
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rates = {1: 100.0, 2: 300.0}

    def train(recipe, run):   # a real training run for the baseline, so losses and epochs are logged
        r = course.train_recipe(course.Recipe(batch_size=64 * recipe["b"], data="host", log_every=2), small,
                                epochs=2, run=run)
        return NS(samples_per_s=rates[recipe["b"]], spread_pct=1.0, test_accuracy=r.test_accuracy,
                  peak_memory_bytes=r.peak_memory_bytes, flops_per_sample=r.flops_per_sample)

    t = course.ablate(train, {"b": 1}, [course.Change("b2", {"b": 2})], apply=apply, params=dict,
                      track={"experiment": "cap", "root": tmp_path}, monitor_interval=0.05)
    table = gl.tracking.runs("cap", root=tmp_path)
    assert [r.name for r in table.rows] == ["seed loop", "b2"]
    stored = {r.run_id: r for r in table.rows}
    first = stored[t.baseline.run_id]
    assert first.status == "FINISHED" and first.params["b"] == "1" and first.params["step"] == "seed loop"
    assert {"loss", "epoch_time_s", "test_accuracy"} <= set(first.metrics) and first.trace_logged
    trace = gl.tracking.load_trace(t.baseline.run_id, root=tmp_path, experiment="cap")
    assert len(trace.frame) >= 1 and "host" in trace.devices
    acc = EventAccumulator(str(first.tensorboard_dir))
    acc.Reload()
    assert {"loss", "test_accuracy"} <= set(acc.Tags()["scalars"])
    # the exercise's check reads the same store
    rec = next(r for r in table.rows if r.name == "b2")
    assert "[ok]" in repr(course.check_tracked("tracked", rec, metrics=["loss"], root=tmp_path))
    with pytest.raises(AssertionError, match="no \\['val_loss'\\] metric"):
        course.check_tracked("tracked", rec, metrics=["val_loss"], root=tmp_path)
    assert isinstance(course.check_tracked("tracked", None), course.NotAnswered)
    with pytest.raises(TypeError, match="record of a tracked run"):
        course.check_tracked("tracked", "run-id", root=tmp_path)


def test_ablate_decides_from_the_interleaved_comparison_when_given():
    # the runs' own rates say "slower" (a busy moment); the interleaved comparison says 1.5x: it decides
    t = course.ablate(fake_train({1: 100.0, 2: 90.0}), {"b": 1}, [course.Change("b2", {"b": 2})], apply=apply,
                      compare=lambda cur, cand: (1.5, 3.0))
    assert (t.steps[1].decision, t.steps[1].reason, t.steps[1].gain) == ("kept", "1.50x (interleaved)", 1.5)
    t = course.ablate(fake_train({1: 100.0, 2: 300.0}), {"b": 1}, [course.Change("b2", {"b": 2})], apply=apply,
                      compare=lambda cur, cand: (1.08, 12.0))
    assert t.steps[1].decision == "dropped" and "within the noise (12%)" in t.steps[1].reason


def test_ablate_drops_a_diverged_change_whose_rate_or_accuracy_is_nan():
    # NaN compares false with everything: a change that diverged must be dropped, not kept as the final recipe
    nan = float("nan")
    t = course.ablate(fake_train({1: 100.0, 2: 400.0, 3: nan}, accuracy={2: nan}), {"b": 1},
                      [course.Change("b2", {"b": 2}), course.Change("b3", {"b": 3})], apply=apply)
    assert [s.decision for s in t.steps] == ["baseline", "dropped", "dropped"]
    assert "diverged: its test accuracy is nan" in t.steps[1].reason
    assert "diverged: its samples/s is nan" in t.steps[2].reason
    assert t.final.label == "seed loop"


def test_recipe_stepper_cycles_epochs_and_interleaved_gain_sees_a_faster_recipe(small):
    step = course.recipe_stepper(course.Recipe(batch_size=256, data="host"), small)
    assert [step() for _ in range(7)] == [256, 256, 128, 256, 256, 128, 256]      # 640 = 256 + 256 + 128
    gain, spread = course.interleaved_gain(course.Recipe(data="host"), course.Recipe(batch_size=256, data="host"),
                                           small, min_run_time=0.3)
    assert gain > 1.5 and spread >= 0


# ---- TF32: an fp32 recipe with TF32 on is held to the TF32 ceiling ---------------------------------------------
def test_recipe_ceiling_times_a_tf32_recipes_matmuls_with_tf32_on(monkeypatch):
    from gpulab import limits
    from gpulab.system import tf32_state

    tf32_module = importlib.import_module("gpulab.course.machine.tf32")    # the module: course.tf32 is its function
    seen, real = [], limits.step_matmul_ceiling

    def recording(step, *args, **kwargs):
        seen.append(tf32_state().matmul)
        return real(step, *args, **kwargs)

    monkeypatch.setattr(limits, "step_matmul_ceiling", recording)
    with pytest.raises(ValueError, match="tf32"):                     # a CPU has no TF32
        course.recipe_ceiling(course.Recipe(batch_size=16, tf32=True), min_run_time=0.02)
    monkeypatch.setattr(tf32_module, "tf32_supported", lambda device=None: True)   # as on an A100
    before = tf32_state()
    course.recipe_ceiling(course.Recipe(batch_size=16, tf32=True), min_run_time=0.02)
    course.recipe_ceiling(course.Recipe(batch_size=16), min_run_time=0.02)
    assert seen == [True, before.matmul] and tf32_state() == before


A100_FP32, A100_TF32, A100_BF16 = 19.5e12, 156e12, 312e12


@pytest.fixture
def a100_limits(monkeypatch, pretend_gpus):
    """gl.machine_limits on an A100, with torch.mm timed by a stand-in that runs at 80% of the A100's fp32 peak,
    or of its TF32 peak when the matmul TF32 switch (read as torch reads it) is on."""
    from gpulab import limits, system
    from gpulab.system import tf32_state
    from gpulab.timing import Measurement, environment

    tf32_module = importlib.import_module("gpulab.course.machine.tf32")

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-40GB")
    monkeypatch.setattr(tf32_module, "tf32_supported", lambda device=None: True)
    monkeypatch.setattr(system, "system_info", lambda frameworks=(): NS(capabilities=NS(bf16=True), cpu_flags=()))

    def timed(label, seconds, dev, **work):
        return Measurement(label, (seconds,), 1, str(dev), 1, environment(dev), "torch.utils.benchmark", 0, **work)

    def matmul(n, dtype="float32", device=None, min_run_time=0.5, warmup=2):
        peak = {"float32": A100_TF32 if tf32_state().matmul else A100_FP32, "bfloat16": A100_BF16,
                "float16": A100_BF16}[dtype]
        return timed(f"matmul {n} {dtype}", 2 * n**3 / (0.8 * peak), device, flops=2 * n**3)

    monkeypatch.setattr(limits, "measure_matmul", matmul)
    monkeypatch.setattr(limits, "measure_bandwidth", lambda nbytes, device=None, min_run_time=0.5, warmup=2:
                        timed("copy", nbytes / 1.3e12, device, bytes_moved=2 * nbytes))
    limits.forget_limits()
    yield
    limits.forget_limits()


def test_a_tf32_recipes_share_is_of_the_tf32_ceiling(a100_limits):
    from gpulab.course.capstone.torch_ablation import _ceiling

    ceiling = _ceiling(torch.device("cuda"))
    assert ceiling(course.Recipe()) == ("float32", pytest.approx(0.8 * A100_FP32))
    assert ceiling(course.Recipe(tf32=True)) == ("tf32", pytest.approx(0.8 * A100_TF32))
    assert ceiling(course.Recipe(precision="bf16")) == ("bfloat16", pytest.approx(0.8 * A100_BF16))
    assert ceiling(course.Recipe()) == ("float32", pytest.approx(0.8 * A100_FP32))   # TF32 off again: not mixed up
    # the seed loop at 10 TFLOP/s; with TF32, 40 TFLOP/s: above the fp32 ceiling, a third of the TF32 one
    def train(recipe, run):
        return NS(samples_per_s=4e7 if recipe.tf32 else 1e7, spread_pct=1.0, test_accuracy=0.9,
                  peak_memory_bytes=0, flops_per_sample=1e6)

    t = course.ablate(train, course.Recipe(), [course.Change("TF32 matmuls", {"tf32": True})],
                      apply=lambda r, f: replace(r, **f), ceiling=ceiling)
    assert t.step("TF32 matmuls").ceiling_dtype == "tf32"
    assert t.share_of_ceiling("TF32 matmuls") == pytest.approx(40e12 / (0.8 * A100_TF32))
    assert t.share_of_ceiling("seed loop") == pytest.approx(10e12 / (0.8 * A100_FP32))   # its own ceiling, not raised
    assert not t.ceiling_notes and all(t.share_of_ceiling(s.label) <= 1 for s in t.steps)
    assert t._columns()[1][1][5] == f"{40e12 / (0.8 * A100_TF32):.0%} tf32"


@pytest.mark.parametrize("bad,match", [
    ({1: float("nan")}, "samples_per_s=nan"), ({1: -400.0}, "samples_per_s=-400.0"), ({2: 0.0}, "samples_per_s=0.0"),
    ({2: float("inf")}, "samples_per_s=inf")])
def test_ablate_refuses_a_throughput_that_is_no_positive_number(bad, match):
    rates = {1: 100.0, 2: 400.0, **bad}
    with pytest.raises(ValueError, match=match):
        course.ablate(fake_train(rates), {"b": 1}, [course.Change("b2", {"b": 2})], apply=apply)


def test_ablate_refuses_an_accuracy_outside_0_1_and_a_baseline_that_diverged():
    with pytest.raises(ValueError, match=r"test_accuracy=1\.5: a fraction from 0 to 1"):
        course.ablate(fake_train({1: 100.0, 2: 400.0}, {2: 1.5}), {"b": 1}, [course.Change("b2", {"b": 2})],
                      apply=apply)
    with pytest.raises(ValueError, match="the baseline 'seed loop' diverged"):
        course.ablate(fake_train({1: 100.0, 2: 400.0}, {1: float("nan")}), {"b": 1}, [course.Change("b2", {"b": 2})],
                      apply=apply)
    with pytest.raises(ValueError, match=r"rerun\(baseline, 1\) gave test accuracy 1\.5"):
        course.ablate(fake_train({1: 100.0, 2: 400.0}), {"b": 1}, [course.Change("b2", {"b": 2})], apply=apply,
                      rerun=lambda r, seed: 1.5)
    # a change that diverged is dropped as diverged, as before
    t = course.ablate(fake_train({1: 100.0, 2: 400.0}, {2: float("nan")}), {"b": 1}, [course.Change("b2", {"b": 2})],
                      apply=apply)
    assert t.step("b2").decision == "dropped"


def test_a_gpus_price_over_cpu_runs_is_called_a_what_if():
    t = course.ablate(fake_train({1: 100.0, 2: 400.0}), {"b": 1}, [course.Change("b2", {"b": 2})], apply=apply,
                      device="cpu", price_per_hour="aws-p5-h100")
    assert "a what-if" in repr(t) and t.device_name
    mine = course.ablate(fake_train({1: 100.0, 2: 400.0}), {"b": 1}, [course.Change("b2", {"b": 2})], apply=apply,
                         device="cpu", price_per_hour=0.5)
    assert "what-if" not in repr(mine)
