from __future__ import annotations

import pytest
import torch

import gpulab as gl
from gpulab import course


@pytest.mark.parametrize("name", sorted(course.models.MODELS))
def test_models_and_batches(name):
    make, _ = course.models.MODELS[name]
    model = make()
    x, y = course.models.example_batch(name, 4)
    assert model(x).shape == (4, 10) and y.shape == (4,) and int(y.max()) < 10
    x2, y2 = course.models.example_batch(name, 4)
    assert torch.equal(x, x2) and torch.equal(y, y2)     # seeded
    with pytest.raises(ValueError):
        course.models.example_batch(name, 0)
    with pytest.raises(ValueError, match="unknown model"):
        course.models.example_batch("vgg", 4)


def test_training_learns_the_synthetic_task():
    torch.manual_seed(0)
    model = course.models.mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = [course.models.example_batch("mlp", 128, seed=s) for s in range(4)]
    before = course.evaluate(model, data[0])
    result = course.train(model, opt, lambda step: data[step % 4], steps=40, config=course.TrainConfig(progress=False))
    after = course.evaluate(model, data[0])
    assert result.losses[-1] < result.losses[0] and after > before + 0.3
    assert result.items_per_s > 0 and result.peak_memory_bytes > 0 and len(result.step_times_s) == 40
    assert "TrainResult" in repr(result)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_steps(precision):
    model = course.models.mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = course.models.example_batch("mlp", 32)
    result = course.train(model, opt, lambda s: batch, steps=3, config=course.TrainConfig(precision=precision, progress=False))
    assert all(l == l for l in result.losses)   # finite, not NaN
    assert all(p.dtype == torch.float32 for p in model.parameters())   # master weights stay fp32


def test_accumulation_equals_full_batch_and_catches_the_bug():
    torch.manual_seed(0)
    model = course.models.mlp()
    batch = course.models.example_batch("mlp", 50)          # 50 = 13 + 13 + 12 + 12: uneven micro-batches
    full = course.accumulated_gradients(model, batch, steps=1)
    acc = course.accumulated_gradients(model, batch, steps=4)
    assert all(torch.allclose(f, a, atol=1e-6, rtol=1e-4) for f, a in zip(full, acc))
    bug = course.accumulated_gradients(model, batch, steps=4, divide=False)
    ratio = float(bug[0].norm() / full[0].norm())
    assert ratio == pytest.approx(4, rel=0.1)


def test_train_step_with_accumulation_matches_plain_step():
    torch.manual_seed(0)
    a, b = course.models.mlp(), course.models.mlp()
    b.load_state_dict(a.state_dict())
    oa, ob = torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.SGD(b.parameters(), lr=0.1)
    batch = course.models.example_batch("mlp", 48)
    course.train_step(a, oa, batch, course.TrainConfig(accumulation_steps=1))
    course.train_step(b, ob, batch, course.TrainConfig(accumulation_steps=3))
    assert all(torch.allclose(p, q, atol=1e-6) for p, q in zip(a.parameters(), b.parameters()))


def test_config_validation():
    with pytest.raises(ValueError, match="precision"):
        course.TrainConfig(precision="fp8")
    with pytest.raises(ValueError, match="accumulation_steps"):
        course.TrainConfig(accumulation_steps=0)
    with pytest.raises(ValueError, match="steps"):
        course.train(course.models.mlp(), torch.optim.SGD(course.models.mlp().parameters(), lr=0.1), lambda s: None, steps=0)


def test_train_accepts_an_iterable_and_says_when_it_runs_out():
    import torch
    import gpulab as gl

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(3)]
    result = course.train(model, opt, batches, steps=3, config=course.TrainConfig(progress=False))
    assert len(result.losses) == 3
    with pytest.raises(ValueError, match="ran out after 3 of 5 steps"):
        course.train(model, opt, iter(batches), steps=5, config=course.TrainConfig(progress=False))
