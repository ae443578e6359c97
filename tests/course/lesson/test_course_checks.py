"""Exercises that teach: checks wait for an answer instead of stopping Run All, challenges measure the learner's
code and fail by a stated margin, solutions run only with GPULAB_SOLUTIONS=1, and narration follows the device."""
from __future__ import annotations

import time

import pytest

from gpulab import course


def test_check_waits_ticks_and_fails_with_the_hint():
    assert isinstance(course.check("q", None, 4), course.NotAnswered)
    assert "not answered yet" in repr(course.check("q", None, 4))
    assert "not answered yet" in course.check("q", None, 4)._repr_html_()
    assert repr(course.check("q", 4.01, 4.0)) == "[ok] q: 4.01 is right"
    with pytest.raises(AssertionError, match=r"q: got 5, expected 4\. Hint: count again"):
        course.check("q", 5, 4, hint="count again")
    with pytest.raises(ValueError, match="rtol"):
        course.check("q", 1, 1, rtol=-1)


def test_solutions_follow_the_environment(monkeypatch):
    monkeypatch.delenv(course.SOLUTIONS_ENV, raising=False)
    assert course.solutions() is False
    monkeypatch.setenv(course.SOLUTIONS_ENV, "0")
    assert course.solutions() is False
    monkeypatch.setenv(course.SOLUTIONS_ENV, "1")
    assert course.solutions() is True


def _slow() -> int:
    time.sleep(0.004)
    return 42


def _fast() -> int:
    return 42


def test_challenge_passes_misses_and_waits():
    assert isinstance(course.challenge("c", _slow, None), course.NotAnswered)
    ok = course.challenge("faster", _slow, _fast, speedup=2, same=lambda a, b: a == b, min_run_time=0.2)
    assert ok.passed and ok.speedup > 2 and ok.same_result is True
    assert "passed by" in repr(ok) and "target 2x" in repr(ok)
    with pytest.raises(AssertionError, match=r"\[x\] slower: .*missed by"):
        course.challenge("slower", _fast, _slow, speedup=2, min_run_time=0.2)
    with pytest.raises(AssertionError, match="does not compute the same result"):
        course.challenge("wrong", _slow, lambda: 41, speedup=1.5, same=lambda a, b: a == b, min_run_time=0.2)
    with pytest.raises(ValueError, match="speedup"):
        course.challenge("c", _slow, _fast, speedup=0)
    with pytest.raises(TypeError, match="functions without arguments"):
        course.challenge("c", _slow, 3)


def test_narrate_picks_the_device_fills_figures_and_refuses_noise():
    kw = dict(cpu="CPU ran {x:.1f}", cuda="GPU ran {x:.1f}")
    assert str(course.narrate(kind="cpu", x=1.26, **kw)) == "CPU ran 1.3"
    assert course.narrate(kind="cuda", x=1.26, **kw)._repr_markdown_() == "GPU ran 1.3"
    assert str(course.narrate(kind="mps", x=2, **kw)) == "CPU ran 2.0"          # mps defaults to the CPU text
    assert "noisy" in str(course.narrate(kind="cuda", noisy=True, x=1, **kw))
    with pytest.raises(ValueError, match="field 'x'"):
        course.narrate(kind="cpu", **kw)
    with pytest.raises(ValueError, match="kind"):
        course.narrate(kind="tpu", x=1, **kw)
