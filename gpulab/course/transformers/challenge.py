"""Lesson 13's measured challenge: a GPT recipe's training steps timed against a baseline's in tokens/s, interleaved,
and its held-out accuracy after the same tokens held to the baseline's (the unigram floor shown beside).

Example:
    >>> from gpulab import course
    >>> from gpulab.transformer import TransformerShape
    >>> shape = TransformerShape(layers=1, d_model=32, heads=2, seq_len=32, vocab=256)
    >>> print(course.gpt_challenge("faster", shape, None))     # not answered yet: nothing is timed
    [ ] faster: not answered yet - write your answer in the exercise cell above, then run this cell again
"""
from __future__ import annotations

import math
import numbers
from typing import Any

from ..._check import positive, text, whole
from ...transformer import TransformerShape
from ..capstone.ablation_table import _fraction
from .checks import shape_arg
from .heldout import unigram_baseline
from .train import GPTRecipe, _args, _recipe_arg, gpt_stepper, train_gpt

__all__ = ["gpt_challenge"]


def gpt_challenge(name: str, shape: TransformerShape, yours: GPTRecipe | None, *, baseline: GPTRecipe | None = None,
                  speedup: float = 1.5, tokens: int = 32_768, accuracy_tolerance: float = 0.02,
                  min_run_time: float = 1.0, device: Any = None) -> Any:
    """A measured challenge on tokens/s: your recipe's training steps timed against ``baseline``'s (default
    :class:`GPTRecipe`), interleaved, each counted in tokens; it passes when yours trains at least ``speedup`` times
    the tokens per second and, trained on the same ``tokens``, reaches the baseline's held-out next-token accuracy less
    ``accuracy_tolerance``. A miss raises ``AssertionError`` saying by how much; ``yours=None``: not answered yet."""
    from ...interleaved import benchmark_interleaved
    from ..lesson.checks import Challenge, NotAnswered

    text("name", name, empty=False)
    shape_arg("shape", shape)
    base = GPTRecipe() if baseline is None else _recipe_arg("baseline", baseline)
    if isinstance(speedup, bool) or not isinstance(speedup, numbers.Real):
        raise TypeError(f"speedup must be a target ratio, a finite number > 0 (e.g. 1.5), got {speedup!r}")
    if not math.isfinite(speedup) or speedup <= 0:
        raise ValueError(f"speedup must be a target ratio, a finite number > 0 (e.g. 1.5), got {speedup!r}")
    accuracy_tolerance = _fraction("accuracy_tolerance", accuracy_tolerance)
    whole("tokens", tokens)
    positive("min_run_time", min_run_time, unit="seconds")
    dev = _args(shape, None, device, held_out=True)
    if yours is None:
        return NotAnswered(name)
    _recipe_arg("yours", yours)
    per = {k: r.micro_batch * r.accumulation * shape.seq_len for k, r in (("baseline", base), ("yours", yours))}
    runs = benchmark_interleaved({"baseline": gpt_stepper(shape, base, device=dev),
                                  "yours": gpt_stepper(shape, yours, device=dev)},
                                 min_run_time=min_run_time, warmup=2, device=dev, items=per, energy=False)
    acc = {k: train_gpt(shape, r, steps=max(4, tokens // per[k]), device=dev).test_accuracy
           for k, r in (("baseline", base), ("yours", yours))}
    floor = unigram_baseline()              # what guessing by byte frequency alone scores, shown beside
    same = acc["yours"] >= acc["baseline"] - accuracy_tolerance
    result = Challenge(f"{name} (held-out accuracy {acc['yours']:.1%} vs the baseline's {acc['baseline']:.1%} after "
                       f"{tokens:,} tokens; byte frequencies alone: {floor.accuracy:.1%})", str(dev),
                       1.0 / runs["baseline"].items_per_s,
                       1.0 / runs["yours"].items_per_s, float(speedup), same,
                       bool(runs["baseline"].noisy or runs["yours"].noisy))
    if not result.passed:
        raise AssertionError(repr(result))
    return result
