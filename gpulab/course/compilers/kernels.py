"""Lesson 11's scaffolding: the bytes a naive and a tiled matmul kernel read from global memory, and the
fused-kernel challenge (correct, fewer bytes, and on a GPU faster).

Example:
    >>> from gpulab.course.compilers.kernels import matmul_global_bytes
    >>> matmul_global_bytes(64, tile=None) // matmul_global_bytes(64, tile=16)   # tiles of 16: ~16x fewer reads
    14
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..._format import fmt_bytes
from ..lesson.checks import NotAnswered, _esc

__all__ = ["matmul_global_bytes", "FusedChallenge", "fused_challenge"]


def matmul_global_bytes(n: int, *, tile: int | None, itemsize: int = 4) -> int:
    """Bytes an ``n x n`` matmul kernel moves through global memory: every thread computes one output.

    Naive (``tile=None``): each thread reads a row of A and a column of B (``2n`` values) and writes one value:
    ``2n^3 + n^2`` values in all. Tiled: each block of ``tile x tile`` threads loads ``n / tile`` tiles of A and of
    B into shared memory, once per block, so reads drop by the tile width: ``2n^3 / tile + n^2``.
    """
    if not isinstance(n, int) or n <= 0:
        raise ValueError(f"n must be a positive matrix size, got {n!r}")
    if tile is not None and (not isinstance(tile, int) or tile <= 0 or n % tile):
        raise ValueError(f"tile must be a positive divisor of n={n} (or None for the naive kernel), got {tile!r}")
    reads = 2 * n**3 if tile is None else 2 * n**3 // tile
    return (reads + n * n) * itemsize


@dataclass(frozen=True)
class FusedChallenge:
    """The fused-kernel challenge: same result as the reference, fewer bytes moved, and (on a GPU) faster."""

    name: str
    correct: bool
    max_abs_err: float
    reference_bytes: int
    your_bytes: int
    target_ratio: float
    speedup: float | None        # reference time / yours: only when the kernel ran compiled on a GPU
    target_speedup: float
    timed_on: str | None

    @property
    def bytes_ratio(self) -> float:
        return self.reference_bytes / max(self.your_bytes, 1)

    @property
    def passed(self) -> bool:
        fast_enough = self.speedup is None or self.speedup >= self.target_speedup
        return self.correct and self.bytes_ratio >= self.target_ratio and fast_enough

    def __repr__(self) -> str:
        mark = "[ok]" if self.passed else "[x]"
        parts = [("same result" if self.correct else f"WRONG result (max error {self.max_abs_err:.3g})"),
                 f"{fmt_bytes(self.your_bytes)} moved vs {fmt_bytes(self.reference_bytes)}: {self.bytes_ratio:.2f}x "
                 f"fewer bytes (target {self.target_ratio:g}x)"]
        if self.speedup is None:
            parts.append("speed not graded here: the kernel ran in the interpreter (on a GPU it must also be "
                         f"{self.target_speedup:g}x faster)")
        else:
            parts.append(f"{self.speedup:.2f}x faster on {self.timed_on} (target {self.target_speedup:g}x)")
        return f"{mark} {self.name}: " + "; ".join(parts)

    def _repr_html_(self) -> str:
        colour = "#1b7a2b" if self.passed else "#b00020"
        return f'<div style="color:{colour}">{_esc(repr(self))}</div>'


def fused_challenge(name: str, reference: Callable[..., Any], yours: Callable[..., Any] | None,
                    inputs: Sequence[Any], *, kernels: Sequence[Any] = (), backend: Any = None,
                    bytes_ratio: float = 2.0, speedup: float = 1.5, atol: float = 1e-4,
                    rtol: float = 1e-4) -> FusedChallenge | NotAnswered:
    """Grade a fused kernel: ``yours(*inputs)`` must match ``reference(*inputs)``, move at least ``bytes_ratio``
    times fewer bytes (counted by :func:`gpulab.kernels.traffic`, the Triton ``kernels`` by the tensors they are
    given) and, when ``backend`` compiles for a GPU, run at least ``speedup`` times faster
    (``triton.testing.do_bench``). A miss raises ``AssertionError`` saying which part failed; ``yours=None`` shows
    "not answered yet".

    Example:
        >>> import torch
        >>> x = torch.randn(1000)
        >>> ref = lambda t: torch.relu(t * 2 + 1)
        >>> fused_challenge("relu", ref, ref, [x], bytes_ratio=1.0).passed
        True
    """
    if yours is None:
        return NotAnswered(name)
    if not callable(reference) or not callable(yours):
        raise TypeError(f"reference and yours must be functions of the inputs, got {reference!r}, {yours!r}")
    for label, v in (("bytes_ratio", bytes_ratio), ("speedup", speedup)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"{label} must be a ratio > 0, got {v!r}")
    from ...kernels import bench_kernel, check_kernel, traffic

    inputs = list(inputs)
    check = check_kernel(yours(*inputs), reference(*inputs), atol=atol, rtol=rtol, label=name)
    ref_t = traffic(reference, *inputs, kernels=kernels)
    your_t = traffic(yours, *inputs, kernels=kernels)
    measured = None
    timed_on = None
    if backend is not None and not backend.simulated:
        ref_m = bench_kernel(lambda: reference(*inputs), label="reference", backend=backend)
        your_m = bench_kernel(lambda: yours(*inputs), label="yours", backend=backend)
        measured, timed_on = ref_m.median_s / your_m.median_s, your_m.env.device_name
    result = FusedChallenge(name, check.ok, check.max_abs_err, ref_t.bytes_moved, your_t.bytes_moved,
                            float(bytes_ratio), measured, float(speedup), timed_on)
    if not result.passed:
        raise AssertionError(repr(result) + ". Hint: one kernel that loads each input once and stores the output "
                                            "once; no intermediate tensors")
    return result
