"""Models of performance: the roofline (compute vs memory bound), FLOP counting, Amdahl's law.

Example:
    >>> from gpulab.roofline import attainable_flops, amdahl_speedup
    >>> attainable_flops(1.0, peak_flops=100e9, bandwidth=10e9)   # memory-bound: 1 FLOP/byte
    10000000000.0
    >>> round(amdahl_speedup(0.9, 8), 2)
    4.71
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ._check import callable_arg, checked, number_array, positive
from ._format import html_table, text_table

__all__ = ["attainable_flops", "ridge_point", "count_flops", "amdahl_speedup", "fit_amdahl", "AmdahlFit"]


def attainable_flops(intensity: Any, peak_flops: float, bandwidth: float) -> Any:
    """Roofline: ``min(peak_flops, intensity * bandwidth)``; ``intensity`` in FLOPs per byte
    (a number or a numpy array).

    Example: an fp32 elementwise add (1 FLOP per 12 bytes) on a T4's datasheet figures (8.1 TFLOP/s, 320 GB/s)
        >>> import gpulab as gl
        >>> round(gl.attainable_flops(1 / 12, 8.1e12, 320e9) / 1e9, 1)      # GFLOP/s: memory-bound
        26.7
    """
    positive("peak_flops", peak_flops, unit="FLOP/s")
    positive("bandwidth", bandwidth, unit="bytes/s")
    import numpy as np

    out = np.minimum(peak_flops, number_array("intensity", intensity) * bandwidth)
    return float(out) if np.ndim(out) == 0 else out


def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """Arithmetic intensity (FLOPs/byte) where a kernel turns from memory- to compute-bound."""
    positive("peak_flops", peak_flops, unit="FLOP/s")
    positive("bandwidth", bandwidth, unit="bytes/s")
    return peak_flops / bandwidth


@checked(fn="fn")
def count_flops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """FLOPs of one call of ``fn`` as counted by ``torch.utils.flop_counter`` (matmuls, convolutions,
    attention; elementwise ops count as 0).

    Example:
        >>> import torch
        >>> count_flops(torch.mm, torch.ones(64, 32), torch.ones(32, 16))
        65536
    """
    callable_arg("fn", fn)
    from torch.utils.flop_counter import FlopCounterMode

    from ._dispatch import dispatch_mode

    counter = FlopCounterMode(display=False)
    with dispatch_mode(counter):          # under inference mode too: a Linear's matmul counted, not 0 (torch 2.5)
        fn(*args, **kwargs)
    return int(counter.get_total_flops())


def amdahl_speedup(parallel_fraction: float, workers: Any) -> Any:
    """Amdahl's law: ``1 / ((1 - p) + p / n)``."""
    positive("parallel_fraction", parallel_fraction, allow_zero=True)
    if parallel_fraction > 1.0:
        raise ValueError(f"parallel_fraction must be within [0, 1], got {parallel_fraction!r}")
    import numpy as np

    n = number_array("workers", workers, low=1.0)
    out = 1.0 / ((1.0 - parallel_fraction) + parallel_fraction / n)
    return float(out) if np.ndim(out) == 0 else out


@dataclass(frozen=True)
class AmdahlFit:
    """Amdahl's law fitted to measured times: ``T(n) = T1 * ((1 - p) + p / n)``."""

    workers: tuple[int, ...]
    times_s: tuple[float, ...]
    parallel_fraction: float
    t1_s: float

    @property
    def max_speedup(self) -> float:
        """The limit with infinitely many workers, ``1 / (1 - p)``."""
        return math.inf if self.parallel_fraction >= 1 else 1.0 / (1.0 - self.parallel_fraction)

    def predict(self, workers: Any) -> Any:
        """Predicted speedup over one worker."""
        return amdahl_speedup(self.parallel_fraction, workers)

    @property
    def note(self) -> str | None:
        """A warning when the measurements contradict the model: more workers ran clearly slower."""
        base = self.times_s[self.workers.index(min(self.workers))]
        slower = [(n, base / t) for n, t in zip(self.workers, self.times_s) if n > min(self.workers) and t > 1.1 * base]
        if not slower:
            return None
        runs = ", ".join(f"{n} workers {speedup:.2f}x" for n, speedup in slower)
        return (f"more workers ran slower ({runs}): Amdahl's law never predicts that, so something else took the "
                "cores (another program, or threads waiting on each other for too small a job); the fitted p is "
                "unreliable: re-run on an idle machine")

    def _rows(self) -> list[tuple[str, str, str]]:
        return [(str(n), f"{self.times_s[0] / t:.2f}x", f"{self.predict(n):.2f}x")
                for n, t in zip(self.workers, self.times_s)]

    def __repr__(self) -> str:
        return (f"Amdahl fit: parallel fraction p = {self.parallel_fraction:.1%}, "
                f"max speedup {self.max_speedup:.3g}x\n" + text_table(("workers", "measured", "model"), self._rows())
                + (f"\n[!] {self.note}" if self.note else ""))

    def _repr_html_(self) -> str:
        return html_table(("workers", "measured speedup", "Amdahl model"), self._rows(),
                          caption=f"Amdahl fit: p = {self.parallel_fraction:.1%}, max speedup {self.max_speedup:.3g}x",
                          footer=self.note)


def fit_amdahl(workers: Sequence[int], times_s: Sequence[float]) -> AmdahlFit:
    """Least-squares fit of Amdahl's law to times measured with different worker counts.

    Example:
        >>> fit = fit_amdahl([1, 2, 4], [1.0, 0.6, 0.4])
        >>> round(fit.parallel_fraction, 2)
        0.8
    """
    import math
    import numbers

    for name, value in (("workers", workers), ("times_s", times_s)):
        if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
            raise TypeError(f"{name} must be a list of numbers, one per run, got {value!r:.60}")
    workers, times_s = tuple(workers), tuple(times_s)
    for n in workers:
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
            raise ValueError(f"workers must be whole numbers >= 1, got {n!r} in {workers!r}")
    for t in times_s:
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or not math.isfinite(t) or t <= 0:
            raise ValueError(f"times_s must be finite positive seconds, got {t!r} in {times_s!r}")
    workers, times_s = tuple(int(n) for n in workers), tuple(float(t) for t in times_s)
    if len(workers) != len(times_s) or len(set(workers)) < 2:
        raise ValueError(f"fit_amdahl needs workers and times_s of the same length, for at least two different "
                         f"worker counts; got workers={list(workers)}, times_s={list(times_s)}")
    if 1 not in workers:
        raise ValueError(f"workers must include 1: the one-worker time is what every speedup is relative to, "
                         f"got {list(workers)}")
    import numpy as np

    # T(n) = a + b / n with a = T1 (1 - p) and b = T1 p: linear in (a, b).
    A = np.column_stack([np.ones(len(workers)), 1.0 / np.asarray(workers, dtype=float)])
    (a, b), *_ = np.linalg.lstsq(A, np.asarray(times_s), rcond=None)
    a, b = max(a, 0.0), max(b, 0.0)
    t1 = a + b
    p = float(b / t1) if t1 > 0 else 0.0
    return AmdahlFit(workers, times_s, min(max(p, 0.0), 1.0), float(t1))
