"""Argument checks shared by gpulab's public functions: one wording for one mistake.

Every check raises ``TypeError`` for a value of the wrong kind and ``ValueError`` for a value out of
range, naming the argument and what to pass instead.

Example:
    >>> whole("warmup", 3, low=0)
    3
    >>> positive("min_run_time", 0)
    Traceback (most recent call last):
    ...
    ValueError: min_run_time must be a positive finite number, got 0
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

__all__ = ["whole", "positive", "flag", "per_label", "table_rows"]


def whole(name: str, value: Any, low: int = 1) -> int:
    """``value`` as a whole number ``>= low``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a whole number >= {low}, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be a whole number >= {low}, got {value!r}")
    return value


def positive(name: str, value: Any, *, allow_zero: bool = False, unit: str = "") -> float:
    """``value`` as a finite number ``> 0`` (``>= 0`` with ``allow_zero``); ``unit`` only words the error."""
    what = f"{'non-negative' if allow_zero else 'positive'} finite number{' of ' + unit if unit else ''}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a {what}, got {value!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be a {what}, got {value!r}")
    return float(value)


def flag(name: str, value: Any) -> bool:
    """``value`` as a bool (``1`` or ``"yes"`` are refused: they hide typos)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def per_label(name: str, value: Any, labels: Sequence[str], *, allow_zero: bool = False) -> dict[str, float | None]:
    """One number (or ``None``) for every label from a single number or a mapping label -> number.

    >>> per_label("items", {"a": 64}, ["a", "b"])
    {'a': 64.0, 'b': None}
    """
    if value is None:
        return {k: None for k in labels}
    if isinstance(value, Mapping):
        unknown = [k for k in value if k not in labels]
        if unknown:
            raise ValueError(f"{name} given for unknown label(s) {unknown}; labels are {list(labels)}")
        raw = {k: value.get(k) for k in labels}
    else:
        raw = {k: value for k in labels}
    return {k: None if v is None else positive(f"{name} for {k!r}", v, allow_zero=allow_zero) for k, v in raw.items()}


def table_rows(rows: Sequence[Any], kind: type, maker: str, baseline: str,
               published: Mapping[str, Any] | None = None) -> list[str]:
    """The labels of a comparison table's rows, checked: every row a ``kind`` (made by ``maker``), labels
    unique, ``baseline`` among them, published figures only for known labels.

    >>> from types import SimpleNamespace as Row
    >>> table_rows([Row(label="a"), Row(label="b")], Row, "Row(label=...)", baseline="a")
    ['a', 'b']
    """
    if not rows:
        raise ValueError(f"a comparison needs at least one {kind.__name__} (from {maker})")
    bad = [type(r).__name__ for r in rows if not isinstance(r, kind)]
    if bad:
        raise TypeError(f"a comparison takes {kind.__name__}s (from {maker}), got {', '.join(bad)}")
    labels = [r.label for r in rows]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise ValueError(f"labels must be unique, repeated: {dupes}; pass label=... to {maker}")
    if baseline not in labels:
        raise ValueError(f"unknown baseline {baseline!r}: choose one of {labels}")
    unknown = [k for k in (published or {}) if k not in labels]
    if unknown:
        raise ValueError(f"published figures given for unknown label(s) {unknown}; labels are {labels}")
    return labels
