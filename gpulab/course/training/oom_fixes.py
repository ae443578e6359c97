"""Lesson 09's fix ladder as training settings: which keyword arguments each out-of-memory fix turns on.

The fixes are named as ``gl.explain_oom`` names them (``report.fixes[i].name``); the settings are keyword
arguments of a lesson's training function with the parameters ``precision``, ``accumulation_steps`` and
``checkpoint_segments`` (as ``train_on_card`` in lesson 09). :func:`ladder_rungs` stacks them in the report's
order: each rung keeps the fixes before it and adds one.

Example:
    >>> from types import SimpleNamespace as Fix
    >>> fixes = [Fix(name=GRADIENT_CHECKPOINTING, applies=True), Fix(name=ACCUMULATION, applies=True)]
    >>> for rung, settings in ladder_rungs(fixes, fix_settings("bf16")).items():
    ...     print(f"{rung}: {settings}")
    baseline: {}
    + gradient checkpointing: {'checkpoint_segments': 4}
    + smaller batch + gradient accumulation: {'checkpoint_segments': 4, 'accumulation_steps': 4}
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..._check import whole

__all__ = ["ACCUMULATION", "MIXED_PRECISION", "GRADIENT_CHECKPOINTING", "fix_settings", "ladder_rungs"]

# the names gl.explain_oom gives these fixes (gpulab.memory.oom)
ACCUMULATION = "smaller batch + gradient accumulation"
MIXED_PRECISION = "mixed precision (bf16/fp16 autocast)"
GRADIENT_CHECKPOINTING = "gradient checkpointing"


def fix_settings(precision: str, *, accumulation_steps: int = 4, checkpoint_segments: int = 4
                 ) -> dict[str, dict[str, Any]]:
    """The training settings of each fix that changes how a step trains, by the fix's name in an
    ``explain_oom`` report: accumulation over ``accumulation_steps`` micro-batches, ``precision`` autocast
    (``"bf16"`` or ``"fp16"``, e.g. ``gl.choose_precision().precision``), checkpointing in
    ``checkpoint_segments`` segments. A new dict every call.

    Example:
        >>> fix_settings("fp16")[MIXED_PRECISION]
        {'precision': 'fp16'}
    """
    if precision not in ("bf16", "fp16"):
        raise ValueError(f"precision must be 'bf16' or 'fp16' (the 16-bit type of the mixed precision fix), "
                         f"got {precision!r}")
    whole("accumulation_steps", accumulation_steps, low=2)
    whole("checkpoint_segments", checkpoint_segments, low=2)
    return {ACCUMULATION: {"accumulation_steps": accumulation_steps},
            MIXED_PRECISION: {"precision": precision},
            GRADIENT_CHECKPOINTING: {"checkpoint_segments": checkpoint_segments}}


def ladder_rungs(fixes: Iterable[Any], settings: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The rungs of a fix ladder: ``"baseline"`` (no settings), then for each fix in ``fixes`` (objects with
    ``name`` and ``applies``, such as ``report.fixes`` from ``gl.explain_oom``) that applies and has settings,
    ``"+ <name>"`` with its settings added to those of every rung before it. Fixes without settings (leaks,
    sharding, a smaller model) are skipped: they are not training settings.

    Example:
        >>> from types import SimpleNamespace as Fix
        >>> list(ladder_rungs([Fix(name="a smaller model", applies=True)], fix_settings("fp16")))
        ['baseline']
    """
    if not isinstance(settings, Mapping):
        raise TypeError(f"settings must map a fix name to its keyword arguments, got {settings!r}")
    rungs: dict[str, dict[str, Any]] = {"baseline": {}}
    current: dict[str, Any] = {}
    for fix in fixes:
        name, applies = getattr(fix, "name", None), getattr(fix, "applies", None)
        if not isinstance(name, str) or not isinstance(applies, bool):
            raise TypeError(f"each fix needs a text .name and a True/False .applies (report.fixes), got {fix!r}")
        if applies and name in settings:
            current = {**current, **settings[name]}
            rungs[f"+ {name}"] = dict(current)
    return rungs
