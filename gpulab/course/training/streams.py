"""Lesson 02's CUDA stream demonstrations: copy/compute overlap and the stale read of a non-blocking copy.

- :func:`copy_compute_overlap` runs the same batches through the same computation twice on a CUDA device:
  serially (copy batch *k*, then compute on it) and overlapped (batch *k+1* is copied from pinned memory on a
  side stream while batch *k* is computed on the current stream), both timed with CUDA events, and checks
  that both give the same results.
- :func:`stale_read` copies a device tensor into pinned host memory with ``non_blocking=True`` and reads the
  host buffer twice: before synchronising (the copy may not have happened yet: stale values) and after
  waiting on a CUDA event recorded behind the copy (the right values).

Both need CUDA; ``tests/course/training/test_course_streams.py`` runs them against fakes of ``torch.cuda``.

Example:
    >>> from gpulab.course.training.streams import OverlapTiming
    >>> t = OverlapTiming(batches=8, serial_s=0.010, overlapped_s=0.006, copy_s=0.004, compute_s=0.005, same=True)
    >>> round(t.speedup, 2), round(t.ideal_speedup, 2)
    (1.67, 1.8)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..._check import checked
from ...streams import _EventClock

__all__ = ["OverlapTiming", "copy_compute_overlap", "StaleRead", "stale_read"]


@dataclass(frozen=True)
class OverlapTiming:
    """Serial vs overlapped time for the same batches (seconds, CUDA-event timed), with the copy alone and the
    compute alone for reference: overlap can at best hide the shorter of the two."""

    batches: int
    serial_s: float
    overlapped_s: float
    copy_s: float
    compute_s: float
    same: bool            # the overlapped run computed the same results as the serial one

    @property
    def speedup(self) -> float:
        return self.serial_s / self.overlapped_s

    @property
    def ideal_speedup(self) -> float:
        """(copy + compute) / max(copy, compute): what perfect overlap would give."""
        return (self.copy_s + self.compute_s) / max(self.copy_s, self.compute_s)

    def __repr__(self) -> str:
        ms = lambda s: f"{s * 1e3:.2f} ms"
        return (f"{self.batches} batches: serial {ms(self.serial_s)}, overlapped {ms(self.overlapped_s)} "
                f"-> {self.speedup:.2f}x (perfect overlap: {self.ideal_speedup:.2f}x; copies alone "
                f"{ms(self.copy_s)}, compute alone {ms(self.compute_s)}); same results: {self.same}")


def _elapsed_s(fn: Callable[[], Any], device: Any) -> tuple[float, Any]:
    """Run ``fn`` between two timing events on the current stream; wait for the end event, then read it."""
    clock = _EventClock(device)              # records the start event on the current stream
    out = fn()
    return clock.seconds(clock.stop()), out  # stop(): the host waits for the GPU before reading the clock


def _serial(host: Sequence[Any], compute: Callable[[Any], Any], device: Any) -> list[Any]:
    return [compute(b.to(device, non_blocking=False)) for b in host]


def _copies_only(host: Sequence[Any], device: Any) -> list[Any]:
    return [b.to(device, non_blocking=True) for b in host]


def _overlapped(host: Sequence[Any], compute: Callable[[Any], Any], device: Any, side: Any) -> list[Any]:
    """Copy batch k+1 on ``side`` while batch k is computed on the current stream."""
    import torch

    main = torch.cuda.current_stream(device)

    def issue_copy(b: Any) -> tuple[Any, Any]:
        ready = torch.cuda.Event()
        side.wait_stream(main)              # the side stream may not run ahead of work queued before it
        with torch.cuda.stream(side):
            x = b.to(device, non_blocking=True)   # from pinned memory: queued, the host goes on
            ready.record(side)
        return x, ready

    outs = []
    nxt = issue_copy(host[0])
    for k in range(len(host)):
        x, ready = nxt
        main.wait_event(ready)              # compute on batch k only after its copy has landed
        x.record_stream(main)               # x was allocated on the side stream and is used on main
        if k + 1 < len(host):
            nxt = issue_copy(host[k + 1])   # queued now: runs on the copy engine during compute(x)
        outs.append(compute(x))
    return outs


@checked(device="device")
def copy_compute_overlap(host_batches: Sequence[Any], compute: Callable[[Any], Any], *, device: Any = "cuda",
                         same: Callable[[Any, Any], bool] | None = None) -> OverlapTiming:
    """Time the same batches serially and with copy/compute overlap on a CUDA ``device``.

    Args:
        host_batches: tensors in pinned host memory (``tensor.pin_memory()``): only those copy asynchronously.
        compute: what runs on each batch on the device (returns a tensor).
        same: compares one serial result with the overlapped one (default ``torch.allclose``).

    Each variant runs once untimed (warm-up), then once between CUDA events. Needs CUDA.
    """
    import torch

    if not host_batches:
        raise ValueError("host_batches must hold at least one batch")
    if not callable(compute):
        raise TypeError(f"compute must be a function of one device batch, got {compute!r}")
    same = same or (lambda a, b: bool(torch.allclose(a, b)))
    side = torch.cuda.Stream(device=device)
    _serial(host_batches[:1], compute, device)                  # warm-up: kernels, allocator
    _overlapped(host_batches[:2], compute, device, side)
    serial_s, serial_out = _elapsed_s(lambda: _serial(host_batches, compute, device), device)
    overlapped_s, overlapped_out = _elapsed_s(lambda: _overlapped(host_batches, compute, device, side), device)
    copy_s, on_device = _elapsed_s(lambda: _copies_only(host_batches, device), device)
    compute_s, _ = _elapsed_s(lambda: [compute(x) for x in on_device], device)
    agree = len(serial_out) == len(overlapped_out) and all(same(a, b) for a, b in zip(serial_out, overlapped_out))
    return OverlapTiming(len(host_batches), serial_s, overlapped_s, copy_s, compute_s, agree)


@dataclass(frozen=True)
class StaleRead:
    """A non-blocking device-to-host copy read twice: how many values were wrong before and after synchronising."""

    n: int
    wrong_before_sync: int
    wrong_after_sync: int

    @property
    def stale(self) -> bool:
        return self.wrong_before_sync > 0

    def __repr__(self) -> str:
        return (f"read before synchronising: {self.wrong_before_sync:,} of {self.n:,} values wrong; "
                f"after waiting on the copy's event: {self.wrong_after_sync:,} wrong")


def _copy_async(dst: Any, src: Any) -> None:
    dst.copy_(src, non_blocking=True)


@checked(device="device")
def stale_read(*, device: Any = "cuda", n: int = 1 << 22, busy_matmuls: int = 20, size: int = 2048,
               pin: bool = True) -> StaleRead:
    """Queue ``busy_matmuls`` matmuls, then a non-blocking copy of ``n`` known values (0, 1, 2, ...) into a
    host buffer filled with -1; read the buffer at once, then after ``event.synchronize()``. Needs CUDA.
    The buffer is pinned unless ``pin=False``: a copy into pageable memory returns only once it has completed,
    so then nothing is read stale.
    """
    import torch

    a = torch.randn(size, size, device=device)
    expected = torch.arange(n, dtype=torch.float32)
    src = expected.to(device)
    host = torch.full((n,), -1.0, pin_memory=pin)
    torch.cuda.synchronize(device)           # start from an idle device: only what follows is queued
    for _ in range(busy_matmuls):            # keeps the GPU busy, so the copy waits in the queue
        a = a @ a
        a = a / a.norm()
    src = src + 0.0 * a[0, 0]                # the copy's source depends on the matmuls: it cannot jump ahead
    _copy_async(host, src)                   # into pinned memory: returns at once
    done = torch.cuda.Event()
    done.record()                            # completes when everything queued before it, the copy too, has run
    before = host.clone()                    # a host read: nothing waits for the GPU
    done.synchronize()
    after = host.clone()
    return StaleRead(n, int((before != expected).sum()), int((after != expected).sum()))
