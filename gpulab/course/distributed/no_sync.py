"""Gradient accumulation under DDP with ``no_sync()``, checked in this kernel: a one-process gloo group, a
DDP-wrapped model whose all-reduces are counted by a communication hook, and the full-batch gradients to match.

With one process the all-reduce moves nothing, so this checks *what* the loop computes and *how many* all-reduces
it asks for, not their cost (lesson 07 measures that with torchrun). Stays on the CPU on every machine.

Example:
    >>> from gpulab import course
    >>> def accumulate(model, micro_batches):
    ...     for i, (x, y) in enumerate(micro_batches):
    ...         with model.no_sync() if i < len(micro_batches) - 1 else course.no_sync_nullcontext():
    ...             course.no_sync_loss(model, x, y, len(micro_batches)).backward()
    >>> course.check_no_sync(accumulate).ok
    True
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ..._check import whole

__all__ = ["NoSyncCheck", "check_no_sync", "no_sync_loss", "no_sync_nullcontext", "local_process_group"]


@dataclass(frozen=True)
class NoSyncCheck:
    """What an accumulation loop computed on a DDP model: its gradients against one backward over the whole
    batch, and how many bucket all-reduces it asked for against the fewest possible (one per bucket)."""

    micro_batches: int
    max_abs_diff: float          # largest |gradient - full-batch gradient|
    tolerance: float
    allreduces: int              # bucket all-reduces during the loop
    buckets: int                 # bucket all-reduces of one synchronised backward: the fewest possible

    @property
    def same_gradients(self) -> bool:
        return self.max_abs_diff <= self.tolerance

    @property
    def ok(self) -> bool:
        return self.same_gradients and self.allreduces == self.buckets

    def __repr__(self) -> str:
        return (f"NoSyncCheck({self.micro_batches} micro-batches: max |grad - full batch| {self.max_abs_diff:.1e} "
                f"(tolerance {self.tolerance:.0e}); {self.allreduces} bucket all-reduce(s), fewest possible "
                f"{self.buckets}, {self.micro_batches * self.buckets} without no_sync)")


def no_sync_nullcontext() -> contextlib.AbstractContextManager:
    """A context that does nothing (the last micro-batch's backward runs outside ``no_sync()``)."""
    return contextlib.nullcontext()


def no_sync_loss(model: Any, x: Any, y: Any, micro_batches: int) -> Any:
    """The cross-entropy loss of one micro-batch, divided by the number of micro-batches, so the accumulated
    gradient is the gradient of the mean loss over the whole batch (equal micro-batches)."""
    import torch.nn.functional as F

    return F.cross_entropy(model(x), y) / whole("micro_batches", micro_batches)


@contextlib.contextmanager
def local_process_group() -> Iterator[Any]:
    """A one-process gloo process group in this Python process (an in-memory store, no network), destroyed on
    exit; an existing default group is used as it is and left alone."""
    import torch.distributed as dist

    if dist.is_initialized():
        yield dist.group.WORLD
        return
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        # gloo's barrier waits for every pending work, so no worker thread is mid-callback (needing the GIL)
        # while the group's destructor joins it
        dist.barrier()
        dist.destroy_process_group()


def check_no_sync(accumulate: Callable[[Any, list], Any] | None, *, micro_batches: int = 4, batch: int = 16,
                  bucket_cap_mb: float = 0.5, seed: int = 0, tolerance: float = 1e-5) -> NoSyncCheck | None:
    """Run ``accumulate(ddp_model, micro_batches)`` once on a DDP-wrapped MLP (no BatchNorm, so micro-batches
    change nothing but the order of the sums; CPU, one-process gloo group, DDP buckets of ``bucket_cap_mb``) and compare the gradients it leaves in ``.grad`` with one backward of the
    mean loss over the whole batch. ``micro_batches`` is a list of ``(x, y)``. ``None`` while there is no loop."""
    if accumulate is None:
        return None
    if not callable(accumulate):
        raise TypeError(f"accumulate must be a function (model, micro_batches) -> None, got {accumulate!r}")
    k, b = whole("micro_batches", micro_batches), whole("batch", batch)
    if b % k:
        raise ValueError(f"batch ({b}) must split into {k} equal micro-batches")
    import copy

    import torch
    from torch.nn.parallel import DistributedDataParallel

    from ..lesson.models import mlp
    from ..lesson.runs import pattern_batch

    torch.manual_seed(seed)
    plain = torch.nn.Sequential(torch.nn.Flatten(), mlp(in_features=3 * 32 * 32, hidden=128, layers=2))
    x, y = pattern_batch(b, seed=seed)
    no_sync_loss(plain, x, y, 1).backward()
    full = [p.grad.detach().clone() for p in plain.parameters()]
    calls = [0]

    def counting_hook(state, bucket):  # type: ignore[no-untyped-def]  (DDP rejects non-GradBucket annotations)
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        calls[0] += 1
        return allreduce_hook(state, bucket)

    with local_process_group() as group:
        ddp = DistributedDataParallel(copy.deepcopy(plain), bucket_cap_mb=bucket_cap_mb, process_group=group)
        ddp.register_comm_hook(group, counting_hook)
        for _ in range(2):      # DDP rebuilds its buckets after the first backward: count the second
            ddp.zero_grad(set_to_none=True)
            calls[0] = 0
            no_sync_loss(ddp, x, y, 1).backward()
        buckets = calls[0]
        ddp.zero_grad(set_to_none=True)
        calls[0] = 0
        accumulate(ddp, list(zip(x.chunk(k), y.chunk(k))))
        allreduces = calls[0]
        got = [p.grad for p in ddp.module.parameters()]
    diff = max(float("inf") if g is None else float((g - f).abs().max()) for g, f in zip(got, full))
    return NoSyncCheck(k, diff, tolerance, allreduces, buckets)
