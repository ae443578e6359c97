"""A measured memory challenge: the learner's training step must run on a card of a given size (no out-of-memory
error) and compute the same loss as the reference step within a tolerance.

Example:
    >>> import torch, gpulab as gl
    >>> from gpulab import course
    >>> r = course.fit_challenge("halves", lambda: torch.ones(64, 1024).sum() / 2, budget_bytes=1 * gl.MiB,
    ...                          reference=32768.0, rtol=1e-6, device="cpu")
    >>> r.passed, r.peak_bytes <= 1 * gl.MiB
    (True, True)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from .._check import checked
from .checks import NotAnswered, _esc

__all__ = ["fit_challenge", "FitChallenge"]


@dataclass(frozen=True)
class FitChallenge:
    """The learner's step on a card of ``budget_bytes``: its peak, its loss and the reference loss."""

    name: str
    device: str
    budget_bytes: int
    peak_bytes: int
    loss: float
    reference: float
    rtol: float

    @property
    def same_loss(self) -> bool:
        return math.isclose(self.loss, self.reference, rel_tol=self.rtol, abs_tol=1e-12)

    @property
    def passed(self) -> bool:
        return self.same_loss and self.peak_bytes <= self.budget_bytes

    def __repr__(self) -> str:
        from .._format import fmt_bytes

        mark = "[ok]" if self.passed else "[x]"
        return (f"{mark} {self.name}: peak {fmt_bytes(self.peak_bytes)} on a {fmt_bytes(self.budget_bytes)} card "
                f"({self.peak_bytes / self.budget_bytes:.0%} of it) on {self.device}; loss {self.loss:.5f} vs "
                f"reference {self.reference:.5f} ({'within' if self.same_loss else 'outside'} {self.rtol:.0%})")

    def _repr_html_(self) -> str:
        colour = "#1b7a2b" if self.passed else "#b00020"
        return f'<div style="color:{colour}">{_esc(repr(self))}</div>'


@checked(device="device")
def fit_challenge(name: str, yours: Callable[[], Any] | None, *, budget_bytes: int, reference: float,
                  rtol: float = 0.02, device: Any = None) -> FitChallenge | NotAnswered:
    """Run ``yours()`` (no arguments; it builds what it needs and returns the loss, a number or a one-element
    tensor) on a card of ``budget_bytes`` (:func:`gpulab.memory.smaller_card`: the real allocator capped on
    CUDA, a counted budget elsewhere). Passes when it raises no out-of-memory error and its loss is within
    ``rtol`` of ``reference``; a miss raises ``AssertionError`` saying what went wrong. ``yours=None`` shows
    "not answered yet".
    """
    if yours is None:
        return NotAnswered(name)
    if not callable(yours):
        raise TypeError(f"yours must be a function without arguments, got {yours!r}")
    if not isinstance(rtol, (int, float)) or isinstance(rtol, bool) or rtol < 0:
        raise ValueError(f"rtol must be a relative tolerance >= 0, got {rtol!r}")
    import torch

    from ..memory import smaller_card
    from ..system import device_kind

    dev = str(device) if device is not None else device_kind()
    try:
        with smaller_card(budget_bytes, device=device) as card:
            loss = yours()
            loss = float(loss.detach().float().cpu()) if isinstance(loss, torch.Tensor) else float(loss)
    except torch.OutOfMemoryError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise AssertionError(f"[x] {name}: out of memory on the {budget_bytes / 2**20:.0f} MiB card: {first[:200]}. "
                             f"Climb the ladder: accumulate smaller micro-batches, checkpoint, or lower the "
                             f"precision") from None
    result = FitChallenge(name, dev, int(budget_bytes), int(card.peak_bytes), loss, float(reference), float(rtol))
    if not result.passed:
        raise AssertionError(repr(result))
    return result
