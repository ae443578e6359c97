"""The toolkit's other figures: legends beside the data, never on it; axes that do not exaggerate."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from types import SimpleNamespace as NS  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

import gpulab as gl  # noqa: E402
from gpulab import course  # noqa: E402
from gpulab.course.capstone.ablation import Change, ablate  # noqa: E402


def _legend_clear_of_axes(ax) -> bool:
    ax.figure.canvas.draw()
    a, b = ax.get_legend().get_window_extent(), ax.get_window_extent()
    inside_fig = a.x1 <= ax.figure.get_window_extent().x1 + 1
    return inside_fig and not (a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1)


def test_the_roofline_legend_sits_under_the_axes_not_in_a_side_column():
    ax = gl.plot_roofline(1e11, 2e10, points=[("matmul", 85.0, 6e10)])
    assert _legend_clear_of_axes(ax)
    assert ax.get_legend().get_window_extent().y1 < ax.get_window_extent().y0     # below, not beside
    plt.close("all")


def test_ablation_accuracy_is_drawn_as_dots_on_a_cut_axis_not_as_bars():
    acc = {1: 0.912, 4: 0.905, 16: 0.86}
    fake = lambda r, run: NS(samples_per_s=100.0 * r["b"], spread_pct=1.0, test_accuracy=acc[r["b"]],  # noqa: E731
                             peak_memory_bytes=None, flops_per_sample=1e6)
    table = ablate(fake, {"b": 1}, [Change("batch 4", {"b": 4}), Change("batch 16", {"b": 16})],
                   apply=lambda r, f: {**r, **f})
    speed_ax, acc_ax = table.plot()
    assert len(acc_ax.patches) == 0 and acc_ax.get_xlim()[0] > 0                # no bar lengths on a cut axis
    assert sorted(t.get_text().strip() for t in acc_ax.texts) == ["86.0%", "90.5%", "91.2%"]
    plt.close("all")


def test_fp16_range_legend_and_loader_legend_cover_no_data():
    torch.manual_seed(0)
    r = course.gradient_underflow(course.models.mlp(hidden=32), course.models.example_batch("mlp", 4),
                                  loss_weight=1e-5)
    assert _legend_clear_of_axes(r.plot())
    from gpulab.data import compare_loaders, measure_loader

    run = measure_loader([([0] * 4, [0] * 4)] * 3, label="a", warmup_batches=0)
    assert _legend_clear_of_axes(compare_loaders([run]).plot())
    plt.close("all")


def test_copy_bandwidth_axis_starts_at_zero():
    sweep = course.transfer_sweep(gl.transfer.measure_transfer, [4096, 65536], device="cpu", min_run_time=0.02,
                                  ceilings={"host copy": 10e9})
    assert sweep.plot().get_ylim()[0] == 0
    plt.close("all")
