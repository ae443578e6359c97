"""gpulab.accumulation: accumulated gradients equal the full batch's (and the classic bugs do not),
gradient comparison, and gradient checkpointing (same gradients, fewer saved activations, BatchNorm
statistics updated once)."""
from __future__ import annotations

import copy
import doctest

import pytest
import torch

import gpulab as gl
from gpulab import course
import gpulab.course.training.accumulation


def test_doctests():
    assert doctest.testmod(gpulab.course.training.accumulation).failed == 0


@pytest.fixture
def mlp_and_batch():
    torch.manual_seed(0)
    return course.models.mlp(hidden=64), course.models.example_batch("mlp", 100)


def test_correct_weighting_matches_the_full_batch(mlp_and_batch):
    model, batch = mlp_and_batch
    full = course.micro_batch_gradients(model, batch, steps=1)
    for kwargs in ({"steps": 4}, {"steps": 7}, {"micro_batch_size": 32}, {"micro_batch_size": 1}):
        check = course.compare_gradients(full, course.micro_batch_gradients(model, batch, **kwargs), rtol=1e-5)
        assert check.ok, (kwargs, check)
    assert all(p.grad is None for p in model.parameters())
    # same as the existing helper
    ref = course.accumulated_gradients(model, batch, steps=4)
    assert course.compare_gradients(ref, course.micro_batch_gradients(model, batch, steps=4), rtol=1e-6).ok


def test_the_classic_bugs_are_caught(mlp_and_batch):
    model, batch = mlp_and_batch
    full = course.micro_batch_gradients(model, batch, steps=1)
    none = course.compare_gradients(full, course.micro_batch_gradients(model, batch, steps=4, weighting="none"))
    assert not none.ok and none.norm_ratio == pytest.approx(4, rel=0.15)
    # equal weights are right for equal micro-batches ...
    assert course.compare_gradients(full, course.micro_batch_gradients(model, batch, micro_batch_size=25,
                                                               weighting="equal")).ok
    # ... and wrong when the last one is smaller (32, 32, 32, 4)
    uneven = course.compare_gradients(full, course.micro_batch_gradients(model, batch, micro_batch_size=32,
                                                                 weighting="equal"))
    assert not uneven.ok and uneven.relative_error > 0.05


def test_batchnorm_models_differ_even_when_weighted_correctly():
    torch.manual_seed(0)
    model, batch = course.models.small_cnn(width=8), course.pattern_batch(32)
    full = course.micro_batch_gradients(model, batch, steps=1)
    check = course.compare_gradients(full, course.micro_batch_gradients(model, batch, steps=4))
    assert not check.ok and check.cosine > 0.5


@pytest.mark.parametrize("precision,rtol", [("bf16", 0.1), ("fp16", 0.1)])
def test_accumulation_under_autocast(mlp_and_batch, precision, rtol):
    model, batch = mlp_and_batch
    full32 = course.micro_batch_gradients(model, batch, steps=1)
    full = course.micro_batch_gradients(model, batch, steps=1, precision=precision)
    acc = course.micro_batch_gradients(model, batch, steps=4, precision=precision)
    assert course.compare_gradients(full, acc, rtol=rtol).ok
    assert course.compare_gradients(full32, acc, rtol=rtol).ok
    assert not course.compare_gradients(full32, acc, rtol=1e-6).ok     # 16-bit math is not bit-exact


def test_micro_batch_gradients_bad_input(mlp_and_batch):
    model, batch = mlp_and_batch
    with pytest.raises(ValueError, match="exactly one"):
        course.micro_batch_gradients(model, batch)
    with pytest.raises(ValueError, match="exactly one"):
        course.micro_batch_gradients(model, batch, steps=2, micro_batch_size=8)
    with pytest.raises(ValueError, match="weighting"):
        course.micro_batch_gradients(model, batch, steps=2, weighting="mean")
    with pytest.raises(ValueError, match="precision"):
        course.micro_batch_gradients(model, batch, steps=2, precision="fp8")
    with pytest.raises(ValueError, match="more than"):
        course.micro_batch_gradients(model, batch, steps=101)
    with pytest.raises(ValueError, match="micro_batch_size"):
        course.micro_batch_gradients(model, batch, micro_batch_size=0)
    with pytest.raises(TypeError):
        course.micro_batch_gradients(model, batch[0], steps=2)


def test_compare_gradients():
    g = [torch.ones(3), torch.full((2, 2), 2.0)]
    same = course.compare_gradients(g, [t.clone() for t in g], label="same")
    assert same.ok and same.relative_error == 0 and same.cosine == pytest.approx(1)
    flipped = course.compare_gradients(g, [-t for t in g])
    assert not flipped.ok and flipped.cosine == pytest.approx(-1) and flipped.norm_ratio == pytest.approx(1)
    assert "agrees" in repr(same) and "<table" in same._repr_html_() and same.to_dict()["agrees"] is True
    with pytest.raises(ValueError, match="numbers"):
        course.compare_gradients(g, g[:1])
    with pytest.raises(ValueError, match="shape"):
        course.compare_gradients(g, [torch.ones(3), torch.ones(4)])
    with pytest.raises(TypeError):
        course.compare_gradients(g, [1.0, 2.0])
    with pytest.raises(ValueError):
        course.compare_gradients([], [])
    with pytest.raises(ValueError, match="rtol"):
        course.compare_gradients(g, g, rtol=-1)


def _grads_after_step(model, batch):
    model.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(model(batch[0]), batch[1]).backward()
    return [p.grad.clone() for p in model.parameters()]


def test_checkpointing_same_gradients_and_batchnorm_statistics():
    torch.manual_seed(0)
    plain = course.models.resnet_small(width=8)
    twin = copy.deepcopy(plain)
    ckpt = course.checkpointed(twin, segments=3)
    assert [type(m).__name__ for m in ckpt] == ["CheckpointedSegment", "CheckpointedSegment", "Sequential"]
    assert {id(p) for p in ckpt.parameters()} == {id(p) for p in twin.parameters()}    # shared layers
    batch = course.pattern_batch(16)
    check = course.compare_gradients(_grads_after_step(plain, batch), _grads_after_step(ckpt, batch), rtol=1e-5)
    assert check.ok, check
    for (name, a), b in zip(plain.state_dict().items(), twin.state_dict().values()):
        assert torch.allclose(a.float(), b.float()), name        # running stats updated once, not twice
    ckpt.eval()
    with torch.no_grad():
        assert torch.allclose(ckpt(batch[0]), plain.eval()(batch[0]), atol=1e-5)


def test_checkpointing_saves_activation_memory():
    torch.manual_seed(0)
    model = course.models.mlp(hidden=256, layers=8)
    ckpt = course.checkpointed(copy.deepcopy(model))
    batch = course.models.example_batch("mlp", 256)

    def forward(m):
        return m(batch[0]).sum()

    plain_bytes = gl.peak_memory(forward, model).retained_bytes
    ckpt_bytes = gl.peak_memory(forward, ckpt).retained_bytes
    assert ckpt_bytes < 0.6 * plain_bytes


def test_checkpointed_bad_input():
    with pytest.raises(TypeError, match="Sequential"):
        course.checkpointed(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="segments"):
        course.checkpointed(course.models.mlp(), segments=0)
    with pytest.raises(ValueError, match="segments"):
        course.checkpointed(course.models.mlp(), segments=99)
    with pytest.raises(ValueError, match="at least one"):
        course.checkpointed(torch.nn.Sequential())
    one = course.checkpointed(course.models.mlp(), segments=1)
    assert len(one) == 1 and type(one[0]).__name__ == "Sequential"    # nothing checkpointed
