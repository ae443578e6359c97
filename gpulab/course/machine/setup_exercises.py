"""Lesson 01's exercise checks: which GPUs ``CUDA_VISIBLE_DEVICES`` leaves a process, which compiled kernels run on
a T4, and which of ``nvidia-smi``'s clock event reasons mean the card was slowed by heat or hardware protection.

Each ``check_*`` compares the learner's answer with the rule gpulab itself applies (``gl.doctor()``'s kernel rule,
the device order of ``gpulab.telemetry``, NVML's reasons), shows "not answered yet" while the answer is None and
raises ``AssertionError`` with a hint on a wrong one.

Example:
    >>> from gpulab import course
    >>> course.cuda_visible("3,1", 4), course.cuda_visible("0,2,-1,1", 4)
    ((3, 1), (0, 2))
    >>> course.kernels_run_on(["sm_80", "compute_70"], "T4")
    True
"""
from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Sequence

from ..lesson.checks import Check, NotAnswered, check
from .nvidia_smi import CLOCK_EVENT_REASONS, active_reasons, nvidia_smi

__all__ = ["VISIBLE_CASES", "ARCH_CASES", "SLOWDOWN_REASONS", "cuda_visible", "check_visible", "kernels_run_on",
           "check_kernels", "slowdown_reasons", "check_slowdown_reader"]

VISIBLE_CASES: tuple[str, ...] = ("", "2", "3,1", "1,7,2", "0,2,-1,1")
ARCH_CASES: tuple[tuple[str, ...], ...] = (("sm_75",), ("sm_70",), ("sm_86",), ("sm_80", "sm_90"),
                                           ("sm_80", "compute_70"), ("sm_90", "compute_90"))
# The reasons that mean the card ran slower than it is built to: heat, or hardware protection.
SLOWDOWN_REASONS: tuple[str, ...] = ("HW Slowdown", "HW Thermal Slowdown", "HW Power Brake Slowdown",
                                     "SW Thermal Slowdown")


def cuda_visible(value: str | None, gpus: int) -> tuple[int, ...]:
    """The ``nvidia-smi`` indices of the GPUs a CUDA process sees, in its own order (``cuda:0`` first), on a
    machine of ``gpus`` identical GPUs with ``CUDA_VISIBLE_DEVICES=value`` (None: unset). CUDA reads the entries
    in order and stops at the first that names no GPU.

    Example:
        >>> cuda_visible(None, 2), cuda_visible("", 2), cuda_visible("1", 2)
        ((0, 1), (), (1,))
    """
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise ValueError(f"gpus must be a whole number >= 0, got {gpus!r}")
    if value is None:
        return tuple(range(gpus))
    if not isinstance(value, str):
        raise TypeError(f"value must be CUDA_VISIBLE_DEVICES's text (e.g. '1,0') or None, got {value!r}")
    seen: list[int] = []
    for token in value.split(","):
        t = token.strip()
        if not t.isdigit() or int(t) >= gpus:
            break
        if int(t) in seen:   # a GPU named twice leaves none visible (as torch reads the variable)
            return ()
        seen.append(int(t))
    return tuple(seen)


def check_visible(answers: Mapping[str, Sequence[int]] | None, gpus: int = 4) -> Check | NotAnswered:
    """Check the learner's ``{value: (nvidia-smi indices in CUDA's order)}`` for each of :data:`VISIBLE_CASES`.

    Example:
        >>> check_visible({v: cuda_visible(v, 4) for v in VISIBLE_CASES})
        [ok] CUDA_VISIBLE_DEVICES on four GPUs: 5 cases right
    """
    name = "CUDA_VISIBLE_DEVICES on four GPUs" if gpus == 4 else f"CUDA_VISIBLE_DEVICES on {gpus} GPUs"
    if answers is None:
        return check(name, None, None)
    if not isinstance(answers, Mapping):
        raise TypeError(f"answers must be a dict {{value: tuple of GPU indices}}, got {type(answers).__name__}")
    missing = [v for v in VISIBLE_CASES if v not in answers]
    if missing:
        raise AssertionError(f"{name}: no answer for CUDA_VISIBLE_DEVICES={missing!r}: give a tuple for each of "
                             f"{list(VISIBLE_CASES)}")
    got = [tuple(int(i) for i in answers[v]) for v in VISIBLE_CASES]
    want = [cuda_visible(v, gpus) for v in VISIBLE_CASES]
    wrong = [v for v, g, w in zip(VISIBLE_CASES, got, want) if g != w]
    if wrong:
        raise AssertionError(f"{name}: wrong for CUDA_VISIBLE_DEVICES={wrong!r}. Hint: entries are read left to "
                             "right, each names a GPU by its index, the order given is the order CUDA numbers them, "
                             "and reading stops at the first entry that names no GPU")
    return Check(name, f"{len(VISIBLE_CASES)} cases right")


def kernels_run_on(arch_list: Sequence[str], gpu: str) -> bool:
    """Whether a build carrying ``arch_list`` (as ``torch.cuda.get_arch_list()`` prints it) has kernels ``gpu`` can
    run, by the rule ``gl.doctor()`` applies: a cubin ``sm_XY`` runs on the same major version with minor >= Y;
    PTX ``compute_XY`` is compiled by the driver for compute capability X.Y or newer.

    Example:
        >>> kernels_run_on(["sm_86"], "T4"), kernels_run_on(["sm_70"], "T4")
        (False, True)
    """
    from ...diagnosis import _has_kernels
    from ...reference import gpu_spec

    if isinstance(arch_list, str) or not all(isinstance(a, str) for a in arch_list):
        raise TypeError(f"arch_list must be a list of texts such as ['sm_75', 'compute_75'], got {arch_list!r}")
    return _has_kernels(list(arch_list), gpu_spec(gpu).compute_capability)


def check_kernels(answers: Sequence[bool] | None, gpu: str = "T4") -> Check | NotAnswered:
    """Check the learner's True/False per arch list of :data:`ARCH_CASES`: can ``gpu`` run that build's kernels?

    Example:
        >>> check_kernels([kernels_run_on(a, "T4") for a in ARCH_CASES])
        [ok] builds that run on a T4: 6 cases right
    """
    name = f"builds that run on a {gpu}"
    if answers is None:
        return check(name, None, None)
    got = list(answers)
    if len(got) != len(ARCH_CASES) or not all(isinstance(a, bool) for a in got):
        raise AssertionError(f"{name}: give {len(ARCH_CASES)} answers, True or False, one per list in order: "
                             f"{[list(a) for a in ARCH_CASES]}")
    want = [kernels_run_on(a, gpu) for a in ARCH_CASES]
    wrong = [list(a) for a, g, w in zip(ARCH_CASES, got, want) if g != w]
    if wrong:
        raise AssertionError(f"{name}: wrong for {wrong}. Hint: look up the {gpu}'s compute capability "
                             "(gl.gpu_spec), then apply the cubin rule to sm_ entries and the PTX rule to "
                             "compute_ ones")
    return Check(name, f"{len(ARCH_CASES)} cases right")


def slowdown_reasons(text: str) -> list[str]:
    """The Active reasons of ``nvidia-smi -q -d PERFORMANCE`` that mean heat or hardware protection slowed the card
    (not idling, a clock setting or the power cap).

    Example:
        >>> slowdown_reasons(nvidia_smi(["-q", "-d", "PERFORMANCE"], which=lambda _: None).text)
        []
    """
    return [r for r in active_reasons(text) if r in SLOWDOWN_REASONS]


_STATE = re.compile(r"^(?P<head>\s*(?P<name>[A-Za-z][A-Za-z ]*?)\s*:\s*)(?:Active|Not Active)\s*$")


def _with_active(text: str, active: set[str]) -> str:
    """``text`` with each reason line set Active exactly when its name is in ``active``."""
    out = []
    for line in text.splitlines():
        m = _STATE.match(line)
        if m and m["name"] in CLOCK_EVENT_REASONS:
            line = m["head"] + ("Active" if m["name"] in active else "Not Active")
        out.append(line)
    return "\n".join(out) + "\n"


_VARIANTS: tuple[frozenset[str], ...] = (
    frozenset({"SW Power Cap"}), frozenset({"HW Slowdown", "HW Thermal Slowdown", "SW Power Cap"}),
    frozenset({"Idle"}), frozenset({"SW Thermal Slowdown", "Applications Clocks Setting"}),
    frozenset({"HW Slowdown", "HW Power Brake Slowdown"}), frozenset())


def check_slowdown_reader(reader: Callable[[str], Any] | None, text: str | None = None) -> Check | NotAnswered:
    """Check the learner's ``reader(text)`` (the Active reasons of a ``nvidia-smi -q -d PERFORMANCE`` report that
    mean heat or hardware protection) on ``text`` (default: the report :func:`nvidia_smi` gives here) and on
    copies of it with other reasons Active, so an answer written for one report fails.

    Example:
        >>> check_slowdown_reader(slowdown_reasons)
        [ok] slowdown reasons: 7 reports right
    """
    name = "slowdown reasons"
    if reader is None:
        return check(name, None, None)
    if not callable(reader):
        raise TypeError(f"reader must be a function reader(text) -> list of reason names, got {reader!r}")
    if text is None:
        text = nvidia_smi(["-q", "-d", "PERFORMANCE"]).text
    if not active_reasons(_with_active(text, set(CLOCK_EVENT_REASONS))):   # no reason lines: use the illustration
        text = nvidia_smi(["-q", "-d", "PERFORMANCE"], which=lambda _: None).text
    reports = [text] + [_with_active(text, set(v)) for v in _VARIANTS]
    for report in reports:
        got, want = reader(report), slowdown_reasons(report)
        if got is None or sorted(got) != sorted(want):
            shown = "\n".join(line for line in report.splitlines() if _STATE.match(line))
            raise AssertionError(f"{name}: for the report whose reasons read\n{shown}\nyour reader gave {got!r}, "
                                 f"expected {want!r}. Hint: keep the lines marked exactly 'Active', then only the "
                                 "reasons that mean heat or hardware protection (course.CLOCK_EVENT_REASONS says "
                                 "what each means)")
    return Check(name, f"{len(reports)} reports right")
