"""The alpha-beta model of an all-reduce: fitted to a sweep with one size left out, it recovers the alpha and bus
bandwidth the sweep was made from and predicts the size it did not see; a sweep it cannot fit is named."""
from __future__ import annotations

import pytest

from gpulab import course

SIZES = (4096, 16384, 65536, 1 << 18, 1 << 20, 1 << 22, 1 << 24)


@pytest.mark.parametrize("workers,alpha,bw", [(2, 50e-6, 2e9), (8, 2e-6, 230e9), (4, 1e-3, 1e8)])
def test_the_fit_recovers_the_model_it_was_made_from(workers, alpha, bw):
    t = lambda n: 2 * (workers - 1) * alpha + 2 * (workers - 1) / workers * n / bw      # noqa: E731
    ab = course.fit_alpha_beta([[n, t(n)] for n in SIZES], workers=workers)
    assert ab.alpha_s == pytest.approx(alpha, rel=1e-6) and ab.bus_bytes_per_s == pytest.approx(bw, rel=1e-6)
    assert ab.held_out_bytes == 1 << 18 and abs(ab.held_out_error) < 1e-9          # the middle size, left out
    assert ab.crossover_bytes == pytest.approx(workers * alpha * bw)
    assert ab.predict(64e6) == pytest.approx(t(64e6))
    text = repr(ab)
    assert "left out" in text and "per ring step" in text and "<table" in ab._repr_html_()


def test_a_noisy_sweep_says_how_far_off_the_left_out_size_is():
    sweep = [[n, (2 * 50e-6 + n / 2e9) * (1.3 if n == 1 << 18 else 1.0)] for n in SIZES]   # the left-out size ran slow
    ab = course.fit_alpha_beta(sweep, workers=2)
    assert ab.held_out_error == pytest.approx(1 / 1.3 - 1, rel=1e-3) and "-23%" in repr(ab)


@pytest.mark.parametrize("sweep,kw,match", [
    ([[4096, 1e-4], [8192, 1e-4]], {}, "sweep must be 3 or more"),
    ([[4096, 1e-4], [8192, -1.0], [16384, 1e-3]], {}, "sweep must be 3 or more"),
    ("4096", {}, "sweep must be 3 or more"),
    ([[4096, 3e-4], [65536, 2e-4], [1 << 20, 1e-4]], {}, "do not grow with the size"),
    ([[4096, 1e-4], [65536, 2e-4], [1 << 20, 1e-3]], {"held_out": 1000}, "is not a size of the sweep"),
    ([[4096, 1e-4], [65536, 2e-4], [1 << 20, 1e-3]], {"workers": 1}, "workers must be a whole number >= 2"),
])
def test_a_sweep_that_cannot_be_fitted_is_named(sweep, kw, match):
    with pytest.raises(ValueError, match=match):
        course.fit_alpha_beta(sweep, **{"workers": 2, **kw})
