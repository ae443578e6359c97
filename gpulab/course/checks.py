"""Exercise self-checks: a tick when the learner's answer is right, an ``AssertionError`` with a hint otherwise.

Example:
    >>> from gpulab import course
    >>> course.check("two plus two", 2 + 2, 4)
    [ok] two plus two: 4 is right
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["check", "Check"]


@dataclass(frozen=True)
class Check:
    """A passed self-check (a failed one raises ``AssertionError`` with a hint)."""

    name: str
    message: str

    def __repr__(self) -> str:
        return f"[ok] {self.name}: {self.message}"

    def _repr_html_(self) -> str:
        return f'<div style="color:#1b7a2b"><b>&#10003; {self.name}</b>: {self.message}</div>'


def _close(got: Any, expected: Any, rtol: float) -> bool:
    import math

    if isinstance(expected, bool) or isinstance(got, bool) or isinstance(expected, str):
        return got == expected
    if isinstance(expected, (int, float)):
        return isinstance(got, (int, float)) and math.isclose(float(got), float(expected), rel_tol=rtol,
                                                              abs_tol=1e-12)
    if isinstance(expected, (list, tuple)):
        return isinstance(got, (list, tuple)) and len(got) == len(expected) and \
            all(_close(g, e, rtol) for g, e in zip(got, expected))
    return got == expected


def check(name: str, got: Any, expected: Any, *, rtol: float = 0.02, hint: str = "") -> Check:
    """Self-check for an exercise: passes quietly with a tick, or raises ``AssertionError`` saying
    what was expected and how to get there. ``rtol`` is the relative tolerance for numbers.

    Example:
        >>> check("two plus two", 2 + 2, 4)
        [ok] two plus two: 4 is right
    """
    if got is None:
        raise AssertionError(f"{name}: no answer yet - fill in the exercise cell above. {hint}".strip())
    if not _close(got, expected, rtol):
        raise AssertionError(f"{name}: got {got!r}, expected {expected!r}"
                             + (f" (within {rtol:.0%})" if isinstance(expected, float) else "")
                             + (f". Hint: {hint}" if hint else ""))
    return Check(name, f"{got!r} is right")
