"""Appendix A1's buffer-reuse challenge: what fresh memory costs on this CPU, and the speedup a reused output buffer
is asked for.

A large allocation is new memory from the operating system, and every page of it costs a page fault when first
written: a ``clone`` pays that, a ``copy_`` into a buffer that already exists does not, and both move the same bytes.
:func:`reuse_target` times the two in turn on one thread (a shared CPU stalls multi-threaded calls) and sets the
challenge's target to part of the gap it measured, so the target follows the machine instead of a fixed figure.

Example:
    >>> t = ReuseTarget(64 * 2**20, clone_s=0.075, copy_s=0.025, share=0.5, noisy=False)
    >>> round(t.ratio, 2), t.target_speedup
    (3.0, 2.0)
"""
from __future__ import annotations

import html
from dataclasses import dataclass

from ..._check import whole

__all__ = ["ReuseTarget", "reuse_target"]


@dataclass(frozen=True)
class ReuseTarget:
    """``clone`` against ``copy_`` of ``nbytes`` into an existing buffer (median seconds, one thread, timed in turn),
    and the challenge's target: ``1 + share x (ratio - 1)``, the part ``share`` of the gap fresh memory opened here
    (never below 1: without a gap, a reused buffer is only asked not to be slower)."""

    nbytes: int
    clone_s: float
    copy_s: float
    share: float
    noisy: bool

    @property
    def ratio(self) -> float:
        """How many times longer the clone took than the copy into an existing buffer."""
        return self.clone_s / self.copy_s

    @property
    def target_speedup(self) -> float:
        return round(max(1.0, 1.0 + self.share * (self.ratio - 1.0)), 2)

    def __repr__(self) -> str:
        noisy = " The timings were noisy: run the cell again before relying on the target." if self.noisy else ""
        return (f"On one thread, a clone of {self.nbytes / 2**20:g} MiB took {self.clone_s * 1e3:.1f} ms and a copy_ "
                f"into an existing buffer {self.copy_s * 1e3:.1f} ms: fresh memory made the same copy "
                f"{self.ratio:.2f}x as long here. Target: {self.target_speedup:.2f}x ({self.share:.0%} of that "
                f"gap, a margin for the noise).{noisy}")

    def _repr_html_(self) -> str:
        return f"<div>{html.escape(repr(self))}</div>"


def reuse_target(nbytes: int = 64 * 2**20, *, share: float = 0.5, min_run_time: float = 0.5) -> ReuseTarget:
    """Time ``x.clone()`` against ``buffer.copy_(x)`` for ``nbytes`` of float32 on one thread, in turn
    (:func:`gpulab.benchmark_interleaved`), and return the :class:`ReuseTarget` with the challenge's speedup.

    Example:
        >>> t = reuse_target(4 * 2**20, min_run_time=0.05)
        >>> t.target_speedup >= 1.0
        True
    """
    whole("nbytes", nbytes)
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        raise ValueError(f"share must be the part of the measured gap to ask for, in (0, 1], got {share!r}")
    import torch

    from ...interleaved import benchmark_interleaved, threads

    x = torch.randn(max(1, nbytes // 4))
    buffer = torch.empty_like(x)
    with threads(1):
        runs = benchmark_interleaved({"copy_": lambda: buffer.copy_(x), "clone": x.clone}, min_run_time=min_run_time)
    return ReuseTarget(int(nbytes), runs["clone"].median_s, runs["copy_"].median_s, float(share),
                       bool(runs["clone"].noisy or runs["copy_"].noisy))
