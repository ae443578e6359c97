"""Amdahl's law measured on the device a lesson runs on (lesson 00).

A step is a *parallel* part (a matmul whose result the host reads, as a training loop reads its loss) followed
by a *serial* part (plain Python on one core, like a loop's bookkeeping). :func:`serial_parallel_step` times it
on one CPU thread, then with the matmul on the device (every CPU thread, or the GPU), every run synchronised by
:func:`gpulab.benchmark` and by the host reading the result. From these times come the parallel fraction *p*,
how much faster the device ran the parallel part, and the step's measured speedup beside Amdahl's prediction.

Example:
    >>> from gpulab import course
    >>> s = course.serial_parallel_step(64, device="cpu", min_run_time=0.02)
    >>> 0.0 <= s.parallel_fraction <= 1.0 and s.step_speedup > 0
    True
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..._check import checked
from ..._format import html_table, text_table
from ...roofline import AmdahlFit, amdahl_speedup
from ...timing import benchmark

__all__ = ["SerialParallelStep", "serial_parallel_step", "python_work", "speedup_needed"]


def python_work(iterations: int) -> int:
    """The serial part: plain Python on one core (no library call can spread it over threads or a GPU).

    Example:
        >>> python_work(4)   # 0 + 1 + 4 + 9
        14
    """
    return sum(i * i for i in range(iterations))


def speedup_needed(parallel_fraction: float, share_of_ceiling: float = 0.9) -> float:
    """How many times faster the parallel part must run for the whole step to reach ``share_of_ceiling`` of
    Amdahl's ceiling 1 / (1 - p): solving 1 / ((1 - p) + p / S) = share / (1 - p) for S gives
    S = share * p / ((1 - share) * (1 - p)).

    Example:
        >>> round(speedup_needed(0.9, 0.9), 6)   # 81x for a 90%-parallel step to reach 9 of its 10x ceiling
        81.0
    """
    for name, v in (("parallel_fraction", parallel_fraction), ("share_of_ceiling", share_of_ceiling)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1:
            raise ValueError(f"{name} must be a fraction strictly between 0 and 1, got {v!r}")
    p, share = float(parallel_fraction), float(share_of_ceiling)
    return share * p / ((1 - share) * (1 - p))


def _matmul_read(a: Any) -> float:
    """The parallel part: a matmul, then the host reads one number of the result (on a GPU this waits for it)."""
    import torch

    return float(torch.mm(a, a)[0, 0])


def _to_device(t: Any, device: Any) -> Any:
    return t.to(device)


@dataclass(frozen=True)
class SerialParallelStep:
    """Times (fastest run of each, in seconds) of a step split into a serial host part and a parallel matmul."""

    device: str
    n: int                    # the matmul is n x n by n x n, fp32
    serial_s: float           # the Python part alone (one core)
    parallel_one_s: float     # the matmul on one CPU thread
    parallel_device_s: float  # the matmul on the device: every CPU thread, or the GPU (synchronised)
    step_one_s: float         # the whole step on one CPU thread
    step_device_s: float      # the whole step with its matmul on the device
    noisy: bool               # a timing's spread was above 10% of its median

    @property
    def parallel_fraction(self) -> float:
        """p: the parallel part's share of the one-thread step."""
        return min(1.0, max(0.0, self.parallel_one_s / (self.parallel_one_s + self.serial_s)))

    @property
    def parallel_speedup(self) -> float:
        """How many times faster the device ran the parallel part than one CPU thread (its 'workers')."""
        return self.parallel_one_s / self.parallel_device_s

    @property
    def step_speedup(self) -> float:
        """The whole step's measured speedup over one CPU thread."""
        return self.step_one_s / self.step_device_s

    @property
    def predicted_speedup(self) -> float:
        """Amdahl's prediction for the step, from p and the parallel part's measured speedup."""
        return float(amdahl_speedup(self.parallel_fraction, max(1.0, self.parallel_speedup)))

    @property
    def max_speedup(self) -> float:
        """Amdahl's ceiling 1 / (1 - p): the speedup with infinitely fast parallel hardware."""
        p = self.parallel_fraction
        return math.inf if p >= 1 else 1.0 / (1.0 - p)

    def fit(self) -> AmdahlFit:
        """The Amdahl model with the measured p, anchored at the one-thread step (for ``gl.plots.plot_amdahl``)."""
        return AmdahlFit((1,), (self.step_one_s,), self.parallel_fraction, self.step_one_s)

    def plot(self, max_workers: int = 4096) -> Any:
        """Amdahl's curve for the measured p, with the device's measured point at x = its parallel speedup."""
        from ...plots import plot_amdahl

        ax = plot_amdahl(self.fit(), max_workers=max_workers)
        ax.plot([max(1.0, self.parallel_speedup)], [self.step_speedup], "s", ms=9,
                label=f"{self.device}: matmul {self.parallel_speedup:.3g}x faster, step {self.step_speedup:.3g}x")
        ax.set_xlabel("speedup of the parallel part (threads, GPU cores, ...)")
        ax.legend(fontsize=8)
        return ax

    def _rows(self) -> list[tuple[str, str, str]]:
        ms = lambda s: f"{s * 1e3:.3g} ms"   # noqa: E731
        return [("serial part (Python, one core)", ms(self.serial_s), ms(self.serial_s)),
                ("parallel part (matmul)", ms(self.parallel_one_s), ms(self.parallel_device_s)),
                ("whole step", ms(self.step_one_s), ms(self.step_device_s))]

    def _summary(self) -> str:
        return (f"p = {self.parallel_fraction:.1%}; parallel part {self.parallel_speedup:.3g}x faster on "
                f"{self.device}; step {self.step_speedup:.3g}x measured, {self.predicted_speedup:.3g}x by Amdahl's "
                f"law; ceiling {self.max_speedup:.3g}x" + (" [noisy: run again]" if self.noisy else ""))

    def __repr__(self) -> str:
        head = ("", "one CPU thread", f"{self.device}")
        return f"Serial + parallel step, n = {self.n}\n" + text_table(head, self._rows()) + "\n" + self._summary()

    def _repr_html_(self) -> str:
        return html_table(("", "one CPU thread", f"{self.device}"), self._rows(),
                          caption=f"Serial + parallel step, n = {self.n}", footer=self._summary())


@checked(device="device")
def serial_parallel_step(n: int, device: Any = "cpu", serial_share: float = 0.1, min_run_time: float = 0.3,
                         warmup: int = 1) -> SerialParallelStep:
    """Measure Amdahl's law on ``device``: a step whose serial Python part takes about ``serial_share`` of the
    one-thread step (calibrated here, then measured), timed on one CPU thread and with its ``n x n`` matmul on
    ``device``. Every time is the fastest of synchronised runs (:func:`gpulab.benchmark`); the host reads the
    matmul's result in every step, so on a GPU the step includes waiting for it.

    Example:
        >>> s = serial_parallel_step(64, device="cpu", min_run_time=0.02)
        >>> round(s.predicted_speedup, 6) == round(float(amdahl_speedup(s.parallel_fraction,
        ...                                                  max(1.0, s.parallel_speedup))), 6)
        True
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive whole number, got {n!r}")
    if not isinstance(serial_share, (int, float)) or not 0.0 < serial_share < 1.0:
        raise ValueError(f"serial_share must be a fraction between 0 and 1, got {serial_share!r}")
    import torch

    a_cpu = torch.randn(n, n, generator=torch.Generator().manual_seed(0))
    a_dev = _to_device(a_cpu, device)
    kw = dict(min_run_time=min_run_time, warmup=warmup, warn_noisy=False)
    one = dict(device="cpu", num_threads=1)
    parallel_one = benchmark(_matmul_read, a_cpu, label="matmul, 1 thread", **one, **kw)
    probe_iters = 20_000
    probe = benchmark(python_work, probe_iters, label="python probe", device="cpu", **kw)
    want_s = parallel_one.min_s * serial_share / (1.0 - serial_share)
    iters = max(1_000, int(probe_iters * want_s / probe.min_s))

    def step(a: Any) -> int:
        _matmul_read(a)              # parallel: the matmul; the host reads its result (waits for the GPU)
        return python_work(iters)    # serial: bookkeeping in plain Python

    serial = benchmark(python_work, iters, label="serial part", device="cpu", **kw)
    step_one = benchmark(step, a_cpu, label="step, 1 thread", **one, **kw)
    parallel_dev = benchmark(_matmul_read, a_dev, label=f"matmul on {device}", device=device, **kw)
    step_dev = benchmark(step, a_dev, label=f"step on {device}", device=device, **kw)
    runs = (parallel_one, serial, step_one, parallel_dev, step_dev)
    return SerialParallelStep(str(device), n, serial.min_s, parallel_one.min_s, parallel_dev.min_s, step_one.min_s,
                              step_dev.min_s, any(m.noisy for m in runs))
