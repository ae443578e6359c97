"""Lesson 10's compiled training step (optimizer included), the PyTorch-version gate, and export with a dynamic
batch dimension."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import gpulab as gl  # noqa: E402
from gpulab import course  # noqa: E402


def _data():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)), \
        torch.randn(32, 8), torch.randint(0, 3, (32,))


def test_compiled_training_matches_eager_and_times_first_calls_apart():
    model, x, y = _data()
    before = [p.detach().clone() for p in model.parameters()]
    r = course.compiled_training(model, lambda p: torch.optim.Adam(p, lr=1e-2), x, y, steps=4, backend="eager",
                                 min_run_time=0.05)
    assert r.same and r.max_loss_diff < 1e-5 and len(r.compiled_losses) == 4
    assert r.eager_losses[-1] < r.eager_losses[0]                     # the optimizer stepped
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))   # the caller's model is untouched
    assert r.graphs >= 1 and r.first_compiled_s > 0 and r.compile_s >= 0
    assert r.speedup == pytest.approx(r.eager.median_s / r.compiled.median_s)
    assert "same losses as eager" in repr(r) and "<table" in r._repr_html_()


def test_compiled_training_sees_a_step_that_differs_from_eager():
    """The check can fail: a loss that is not the same function compiled and eager (a counter in Python state)."""
    model, x, y = _data()
    calls = {"n": 0}

    def drifting_loss(out, target):
        calls["n"] += 1
        return torch.nn.functional.cross_entropy(out, target) * (1.0 + calls["n"])   # baked in when traced

    r = course.compiled_training(model, lambda p: torch.optim.SGD(p, lr=0.1), x, y, loss_fn=drifting_loss,
                                 backend="eager", min_run_time=0.05)
    assert not r.same


def test_compiled_training_refuses_bad_input():
    model, x, y = _data()
    with pytest.raises(TypeError, match="model"):
        course.compiled_training(lambda t: t, lambda p: None, x, y)
    with pytest.raises(TypeError, match="make_optimizer"):
        course.compiled_training(model, None, x, y)
    with pytest.raises(ValueError, match="steps"):
        course.compiled_training(model, lambda p: torch.optim.SGD(p, lr=0.1), x, y, steps=0)


def test_torch_feature_gates_on_the_installed_torch():
    assert course.torch_feature("torch.export.Dim", "2.1", "section 6")
    missing = course.torch_feature("torch._inductor.no_such_call", "9.0", "the AOTInductor package")
    assert not missing and "PyTorch 9.0" in missing.line and "Skipping the AOTInductor package" in repr(missing)
    aoti = course.torch_feature("torch._inductor.aoti_compile_and_package", "2.6", "x")
    version = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
    assert bool(aoti) == (version >= (2, 6))                         # absent from the 2.5 floor, present after
    with pytest.raises(ValueError, match="under torch"):
        course.torch_feature("numpy.ndarray", "1.0", "x")
    with pytest.raises(TypeError, match="part"):
        course.torch_feature("torch.export.Dim", "2.1", "")


def test_export_with_a_dynamic_batch_runs_at_other_batch_sizes():
    model, x, _ = _data()
    batch = torch.export.Dim("batch", min=2, max=1024)
    e = gl.compiling.export(model, x, dynamic_shapes=({0: batch},))
    assert e.ok, e
    for n in (3, 200):
        xb = torch.randn(n, 8)
        assert torch.allclose(e.program.module()(xb), model(xb), atol=1e-6)
    static = gl.compiling.export(model, x)
    with pytest.raises(Exception):
        static.program.module()(torch.randn(3, 8))
    bad = gl.compiling.export(model, x, dynamic_shapes=({1: batch},))   # the features are fixed by the weights
    assert not bad.ok and bad.error
