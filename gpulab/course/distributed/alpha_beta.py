"""The alpha-beta model of an all-reduce, fitted before it is trusted (lesson 07): a ring all-reduce of ``n`` bytes
over ``N`` processes costs about ``2 (N-1) alpha + 2 (N-1) / N x n / B`` seconds, ``alpha`` the fixed cost of each of
its ``2 (N-1)`` steps and ``B`` the bus bandwidth. :func:`fit_alpha_beta` fits both by least squares to an
all-reduce size sweep (``ddp_train --allreduce-sweep``), leaving one size out, and checks the model against it.

Example:
    >>> from gpulab import course
    >>> sweep = [[n, 2 * 50e-6 + n / 2e9] for n in (4096, 65536, 1 << 20, 1 << 22, 1 << 24)]   # N=2: 50 us, 2 GB/s
    >>> ab = course.fit_alpha_beta(sweep, workers=2, held_out=1 << 20)
    >>> round(ab.alpha_s * 1e6), round(ab.bus_bytes_per_s / 1e9, 2), round(ab.held_out_error, 6)
    (50, 2.0, 0.0)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from ..._check import whole
from ..._format import fmt_bytes, fmt_rate, fmt_seconds, html_table, text_table

__all__ = ["AlphaBeta", "fit_alpha_beta"]


@dataclass(frozen=True)
class AlphaBeta:
    """An all-reduce's fitted ``alpha_s`` (seconds per ring step) and ``bus_bytes_per_s`` over ``workers`` processes,
    the sweep it was fitted to (``points``: bytes, seconds) and the size left out with its measured and predicted
    time (``held_out_error``: predicted / measured - 1)."""

    alpha_s: float
    bus_bytes_per_s: float
    workers: int
    points: tuple[tuple[int, float], ...]
    held_out_bytes: int
    held_out_s: float
    held_out_predicted_s: float

    @property
    def held_out_error(self) -> float:
        return self.held_out_predicted_s / self.held_out_s - 1

    def predict(self, nbytes: float) -> float:
        """The model's time for an all-reduce of ``nbytes``."""
        n = self.workers
        return 2 * (n - 1) * self.alpha_s + 2 * (n - 1) / n * nbytes / self.bus_bytes_per_s

    @property
    def crossover_bytes(self) -> float:
        """The size at which the latency term equals the bandwidth term: smaller all-reduces pay mostly alpha."""
        return self.workers * self.alpha_s * self.bus_bytes_per_s

    def _rows(self) -> list[list[str]]:
        rows = [[fmt_bytes(b), fmt_seconds(t), fmt_seconds(self.predict(b)), f"{self.predict(b) / t - 1:+.0%}",
                 "left out" if b == self.held_out_bytes else "fitted"] for b, t in self.points]
        return rows

    def _note(self) -> str:
        return (f"{self.workers} processes: alpha = {fmt_seconds(self.alpha_s)} per ring step, bus bandwidth "
                f"{fmt_rate(self.bus_bytes_per_s)}; the latency and bandwidth terms are equal at "
                f"{fmt_bytes(self.crossover_bytes)}; the size left out is predicted {self.held_out_error:+.0%} off")

    def __repr__(self) -> str:
        return ("All-reduce: the alpha-beta model against the sweep\n"
                + text_table(["size", "measured", "model", "model off by", ""], self._rows()) + "\n" + self._note())

    def _repr_html_(self) -> str:
        return html_table(["size", "measured", "model", "model off by", ""], self._rows(),
                          caption="All-reduce: the alpha-beta model against the sweep", footer=self._note())


def fit_alpha_beta(sweep: Sequence[Sequence[float]], *, workers: int, held_out: int | None = None) -> AlphaBeta:
    """Fit ``alpha`` and the bus bandwidth to ``sweep`` (``[bytes, seconds]`` pairs, the median time of each size)
    by least squares in relative error (each size weighs the same), leaving out ``held_out`` bytes (default: the
    size in the middle of the sweep), and predict that one."""
    import numpy as np

    workers = whole("workers", workers, low=2)
    if isinstance(sweep, (str, bytes)) or not isinstance(sweep, Sequence) or len(sweep) < 3 or not all(
            isinstance(p, Sequence) and len(p) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                            and math.isfinite(v) and v > 0 for v in p) for p in sweep):
        raise ValueError(f"sweep must be 3 or more [bytes, seconds] pairs of finite numbers > 0 (ddp_train "
                         f"--allreduce-sweep reports them), got {sweep!r:.80}")
    points = tuple(sorted((int(b), float(t)) for b, t in sweep))
    sizes = [b for b, _ in points]
    held = sizes[len(sizes) // 2] if held_out is None else whole("held_out", held_out)
    if held not in sizes:
        raise ValueError(f"held_out={held} is not a size of the sweep: {sizes}")
    fit = [(b, t) for b, t in points if b != held]
    n = workers
    # t = 2(n-1) alpha + 2(n-1)/n b / B: linear in (alpha, 1/B); rows divided by t weigh every size the same
    a = np.array([[2 * (n - 1) / t, 2 * (n - 1) / n * b / t] for b, t in fit])
    (alpha, inv_bw), *_ = np.linalg.lstsq(a, np.ones(len(fit)), rcond=None)
    if not inv_bw > 0:
        raise ValueError("the sweep's times do not grow with the size: no bandwidth can be fitted (a sweep from a "
                         "busy machine? run it again)")
    held_s = next(t for b, t in points if b == held)
    ab = AlphaBeta(max(float(alpha), 0.0), float(1 / inv_bw), n, points, held, held_s, 0.0)
    return AlphaBeta(ab.alpha_s, ab.bus_bytes_per_s, n, points, held, held_s, ab.predict(held))
