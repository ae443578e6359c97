from __future__ import annotations

import pytest

import gpulab as gl
from gpulab.timing import Measurement, environment


def fake(label, seconds, **kw):
    """A Measurement with known times (no benchmarking needed for table logic)."""
    times = tuple(seconds * f for f in (0.98, 1.0, 1.0, 1.02))
    return Measurement(label, times, 1, "cpu", 2, environment("cpu"), "manual", 0, **kw)


def test_speedup_items_and_fraction_of_peak():
    base = fake("fp32", 0.010, items=64, flops=2e9)
    fast = fake("bf16", 0.004, items=64, flops=2e9, peak_memory_bytes=2**20)
    c = gl.compare([base, fast], baseline="fp32", peak_flops=1e12, published_figures={"bf16": "amp-pytorch"},
                   title="precision")
    assert c.speedup("bf16") == pytest.approx(2.5)
    df = c.to_dataframe()
    assert df.loc["bf16", "items_per_s"] == pytest.approx(16000)
    assert df.loc["bf16", "fraction_of_peak_flops"] == pytest.approx(0.5)
    assert df.loc["fp32", "fraction_of_peak_flops"] == pytest.approx(0.2)
    assert "PyTorch AMP recipe" in df.loc["bf16", "published"]
    text = repr(c)
    assert "2.50x" in text and "50%" in text and "median (ms)" in text and "measured limit" in text
    assert "<table" in c._repr_html_() and "precision" in c._repr_html_()


def test_baseline_defaults_to_first():
    c = gl.compare([fake("a", 1.0), fake("b", 0.5)])
    assert c.baseline == "a" and c.speedup("b") == pytest.approx(2.0)


def test_one_time_unit_per_table():
    c = gl.compare([fake("slow", 0.5), fake("fast", 0.002)])
    assert "median (ms)" in repr(c) and "500" in repr(c)


@pytest.mark.parametrize("call,error,match", [
    (lambda: gl.compare([fake("a", 1.0)], baseline="zzz"), ValueError, "unknown baseline"),
    (lambda: gl.compare([]), ValueError, "at least one"),
    (lambda: gl.compare([fake("a", 1.0), fake("a", 2.0)]), ValueError, "unique"),
    (lambda: gl.compare([fake("a", 1.0), 3.0]), TypeError, "Measurements"),
    (lambda: gl.compare([fake("a", 1.0)], published_figures={"a": "nope"}), ValueError,
     r"published_figures\['a'\]: no published figure key='nope'"),
    (lambda: gl.compare([fake("a", 1.0)], published_figures={"b": "amp-pytorch"}), ValueError, "unknown label"),
    (lambda: gl.compare([fake("a", 1.0)], peak_flops=-5), ValueError, "positive"),
])
def test_bad_inputs(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_noisy_rows_are_flagged():
    noisy = Measurement("n", (0.5, 1.0, 1.5, 2.0, 1.0), 1, "cpu", 2, environment("cpu"), "manual", 0)
    c = gl.compare([fake("a", 1.0), noisy])
    assert "n *" in repr(c) and "noisy" in repr(c)


def test_plot_returns_axes():
    c = gl.compare([fake("a", 1.0), fake("b", 0.5)])
    ax = c.plot()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]
    with pytest.raises(ValueError, match="unknown metric"):
        c.plot("colour")
