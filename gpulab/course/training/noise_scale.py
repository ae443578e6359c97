"""The statistical side of batching (lesson 03): the gradient noise scale of McCandlish et al. (2018), 'An Empirical
Model of Large-Batch Training', estimated on the lesson's own model and data.

A minibatch gradient of ``B`` examples is the true gradient ``G`` plus noise whose variance falls as ``tr(Σ) / B``
(``Σ``: the per-example gradients' covariance). The *simple noise scale* ``B_noise = tr(Σ) / |G|²`` is the batch at
which the noise equals the signal: well below it, doubling the batch halves the steps a target takes (perfect
scaling); well above it, a larger batch buys almost no fewer steps, only more computation per step. The paper's
unbiased estimates from the squared norms of gradients at two batch sizes ``b < B`` (its appendix A.1):

    |G|²  ≈ (B |G_B|² - b |G_b|²) / (B - b)
    tr(Σ) ≈ (|G_b|² - |G_B|²) / (1/b - 1/B)

each averaged over many draws before the ratio is taken (a ratio of noisy estimates is biased).

Example:
    >>> import torch
    >>> from gpulab import course
    >>> torch.manual_seed(0) is not None
    True
    >>> x, y = course.models.example_batch("mlp", 2048, seed=1)
    >>> ns = course.gradient_noise_scale(course.models.mlp(), x, y, small=16, big=512, draws=8)
    >>> ns.b_noise > 0 and ns.trace > 0 and ns.signal > 0
    True
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from ..._check import whole
from ..._format import html_table, text_table

__all__ = ["NoiseScale", "gradient_noise_scale", "noise_scale_estimates"]


def noise_scale_estimates(small_sq: float, big_sq: float, small: int, big: int) -> tuple[float, float]:
    """``(|G|², tr(Σ))`` from the mean squared gradient norms at batch sizes ``small`` and ``big`` (McCandlish et al.
    2018, appendix A.1)."""
    if not 0 < small < big:
        raise ValueError(f"small must be smaller than big (two batch sizes > 0), got small={small}, big={big}")
    signal = (big * big_sq - small * small_sq) / (big - small)
    trace = (small_sq - big_sq) / (1 / small - 1 / big)
    return signal, trace


@dataclass(frozen=True)
class NoiseScale:
    """The gradient noise scale measured on a model and its data: ``b_noise = trace / signal`` (the simple noise
    scale, in examples), from ``draws`` gradients at batch ``small`` and at batch ``big``; ``small_sq`` and ``big_sq``
    their mean squared norms; ``spread`` the relative standard error of ``b_noise`` over the draws (split in halves)."""

    b_noise: float
    signal: float
    trace: float
    small: int
    big: int
    small_sq: float
    big_sq: float
    draws: int
    spread: float | None = None

    def _rows(self) -> list[tuple[str, str]]:
        sp = "" if self.spread is None else f" (halves of the draws disagree by {self.spread:.0%})"
        return [("mean |g|² at batch " + str(self.small), f"{self.small_sq:.4g}"),
                ("mean |g|² at batch " + str(self.big), f"{self.big_sq:.4g}"),
                ("|G|², the true gradient's squared norm", f"{self.signal:.4g}"),
                ("tr(Σ), the per-example gradient noise", f"{self.trace:.4g}"),
                ("B_noise = tr(Σ) / |G|²", f"{self.b_noise:,.0f} examples{sp}")]

    def __repr__(self) -> str:
        return ("Gradient noise scale (McCandlish et al. 2018)\n" + text_table(["", "estimate"], self._rows())
                + f"\n{self.draws} draws at each batch size")

    def _repr_html_(self) -> str:
        return html_table(["", "estimate"], self._rows(), caption="Gradient noise scale (McCandlish et al. 2018)",
                          footer=f"{self.draws} draws at each batch size")


def _grad_sq(model: Any, loss_fn: Callable[[Any, Any], Any], x: Any, y: Any) -> float:
    model.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    return float(sum(float(p.grad.double().pow(2).sum()) for p in model.parameters() if p.grad is not None))


def gradient_noise_scale(model: Any, x: Any, y: Any, *, small: int = 32, big: int = 1024, draws: int = 16,
                         loss_fn: Callable[[Any, Any], Any] | None = None, seed: int = 0) -> NoiseScale:
    """Estimate the simple noise scale of ``model`` at its current weights on the examples ``x``, ``y`` (the
    mean loss ``loss_fn``, cross-entropy by default): ``draws`` random batches of ``big`` examples, and of each its
    first ``small``, their squared gradient norms averaged, then :func:`noise_scale_estimates`. The weights are left
    as they were (gradients cleared); the caller's random generators are not used."""
    import torch
    import torch.nn.functional as F

    small, big, draws = whole("small", small), whole("big", big), whole("draws", draws, low=2)
    if not small < big:
        raise ValueError(f"small must be smaller than big, got small={small}, big={big}: e.g. small=32, big=1024")
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor) or len(x) != len(y):
        raise TypeError(f"x and y must be tensors of the same length (examples and their targets), got "
                        f"{type(x).__name__} and {type(y).__name__}")
    if len(x) < big:
        raise ValueError(f"big={big} is more than the {len(x)} examples given: pass more examples or a smaller big")
    loss_fn = loss_fn or F.cross_entropy
    gen = torch.Generator().manual_seed(whole("seed", seed, low=0))
    was_training = model.training
    model.train()
    small_sq, big_sq = [], []
    try:
        for _ in range(draws):
            idx = torch.randperm(len(x), generator=gen)[:big].to(x.device)
            big_sq.append(_grad_sq(model, loss_fn, x[idx], y[idx]))
            small_sq.append(_grad_sq(model, loss_fn, x[idx[:small]], y[idx[:small]]))
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    mean = lambda v: sum(v) / len(v)    # noqa: E731
    signal, trace = noise_scale_estimates(mean(small_sq), mean(big_sq), small, big)
    halves = [noise_scale_estimates(mean(small_sq[h::2]), mean(big_sq[h::2]), small, big) for h in (0, 1)]
    ratios = [t / s for s, t in halves if s > 0]
    b_noise = trace / signal if signal > 0 else math.inf
    spread = (abs(ratios[0] - ratios[1]) / (2 * b_noise) if len(ratios) == 2 and math.isfinite(b_noise) and b_noise > 0
              else None)
    return NoiseScale(b_noise, signal, trace, small, big, mean(small_sq), mean(big_sq), draws, spread)
