"""Lesson 00's exercise checks: a Linear layer's arithmetic intensity, written by the learner and checked against
FLOPs counted by ``torch.utils.flop_counter`` and bytes counted from the tensors, and the smallest batch at which
the layer is compute-bound against a ridge point.

Example:
    >>> from gpulab import course
    >>> course.check_linear_intensity(lambda batch, width, bytes_per_number: 2 * batch * width * width /
    ...                               (bytes_per_number * (width * width + 2 * batch * width)))
    [ok] Linear layer intensity: 4 cases right
    >>> course.compute_bound_batch(200.6, 8192, 2)
    256
"""
from __future__ import annotations

from typing import Callable

from ..lesson.checks import Check, NotAnswered, check

__all__ = ["LINEAR_CASES", "linear_work", "check_linear_intensity", "compute_bound_batch"]

# (batch, width, dtype): the cases a learner's intensity function must get right (fp32 and both 16-bit formats)
LINEAR_CASES: tuple[tuple[int, int, str], ...] = ((1, 512, "float32"), (64, 512, "float32"), (256, 256, "float16"),
                                                  (32, 1024, "bfloat16"))


def linear_work(batch: int, width: int, dtype: str = "float32") -> tuple[int, int]:
    """FLOPs (counted by ``torch.utils.flop_counter`` on a ``batch x width`` input through a ``width x width``
    weight, no bias) and bytes moved when the weights, the input and the output are each read or written once.

    Example:
        >>> linear_work(1, 512)
        (524288, 1052672)
    """
    import torch

    from ...roofline import count_flops

    dt = getattr(torch, dtype)
    x, w = torch.zeros(batch, width, dtype=dt), torch.zeros(width, width, dtype=dt)
    flops = int(count_flops(torch.nn.functional.linear, x, w))
    size = x.element_size()
    return flops, (w.numel() + x.numel() + batch * width) * size


def check_linear_intensity(intensity: Callable[[int, int, int], float] | None) -> Check | NotAnswered:
    """Check the learner's ``intensity(batch, width, bytes_per_number)`` (FLOPs per byte of a bias-free Linear
    layer) on :data:`LINEAR_CASES`; "not answered yet" while it is None, ``AssertionError`` on a wrong value.

    Example:
        >>> check_linear_intensity(None)
        [ ] Linear layer intensity: not answered yet - write your answer in the exercise cell above, then run this cell again
    """
    name = "Linear layer intensity"
    if intensity is None:
        return check(name, None, None)
    if not callable(intensity):
        raise TypeError(f"intensity must be a function intensity(batch, width, bytes_per_number), got {intensity!r}")
    import torch

    got, want = [], []
    for batch, width, dtype in LINEAR_CASES:
        flops, moved = linear_work(batch, width, dtype)
        got.append(intensity(batch, width, getattr(torch, dtype).itemsize))
        want.append(flops / moved)
    shapes = [(b, w, getattr(torch, d).itemsize) for b, w, d in LINEAR_CASES]
    result = check(name, got, want, rtol=0.01,
                   hint=f"for (batch, width, bytes) = {shapes}; FLOPs: a multiply and an add per weight per row "
                        "of the batch; bytes: every number of the weights, the input and the output, once each")
    return Check(name, f"{len(LINEAR_CASES)} cases right") if isinstance(result, Check) else result


def compute_bound_batch(ridge: float, width: int, bytes_per_number: int, *, limit: int = 2**24) -> int | None:
    """The smallest power-of-two batch at which a bias-free ``width``-wide Linear layer (numbers of
    ``bytes_per_number`` bytes) reaches the ``ridge`` point (FLOPs per byte); None when no batch up to ``limit``
    does (its intensity never exceeds width / bytes_per_number).

    Example:
        >>> compute_bound_batch(10.0, 4096, 4), compute_bound_batch(5000.0, 4096, 4)
        (32, None)
    """
    if isinstance(ridge, bool) or not isinstance(ridge, (int, float)) or not ridge > 0:
        raise ValueError(f"ridge must be FLOPs per byte > 0 (e.g. limits.ridge_point('float32')), got {ridge!r}")
    for name, v in (("width", width), ("bytes_per_number", bytes_per_number), ("limit", limit)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {v!r}")
    batch = 1
    while batch <= limit:
        if 2 * batch * width * width / (bytes_per_number * (width * width + 2 * batch * width)) >= ridge:
            return batch
        batch *= 2
    return None
