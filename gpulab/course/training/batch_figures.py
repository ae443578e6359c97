"""The figures of the batch-size lesson: a sweep's throughput curve (with its knee, or a note that it never
flattened) and the held-out accuracy of runs trained at several batch sizes.

Example:
    >>> import matplotlib; matplotlib.use("Agg")
    >>> from gpulab import course
    >>> runs = [course.BatchRun(f"batch {b}", b, 0.01, 0, 1, 4, (2.3,), a, 1.0, 128) for b, a in ((32, 0.9), (512, 0.6))]
    >>> ax = course.plot_accuracy(runs, baseline=runs[0])
    >>> [t.get_text() for t in ax.texts]
    ['90.0%', '60.0%']
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..._check import axes as axes_arg

__all__ = ["plot_sweep", "plot_accuracy"]

_BLUE, _RED = "#2a7ab9", "#c0392b"


def _batch_label(b: int) -> str:
    return f"{b // 1024}k" if b >= 1024 and b % 1024 == 0 else str(b)


def plot_sweep(sweep: Any, ax: Any = None,
               published: Sequence[tuple[int, float]] | Mapping[str, Sequence[tuple[int, float]]] | None = None,
               published_label: str = "published") -> Any:
    """The figure of :meth:`BatchSweep.plot` for ``sweep`` (a :class:`~gpulab.course.BatchSweep`): items/s as a share of the best against batch size (log scale), the
    knee as a dotted line (or, when the curve never flattened, a note saying so and no line), published curves
    normalised to their own best, step memory on a second axis; the legend sits below the axes. Returns the Axes.
    """
    import matplotlib.pyplot as plt

    ax = axes_arg("ax", ax)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4.2))
    sizes = list(sweep.batch_sizes)
    top = sweep.items_per_s(sweep.best)
    ax.plot(sizes, [100 * sweep.items_per_s(b) / top for b in sizes], "o-", color=_BLUE,
            label="items/s, % of best (this machine)")
    if isinstance(published, Mapping):
        curves = dict(published)
    else:
        curves = {published_label: published} if published else {}
    styles = (("s--", "#888888"), ("D:", "#b07d2a"), ("v-.", "#6a4c93"))
    for (label, points), (style, colour) in zip(curves.items(), styles):
        pb, pr = zip(*points)
        ax.plot(pb, [100 * r / max(pr) for r in pr], style, color=colour, label=label)
    knee = sweep.knee_info
    if knee.flattened:
        ax.axvline(knee.batch, color=_BLUE, ls=":", lw=1.2)
        ax.annotate(f"knee: {knee.batch} ", (knee.batch, 104), color=_BLUE, fontsize=9, ha="right", va="bottom")
    else:
        ax.text(0.02, 0.985, f"{knee} (this machine)", transform=ax.transAxes, color=_BLUE, fontsize=9,
                ha="left", va="top")
    ax.set_xscale("log", base=2)
    ticks = sorted(set(sizes) | {b for points in curves.values() for b, _ in points})
    if len(ticks) > 10:
        ticks = ticks[::2]
    ax.set_xticks(ticks, [_batch_label(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("batch size (log scale)")
    ax.set_ylabel("throughput, % of best")
    ax.set_ylim(0, 115)
    ax.set_yticks(range(0, 101, 20))
    mem = [(b, m.peak_memory_bytes) for b, m in zip(sizes, sweep.measurements) if m.peak_memory_bytes is not None]
    handles = ax.get_legend_handles_labels()[0]
    if mem:
        ax2 = ax.twinx()
        ax2.plot([b for b, _ in mem], [p / 2**20 for _, p in mem], "^-", color=_RED, alpha=0.7,
                 label="step memory (MiB, right axis)")
        ax2.set_ylabel("step memory (MiB)", color=_RED)
        ax2.set_ylim(0, max(p for _, p in mem) / 2**20 * 1.15 or 1)
        handles += ax2.get_legend_handles_labels()[0]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=8, frameon=False,
              ncol=1 if curves else 2)
    ax.set_title(f"Throughput and memory vs batch size ({sweep.measurements[0].device})")
    ax.figure.tight_layout()
    return ax


def plot_accuracy(runs: Sequence[Any], baseline: Any = None, ax: Any = None,
                  title: str = "Held-out accuracy") -> Any:
    """Held-out accuracy of each run (a :class:`~gpulab.course.BatchRun` from
    :func:`~gpulab.course.train_at_batch_size`) as horizontal bars, each with its value written on it, and
    ``baseline``'s accuracy as a dashed line named in the legend. Returns the Axes."""
    import matplotlib.pyplot as plt

    def is_run(r: Any) -> bool:
        return isinstance(getattr(r, "accuracy", None), float) and isinstance(getattr(r, "label", None), str)

    runs = list(runs)
    if not runs or not all(is_run(r) for r in runs):
        raise TypeError("runs must be a non-empty list of BatchRun results from course.train_at_batch_size")
    if baseline is not None and not is_run(baseline):
        raise TypeError(f"baseline must be one of the BatchRun results or None, got {type(baseline).__name__}")
    if not isinstance(title, str):
        raise TypeError(f"title must be a text, got {title!r}")
    ax = axes_arg("ax", ax)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 1.3 + 0.42 * len(runs)))
    pct = [100 * r.accuracy for r in runs]
    ypos = list(range(len(runs)))
    bars = ax.barh(ypos, pct, color=_BLUE, height=0.6)
    for bar, v in zip(bars, pct):
        inside = v > 18
        ax.text(v - 1.5 if inside else v + 1.5, bar.get_y() + bar.get_height() / 2, f"{v:.1f}%", va="center",
                ha="right" if inside else "left", color="white" if inside else "black", fontsize=9)
    ax.set_yticks(ypos, [r.label for r in runs])
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("held-out accuracy (%)")
    ax.set_title(title)
    ax.figure.tight_layout()
    if baseline is not None:
        ax.axvline(100 * baseline.accuracy, color="k", ls="--", lw=1,
                   label=f"{baseline.label}: {100 * baseline.accuracy:.1f}% (the baseline)")
        below = 0.5 / max(ax.get_position().height * ax.figure.get_figheight(), 0.1)   # under the x label
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -below), fontsize=8, frameon=False)
        ax.figure.tight_layout()
    return ax
