"""Lesson 12's Keras side: the seed's model.fit loop as a KerasRecipe, one run of it, the changes per device and
the ablation that keeps each change only if it helps."""
from __future__ import annotations

import importlib.util
import math

import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("tensorflow") is None:      # not importorskip: TensorFlow must load after Triton
    pytest.skip("TensorFlow is not installed", allow_module_level=True)

from gpulab import course  # noqa: E402


@pytest.fixture(scope="module")
def tiny():
    return course.digits(n_train=512, n_test=128, download=False)


@pytest.fixture(scope="module")
def keras():
    return course.start_keras(seed=0).keras


class FakeRun:
    """Records what train_keras_recipe logs (a tracking run's log_metrics)."""

    def __init__(self):
        self.points = []

    def log_metrics(self, mapping, step):
        for k, v in mapping.items():
            assert math.isfinite(v), (k, v)
            self.points.append((k, step, v))


@pytest.mark.parametrize("kwargs, error, match", [
    ({"batch_size": 0}, ValueError, "batch_size"), ({"batch_size": 32.0}, TypeError, "batch_size"),
    ({"lr": 0}, ValueError, "lr"), ({"lr": True}, ValueError, "lr"),
    ({"data": "disk"}, ValueError, "data must be one of"), ({"policy": "bf16"}, ValueError, "policy.*'bf16'"),
    ({"jit_compile": "yes"}, TypeError, "jit_compile"), ({"jit_compile": 1}, TypeError, "jit_compile")])
def test_recipe_rejects_bad_fields(kwargs, error, match):
    with pytest.raises(error, match=match):
        course.KerasRecipe(**kwargs)


def test_recipe_is_the_seed_by_default_and_describes_itself():
    r = course.KerasRecipe()
    assert (r.batch_size, r.lr, r.data, r.policy, r.jit_compile) == (32, 1e-3, "arrays", "float32", "auto")
    assert r.params() == {"batch_size": 32, "lr": 1e-3, "data": "arrays", "policy": "float32", "jit_compile": "auto"}
    assert course.KerasRecipe(batch_size=256, jit_compile=True).describe().endswith("jit_compile True")


def test_train_rejects_bad_arguments(tiny):
    with pytest.raises(TypeError, match="KerasRecipe"):
        course.train_keras_recipe(course.Recipe(), tiny)
    with pytest.raises(TypeError, match="data must be"):
        course.train_keras_recipe(course.KerasRecipe(), tiny.train_x)
    with pytest.raises(ValueError, match="epochs"):
        course.train_keras_recipe(course.KerasRecipe(), tiny, epochs=0)


def test_a_tiny_run_reports_sane_fields_and_logs_each_epoch(tiny, keras):
    run = FakeRun()
    r = course.train_keras_recipe(course.KerasRecipe(batch_size=64), tiny, epochs=3, run=run)
    assert len(r.epoch_times_s) == 3 and all(t > 0 for t in r.epoch_times_s) and r.samples_per_epoch == 512
    assert 0.0 <= r.test_accuracy <= 1.0 and r.samples_per_s > 0 and len(r.history) == 3
    assert len(r.chunk_rates) == 2 and all(len(e) == 4 for e in r.chunk_rates)
    assert r.spread_pct is not None and r.spread_pct >= 0
    # the same network as PyTorch's seed, so the same matmul FLOPs per sample (forward + backward)
    torch_run = course.train_recipe(course.Recipe(batch_size=64, data="host"), tiny, epochs=1, device="cpu")
    assert r.flops_per_sample == torch_run.flops_per_sample == 1_598_000
    # jit_compile="auto" is Keras' choice: XLA only when TensorFlow sees a GPU
    import tensorflow as tf

    assert r.xla == bool(tf.config.list_physical_devices("GPU")) and not r.loss_scaling
    if r.xla:
        assert r.peak_memory_bytes > 0
    else:
        assert r.peak_memory_bytes is None and any("not measured" in n for n in r.notes)
    assert {(k, s) for k, s, _ in run.points} >= {(k, e) for k in ("loss", "accuracy", "epoch_time_s",
                                                                     "samples_per_s") for e in range(3)}
    assert ("test_accuracy", 3, r.test_accuracy) in run.points
    text = repr(r)
    assert text.startswith("KerasRun") and "samples/s" in text and len(text.splitlines()) <= 12
    assert "<table" in r._repr_html_() and "\x1b" not in text


def test_runs_are_seeded_and_xla_is_honoured(tiny, keras):
    a = course.train_keras_recipe(course.KerasRecipe(batch_size=128), tiny, epochs=1, seed=3)
    b = course.train_keras_recipe(course.KerasRecipe(batch_size=128, jit_compile=True), tiny, epochs=1, seed=3)
    assert b.xla and a.history[0][0] == pytest.approx(b.history[0][0], rel=1e-3)
    assert a.startup_s is None and len(a.timed_epochs_s) == 1


def test_a_mixed_policy_run_leaves_the_global_policy_as_it_was(tiny, keras):
    keras.mixed_precision.set_global_policy("float32")
    r = course.train_keras_recipe(course.KerasRecipe(batch_size=128, policy="mixed_bfloat16"), tiny, epochs=2)
    assert keras.mixed_precision.global_policy().name == "float32" and 0 <= r.test_accuracy <= 1
    # a learner's own policy survives too
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        course.train_keras_recipe(course.KerasRecipe(batch_size=128), tiny, epochs=1)
        assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_mixed_float16_wraps_the_optimizer_in_loss_scaling(tiny, keras):
    r = course.train_keras_recipe(course.KerasRecipe(batch_size=256, policy="mixed_float16"), tiny, epochs=1)
    assert r.loss_scaling and keras.mixed_precision.global_policy().name == "float32"


def test_changes_per_device():
    cpu = course.keras_changes(device="cpu")
    assert [c.label for c in cpu] == ["batch 256, lr x2.8 (square-root rule)", "tf.data: cache, shuffle, batch, prefetch",
                                      f"mixed precision ({cpu[2].fields['policy']})", "XLA (jit_compile=True)",
                                      "larger batch", f"mixed precision ({cpu[2].fields['policy']}), again on the recipe reached"]
    assert all(c.available for c in cpu) and cpu[2].fields["policy"] in ("mixed_bfloat16", "mixed_float16")
    first = cpu[0].fields(course.KerasRecipe())
    assert first == {"batch_size": 256, "lr": pytest.approx(1e-3 * 8 ** 0.5)}
    assert course.keras_changes(device="cpu", lr_rule="linear")[0].label == "batch 256, lr x8 (linear rule)"
    gpu = course.keras_changes(device="cuda", batch_size=512, lr_rule="sqrt")
    assert gpu[0].label == "batch 512, lr x4 (square-root rule)"
    xla = next(c for c in gpu if c.label.startswith("XLA"))
    assert not xla.available and "auto" in xla.why_not
    # the larger batch: 4x, then 2x the batch so far, only sizes leaving an epoch 8 steps
    larger = next(c for c in course.keras_changes(device="cpu", n_train=8000) if c.label == "larger batch")
    bigger = larger.fields(course.KerasRecipe(batch_size=256, lr=8e-3))
    assert [label for label, _ in bigger] == ["batch 512, lr x1.4"]
    assert bigger[0][1]["lr"] == pytest.approx(8e-3 * 2 ** 0.5)
    with pytest.raises(ValueError, match="device"):
        course.keras_changes(device="tpu")
    with pytest.raises(ValueError, match="lr_rule"):
        course.keras_changes(lr_rule="cubic")


ALLOWED = {"baseline", "kept", "dropped", "not available", "not tried", "branch"}


class FakeLimits:
    """A machine_limits result with made-up peaks: the real one measures matmuls for seconds."""

    def has(self, dtype):
        return True

    def peak_flops(self, dtype):
        return 1e12 if dtype == "float32" else 2e12


@pytest.fixture
def fake_limits(monkeypatch):
    import gpulab.limits

    asked = []
    monkeypatch.setattr(gpulab.limits, "machine_limits",
                        lambda device=None, dtypes=None, **kw: asked.append((device, tuple(dtypes or ()))) or FakeLimits())
    return asked


def test_a_small_ablation(tiny, keras, fake_limits):
    table = course.keras_ablation(tiny, epochs=2)
    assert {d for d, _ in fake_limits} in ({"cpu"}, {"cuda"})      # on TensorFlow's device
    assert {t for _, t in fake_limits} <= {("float32",), ("bfloat16",), ("float16",)}   # each policy's dtype
    assert table.steps[0].label == "seed loop" and table.steps[0].decision == "baseline"
    assert {s.decision for s in table.steps} <= ALLOWED and len(table.steps) >= 5
    assert table.title.startswith("Keras: the seed loop, one change at a time (")
    assert table.baseline.ceiling_dtype == "float32" and 0 < table.share_of_ceiling("seed loop") <= 1
    mixed = next(s for s in table.steps if s.label.startswith("mixed precision"))
    assert mixed.ceiling_dtype in ("bfloat16", "float16") and mixed.ceiling_flops == 2e12   # its own precision's peak
    assert any("jit_compile='auto'" in n for n in table.notes)
    assert keras.mixed_precision.global_policy().name == "float32"
    assert "seed loop" in repr(table) and "<table" in table._repr_html_()


@pytest.mark.skipif(importlib.util.find_spec("gpulab.tracking") is None or importlib.util.find_spec("mlflow") is None,
                    reason="needs gpulab.tracking and mlflow")
def test_a_tracked_ablation_logs_every_step(tiny, keras, tmp_path, fake_limits):
    import gpulab.tracking as tracking

    table = course.keras_ablation(course.digits(n_train=256, n_test=64, download=False), epochs=2,
                                  track={"experiment": "t", "root": tmp_path})
    runs = tracking.runs("t", root=tmp_path)
    measured = [s for s in table.steps if s.measured]
    assert [r.name for r in runs.rows] == [s.label for s in measured]
    first = {r.run_id: r for r in runs.rows}[table.baseline.run_id]
    assert first.params["batch_size"] == "32" and first.params["jit_compile"] == "auto"
    assert {"loss", "accuracy", "epoch_time_s", "test_accuracy"} <= set(first.metrics)
