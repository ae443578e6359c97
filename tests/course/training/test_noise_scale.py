"""The gradient noise scale (McCandlish et al. 2018): the two-batch-size estimates recover a signal and a noise they
are built from, and on a problem whose per-example gradients are known (a mean fitted to N(1, 2²) samples: |G|² = 1,
tr(Σ) = 4) the measured noise scale is 4."""
from __future__ import annotations

import pytest
import torch

from gpulab import course
from gpulab.course.training.noise_scale import noise_scale_estimates


@pytest.mark.parametrize("signal,trace,small,big", [(1.0, 4.0, 4, 64), (0.02, 50.0, 32, 1024), (3.0, 0.5, 2, 3)])
def test_the_estimates_invert_the_expected_norms(signal, trace, small, big):
    # E|g_b|² = |G|² + tr(Σ) / b
    got = noise_scale_estimates(signal + trace / small, signal + trace / big, small, big)
    assert got == pytest.approx((signal, trace))


def test_the_noise_scale_of_a_known_problem():
    n = 200_000
    y = 1.0 + 2.0 * torch.randn(n, generator=torch.Generator().manual_seed(0))      # per-example gradient: w - y_i
    x = torch.ones(n, 1)
    model = torch.nn.Linear(1, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    loss = lambda out, t: 0.5 * ((out.squeeze(-1) - t) ** 2).mean()     # noqa: E731
    ns = course.gradient_noise_scale(model, x, y, small=4, big=64, draws=400, loss_fn=loss)
    assert ns.signal == pytest.approx(1.0, rel=0.25) and ns.trace == pytest.approx(4.0, rel=0.1)
    assert ns.b_noise == pytest.approx(4.0, rel=0.3) and model.weight.grad is None and model.weight.item() == 0.0
    text = repr(ns)
    assert "B_noise = tr(Σ) / |G|²" in text and "400 draws" in text and "<table" in ns._repr_html_()


def test_the_callers_generator_and_the_models_mode_are_left_alone():
    x, y = course.models.example_batch("mlp", 512, seed=1)
    model = course.models.mlp().eval()
    state = torch.get_rng_state()
    course.gradient_noise_scale(model, x, y, small=8, big=128, draws=2)
    assert torch.equal(torch.get_rng_state(), state) and not model.training


@pytest.mark.parametrize("kw,kind,match", [
    (dict(small=64, big=64), ValueError, "small must be smaller than big"),
    (dict(big=10_000), ValueError, "big=10000 is more than the 512 examples"),
    (dict(draws=1), ValueError, "draws must be a whole number >= 2"),
    (dict(small=0), ValueError, "small must be a whole number"),
])
def test_bad_arguments_are_named(kw, kind, match):
    x, y = course.models.example_batch("mlp", 512, seed=1)
    with pytest.raises(kind, match=match):
        course.gradient_noise_scale(course.models.mlp(), x, y, **kw)
    with pytest.raises(TypeError, match="x and y must be tensors of the same length"):
        course.gradient_noise_scale(course.models.mlp(), x, y[:10])
