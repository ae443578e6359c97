"""Energy readings that go wrong, and energy asked of traces that cannot give it: a counter that becomes unparsable
or raises mid-window never replaces the timed block's own exception nor stops a timing (the window has no figure,
with the reason), and a trace's summary and phases give a clear error for a bad argument or 'not measurable' with why,
never a silent number (a stuck, reset or single-reading counter, no samples at all, a price without items)."""
from __future__ import annotations

import math
import time

import pandas as pd
import pytest

import gpulab as gl
from gpulab.telemetry.energy import EnergyMeter
from gpulab.telemetry.rapl import RaplZone
from gpulab.telemetry.trace import Mark, Trace
from gpulab.telemetry.trace_energy import energy_between, energy_of, phase_energy


# ---- a counter read around a timed block ----------------------------------------------------------------------------
def _counter_breaks(monkeypatch, error: Exception) -> None:
    """From now on the package counter raises ``error`` (a file turned to text: ValueError; anything else)."""
    def read_uj(self):
        raise error
    monkeypatch.setattr(RaplZone, "read_uj", read_uj)


class _BlockError(Exception):
    pass


@pytest.mark.parametrize("error", [ValueError("invalid literal for int() with base 10: 'N/A'"),
                                   RuntimeError("the driver went away")])
def test_a_broken_counter_never_masks_the_blocks_own_exception(package_at, monkeypatch, error):
    package_at(watts=30.0)
    with pytest.raises(_BlockError, match="the block's own"):
        with gl.timer("block") as t:
            _counter_breaks(monkeypatch, error)
            raise _BlockError("the block's own")
    assert t.elapsed_s is not None and t.energy is not None and t.energy.joules is None
    assert type(error).__name__ in t.energy.reason or "gave no number" in t.energy.reason


@pytest.mark.parametrize("error", [ValueError("invalid literal for int() with base 10: 'N/A'"),
                                   RuntimeError("the driver went away")])
def test_a_broken_counter_leaves_the_timing_and_says_why_there_are_no_joules(package_at, monkeypatch, error):
    package_at(watts=30.0)
    with gl.timer("block") as t:
        time.sleep(0.01)
        _counter_breaks(monkeypatch, error)
    assert t.elapsed_s >= 0.01 and t.energy.joules is None and not t.energy.measured
    assert "could not be read again" in t.energy.reason and "not measurable here" in str(t.energy)
    assert str(error) in t.energy.reason


def test_a_counter_file_turned_to_text_gives_windows_without_joules(package_at, monkeypatch):
    root = package_at(watts=30.0)
    meter = EnergyMeter("cpu", rapl_root=root).start()            # found readable, then the file turns to text
    (root / "intel-rapl:0" / "energy_uj").write_text("N/A\n")
    monkeypatch.undo()                                              # the real read_uj: int("N/A") raises ValueError
    assert meter.read() is None
    e = meter.stop()
    assert e.joules is None and "gave no number" in e.reason and "'N/A'" in e.reason
    assert meter.start().stop().joules is None                      # a new window: read again, refused again


def test_a_benchmark_whose_counter_breaks_keeps_its_times(package_at, monkeypatch):
    package_at(watts=30.0)
    _counter_breaks(monkeypatch, ValueError("N/A"))
    m = gl.benchmark(sum, range(100), min_run_time=0.02, warn_noisy=False)
    assert m.median_s > 0 and m.energy.joules is None and "could not be read" in m.energy.reason


# ---- a trace's summary and phases ---------------------------------------------------------------------------------
T = [0.0, 1.0, 2.0, 3.0, 4.0]


def _gpu(**columns) -> pd.DataFrame:
    return pd.DataFrame({"t_s": T, "device": "gpu0", "source": "nvml", "power_w": 300.0, **columns})


def _trace(frame: pd.DataFrame, **kw) -> Trace:
    return Trace(frame, 1.0, marks=(Mark("train", 0.0, 2.0),), duration_s=5.0, **kw)


@pytest.mark.parametrize("items,kind", [(0, ValueError), (-1, ValueError), (math.nan, ValueError),
                                        (math.inf, ValueError), (True, TypeError), ("10", TypeError),
                                        ([10], TypeError)])
def test_summary_items_must_be_a_finite_number_above_zero(items, kind):
    with pytest.raises(kind, match="items must be the number of items the run processed"):
        _trace(_gpu(energy_j=[0.0, 100.0, 200.0, 300.0, 400.0])).summary(items=items)


@pytest.mark.parametrize("energy,why", [
    ([1000.0] * 5, "did not advance over 4.00 s"),
    ([1000.0, 900.0, 800.0, 700.0, 600.0], "went backwards (from 1000 J to 900 J at 1.00 s)"),
    ([1000.0, math.inf, 1200.0, 1300.0, 1400.0], "infinite value"),
    ([1000.0, math.nan, math.nan, math.nan, math.nan], "one reading of its energy counter")])
def test_a_counter_that_gives_no_figure_is_not_measurable_with_why_never_a_number(energy, why):
    """Before: a stuck counter gave 0 J, a reset one -400 J, and both a J per item; and the power readings beside a
    broken counter would not stand in for it silently."""
    trace = _trace(_gpu(energy_j=energy))
    s = trace.summary(items=10, price_per_hour=1.0)
    row = s.device("gpu0")
    assert row.energy_j is None and row.energy_per_item_j is None and why in row.energy_note
    text = repr(s)
    assert "not measurable" in text and why in text
    pe = trace.phase_energy()
    assert pe.joules("train", "gpu0") is None and why in repr(pe)


def test_power_below_zero_or_never_finite_gives_no_figure():
    negative = _trace(_gpu(power_w=[-5.0] * 5))
    assert negative.summary().device("gpu0").energy_j is None
    assert "below 0 W" in negative.summary(items=3).device("gpu0").energy_note
    nan_power = _trace(_gpu(power_w=[math.nan] * 5))
    s = nan_power.summary(items=3)
    assert s.device("gpu0").energy_j is None and "J per item not measurable here" in repr(s)


def test_a_phase_where_the_counter_did_not_move_or_that_lasts_no_time_has_no_joules():
    trace = Trace(_gpu(energy_j=[0.0, 0.0, 0.0, 100.0, 200.0]), 1.0,
                  marks=(Mark("idle", 0.0, 2.0), Mark("work", 2.0, 4.0), Mark("blink", 3.0, 3.0)), duration_s=4.0)
    pe = trace.phase_energy()
    assert pe.joules("idle", "gpu0") is None and pe.joules("work", "gpu0") == pytest.approx(200.0)
    assert pe.joules("blink", "gpu0") is None
    text = repr(pe)
    assert "idle on gpu0: its energy counter did not advance within the phase" in text
    assert "blink on gpu0: the phase lasts 0 s" in text


def test_a_trace_without_samples_says_its_energy_and_cost_are_not_measurable():
    empty = Trace(pd.DataFrame(columns=["t_s", "device", "source"]), 0.1, marks=(Mark("train", 0.0, 1.0),),
                  duration_s=0.0)
    s = empty.summary(items=10, price_per_hour=1.0)
    assert s.cost_per_million_items is None
    assert "J per item not measurable here: the trace has no samples" in repr(s)
    assert "cost per million items not measurable: the trace has no duration" in repr(s)
    pe = empty.phase_energy()
    assert pe.devices == () and "energy per phase is not measurable here" in repr(pe)
    assert "joules from each device's energy counter" not in repr(pe)
    priced = _trace(_gpu(energy_j=[0.0, 100.0, 200.0, 300.0, 400.0])).summary(price_per_hour=1.0)
    assert priced.cost_per_million_items is None and "pass items=" in repr(priced)


def test_the_trace_energy_functions_refuse_what_is_not_a_frame_a_trace_or_a_time():
    from gpulab.telemetry.trace_energy import energy_why_not

    f = _gpu(energy_j=[0.0, 100.0, 200.0, 300.0, 400.0]).set_index("t_s")
    assert energy_of(f) == (400.0, "counter") and energy_why_not(f) is None
    assert energy_between(f, 1.0, 3.0) == pytest.approx(200.0)
    with pytest.raises(TypeError, match="f must be one device's frame"):
        energy_of(3)
    with pytest.raises(TypeError, match="trace must be a gpulab Trace"):
        phase_energy(3)
    with pytest.raises(TypeError, match="start must be seconds"):
        energy_between(f, "0", 1.0)
    with pytest.raises(ValueError, match="end must be a finite number"):
        energy_between(f, 0.0, math.nan)
    with pytest.raises(ValueError, match=r"end \(1.0 s\) is before start \(3.0 s\)"):
        energy_between(f, 3.0, 1.0)
    with pytest.raises(ValueError, match="slack_s"):
        energy_between(f, 0.0, 1.0, slack_s=-1.0)
    with pytest.raises(ValueError, match="price_per_hour"):
        _trace(_gpu(energy_j=[0.0, 1.0, 2.0, 3.0, 4.0])).summary(items=1, price_per_hour="no-such-price")
