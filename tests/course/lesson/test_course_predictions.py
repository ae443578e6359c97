"""gpulab.course.lesson.prediction: the learner's Predict answers recorded, set beside the measurement, listed per session."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from gpulab import course
from gpulab.course.lesson import prediction


@pytest.fixture(autouse=True)
def _fresh_session():
    prediction._forget()
    yield
    prediction._forget()


def test_the_course_exports_the_calls():
    for name in ("predict", "versus_prediction", "compare_predictions", "predictions", "Prediction",
                 "VersusPrediction", "PredictionTable"):
        assert name in course.__all__ and getattr(course, name) is getattr(prediction, name)


def test_a_prediction_is_recorded_and_replaced():
    p = course.predict("batch knee", 256, note="from the fixed part")
    assert (p.key, p.value, p.unit, p.note) == ("batch knee", 256.0, "", "from the fixed part")
    assert course.predict("speedup", Fraction(9, 2), unit="x").value == 4.5
    assert course.predict("speedup", np.float32(3.0), unit="x").value == 3.0       # replaced, numpy numbers count
    assert course.predict("  phase ", "  backward ").value == "backward"
    table = course.predictions()
    assert [r.key for r in table.rows] == ["batch knee", "speedup", "phase"]
    assert [r.predicted for r in table.rows] == [256.0, 3.0, "backward"]
    assert all(r.verdict == "not measured" for r in table.rows)
    with pytest.raises(AttributeError):
        p.value = 1.0                                                                # frozen


def test_none_records_the_key_as_unanswered_and_never_blocks():
    course.predict("knee", 64)
    p = course.predict("knee", None)                # re-running the stored cell clears an old answer
    assert p.value is None and p.text == "No prediction recorded (knee): write one in the cell above to compare"
    v = course.versus_prediction("knee", 128)
    assert (v.predicted, v.measured, v.ratio, v.matched, v.verdict) == (None, 128.0, None, None, "not predicted")
    never = course.versus_prediction("never predicted", "backward")
    assert never.verdict == "not predicted" and never.predicted is None


def test_numbers_compare_by_ratio_within_or_off_by():
    course.predict("copy", 10, unit="GB/s")
    close = course.versus_prediction("copy", 11.2)
    assert close.ratio == pytest.approx(1.12) and close.matched is True and close.unit == "GB/s"
    assert close.verdict == "within 12% (higher than predicted)"
    low = course.versus_prediction("copy", 2.5)
    assert low.matched is False and low.verdict == "off by 4x (lower than predicted)"
    assert course.versus_prediction("copy", 10.0).verdict == "exact"
    assert course.versus_prediction("copy", 13.0, tolerance=0.5).verdict == "within 30% (higher than predicted)"
    assert course.versus_prediction("copy", -3.0).verdict == "off: the opposite sign"
    assert course.versus_prediction("copy", float("nan")).verdict == "not measured"
    course.predict("zero", 0)
    assert course.versus_prediction("zero", 0.0).verdict == "exact"
    assert course.versus_prediction("zero", 1.0).verdict == "off: you predicted 0"


def test_a_noisy_measurement_is_shown_without_a_verdict():
    course.predict("speedup", 2, unit="x")
    v = course.versus_prediction("speedup", 6.0, noisy=True)
    assert (v.measured, v.matched, v.verdict) == (6.0, None, "noisy measurement: run it again before comparing")
    assert "3x" not in repr(v) and "noisy: other programs shared the machine" in repr(v)
    assert course.predictions("speedup").rows[0].noisy is True
    assert course.compare_predictions({"speedup": 2.0}, noisy=True).to_dataframe()["noisy"].tolist() == [True]


def test_a_number_written_as_text_still_compares():
    course.predict("speedup", "4x")
    assert course.versus_prediction("speedup", 5.0).verdict == "within 25% (higher than predicted)"
    course.predict("share", "50%", unit="fraction")
    assert course.versus_prediction("share", 0.25).ratio == pytest.approx(0.5)
    course.predict("batch", "1,024")
    assert course.versus_prediction("batch", 1024).verdict == "exact"


def test_choices_match_without_case_spacing_or_order():
    course.predict("phase", "Backward ")
    assert course.versus_prediction("phase", "backward").matched is True
    assert course.versus_prediction("phase", "optimizer step").verdict == "did not match"
    course.predict("errors", "4, 1")
    assert course.versus_prediction("errors", "1,4").matched is True
    assert course.versus_prediction("errors", "1, 2, 4").matched is False
    course.predict("bit for bit", "yes")
    assert course.versus_prediction("bit for bit", True).matched is True
    assert course.versus_prediction("bit for bit", False).verdict == "did not match"
    assert course.versus_prediction("bit for bit", np.bool_(True)).measured == "yes"
    course.predict("mixed", "backward")
    assert course.versus_prediction("mixed", 3.0).verdict == "did not match"
    course.predict("segments", 3)
    assert course.versus_prediction("segments", "3").verdict == "exact"
    assert course.versus_prediction("segments", "3 segments").verdict == "did not match"


def test_compare_predictions_and_the_session_summary():
    course.predict("data share: default", 0.5, unit="fraction")
    course.predict("data share: decoded once", None, unit="fraction")
    t = course.compare_predictions({"data share: default": 0.8, "data share: decoded once": 0.1})
    df = t.to_dataframe()
    assert df["verdict"].tolist() == ["off by 1.6x (higher than predicted)", "not predicted"]
    assert df["ratio"].iloc[0] == pytest.approx(1.6) and math.isnan(df["ratio"].iloc[1])
    assert df["unit"].tolist() == ["fraction", "fraction"]
    summary = course.predictions("data share: default")
    assert [(r.key, r.measured) for r in summary.rows] == [("data share: default", 0.8)]
    assert len(course.predictions().rows) == 2


def test_rendering_as_text_and_html():
    p = course.predict("copy <fast>", 12, unit="GB/s")
    assert repr(p) == "Your prediction (copy <fast>): 12 GB/s"
    assert "<b>Your prediction</b>" in p._repr_html_() and "&lt;fast&gt;" in p._repr_html_()
    missing = course.predict("knee", None)
    assert repr(missing) == "No prediction recorded (knee): write one in the cell above to compare"
    assert "No prediction recorded" in missing._repr_html_()
    v = course.versus_prediction("copy <fast>", 6.0)
    text = repr(v)
    assert text.splitlines()[0] == "Your prediction vs the measurement"
    assert "12 GB/s" in text and "6 GB/s" in text and "0.5x" in text and "off by 2x (lower than predicted)" in text
    assert len(text.splitlines()) <= 10 and "\x1b" not in text
    page = v._repr_html_()
    assert page.startswith('<table class="gpulab">') and "&lt;fast&gt;" in page and "off by 2x" in page
    unanswered = repr(course.versus_prediction("knee", 256))
    assert "not predicted" in unanswered and "write a value in the predict cell" in unanswered
    share = course.predict("share", 0.5, unit="fraction")
    assert repr(share) == "Your prediction (share): 50%"
    empty = repr(prediction.PredictionTable(()))
    assert "no predictions recorded" in empty


@pytest.mark.parametrize("call, error, words", [
    (lambda: course.predict("", 3), ValueError, "key must be a non-empty text"),
    (lambda: course.predict(3, 3), TypeError, "key must be a text naming the prediction.*got 3"),
    (lambda: course.predict("k", True), TypeError, "write 'yes' or 'no'"),
    (lambda: course.predict("k", float("inf")), ValueError, "finite number, got inf"),
    (lambda: course.predict("k", float("nan")), ValueError, "finite number, got nan"),
    (lambda: course.predict("k", "  "), ValueError, "must not be empty"),
    (lambda: course.predict("k", [256]), TypeError, r"a number, a text \(a choice\) or None, got \[256\]"),
    (lambda: course.predict("k", 1, unit=None), TypeError, "unit for 'k' must be a text"),
    (lambda: course.predict("k", 1, note=3), TypeError, "note for 'k' must be a text"),
    (lambda: course.versus_prediction(None, 1.0), TypeError, "key must be a text.*got None"),
    (lambda: course.versus_prediction("k", {"a": 1}), TypeError, r"measured for 'k'.*got \{'a': 1\}"),
    (lambda: course.versus_prediction("k", 1.0, tolerance="10%"), TypeError, "tolerance must be a fraction"),
    (lambda: course.versus_prediction("k", 1.0, tolerance=-0.1), ValueError, "between 0 and 10"),
    (lambda: course.versus_prediction("k", 1.0, unit=1), TypeError, "unit for 'k' must be a text"),
    (lambda: course.compare_predictions([("k", 1.0)]), TypeError, "dict of prediction key"),
    (lambda: course.versus_prediction("k", 1.0, noisy="no"), TypeError, "noisy for 'k' must be True or False"),
    (lambda: course.predictions(""), ValueError, "key must be a non-empty text"),
])
def test_bad_input_names_the_value_and_what_to_do(call, error, words):
    with pytest.raises(error, match=words):
        call()
    assert course.predictions().rows == ()          # nothing recorded by a refused call


def test_verdicts_hold_at_the_edges_of_the_numbers():
    """Signs and sides by value, ratios without under- or overflow, and a miss at tolerance 0 said as a percentage."""
    from gpulab.course.lesson.prediction import VersusPrediction

    v = lambda p, m, tol=0.25: VersusPrediction("k", p, m, "", tol, False)
    assert v(1e308, 1e-308).verdict == "off by about 10^616x (lower than predicted)"
    assert v(1e-308, 1e308).verdict.startswith("off by about 10^616x (higher")
    assert v(-2.0, -4.0).verdict == "off by 2x (lower than predicted)"          # -4 is below -2
    assert v(-2.0, -1.0).verdict == "off by 2x (higher than predicted)"
    assert v(-2.0, -2.2).verdict == "within 10% (lower than predicted)" and v(-2.0, -2.2).matched
    assert v(2.0, -2.0).verdict == "off: the opposite sign" and v(2.0, -2.0).matched is False
    assert v(1.0, 1.001, 0.0).verdict == "off by 0.1% (higher than predicted)"
    assert v(1.0, 1.0, 0.0).verdict == "exact" and v(1.0, 1.0, 0.0).matched
    assert v(3.0, 0.0).verdict == "off: measured 0"
