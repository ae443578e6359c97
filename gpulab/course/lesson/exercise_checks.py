"""The checks of exercises whose answer is worked out from a lesson's measurements (lessons 06, 08 and 09): each
computes the expected answer from the measured objects itself, so the notebook's check cell does not show it, and
each fails (``AssertionError``) on a wrong answer and waits ("not answered yet") on ``None``, as
:func:`~gpulab.course.check` does.

Example:
    >>> from types import SimpleNamespace as Run
    >>> from gpulab import course
    >>> course.check_workers_needed(3, Run(label="loader", items_per_s=400.0), 1000.0)
    [ok] workers needed to keep up: 3 is right
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable

from .checks import Check, NotAnswered, check

__all__ = ["check_faster_loading", "check_loaders_that_keep_up", "check_workers_needed", "check_phase_bound",
           "check_calls_per_item", "check_bytes_per_parameter", "check_running_total"]


def _number(name: str, value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TypeError(f"{name} must be {what}, got {value!r}")
    return float(value)


def check_faster_loading(answer: float | None, run: Any) -> Check | NotAnswered:
    """Lesson 06: the images/s of ``run`` (a :class:`gpulab.data.LoaderRun`) had each batch's data wait taken half
    as long, the rest of its wall time unchanged.

    Example:
        >>> from types import SimpleNamespace as Run
        >>> type(check_faster_loading(100 / 6, Run(items=100, wall_s=8.0, data_wait_s=4.0))).__name__
        'Check'
    """
    wall, wait = _number("run.wall_s", run.wall_s, "seconds"), _number("run.data_wait_s", run.data_wait_s, "seconds")
    return check("images/s with loading twice as fast", answer, run.items / (wall - wait / 2), rtol=0.02,
                 hint="only the waiting gets shorter: work out the new wall time of the same images first")


def check_loaders_that_keep_up(answer: Iterable[str] | None, alone: Iterable[Any], limit: float
                               ) -> Check | NotAnswered:
    """Lesson 06: the labels of the loaders in ``alone`` (runs without a step) that deliver at least ``limit``
    images/s (the compute-only limit), in any order; an empty list when none does.

    Example:
        >>> from types import SimpleNamespace as Run
        >>> runs = [Run(label="a", items_per_s=50.0), Run(label="b", items_per_s=500.0)]
        >>> type(check_loaders_that_keep_up(["b"], runs, 100.0)).__name__
        'Check'
    """
    limit = _number("limit", limit, "the compute-only limit in images/s")
    expected = sorted(r.label for r in alone if r.items_per_s >= limit)
    if answer is not None and (isinstance(answer, str) or not all(isinstance(a, str) for a in answer)):
        raise TypeError(f"answer must be a list of loader labels (texts), got {answer!r}")
    return check("loaders that keep up with the step", None if answer is None else sorted(answer), expected,
                 hint="a loader keeps the step fed when it alone delivers at least as many images/s as the step can "
                      "consume; compare each row of the loaders-alone table with the compute-only limit")


def check_workers_needed(answer: int | None, alone: Any, limit: float) -> Check | NotAnswered:
    """Lesson 06: the fewest workers, each as fast as the loader ``alone`` (one process), that together deliver
    at least ``limit`` images/s, if they add up linearly.

    Example:
        >>> from types import SimpleNamespace as Run
        >>> check_workers_needed(2, Run(label="loader", items_per_s=400.0), 1000.0)
        Traceback (most recent call last):
        ...
        AssertionError: workers needed to keep up: got 2, expected 3. Hint: k workers deliver k times what one does; the answer is a whole number of workers
    """
    rate, limit = _number("alone.items_per_s", alone.items_per_s, "images/s"), _number("limit", limit, "images/s")
    if answer is not None and (isinstance(answer, bool) or not isinstance(answer, int)):
        raise TypeError(f"answer must be a whole number of workers, got {answer!r}")
    return check("workers needed to keep up", answer, max(1, math.ceil(limit / rate)),
                 hint="k workers deliver k times what one does; the answer is a whole number of workers")


def check_phase_bound(answer: float | None, profile: Any, phase: str = "data") -> Check | NotAnswered:
    """Lesson 08: the largest speedup of the profiled step if ``phase`` took no time at all (Amdahl's law on its
    share of the step, ``profile.share(phase)``).

    Example:
        >>> from types import SimpleNamespace as Prof
        >>> type(check_phase_bound(4.0, Prof(share=lambda phase: 0.75))).__name__
        'Check'
    """
    share = _number("the phase's share", profile.share(phase), "a share from 0 to 1")
    return check(f"speedup bound if the {phase} phase took no time", answer,
                 math.inf if share >= 1 else 1 / (1 - share), rtol=0.02,
                 hint="what is left of a step when that phase costs nothing, and how much faster is that?")


def check_calls_per_item(answer: int | None, before: Any, after: Any, batch: int) -> Check | NotAnswered:
    """Lesson 08: operator calls per item that the change from ``before`` to ``after`` (profiles) removed: their
    difference in ``op_calls_per_step``, per item of a ``batch``, rounded.

    Example:
        >>> from types import SimpleNamespace as Prof
        >>> type(check_calls_per_item(4, Prof(op_calls_per_step=530.0), Prof(op_calls_per_step=18.0), 128)).__name__
        'Check'
    """
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be the batch size (a whole number >= 1), got {batch!r}")
    removed = (_number("before.op_calls_per_step", before.op_calls_per_step, "calls per step")
               - _number("after.op_calls_per_step", after.op_calls_per_step, "calls per step"))
    if answer is not None and (isinstance(answer, bool) or not isinstance(answer, int)):
        raise TypeError(f"answer must be a whole number of calls per item, got {answer!r}")
    return check("operator calls per item of the per-item loss", answer, round(removed / batch),
                 hint="the two profiles' operator calls per step differ by the loop's calls; the loop runs once per "
                      "item of the batch")


def check_bytes_per_parameter(answer: float | None, make_optimizer: Callable[[Any], Any]) -> Check | NotAnswered:
    """Lesson 09: the bytes per parameter of weights, gradients and optimizer state for the optimizer
    ``make_optimizer(parameters)`` builds, in fp32: measured after one step of a small MLP.

    Example:
        >>> import torch
        >>> type(check_bytes_per_parameter(12, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9))).__name__
        'Check'
    """
    if not callable(make_optimizer):
        raise TypeError(f"make_optimizer must build an optimizer from parameters, got {make_optimizer!r}")
    import torch

    from . import models

    torch.manual_seed(0)
    model = models.mlp(hidden=32)
    optimizer = make_optimizer(model.parameters())
    x, y = models.example_batch("mlp", 8)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
    params = list(model.parameters())
    n = sum(p.numel() for p in params)
    state = sum(v.numel() * v.element_size() for s in optimizer.state.values() for v in s.values()
                if isinstance(v, torch.Tensor) and v.dim() > 0)         # per-parameter tensors, not step counters
    measured = (sum(p.numel() * p.element_size() for p in params) + sum(p.grad.numel() * p.grad.element_size()
                                                                          for p in params) + state) / n
    return check("bytes per parameter (weights + gradients + optimizer state)", answer, measured, rtol=0.02,
                 hint="an fp32 number takes 4 bytes: count the weight, its gradient, and each tensor the optimizer's "
                      "documentation says it keeps per parameter")


def check_running_total(fixed: Callable[[Any], Any] | None, model: Any, batch: tuple[Any, Any], *, steps: int = 4
                        ) -> Check | NotAnswered:
    """Lesson 09: ``fixed(total)`` adds one evaluation loss of ``model`` on ``batch`` to ``total`` and returns the
    new total. Passes when ``steps`` calls leak no memory, one call makes no host sync, and the total equals
    the sum of the losses.

    Example:
        >>> import torch
        >>> from gpulab import course
        >>> model, batch = course.models.mlp(hidden=16), course.models.example_batch("mlp", 8)
        >>> def fixed(total):
        ...     with torch.no_grad():
        ...         return total + torch.nn.functional.cross_entropy(model(batch[0]), batch[1])
        >>> type(check_running_total(fixed, model, batch)).__name__
        'Check'
    """
    if fixed is None:
        return NotAnswered("a running total that neither leaks nor syncs")
    if not callable(fixed):
        raise TypeError(f"fixed must be a function taking the total so far and returning the new one, got {fixed!r}")
    import torch

    from ...memory import memory_growth
    from ...transfer import find_host_syncs

    x, y = batch
    with torch.no_grad():
        loss = float(torch.nn.functional.cross_entropy(model(x), y))
    state = {"total": torch.zeros((), device=x.device), "calls": 0}

    def step() -> None:
        state["total"] = fixed(state["total"])
        state["calls"] += 1

    growth = memory_growth(step, steps=steps, label="your running total")
    syncs = find_host_syncs(step).total
    total = state["total"]
    right = isinstance(total, torch.Tensor) and math.isclose(float(total.detach()), state["calls"] * loss,
                                                             rel_tol=1e-4)
    return check("a running total that neither leaks nor syncs",
                 ["leaks" if growth.leaks else "no leak", f"{syncs} host syncs per call",
                  "right total" if right else f"a wrong total ({total!r} after {state['calls']} calls)"],
                 ["no leak", "0 host syncs per call", "right total"],
                 hint="the total must not hold any step's graph, and reading a value on the host at every step is a "
                      "sync (lesson 02): keep the total a tensor on the device")
