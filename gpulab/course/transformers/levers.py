"""Lesson 13's predicted gains: what each training lever can win at most, read from a profile of the plain step.

Each lever speeds up one part of the step and leaves the rest as it was, so Amdahl's law bounds its gain: if the
part it acts on is a share ``s`` of the step and gets ``k`` times faster, the step gets at most
``1 / ((1 - s) + s / k)`` times faster (``1 / (1 - s)`` if that part vanished). The parts come from
``gl.profile``'s attribution (host self time on a CPU, device time on a GPU):

- **16-bit autocast** acts on the matrix products (matmuls and SDPA): at most as much faster as this machine's
  measured 16-bit matmul peak over its fp32 one (``gl.machine_limits``); the elementwise work moves half the
  bytes, which this bound leaves out.
- **fused AdamW** acts on the optimizer's phase: one kernel for the update instead of several per tensor; bound by
  the phase vanishing.
- **compiled blocks** act on the elementwise operators and the norms and reductions (fusion keeps them from
  re-reading memory); bound by their vanishing, as a launch-bound GPU step nearly gets.
- **a larger micro-batch** shares the time outside every operator (a CPU's Python between operators; a GPU's idle
  time) over more tokens: bound by that time vanishing per token.
- **the whole model compiled with CUDA graphs** (on a GPU) replays each step's kernels with one launch and fuses as
  compiled blocks do: bound by the device's idle time and the fusable operators vanishing together. It runs after
  the micro-batch lever, which shares the same idle time: what the bound offers, the two split.

Each bound holds only for the part named: a lever that also helps elsewhere can beat it (autocast halves the bytes
the elementwise operators move; a larger micro-batch runs its matrix products nearer the peak), and one that costs
elsewhere falls short of it (autocast adds casts). The measured gains set beside these say which happened.

Example:
    >>> from gpulab.profiling import Attribution
    >>> a = Attribution(1.0, 1, "host self time", (("forward", 0.4), ("backward", 0.4), ("optimizer", 0.2)),
    ...                 (("matmul/conv", 0.6), ("elementwise", 0.1), ("outside any operator", 0.1)))
    >>> b = lever_bounds(a, peaks={"float32": 1e11, "bfloat16": 4e11}, low_precision="bfloat16")
    >>> round(b.bound("bf16 autocast"), 2), round(b.bound("fused AdamW"), 2)
    (1.82, 1.25)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from ..._format import html_table, text_table

__all__ = ["LeverBound", "LeverBounds", "LeverGains", "lever_bounds"]

_OUTSIDE = ("outside any operator", "device idle")
_FUSABLE = ("elementwise", "reductions/norms", "views/allocations")


@dataclass(frozen=True)
class LeverBound:
    """One lever: the part of the step it acts on (``share`` of the step), how many times faster it can make that
    part (``factor``; None: the part can vanish) and Amdahl's bound on the step's gain."""

    lever: str
    acts_on: str
    share: float
    factor: float | None

    @property
    def bound(self) -> float:
        rest = 1.0 - self.share
        if self.factor is None:
            return math.inf if rest <= 0 else 1.0 / rest
        return 1.0 / (rest + self.share / self.factor)


@dataclass(frozen=True, repr=False)
class LeverBounds:
    """:func:`lever_bounds`'s table: one :class:`LeverBound` per lever, from a profile whose time is ``basis``."""

    basis: str
    levers: tuple[LeverBound, ...]
    notes: tuple[str, ...] = ()

    def bound(self, lever: str) -> float | None:
        """Amdahl's bound on the step's gain from ``lever`` (None: not in the table)."""
        return next((b.bound for b in self.levers if b.lever == lever), None)

    def against(self, steps: Any) -> "LeverGains":
        """Each lever's Amdahl figure beside its measured gain in an ablation's ``steps`` (``AblationStep``s: a
        lever's step has its label, or "label: variant" for a lever tried in several variants, such as the
        micro-batch's; then the kept variant, else the fastest)."""
        rows = []
        for b in self.levers:
            mine = [st for st in steps if st.label == b.lever or st.label.startswith(f"{b.lever}: ")]
            if not mine:
                continue
            st = next((st for st in mine if st.decision == "kept"), None) or max(
                mine, key=lambda st: st.gain if st.gain is not None else -1.0)
            label = b.lever if st.label == b.lever else f"{b.lever} ({st.label.split(': ', 1)[1]})"
            rows.append((label, b.bound, st.gain, st.decision))
        return LeverGains(self.basis, tuple(rows))

    def _rows(self) -> list[tuple[str, str, str, str, str]]:
        return [(b.lever, b.acts_on, f"{b.share:.0%}", "vanishes" if b.factor is None else f"{b.factor:.1f}x faster",
                 "unbounded" if math.isinf(b.bound) else f"{b.bound:.2f}x") for b in self.levers]

    _HEAD = ("lever", "acts on", "share of the step", "that part at best", "step gain (Amdahl)")

    def __repr__(self) -> str:
        return (f"What each lever wins if only its part changes ({self.basis})\n" + text_table(self._HEAD, self._rows())
                + "".join(f"\n{n}" for n in self.notes))

    def _repr_html_(self) -> str:
        return html_table(self._HEAD, self._rows(),
                          caption=f"What each lever wins if only its part changes ({self.basis})",
                          footer=" ".join(self.notes) or None)


@dataclass(frozen=True, repr=False)
class LeverGains:
    """:meth:`LeverBounds.against`: per lever, (label, Amdahl figure, measured gain or None, the ablation's
    decision)."""

    basis: str
    rows: tuple[tuple[str, float, float | None, str], ...]

    def gain(self, lever: str) -> float | None:
        return next((g for label, _, g, _ in self.rows if label.split(" (")[0] == lever), None)

    def _cells(self) -> list[tuple[str, str, str, str]]:
        return [(label, "unbounded" if math.isinf(bound) else f"{bound:.2f}x",
                 "N/A" if gain is None else f"{gain:.2f}x", decision) for label, bound, gain, decision in self.rows]

    _HEAD = ("lever", "Amdahl, from the plain step", "measured gain", "decision")

    def __repr__(self) -> str:
        return "Each lever: Amdahl's figure and the measured gain\n" + text_table(self._HEAD, self._cells())

    def _repr_html_(self) -> str:
        return html_table(self._HEAD, self._cells(), caption="Each lever: Amdahl's figure and the measured gain",
                          footer=f"Amdahl's figures from the plain step's profile ({self.basis}); the gains from "
                                 "the ablation, each lever applied on top of those kept before it")


def lever_bounds(attribution: Any, *, peaks: Mapping[str, float] | None = None,
                 low_precision: str | None = None) -> LeverBounds:
    """Amdahl's bound on each lesson-13 lever's gain (rows named as ``gpt_ablation`` names the levers), from
    ``attribution`` (``gl.profile(step).attribution`` of the plain step) and ``peaks`` (FLOP/s by dtype name,
    e.g. from ``gl.machine_limits(dtypes=[...])``). The 16-bit row needs ``low_precision`` (``"bfloat16"`` or
    ``"float16"``, as ``gl.choose_precision()`` picks) and both peaks; without them it is left out, with a note.

    Example:
        >>> from gpulab.profiling import Attribution
        >>> a = Attribution(2.0, 2, "host self time", (("optimizer", 0.5),), (("outside any operator", 1.0),))
        >>> lever_bounds(a).bound("largest micro-batch")
        2.0
    """
    for name in ("total_s", "phases", "classes"):
        if not hasattr(attribution, name):
            raise TypeError(f"attribution must be a profile's attribution (gl.profile(step).attribution), got "
                            f"{type(attribution).__name__}")
    if attribution.total_s <= 0:
        raise ValueError("the profile recorded no time: profile a step that runs (gl.profile(step, steps=3))")
    peaks = dict(peaks or {})
    for dtype, value in peaks.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0 or math.isinf(value):
            raise ValueError(f"peaks must map dtype names to positive FLOP/s, got {dtype!r}: {value!r}")
    if low_precision not in (None, "bfloat16", "float16"):
        raise ValueError(f"low_precision must be 'bfloat16', 'float16' or None, got {low_precision!r}")

    share = attribution.share
    rows, notes = [], []
    if low_precision and {"float32", low_precision} <= peaks.keys():
        factor = peaks[low_precision] / peaks["float32"]
        label = "bf16 autocast" if low_precision == "bfloat16" else "fp16 autocast + GradScaler"   # the ablation's
        rows.append(LeverBound(label, "matrix products (matmul/conv, SDPA)",
                               share("matmul/conv"), factor))
        if factor < 1:
            notes.append(f"This machine's measured {low_precision} matmul peak is below its fp32 one "
                         f"({factor:.2f}x): autocast slows the matrix products here.")
    else:
        notes.append("No 16-bit row: it needs low_precision and both measured peaks "
                     "(gl.machine_limits(dtypes=['float32', 'bfloat16'])).")
    optimizer = max(attribution.phase_share("optimizer"), share("optimizer updates"))
    rows.append(LeverBound("fused AdamW", "the optimizer's step", optimizer, None))
    rows.append(LeverBound("torch.compile each block", "elementwise, norms and reductions, views",
                           sum(share(c) for c in _FUSABLE), None))
    rows.append(LeverBound("largest micro-batch", "time outside the operators (per token)",
                           max(share(c) for c in _OUTSIDE), None))
    if "device idle" in dict(attribution.classes):           # a GPU profile: the CUDA-graphs lever runs there only
        rows.append(LeverBound("whole model compiled + CUDA graphs", "device idle, elementwise, norms, views",
                               share("device idle") + sum(share(c) for c in _FUSABLE), None))
    return LeverBounds(attribution.basis, tuple(rows), tuple(notes))
