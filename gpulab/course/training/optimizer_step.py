"""One optimizer step per effective batch, written out: loss scaling, gradient clipping, the LR schedule,
gradient accumulation with an uneven last window, the scaler in checkpoints, autocast at evaluation.

The order inside :func:`effective_batch_step` is the recipe of PyTorch's AMP examples:

1. for each micro-batch: forward under ``torch.autocast``, weight the mean loss by the micro-batch's share of
   the window's items, ``scaler.scale(loss).backward()`` (fp16) or ``loss.backward()``;
2. ``scaler.unscale_(optimizer)``: the gradients in true units *before* clipping (else the clipping threshold
   would be compared with gradients multiplied by the scale);
3. ``torch.nn.utils.clip_grad_norm_`` once, on the accumulated gradient;
4. ``scaler.step(optimizer)`` (skips the step if a gradient is inf/NaN) and ``scaler.update()``, once;
5. ``scheduler.step()`` once: the learning-rate schedule counts optimizer steps, not micro-batches.

:func:`accumulate_epoch` groups an epoch's micro-batches into windows of ``k``; when their count is not a
multiple of ``k`` the last window is either dropped or stepped with weights over its own items
(``partial="scale"``), so its gradient is that of the items it has. :func:`training_state` saves the scaler's
``state_dict()`` beside the model's and the optimizer's; :func:`evaluate_autocast` evaluates under
``torch.no_grad()`` and the same autocast as training.

Example:
    >>> import torch
    >>> from gpulab import course
    >>> model = course.models.mlp()
    >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    >>> micro = [course.models.example_batch("mlp", 8, seed=i) for i in range(10)]
    >>> epoch = course.accumulate_epoch(model, opt, micro, k=4, partial="scale", max_grad_norm=1.0, scheduler=sched)
    >>> epoch.optimizer_steps, epoch.window_sizes, sched.last_epoch
    (3, (4, 4, 2), 3)
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence

__all__ = ["effective_batch_step", "StepReport", "accumulate_epoch", "EpochReport", "training_state",
           "evaluate_autocast"]

_DTYPES = {"fp32": None, "bf16": "bfloat16", "fp16": "float16"}


def _autocast(device_type: str, precision: str) -> Any:
    import torch

    if precision not in _DTYPES:
        raise ValueError(f"precision must be 'fp32', 'bf16' or 'fp16', got {precision!r}")
    name = _DTYPES[precision]
    return contextlib.nullcontext() if name is None else torch.autocast(device_type, dtype=getattr(torch, name))


@dataclass(frozen=True)
class StepReport:
    """What one effective-batch step did: its loss (the window's mean), items, micro-batches, the gradient norm
    before clipping (None without clipping) and whether the optimizer stepped (False when the scaler skipped
    it because a gradient overflowed)."""

    loss: float
    items: int
    micro_batches: int
    grad_norm: float | None
    stepped: bool


def effective_batch_step(model: Any, optimizer: Any, micro_batches: Sequence[tuple[Any, Any]], *,
                         precision: str = "fp32", scaler: Any = None, max_grad_norm: float | None = None,
                         scheduler: Any = None, loss_fn: Callable[[Any, Any], Any] | None = None) -> StepReport:
    """One optimizer step on the effective batch made of ``micro_batches`` (a list of ``(inputs, targets)``):
    the recipe in this module's docstring. Each micro-batch's mean loss is weighted by its share of *these*
    items, so a short window (the end of an epoch) gets its own items' mean gradient.

    Example:
        >>> import torch
        >>> from gpulab import course
        >>> model = course.models.mlp(); opt = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> r = effective_batch_step(model, opt, [course.models.example_batch("mlp", 8)] * 2, max_grad_norm=0.5)
        >>> r.items, r.micro_batches, r.stepped
        (16, 2, True)
    """
    import torch
    import torch.nn.functional as F

    if not micro_batches:
        raise ValueError("micro_batches must hold at least one (inputs, targets) pair")
    if max_grad_norm is not None and (isinstance(max_grad_norm, bool) or not max_grad_norm > 0):
        raise ValueError(f"max_grad_norm must be a positive number or None, got {max_grad_norm!r}")
    loss_fn = loss_fn or F.cross_entropy
    total = sum(int(x.shape[0]) for x, _ in micro_batches)
    device_type = micro_batches[0][0].device.type
    optimizer.zero_grad(set_to_none=True)
    losses = []
    for x, y in micro_batches:
        with _autocast(device_type, precision):
            loss = loss_fn(model(x), y) * (x.shape[0] / total)
        (scaler.scale(loss) if scaler is not None else loss).backward()
        losses.append(loss.detach().float())
    params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    grad_norm = None
    if scaler is not None:
        scaler.unscale_(optimizer)                    # true gradients before clipping
    if max_grad_norm is not None:
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
    if scaler is not None:
        scale = scaler.get_scale()
        scaler.step(optimizer)                        # skipped if a gradient is inf/NaN
        scaler.update()
        stepped = scaler.get_scale() >= scale         # the scale shrinks exactly when the step was skipped
    else:
        optimizer.step()
        stepped = True
    if scheduler is not None:
        scheduler.step()                              # once per optimizer step, not per micro-batch
    return StepReport(float(torch.stack(losses).sum()), total, len(micro_batches), grad_norm, stepped)


@dataclass(frozen=True)
class EpochReport:
    """An epoch of accumulation: the optimizer steps taken, the micro-batches in each window, and the
    micro-batches left out (``partial="drop"``)."""

    optimizer_steps: int
    window_sizes: tuple[int, ...]
    dropped_micro_batches: int
    steps: tuple[StepReport, ...]


def accumulate_epoch(model: Any, optimizer: Any, micro_batches: Sequence[tuple[Any, Any]], k: int, *,
                     partial: Literal["scale", "drop"] = "scale", **step: Any) -> EpochReport:
    """Train one epoch of ``micro_batches`` with ``k`` micro-batches per optimizer step. When their count is
    not a multiple of ``k``, the last window has fewer: ``partial="scale"`` steps on it with weights over its
    own items (:func:`effective_batch_step`), ``partial="drop"`` leaves it out (like ``drop_last``).
    ``step`` goes to :func:`effective_batch_step` (precision, scaler, max_grad_norm, scheduler, loss_fn).

    Example:
        >>> import torch
        >>> from gpulab import course
        >>> model = course.models.mlp(); opt = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> micro = [course.models.example_batch("mlp", 4, seed=i) for i in range(6)]
        >>> accumulate_epoch(model, opt, micro, k=4, partial="drop").dropped_micro_batches
        2
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a whole number >= 1, got {k!r}")
    if partial not in ("scale", "drop"):
        raise ValueError(f"partial must be 'scale' or 'drop', got {partial!r}")
    batches = list(micro_batches)
    windows = [batches[i:i + k] for i in range(0, len(batches), k)]
    dropped = 0
    if windows and len(windows[-1]) < k and partial == "drop":
        dropped = len(windows.pop())
    reports = tuple(effective_batch_step(model, optimizer, w, **step) for w in windows)
    return EpochReport(sum(r.stepped for r in reports), tuple(len(w) for w in windows), dropped, reports)


def training_state(model: Any, optimizer: Any, scaler: Any = None, scheduler: Any = None, **extra: Any) -> dict:
    """What a checkpoint must hold to resume mixed precision training exactly: the model's, the optimizer's,
    the GradScaler's (its current scale and growth tracker; without it a resumed fp16 run starts again at 2^16
    and skips steps finding its scale) and the scheduler's ``state_dict()``. Save with ``torch.save``; resume
    with each object's ``load_state_dict``.

    Example:
        >>> import torch
        >>> from gpulab import course
        >>> m = course.models.mlp(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
        >>> sorted(training_state(m, opt, torch.amp.GradScaler("cpu"), step=10))
        ['model', 'optimizer', 'scaler', 'step']
    """
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    if scaler is not None:
        state["scaler"] = scaler.state_dict()
    if scheduler is not None:
        state["scheduler"] = scheduler.state_dict()
    state.update(extra)
    return state


def evaluate_autocast(model: Any, batch: tuple[Any, Any], precision: str = "fp32") -> float:
    """Accuracy of ``model`` on ``batch`` in eval mode, under ``torch.no_grad()`` and the training precision's
    autocast (evaluation runs the same 16-bit kernels as training, and stores no graph).

    Example:
        >>> from gpulab import course
        >>> 0.0 <= evaluate_autocast(course.models.mlp(), course.models.example_batch("mlp", 16), "bf16") <= 1.0
        True
    """
    import torch

    x, y = batch
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), _autocast(x.device.type, precision):
            acc = (model(x).argmax(dim=1) == y).float().mean().item()
    finally:
        model.train(was_training)
    return acc
