"""The shared matplotlib figures (roofline, Amdahl). Each returns the Axes it drew on.

Example:
    >>> from gpulab.plots import plot_amdahl
    >>> from gpulab.roofline import fit_amdahl
    >>> ax = plot_amdahl(fit_amdahl([1, 2], [1.0, 0.6]))
"""
from __future__ import annotations

from typing import Any, Sequence

from ._check import axes, mapping, number_array, positive, text, texts
from .reference import GPU_SPECS, gpu_spec
from .roofline import AmdahlFit, attainable_flops

__all__ = ["plot_roofline", "plot_amdahl"]


def plot_roofline(peak_flops: float, bandwidth: float, points: Sequence[tuple[str, float, float]] = (),
                  label: str = "this machine", gpus: Sequence[str] = ("T4", "A100 40GB SXM", "H100 SXM"),
                  extra_peaks: dict[str, float] | None = None, ax: Any = None, source: str = "measured") -> Any:
    """Log-log roofline of this machine (measured ``peak_flops`` and ``bandwidth``) with measured
    ``points`` as (label, FLOPs per byte, achieved FLOP/s), and datasheet rooflines of ``gpus``
    (fp16 tensor-core peak) for scale. ``extra_peaks`` adds more flat ceilings (e.g. bf16). ``source`` says
    where the main roofline's figures come from, in its legend entry (e.g. ``"datasheet"``).

    Example:
        >>> import matplotlib; matplotlib.use("Agg")
        >>> import gpulab as gl
        >>> ax = gl.plot_roofline(1e11, 2e10, points=[("matmul 512", 85.0, 6e10)])
        >>> ax.get_xscale(), ax.get_yscale()
        ('log', 'log')
    """
    positive("peak_flops", peak_flops, unit="FLOP/s")
    positive("bandwidth", bandwidth, unit="bytes/s")
    text("label", label)
    text("source", source)
    specs = [GPU_SPECS.get(g) or gpu_spec(g) for g in texts("gpus", gpus)]
    for name, peak in mapping("extra_peaks", extra_peaks or {}, example="{'bf16': 2e12}").items():
        positive(f"extra_peaks[{name!r}]", peak, unit="FLOP/s")
    if isinstance(points, (str, bytes)) or not isinstance(points, (list, tuple)):
        raise TypeError(f"points must be a list of (name, intensity, FLOP/s) tuples, got {points!r:.60}")
    for p in points:
        if not isinstance(p, (list, tuple)) or len(p) != 3 or not isinstance(p[0], str):
            raise ValueError(f"points: each point is (name, intensity in FLOP/byte, achieved FLOP/s), got {p!r:.60}")
        number_array(f"points[{p[0]!r}]", p[1:], low=0.0, allow_low=False)
    axes("ax", ax)
    import matplotlib.pyplot as plt
    import numpy as np

    if ax is None:
        _, ax = plt.subplots(figsize=(9, 4.5))
    x = np.logspace(-2, 4, 200)
    ax.loglog(x, attainable_flops(x, peak_flops, bandwidth), lw=2.5, color="k", label=f"{label} ({source})")
    for name, peak in (extra_peaks or {}).items():
        ax.loglog(x, attainable_flops(x, peak, bandwidth), lw=1.5, ls="--", color="k", alpha=0.6, label=name)
    for s, color in zip(specs, ("#76b900", "#2a7ab9", "#b0358a", "#d9822b")):
        ax.loglog(x, attainable_flops(x, s.fp16_tensor_flops, s.bandwidth_bytes_per_s), color=color, alpha=0.8,
                  label=f"{s.name} datasheet (fp16 tensor)")
    for (name, intensity, achieved), marker in zip(points, "osD^v<>ph*"):
        ax.loglog([intensity], [achieved], marker=marker, ls="", ms=8, label=name)
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved)")
    ax.set_ylabel("FLOP/s")
    ax.set_title("Roofline: measured points under this machine's limits")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, frameon=False)
    ax.figure.tight_layout()
    return ax


def plot_amdahl(fit: AmdahlFit, max_workers: int = 64, ax: Any = None) -> Any:
    """Measured speedups and the fitted Amdahl curve, with the ``1/(1-p)`` ceiling."""
    import matplotlib.pyplot as plt
    import numpy as np

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    n = np.arange(1, max_workers + 1)
    ax.plot(n, fit.predict(n), label=f"Amdahl, p = {fit.parallel_fraction:.1%}")
    ax.plot(n, n, ls=":", color="gray", label="perfect scaling")
    ax.plot(fit.workers, [fit.times_s[0] / t for t in fit.times_s], "o", ms=8, label="measured")
    if fit.max_speedup < 1e6:
        ax.axhline(fit.max_speedup, ls="--", color="k", lw=0.8, label=f"ceiling {fit.max_speedup:.3g}x")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("workers (threads, GPUs, ...)")
    ax.set_ylabel("speedup over one worker")
    ax.legend(fontsize=8)
    ax.figure.tight_layout()
    return ax
