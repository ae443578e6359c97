"""Where an overhead-bound CPU step's time goes, against this machine's measured per-call floor.

A step far below every ceiling spends its time on something other than work: Python between the operators (a loop
over the batch's items, per-step logging, the autograd engine), the fixed cost each operator call pays whatever its
size, host reads of a tensor's value. :func:`call_floor` measures what one call costs here at the least (an
operator on a one-element tensor, a Python-level module call); :func:`overhead_parts` splits a profiled step into
those parts, each with its share of the step and the gain if it cost nothing (Amdahl's bound), largest first.

Example:
    >>> from gpulab.profiling.overhead import call_floor
    >>> op_s, module_s = call_floor()
    >>> 0 < op_s < 1e-3 and 0 < module_s < 1e-3
    True
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .._format import fmt_seconds

__all__ = ["call_floor", "OverheadPart", "overhead_parts"]

_FLOOR: dict[str, tuple[float, float]] = {}


def call_floor(calls: int = 400, repeats: int = 5) -> tuple[float, float]:
    """``(operator_s, module_s)``: the least time one operator call (``torch.add`` of one-element tensors) and one
    Python-level module call (an ``nn.Identity``) take on this machine, best of ``repeats`` loops of ``calls``;
    measured once per process (the best of loops is the floor, whatever else ran before)."""
    if "floor" in _FLOOR:
        return _FLOOR["floor"]
    import torch

    a, b = torch.ones(1), torch.ones(1)
    module = torch.nn.Identity()

    def best(fn: Any) -> float:
        out = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            out = min(out, (time.perf_counter() - t0) / calls)
        return out

    with torch.no_grad():
        op = best(lambda: torch.add(a, b))
        mod = best(lambda: module(a))
    _FLOOR["floor"] = (op, mod)
    return op, mod


@dataclass(frozen=True)
class OverheadPart:
    """One part of a step's overhead: what it is, its share of the step, what the measurement says, the fix."""

    name: str
    share: float
    evidence: str
    fix: str

    @property
    def gain(self) -> float:
        """How much faster the step would be if this part cost nothing (Amdahl's bound)."""
        return 1 / max(1e-9, 1 - min(self.share, 0.999))


def overhead_parts(s: Any) -> list[OverheadPart]:
    """The parts of a profiled CPU step's time outside the work (``s``: a :class:`ProfileSummary`), largest first."""
    step = s.step_s
    if not step or step <= 0:
        return []
    op_s, _ = call_floor()
    calls = s.op_calls_per_step or 0.0
    outside = max(0.0, 1 - (s.op_time_s + s.phases_s.get("data", 0.0)) / s.total_s) if s.total_s > 0 else 0.0
    fixed = min(1.0, calls * op_s / step)
    parts = [
        OverheadPart("Python between the operators (a loop over the batch's items, per-step logic and logging, "
                     "the autograd engine)", outside, "the time outside every operator",
                     "batch the per-item work into tensor operations; log every N steps"),
        OverheadPart("the fixed cost of each operator call", fixed,
                     f"{calls:.0f} operator calls per step x this machine's floor of {fmt_seconds(op_s)} per call "
                     f"(median call {fmt_seconds(s.median_op_s) if s.median_op_s else '?'})",
                     "fewer, larger operators: a larger batch, fused operators (torch.compile)"),
    ]
    syncs = getattr(s, "syncs_per_step", 0.0) or 0.0
    if syncs:
        parts.append(OverheadPart("host reads of a tensor's value (.item(), printing)", min(1.0, syncs * op_s / step),
                                  f"{syncs:.0f} per step", "read values every N steps, or keep them on the device"))
    return sorted((p for p in parts if p.share > 0), key=lambda p: p.share, reverse=True)
