"""gl.streams.measure_streams on a CUDA GPU: a pinned host-to-device copy and matmuls on two streams overlap,
the plot shows both schedules, and the table labels every span by its stream (lesson 11's demonstration)."""
from __future__ import annotations

import pytest

import gpulab as gl

BATCH_BYTES = 64 * 2**20     # the lesson's 64 MiB batch
N = 2048                     # the lesson's matmul size


@pytest.fixture(scope="module")
def timeline():
    import torch

    buf = {"host": torch.randn(BATCH_BYTES // 4).pin_memory(), "device": torch.empty(BATCH_BYTES // 4, device="cuda"),
           "weights": torch.randn(N, N, device="cuda")}

    def copy_next():
        buf["device"].copy_(buf["host"], non_blocking=True)     # pinned memory: the host does not wait

    def compute_current():
        for _ in range(2):
            buf["weights"] @ buf["weights"]

    tasks = [gl.streams.StreamTask("copy batch k+1", "copy", "h2d", copy_next, bytes_moved=BATCH_BYTES),
             gl.streams.StreamTask("compute batch k", "compute", "kernel", compute_current, flops=2 * 2 * N**3,
                                   bytes_moved=2 * 3 * N**2 * 4)]
    t = gl.streams.measure_streams(tasks, device="cuda", repeats=5)
    yield t
    buf.clear()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


@pytest.mark.alone          # idle vs loaded power, overlap, peak speed: the whole GPU, nothing beside it
def test_two_streams_overlap_a_copy_and_a_kernel(timeline, figure):
    t = timeline
    assert t.measured and t.source == "CUDA events", f"measure_streams returned a model, not a measurement: {t.title}"
    assert len(t.spans) == 2 and len(t.serial_spans) == 2, f"expected one span per task per schedule: {t}"
    assert all(s.duration_s > 0 for s in (*t.spans, *t.serial_spans)), f"a task took no time: {t.to_dataframe()}"
    assert t.overlapped_s < t.serial_s, (
        f"on two streams the pinned copy and the matmuls should overlap: overlapped {t.overlapped_s * 1e3:.3f} ms "
        f"is not below serial {t.serial_s * 1e3:.3f} ms. Is the host memory pinned and the copy non_blocking, and "
        f"does the GPU have a free copy engine?\n{t}")
    assert t.overlap_s > 0, f"no moment with both tasks running although the schedule got shorter:\n{t}"
    figure("streams_overlap_speedup", t.speedup, "x",
           note=f"serial {t.serial_s * 1e3:.2f} ms -> overlapped {t.overlapped_s * 1e3:.2f} ms: a 64 MiB pinned "
                f"H2D copy beside two {N}x{N} fp32 matmuls, CUDA events")


def test_the_plot_draws_spans_in_both_panels(timeline):
    import matplotlib.pyplot as plt

    ax = timeline.plot()
    try:
        axes = [a for a in ax.figure.axes]
        assert len(axes) == 2, f"plot() without ax should draw the overlapped and the serial panel, got {len(axes)}"
        serial_ax = next(a for a in axes if a is not ax)
        assert len(ax.patches) >= len(timeline.spans), (
            f"the overlapped panel shows {len(ax.patches)} bars for {len(timeline.spans)} spans")
        assert len(serial_ax.patches) >= len(timeline.serial_spans), (
            f"the serial panel shows {len(serial_ax.patches)} bars for {len(timeline.serial_spans)} spans")
        lanes = [t.get_text() for t in ax.get_yticklabels()]
        assert lanes == ["copy", "compute"], f"the overlapped panel's lanes should be the two streams, got {lanes}"
        assert [t.get_text() for t in serial_ax.get_yticklabels()] == ["serial"]
        title = ax.get_title(loc="left") or ax.get_title()
        assert "measured with CUDA events" in title, f"the title should say it is measured: {title!r}"
    finally:
        plt.close(ax.figure)


def test_to_dataframe_labels_spans_by_stream(timeline):
    df = timeline.to_dataframe()
    assert sorted(df["schedule"].unique()) == ["overlapped", "serial"], f"schedules: {df['schedule'].unique()}"
    over = df[df["schedule"] == "overlapped"].set_index("task")
    assert over.loc["copy batch k+1", "stream"] == "copy" and over.loc["copy batch k+1", "kind"] == "h2d", over
    assert over.loc["compute batch k", "stream"] == "compute" and over.loc["compute batch k", "kind"] == "kernel", over
    serial = df[df["schedule"] == "serial"]
    assert (serial["stream"] == "serial").all(), f"every serial span runs on the one 'serial' stream:\n{serial}"
    assert (df["end_s"] >= df["start_s"]).all() and (df["duration_s"] > 0).all(), df
    assert timeline.busy_by_stream.keys() == {"copy", "compute"}, timeline.busy_by_stream
