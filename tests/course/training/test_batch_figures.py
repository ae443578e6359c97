"""The figures of the batch-size lesson and the Monitor's trace: what each must show (and not hide)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import gpulab as gl  # noqa: E402
from gpulab import course  # noqa: E402
from gpulab.telemetry.trace import Mark, Trace  # noqa: E402


def _m(batch: int, seconds: float, peak: int | None = None) -> gl.Measurement:
    return gl.Measurement(label=f"batch {batch}", times_s=(seconds,) * 5, number_per_run=1, device="cpu",
                          num_threads=2, env=gl.timing.environment("cpu"), backend="test", warmup=0, items=batch,
                          peak_memory_bytes=peak)


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _vertical_lines(ax) -> list[float]:
    return [line.get_xdata()[0] for line in ax.get_lines()
            if len(set(line.get_xdata())) == 1 and len(line.get_xdata()) == 2]


def test_a_rising_curve_has_no_knee_and_says_so():
    knee = course.curve_knee([(1, 10.0), (8, 70.0), (64, 400.0)])
    assert knee.batch is None and not knee.flattened and knee.value == "no knee up to batch 64: still rising"
    assert course.curve_knee([(1, 10.0), (8, 370.0), (64, 400.0)]).value == 8
    sweep = course.BatchSweep(tuple(_m(b, 1e-3 + b * 1e-7, 1000 * b) for b in (1, 8, 64, 512)))
    assert sweep.knee is None and "no knee up to batch 512: still rising" in repr(sweep)
    ax = sweep.plot()
    assert _vertical_lines(ax) == []                                      # no knee line at the last batch
    assert any("no knee up to batch 512: still rising" in t.get_text() for t in ax.texts)
    plt.close("all")


def test_a_flattening_curve_marks_its_knee_and_the_legend_covers_no_data():
    sweep = course.BatchSweep(tuple(_m(b, 4e-4 + b * 2.4e-5, 1000 * b) for b in (1, 4, 16, 64, 256, 1024)))
    assert sweep.knee == 256 and sweep.knee_info.flattened
    ax = sweep.plot(published=course.published_curve("resnet50-t4-batch-1-to-256"))
    assert _vertical_lines(ax) == [256]
    fig = ax.figure
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    assert not _overlaps(legend, ax.get_window_extent())                  # outside the axes, below them
    plt.close("all")


def test_the_accuracy_bars_carry_their_values_and_a_named_baseline():
    runs = [course.BatchRun(lbl, b, 0.01, 0, 3, 10, (2.0, 1.0), acc, 1.0, 100)
            for lbl, b, acc in (("batch 32", 32, 0.91), ("batch 512", 512, 0.62), ("batch 2048", 2048, 0.1))]
    ax = course.plot_accuracy(runs, baseline=runs[0])
    assert sorted(t.get_text() for t in ax.texts) == ["10.0%", "62.0%", "91.0%"]
    assert ax.get_xlabel() == "held-out accuracy (%)" and ax.get_ylabel() != "label"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["batch 32: 91.0% (the baseline)"]
    with pytest.raises(TypeError, match="BatchRun"):
        course.plot_accuracy([0.9])
    plt.close("all")


def _trace(rss_mib: tuple[float, float]) -> Trace:
    rows = [{"t_s": i / 10, "device": "host", "source": "host", "cpu_util_pct": 100.0 if i < 30 else 35.0,
             "rss_bytes": int((rss_mib[0] if i % 2 else rss_mib[1]) * 2**20)} for i in range(60)]
    return Trace(pd.DataFrame(rows), interval_s=0.1, duration_s=6.0,
                 marks=(Mark("busy", 0.0, 3.0), Mark("waiting for data", 3.0, 6.0)))


def test_the_monitor_figure_reads_at_a_glance():
    fig = _trace((780.0, 787.0)).plot()
    ax_u, ax_m = fig.axes[:2]
    assert ax_m.get_ylim()[0] == 0 and ax_m.get_ylabel() == "memory (MiB)"   # a 7 MiB wobble looks flat
    fig.canvas.draw()
    names = {t.get_text().strip(): t for t in ax_u.texts}
    assert set(names) == {"busy", "waiting for data"}
    box = ax_u.get_window_extent()
    for t in names.values():
        e = t.get_window_extent()
        assert t.get_fontsize() >= 9 and box.x0 <= e.x0 and e.x1 <= box.x1 and box.y0 <= e.y0 and e.y1 <= box.y1
    colours = {p.get_facecolor() for p in ax_u.patches}
    assert len(colours) == 2                                              # each phase its own shade
    width = fig.get_window_extent().x1
    for ax in fig.axes:
        legend = ax.get_legend().get_window_extent()
        assert legend.x1 <= width and not _overlaps(legend, ax.get_window_extent())
    plt.close("all")


def test_phase_utilisation_and_the_lowest_phase():
    metric, util = course.phase_utilisation(_trace((1.0, 1.0)))
    assert metric == "CPU utilisation (all cores)" and util == {"busy": 100.0, "waiting for data": 35.0}
    w = course.LoopWatch(_trace((1.0, 1.0)), (course.PhaseUse("busy", 5, 3.0, 100.0),
                                              course.PhaseUse("waiting for data", 2, 3.0, 35.0)), metric)
    assert w.lowest() == "waiting for data" and w.lowest("busy") == "busy" and "35%" in repr(w)
    same = course.LoopWatch(w.trace, (course.PhaseUse("naive", 5, 3.0, 99.0), course.PhaseUse("batched", 9, 3.0, 97.0)),
                            metric)
    assert same.lowest() == "about equal" and same.lowest(margin_pct=1.0) == "batched"
    with pytest.raises(KeyError, match="phases"):
        w.phase("naive")
    with pytest.raises(TypeError, match="loops"):
        course.watch_loops({}, 1.0)
    with pytest.raises(TypeError, match="Trace"):
        course.phase_utilisation("trace")
