"""A measured memory challenge: the learner's training step must run on a card of a given size (no out-of-memory
error) and compute the same loss as the reference step within a tolerance. Since the loss of a fresh model is about
the same on any part of a batch, the challenge can also measure what was trained: the items the returned model's
forward passes saw with gradients on (``items``), and how far its gradients are from the full batch's
(``reference_gradients``).

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
from typing import Any, Callable, Sequence

from ..._check import checked
from ..lesson.checks import NotAnswered, _esc

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
    items: int | None = None               # items the model's forward passes saw with gradients on (None: not counted)
    expected_items: int | None = None
    gradient_error: float | None = None    # |g - g_ref| / |g_ref| over all parameters (None: not compared)
    gradient_rtol: float | None = None

    @property
    def same_loss(self) -> bool:
        return math.isclose(self.loss, self.reference, rel_tol=self.rtol, abs_tol=1e-12)

    @property
    def whole_batch(self) -> bool:
        return self.expected_items is None or self.items == self.expected_items

    @property
    def same_gradients(self) -> bool:
        return self.gradient_rtol is None or (self.gradient_error is not None
                                              and self.gradient_error <= self.gradient_rtol)

    @property
    def passed(self) -> bool:
        return self.same_loss and self.peak_bytes <= self.budget_bytes and self.whole_batch and self.same_gradients

    def __repr__(self) -> str:
        from ..._format import fmt_bytes

        mark = "[ok]" if self.passed else "[x]"
        return (f"{mark} {self.name}: peak {fmt_bytes(self.peak_bytes)} on a {fmt_bytes(self.budget_bytes)} card "
                f"({self.peak_bytes / self.budget_bytes:.0%} of it) on {self.device}; loss {self.loss:.5f} vs "
                f"reference {self.reference:.5f} ({'within' if self.same_loss else 'outside'} {self.rtol:.0%})"
                + ("" if self.expected_items is None else
                   f"; trained on {self.items} of the {self.expected_items} items")
                + ("" if self.gradient_rtol is None else
                   "; gradients: not found in the model" if self.gradient_error is None else
                   f"; gradients {self.gradient_error:.1%} from the full batch's "
                   f"({'within' if self.same_gradients else 'outside'} {self.gradient_rtol:.0%})"))

    def _repr_html_(self) -> str:
        colour = "#1b7a2b" if self.passed else "#b00020"
        return f'<div style="color:{colour}">{_esc(repr(self))}</div>'


@checked(device="device")
def fit_challenge(name: str, yours: Callable[[], Any] | None, *, budget_bytes: int, reference: float,
                  rtol: float = 0.02, device: Any = None, items: int | None = None,
                  reference_gradients: Sequence[Any] | None = None, gradient_rtol: float = 0.3
                  ) -> FitChallenge | NotAnswered:
    """Run ``yours()`` (no arguments; it builds what it needs and returns the loss, a number or a one-element
    tensor, or ``(loss, model)``) on a card of ``budget_bytes`` (:func:`gpulab.memory.smaller_card`: the real
    allocator capped on CUDA, a counted budget elsewhere). Passes when it raises no out-of-memory error and its loss
    is within ``rtol`` of ``reference``, and, when asked: the returned model's forward passes with gradients on saw
    ``items`` items in all (micro-batches add up; checkpointing's recomputation inside the model does not count),
    and the model's gradients are within ``gradient_rtol`` (relative L2 over all parameters) of
    ``reference_gradients`` (one tensor per parameter, in ``model.parameters()`` order). A miss raises
    ``AssertionError`` saying what went wrong. ``yours=None`` shows "not answered yet".
    """
    if yours is None:
        return NotAnswered(name)
    if not callable(yours):
        raise TypeError(f"yours must be a function without arguments, got {yours!r}")
    if not isinstance(rtol, (int, float)) or isinstance(rtol, bool) or rtol < 0:
        raise ValueError(f"rtol must be a relative tolerance >= 0, got {rtol!r}")
    if items is not None and (isinstance(items, bool) or not isinstance(items, int) or items < 1):
        raise ValueError(f"items must be the number of items the step must train on (a whole number >= 1), "
                         f"got {items!r}")
    if not isinstance(gradient_rtol, (int, float)) or isinstance(gradient_rtol, bool) or gradient_rtol < 0:
        raise ValueError(f"gradient_rtol must be a relative tolerance >= 0, got {gradient_rtol!r}")
    import torch

    from ...memory import smaller_card
    from ...system import device_kind

    dev = str(device) if device is not None else device_kind()
    calls: list[tuple[Any, int]] = []

    def count(module: Any, args: Any) -> None:
        if torch.is_grad_enabled() and module.training and args and isinstance(args[0], torch.Tensor):
            calls.append((module, int(args[0].shape[0]) if args[0].dim() else 1))

    hook = torch.nn.modules.module.register_module_forward_pre_hook(count) if items is not None else None
    try:
        with smaller_card(budget_bytes, device=device) as card:
            out = yours()
            model = None
            if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], torch.nn.Module):
                out, model = out
            loss = float(out.detach().float().cpu()) if isinstance(out, torch.Tensor) else float(out)
    except torch.OutOfMemoryError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise AssertionError(f"[x] {name}: out of memory on the {budget_bytes / 2**20:.0f} MiB card: {first[:200]}. "
                             f"Climb the ladder: accumulate smaller micro-batches, checkpoint, or lower the "
                             f"precision") from None
    finally:
        if hook is not None:
            hook.remove()
    if (items is not None or reference_gradients is not None) and model is None:
        raise AssertionError(f"[x] {name}: return (loss, model), the model you trained, so the challenge can see what "
                             f"it was trained on")
    seen = None if items is None else sum(n for m, n in calls if m is model)
    error = None if reference_gradients is None else _gradient_error(model, reference_gradients)
    result = FitChallenge(name, dev, int(budget_bytes), int(card.peak_bytes), loss, float(reference), float(rtol),
                          seen, items, error, None if reference_gradients is None else float(gradient_rtol))
    if not result.passed:
        raise AssertionError(repr(result))
    return result


def _gradient_error(model: Any, reference: Sequence[Any]) -> float | None:
    """Relative L2 distance of ``model``'s gradients from ``reference`` (None when a gradient is missing)."""
    import torch

    params = list(model.parameters())
    if len(params) != len(reference):
        raise ValueError(f"reference_gradients has {len(reference)} tensors, the model {len(params)} parameters: "
                         "pass one gradient per parameter, in model.parameters() order")
    if any(p.grad is None for p in params):
        return None
    mine = torch.cat([p.grad.detach().float().flatten().cpu() for p in params])
    ref = torch.cat([torch.as_tensor(r).detach().float().flatten().cpu() for r in reference])
    return float((mine - ref).norm() / ref.norm().clamp_min(1e-30))
