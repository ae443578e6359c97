"""The lessons' **Predict** prompts, made concrete: the learner writes a guess in a cell, and the measurement
shows up beside it with how far off it was.

:func:`predict` records a prediction (a number, a ratio, or a choice such as ``"backward"``) under a key for this
kernel session; :func:`versus_prediction` sets a measurement beside it (for numbers ``measured / predicted``,
"within 12%" or "off by 3.1x"; for choices whether they match); :func:`compare_predictions` does it for several
keys at once, and :func:`predictions` lists every prediction of the session with its measurement, for a lesson's
"your numbers" summary. A prediction left at ``None`` blocks nothing: the comparison then says "not predicted".

Example:
    >>> from gpulab import course
    >>> course.predict("doctest knee", 256)
    Your prediction (doctest knee): 256
    >>> course.versus_prediction("doctest knee", 512).verdict
    'off by 2x (higher than predicted)'
    >>> course.versus_prediction("doctest unanswered", 3.0).verdict
    'not predicted'
"""
from __future__ import annotations

import html
import math
import numbers
import re
from dataclasses import dataclass
from typing import Any, Mapping

from ..._format import NA, TableView, fmt_number
from .published import _with_unit

__all__ = ["Prediction", "VersusPrediction", "PredictionTable", "predict", "versus_prediction", "compare_predictions",
           "predictions", "DEFAULT_TOLERANCE"]

DEFAULT_TOLERANCE = 0.25     # a numeric prediction within 25% of the measurement counts as close
NO_PREDICTION = "No prediction recorded ({key}): write one in the cell above to compare"

Value = float | str | None
_RECORDED: dict[str, "Prediction"] = {}                           # key -> the latest prediction this session
_MEASURED: dict[str, tuple[Value, str, float, bool]] = {}         # key -> (measured, unit, tolerance, noisy)


def _key(key: Any) -> str:
    if not isinstance(key, str):
        raise TypeError(f"key must be a text naming the prediction, e.g. 'batch knee', got {key!r}")
    if not key.strip():
        raise ValueError(f"key must be a non-empty text naming the prediction, e.g. 'batch knee', got {key!r}")
    return key.strip()


def _text(name: str, value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} for {key!r} must be a text, e.g. 'ms' or '', got {value!r}")
    return value.strip()


def _value(name: str, value: Any, key: str, *, allow_bool: bool) -> Value:
    """None, a finite float or a non-empty stripped text; ``allow_bool`` turns True/False into "yes"/"no"."""
    if value is None:
        return None
    if isinstance(value, bool) or (getattr(getattr(value, "dtype", None), "kind", None) == "b"
                                   and getattr(value, "ndim", None) == 0):          # numpy's bool too
        value = bool(value)
        if allow_bool:
            return "yes" if value else "no"
        raise TypeError(f"{name} for {key!r} must be a number or a text, got {value!r}: write 'yes' or 'no'")
    if isinstance(value, numbers.Real):
        out = float(value)
        if math.isnan(out) and allow_bool:       # a measurement that is not available
            return None
        if not math.isfinite(out):
            raise ValueError(f"{name} for {key!r} must be a finite number, got {value!r}")
        return out
    if isinstance(value, str):
        if not value.strip():
            raise ValueError(f"{name} for {key!r} must not be empty: write a choice such as 'backward', or None")
        return value.strip()
    raise TypeError(f"{name} for {key!r} must be a number, a text (a choice) or None, got {value!r}")


def _tolerance(tolerance: Any) -> float:
    if isinstance(tolerance, bool) or not isinstance(tolerance, numbers.Real):
        raise TypeError(f"tolerance must be a fraction such as 0.25 (within 25%), got {tolerance!r}")
    if not 0 <= float(tolerance) < 10:
        raise ValueError(f"tolerance must be a fraction between 0 and 10 (0.25 is within 25%), got {tolerance!r}")
    return float(tolerance)


def _show(value: Value, unit: str) -> str:
    if value is None:
        return NA
    return value if isinstance(value, str) else _with_unit(value, unit)


def _choice(text: str) -> str | frozenset[str]:
    """A choice compared without case and spacing; a comma-separated list compares as a set ("4, 1" == "1,4")."""
    items = [" ".join(p.lower().split()) for p in text.split(",")]
    items = [p for p in items if p]
    return frozenset(items) if len(items) > 1 else (items[0] if items else "")


def _as_text(value: float | str) -> str:
    return value if isinstance(value, str) else fmt_number(value, digits=6).replace(",", "")


_NUMBER = re.compile(r"^\s*([-+]?\d[\d,]*(?:\.\d*)?(?:e[-+]?\d+)?)\s*(x|×|%)?\s*$", re.I)


def _as_number(text: str, unit: str) -> float | None:
    """A number written as text ("256", "4x", "1,024", "50%" for a fraction), else None."""
    m = _NUMBER.match(text)
    if not m:
        return None
    value = float(m.group(1).replace(",", ""))
    return value / 100 if m.group(2) == "%" and unit == "fraction" else value


@dataclass(frozen=True)
class Prediction:
    """A recorded prediction: its key, value (a number, a choice, or None when not written yet), unit and note.

    Example:
        >>> Prediction("copy speed", 12.0, "GB/s")
        Your prediction (copy speed): 12 GB/s
        >>> Prediction("copy speed", None)
        No prediction recorded (copy speed): write one in the cell above to compare
    """

    key: str
    value: Value
    unit: str = ""
    note: str = ""

    @property
    def text(self) -> str:
        if self.value is None:
            return NO_PREDICTION.format(key=self.key)
        note = f" ({self.note})" if self.note else ""
        return f"Your prediction ({self.key}): {_show(self.value, self.unit)}{note}"

    def __repr__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        if self.value is None:
            return f'<p style="color:#555"><i>{html.escape(self.text)}</i></p>'
        note = f" ({html.escape(self.note)})" if self.note else ""
        return (f"<p><b>Your prediction</b> ({html.escape(self.key)}): "
                f"{html.escape(_show(self.value, self.unit))}{note}</p>")


def predict(key: str, value: float | str | None = None, *, unit: str = "", note: str = "") -> Prediction:
    """Record a prediction under ``key`` for this kernel session (a later call with the same key replaces it) and
    return it to show. ``value`` is a number in ``unit`` (a ratio: ``unit="x"``; a share: ``unit="fraction"``), a
    choice such as ``"backward"`` or ``"1, 4"``, or None: not written yet, which blocks nothing.

    Example:
        >>> predict("doctest speedup", 4, unit="x").value
        4.0
        >>> predict("doctest phase", "backward", note="the optimizer state is small")
        Your prediction (doctest phase): backward (the optimizer state is small)
    """
    key = _key(key)
    unit, note = _text("unit", unit, key), _text("note", note, key)
    result = Prediction(key, _value("value, the prediction", value, key, allow_bool=False), unit, note)
    _RECORDED[key] = result
    return result


@dataclass(frozen=True, repr=False)
class VersusPrediction(TableView):
    """A measurement beside the prediction of the same key: ``ratio`` (measured / predicted, numbers only),
    ``matched`` (choices only; for numbers: within ``tolerance``) and ``verdict`` in words. A ``noisy``
    measurement is shown but not judged.

    Example:
        >>> VersusPrediction("copy speed", 10.0, 12.0, "GB/s").verdict
        'within 20% (higher than predicted)'
    """

    key: str
    predicted: Value
    measured: Value
    unit: str = ""
    tolerance: float = DEFAULT_TOLERANCE
    noisy: bool = False
    title: str = "Your prediction vs the measurement"

    @property
    def ratio(self) -> float | None:
        """measured / predicted where both are numbers (a numeric text prediction counts) and predicted is not 0."""
        p, m = self._numbers()
        return None if p is None or m is None or p == 0 else m / p

    def _numbers(self) -> tuple[float | None, float | None]:
        """Both as numbers where both are, or one is and the other is a number written as text."""
        p, m = self.predicted, self.measured
        if isinstance(m, float) and isinstance(p, str):
            p = _as_number(p, self.unit)
        elif isinstance(p, float) and isinstance(m, str):
            m = _as_number(m, self.unit)
        return (p, m) if isinstance(p, float) and isinstance(m, float) else (None, None)

    @property
    def matched(self) -> bool | None:
        """True when the prediction was right (a choice that matches, a number within ``tolerance``), None when
        there is nothing to compare."""
        if self.predicted is None or self.measured is None or self.noisy:
            return None
        p, m = self._numbers()
        if p is None or m is None:          # choices (a whole number counts as its digits: 3 matches "3")
            return _choice(_as_text(self.predicted)) == _choice(_as_text(self.measured))
        if p == 0 or m == 0 or (m > 0) != (p > 0):
            return p == m
        digits = math.log10(abs(m)) - math.log10(abs(p))
        return abs(digits) < 300 and abs(10 ** digits - 1) <= self.tolerance + 1e-12

    @property
    def verdict(self) -> str:
        if self.predicted is None:
            return "not predicted"
        if self.measured is None:
            return "not measured"
        if self.noisy:
            return "noisy measurement: run it again before comparing"
        p, m = self._numbers()
        if p is None or m is None:
            return "matched" if self.matched else "did not match"
        if p == 0:
            return "exact" if m == 0 else "off: you predicted 0"
        if m == 0:
            return "off: measured 0"
        if (m > 0) != (p > 0):
            return "off: the opposite sign"
        side = "higher" if m > p else "lower"          # by value: -4 is lower than -2, though twice its size
        if m == p:
            return "exact"
        digits = math.log10(abs(m)) - math.log10(abs(p))   # the ratio without under- or overflow (1e-308 / 1e308)
        r = 10 ** digits if abs(digits) < 300 else math.inf
        if abs(r - 1) <= self.tolerance + 1e-12:
            return f"within {max(round(100 * abs(r - 1)), 1)}% ({side} than predicted)"
        factor = max(r, 1 / r) if r > 0 else math.inf
        if factor < 1.1:                                   # "off by 1x" says nothing: the percentage does
            return f"off by {fmt_number(100 * abs(r - 1), digits=2)}% ({side} than predicted)"
        if factor > 1e6:
            return f"off by about 10^{abs(digits):.0f}x ({side} than predicted)"
        return f"off by {fmt_number(factor, digits=2)}x ({side} than predicted)"

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        return _columns([self], self.tolerance)


def _row(v: VersusPrediction) -> list[str]:
    ratio = None if v.noisy else v.ratio
    return [v.key, _show(v.predicted, v.unit) if v.predicted is not None else "not predicted",
            _show(v.measured, v.unit), "" if ratio is None else f"{fmt_number(ratio, digits=2)}x", v.verdict]


def _columns(rows: list[VersusPrediction], tolerance: float) -> tuple[list[str], list[list[str]], str]:
    header = ["prediction", "yours", "measured", "measured / yours", "verdict"]
    foot = f"close: within {round(100 * tolerance)}% of your prediction"
    if any(v.noisy for v in rows):
        foot += "; noisy: other programs shared the machine, so no verdict"
    if any(v.predicted is None for v in rows):
        foot += "; not predicted: write a value in the predict cell and run on to compare"
    return header, [_row(v) for v in rows], foot


def versus_prediction(key: str, measured: float | str | bool | None, *, unit: str | None = None,
                      tolerance: float = DEFAULT_TOLERANCE, noisy: bool = False) -> VersusPrediction:
    """The measurement beside the prediction recorded under ``key``: for numbers ``measured / predicted`` and
    "within 12%" (closer than ``tolerance``) or "off by 3.1x"; for choices whether they match (case, spacing and the
    order of a comma-separated list do not count). It never fails for a missing prediction: it says "not
    predicted". ``unit`` defaults to the prediction's; True/False measured read as "yes"/"no", NaN as not measured;
    ``noisy=True`` (the measurement was flagged noisy) shows both values without a verdict.

    Example:
        >>> _ = predict("doctest bits", "yes")
        >>> versus_prediction("doctest bits", True).matched
        True
        >>> versus_prediction("doctest bits", "no")
        Your prediction vs the measurement
        prediction    yours  measured  measured / yours  verdict
        ------------  -----  --------  ----------------  -------------
        doctest bits  yes    no                          did not match
        close: within 25% of your prediction
    """
    key = _key(key)
    prediction = _RECORDED.get(key)
    unit = (prediction.unit if prediction else "") if unit is None else _text("unit", unit, key)
    value = _value("measured", measured, key, allow_bool=True)
    tolerance = _tolerance(tolerance)
    if not isinstance(noisy, bool):
        raise TypeError(f"noisy for {key!r} must be True or False, got {noisy!r}")
    _MEASURED[key] = (value, unit, tolerance, noisy)
    return VersusPrediction(key, prediction.value if prediction else None, value, unit, tolerance, noisy)


@dataclass(frozen=True, repr=False)
class PredictionTable(TableView):
    """Several predictions beside their measurements, one row each; ``to_dataframe()`` gives the values.

    Example:
        >>> t = compare_predictions({"doctest share": 0.4}, unit="fraction")
        >>> t.to_dataframe()[["key", "verdict"]].values.tolist()
        [['doctest share', 'not predicted']]
    """

    rows: tuple[VersusPrediction, ...]
    title: str = "Your predictions vs the measurements"

    def to_dataframe(self) -> Any:
        """key, predicted, measured (numbers or texts; None when missing), unit, ratio (NaN when not numbers),
        matched, noisy and verdict."""
        import pandas as pd

        return pd.DataFrame([{"key": v.key, "predicted": v.predicted, "measured": v.measured, "unit": v.unit,
                              "ratio": v.ratio if v.ratio is not None else float("nan"), "matched": v.matched,
                              "noisy": v.noisy, "verdict": v.verdict} for v in self.rows],
                            columns=["key", "predicted", "measured", "unit", "ratio", "matched", "noisy", "verdict"])

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        tolerance = self.rows[0].tolerance if self.rows else DEFAULT_TOLERANCE
        header, rows, foot = _columns(list(self.rows), tolerance)
        return header, rows, foot if self.rows else "no predictions recorded in this session yet"


def compare_predictions(measured: Mapping[str, float | str | bool | None], *, unit: str | None = None,
                        tolerance: float = DEFAULT_TOLERANCE, noisy: bool = False,
                        title: str = "Your predictions vs the measurements") -> PredictionTable:
    """:func:`versus_prediction` for each ``key: measured`` pair, as one table (e.g. a data share per loader);
    ``unit=None`` takes each prediction's own unit.

    Example:
        >>> _ = predict("doctest loader A", 0.5, unit="fraction")
        >>> compare_predictions({"doctest loader A": 0.6, "doctest loader B": 0.2}).rows[0].verdict
        'within 20% (higher than predicted)'
    """
    if not isinstance(measured, Mapping):
        raise TypeError(f"measured must be a dict of prediction key -> measured value, got {measured!r}")
    if not isinstance(title, str):
        raise TypeError(f"title must be a text, got {title!r}")
    rows = tuple(versus_prediction(k, v, unit=unit, tolerance=tolerance, noisy=noisy) for k, v in measured.items())
    return PredictionTable(rows, title)


def predictions(*keys: str) -> PredictionTable:
    """This session's predictions (only ``keys`` when given, in that order), each beside its latest measurement
    from :func:`versus_prediction`: the "your predictions" summary of a lesson.

    Example:
        >>> _ = predict("doctest summary", 3, unit="x"); _ = versus_prediction("doctest summary", 3.3)
        >>> predictions("doctest summary").rows[0].verdict
        'within 10% (higher than predicted)'
    """
    chosen = [_key(k) for k in keys] if keys else list(dict.fromkeys([*_RECORDED, *_MEASURED]))
    rows = []
    for k in chosen:
        p = _RECORDED.get(k)
        value, unit, tolerance, noisy = _MEASURED.get(k, (None, p.unit if p else "", DEFAULT_TOLERANCE, False))
        rows.append(VersusPrediction(k, p.value if p else None, value, unit, tolerance, noisy))
    return PredictionTable(tuple(rows), "Your predictions this session")


def _forget() -> None:
    """Forget every prediction and measurement of this session (for tests)."""
    _RECORDED.clear()
    _MEASURED.clear()
