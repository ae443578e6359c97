"""Shared argument checks: each mistake gets the right exception and a message naming the argument."""
import math

import pytest

from gpulab._check import flag, per_label, positive, whole


@pytest.mark.parametrize("bad, exc", [(True, TypeError), (1.5, TypeError), ("3", TypeError), (-1, ValueError)])
def test_whole_refuses(bad, exc):
    with pytest.raises(exc, match="warmup must be a whole number >= 0"):
        whole("warmup", bad, low=0)


def test_whole_and_positive_accept():
    assert whole("n", 1) == 1
    assert positive("t", 2) == 2.0
    assert positive("t", 0, allow_zero=True) == 0.0


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (-1.0, ValueError), (math.inf, ValueError),
                                      (math.nan, ValueError), (None, TypeError), (False, TypeError)])
def test_positive_refuses(bad, exc):
    with pytest.raises(exc, match="min_run_time must be a positive finite number of seconds"):
        positive("min_run_time", bad, unit="seconds")


def test_flag_refuses_truthy_non_bools():
    assert flag("pinned", False) is False
    with pytest.raises(TypeError, match="pinned must be True or False"):
        flag("pinned", 1)


def test_per_label():
    assert per_label("items", 64, ["a", "b"]) == {"a": 64.0, "b": 64.0}
    assert per_label("items", None, ["a"]) == {"a": None}
    assert per_label("items", {"b": 2}, ["a", "b"]) == {"a": None, "b": 2.0}
    with pytest.raises(ValueError, match=r"unknown label\(s\) \['c'\]"):
        per_label("items", {"c": 1}, ["a", "b"])
    with pytest.raises(ValueError, match="items for 'a'"):
        per_label("items", {"a": -1}, ["a"])


def test_whole_numbers_from_numpy_are_whole_and_its_bools_are_not():
    import numpy as np

    from gpulab._check import whole

    assert whole("steps", np.int64(3)) == 3 and type(whole("steps", np.int64(3))) is int
    assert whole("warmup", np.uint8(0), low=0) == 0
    for bad in (np.bool_(True), True, np.float64(3.0), 3.0):
        with pytest.raises(TypeError, match="steps must be a whole number"):
            whole("steps", bad)
    with pytest.raises(ValueError, match="steps must be a whole number >= 1, got"):
        whole("steps", np.int64(0))
