"""Exercises that teach: self-checks that wait for the learner, measured challenges, and reference solutions that
run only in CI.

- :func:`check` ticks a right answer, raises ``AssertionError`` with a hint for a wrong one, and shows
  "not answered yet" (without stopping Run All) while the answer is still ``None``.
- :func:`challenge` measures the learner's code against a baseline on *their* machine (interleaved runs, so
  background load slows both alike), checks that it computes the same thing, and says by how much it passed
  or missed the target speedup.
- :func:`solutions` is true only where ``GPULAB_SOLUTIONS=1`` is set (``make test`` and CI set it): the
  reference-solution cells run under ``if course.solutions():``, so a learner's Run All never answers for them.

Example:
    >>> from gpulab import course
    >>> course.check("two plus two", 2 + 2, 4)
    [ok] two plus two: 4 is right
    >>> course.check("two plus two", None, 4)
    [ ] two plus two: not answered yet - write your answer in the exercise cell above, then run this cell again
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable

from ..._check import checked

__all__ = ["check", "Check", "NotAnswered", "challenge", "Challenge", "solutions", "SOLUTIONS_ENV"]

SOLUTIONS_ENV = "GPULAB_SOLUTIONS"   # "1": reference solutions run (tests and CI); unset for learners


def solutions() -> bool:
    """True when the reference solutions should run: ``GPULAB_SOLUTIONS=1`` (set by ``make test`` / CI).

    Example:
        >>> import os; from gpulab import course
        >>> os.environ.pop("GPULAB_SOLUTIONS", None) is None or True
        True
        >>> course.solutions()
        False
    """
    return os.environ.get(SOLUTIONS_ENV, "").strip() == "1"


@dataclass(frozen=True)
class Check:
    """A passed self-check (a failed one raises ``AssertionError`` with a hint)."""

    name: str
    message: str

    def __repr__(self) -> str:
        return f"[ok] {self.name}: {self.message}"

    def _repr_html_(self) -> str:
        return f'<div style="color:#1b7a2b"><b>&#10003; {_esc(self.name)}</b>: {_esc(self.message)}</div>'


@dataclass(frozen=True)
class NotAnswered:
    """An exercise still waiting for the learner's answer: shown, not raised, so Run All goes on."""

    name: str

    @property
    def message(self) -> str:
        return "not answered yet - write your answer in the exercise cell above, then run this cell again"

    def __repr__(self) -> str:
        return f"[ ] {self.name}: {self.message}"

    def _repr_html_(self) -> str:
        return f'<div style="color:#8a6d00"><b>&#9744; {_esc(self.name)}</b>: {_esc(self.message)}</div>'


@dataclass(frozen=True)
class CannotRunHere:
    """An exercise's check this machine's stack cannot run (``reason`` says why and what to install): shown, not
    raised, so Run All goes on; nothing about the answer is claimed."""

    name: str
    reason: str

    def __repr__(self) -> str:
        return f"[ ] {self.name}: not checked here - {self.reason}"

    def _repr_html_(self) -> str:
        return (f'<div style="color:#8a6d00"><b>&#9744; {_esc(self.name)}</b>: not checked here - '
                f'{_esc(self.reason)}</div>')


def _esc(s: str) -> str:
    import html

    return html.escape(str(s))


def _close(got: Any, expected: Any, rtol: float) -> bool:
    if isinstance(expected, bool) or isinstance(got, bool) or isinstance(expected, str):
        return got == expected
    if isinstance(expected, (int, float)):
        return isinstance(got, (int, float)) and math.isclose(float(got), float(expected), rel_tol=rtol,
                                                              abs_tol=1e-12)
    if isinstance(expected, (list, tuple)):
        return isinstance(got, (list, tuple)) and len(got) == len(expected) and \
            all(_close(g, e, rtol) for g, e in zip(got, expected))
    return got == expected


def check(name: str, got: Any, expected: Any, *, rtol: float = 0.02, hint: str = "") -> Check | NotAnswered:
    """Self-check for an exercise: a tick when ``got`` equals ``expected`` (numbers within ``rtol``), an
    ``AssertionError`` saying what was expected and how to get there when it does not, and "not answered yet"
    (no error) while ``got`` is None.

    Example:
        >>> check("two plus two", 2 + 2, 4)
        [ok] two plus two: 4 is right
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty text naming the exercise, got {name!r}")
    if not isinstance(rtol, (int, float)) or isinstance(rtol, bool) or not 0 <= rtol < float("inf"):
        raise ValueError(f"rtol must be a relative tolerance, a finite number >= 0, got {rtol!r}")
    if not isinstance(hint, str):
        raise TypeError(f"hint must be a text (how to get there), got {hint!r}")
    if got is None:
        return NotAnswered(name)
    if not _close(got, expected, rtol):
        raise AssertionError(f"{name}: got {got!r}, expected {expected!r}"
                             + (f" (within {rtol:.0%})" if isinstance(expected, float) else "")
                             + (f". Hint: {hint}" if hint else ""))
    return Check(name, f"{got!r} is right")


@dataclass(frozen=True)
class Challenge:
    """A measured challenge's result: the learner's code against the baseline, on this machine."""

    name: str
    device: str
    baseline_s: float            # median seconds per call of the baseline
    yours_s: float               # ... and of the learner's code
    target_speedup: float
    same_result: bool | None     # the correctness check, None when none was given
    noisy: bool

    @property
    def speedup(self) -> float:
        return self.baseline_s / self.yours_s

    @property
    def passed(self) -> bool:
        return self.speedup >= self.target_speedup and self.same_result is not False

    def __repr__(self) -> str:
        mark = "[ok]" if self.passed else "[x]"
        how = (f"{self.speedup:.2f}x the baseline's speed on {self.device} (target {self.target_speedup:g}x: "
               + (f"passed by {self.speedup / self.target_speedup - 1:.0%})" if self.speedup >= self.target_speedup
                  else f"missed by {1 - self.speedup / self.target_speedup:.0%})"))
        extra = "" if self.same_result is not False else "; but it does not compute the same result"
        noise = "; the timings were noisy: run it again before concluding" if self.noisy else ""
        return f"{mark} {self.name}: {how}{extra}{noise}"

    def _repr_html_(self) -> str:
        colour = "#1b7a2b" if self.passed else "#b00020"
        return f'<div style="color:{colour}">{_esc(repr(self))}</div>'


@checked(device="device")
def challenge(name: str, baseline: Callable[[], Any], yours: Callable[[], Any] | None, *, speedup: float = 2.0,
              same: Callable[[Any, Any], bool] | None = None, min_run_time: float = 1.0,
              device: Any = None) -> Challenge | NotAnswered:
    """A measured challenge: time ``yours`` against ``baseline`` (no arguments each, interleaved by
    :func:`gpulab.benchmark_interleaved`) on this machine, check ``same(baseline(), yours())`` when given, and
    pass when ``yours`` is at least ``speedup`` times faster and computes the same thing. A miss raises
    ``AssertionError`` saying by how much (so a reference solution that stops passing fails CI); ``yours=None``
    shows "not answered yet".

    Example:
        >>> from gpulab import course
        >>> slow = lambda: sum(i * i for i in range(20000))
        >>> fast = lambda: 20000 * 19999 * 39999 // 6 - 0
        >>> course.challenge("closed form", slow, fast, speedup=2, same=lambda a, b: a == b, min_run_time=0.2).passed
        True
    """
    if yours is None:
        return NotAnswered(name)
    if not callable(baseline) or not callable(yours):
        raise TypeError(f"baseline and yours must be functions without arguments, got {baseline!r}, {yours!r}")
    if not isinstance(speedup, (int, float)) or isinstance(speedup, bool) or speedup <= 0:
        raise ValueError(f"speedup must be a target ratio > 0 (e.g. 2.0 for twice as fast), got {speedup!r}")
    from ...interleaved import benchmark_interleaved
    from ...system import device_kind

    same_result = None if same is None else bool(same(baseline(), yours()))
    runs = benchmark_interleaved({"baseline": baseline, "yours": yours}, min_run_time=min_run_time, device=device)
    result = Challenge(name, str(device) if device is not None else device_kind(), runs["baseline"].median_s,
                       runs["yours"].median_s, float(speedup), same_result,
                       bool(runs["baseline"].noisy or runs["yours"].noisy))
    if not result.passed:
        raise AssertionError(repr(result))
    return result
