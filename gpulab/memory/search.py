"""The largest batch that fits: a doubling-then-bisection search that recovers from each out-of-memory error."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable

from .._check import checked
from .._format import fmt_bytes, fmt_number, html_table, text_table
from .peak import _is_cuda, _torch, _Watch, free_memory, is_oom, memory_budget

__all__ = ['BatchTrial', 'BatchSizeSearch', 'find_max_batch_size']


# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchTrial:
    batch_size: int
    fits: bool
    peak_bytes: int | None
    items_per_s: float | None = None


@dataclass(frozen=True)
class BatchSizeSearch:
    """The trials of :func:`find_max_batch_size`, the largest batch that fits, and the recommendation:
    the fastest batch (items/s) whose peak stays within ``margin`` of the capacity."""

    trials: tuple[BatchTrial, ...]
    capacity_bytes: int
    margin: float
    device: str
    notes: tuple[str, ...] = ()   # where the capacity came from; why the search stopped early

    @property
    def max_batch_size(self) -> int:
        ok = [t.batch_size for t in self.trials if t.fits]
        return max(ok) if ok else 0

    @property
    def safe(self) -> list[BatchTrial]:
        return [t for t in self.trials if t.fits and t.peak_bytes is not None
                and t.peak_bytes <= self.margin * self.capacity_bytes]

    @property
    def recommended(self) -> int:
        timed = [t for t in self.safe if t.items_per_s]
        if timed:
            return max(timed, key=lambda t: t.items_per_s).batch_size
        return max((t.batch_size for t in self.safe), default=0)

    def to_dataframe(self) -> Any:
        import pandas as pd

        df = pd.DataFrame([t.__dict__ for t in self.trials]).drop_duplicates("batch_size", keep="last")
        df["peak % of capacity"] = 100 * df["peak_bytes"] / self.capacity_bytes
        return df.sort_values("batch_size").set_index("batch_size")

    def _rows(self) -> list[tuple[str, ...]]:
        df = self.to_dataframe()
        return [(str(bs), "yes" if r.fits else "OOM", fmt_bytes(r.peak_bytes if r.fits else None),
                 fmt_number(r.items_per_s) if r.items_per_s == r.items_per_s and r.items_per_s else "")
                for bs, r in df.iterrows()]

    def _caption(self) -> str:
        return (f"Largest batch that fits: {self.max_batch_size}; recommended: {self.recommended} (fastest within "
                f"{self.margin:.0%} of {fmt_bytes(self.capacity_bytes)} on {self.device})"
                + "".join(f"\n{n}" for n in self.notes))

    def __repr__(self) -> str:
        return self._caption() + "\n" + text_table(("batch", "fits", "peak", "items/s"), self._rows())

    def _repr_html_(self) -> str:
        return html_table(("batch", "fits", "peak", "items/s"), self._rows(), caption=self._caption())


@checked(step="fn", start="count", limit="count", budget="bytes1?", device="device", margin="pos",
         time_trials="flag", min_run_time="pos", max_trials="count")
def find_max_batch_size(step: Callable[[int], Any], start: int = 8, limit: int = 65536, *,
                        budget: int | None = None, device: Any = None, margin: float = 0.9,
                        time_trials: bool = True, min_run_time: float = 0.2, max_trials: int = 24
                        ) -> BatchSizeSearch:
    """Find the largest batch size for which ``step(batch_size)`` fits in memory, then time the sizes
    that fit so you can pick the fastest, not only the largest.

    Doubles from ``start`` until a step runs out of memory (or ``limit``), then bisects. Each OOM is
    recovered from *outside* the ``except`` block (references dropped, garbage collected, CUDA cache
    emptied, peak reset), so nothing leaks between trials. On CUDA the capacity is the memory free at the
    start (``torch.cuda.mem_get_info`` after emptying the cache), so the CUDA context, the model already on the
    card and other processes count, and on return the cache is emptied again, so the memory the trials reserved
    goes back to the driver (for TensorFlow or another process) instead of staying in PyTorch's cache; elsewhere
    pass ``budget`` (bytes) to simulate a card with :func:`memory_budget`. The search never goes past the batch at which the step's largest tensor would
    exceed 2**31 elements (sized in the first trial), where CUDA kernels fail with errors that are not OOM.

    Example:
        >>> import torch, gpulab as gl
        >>> search = gl.find_max_batch_size(lambda n: torch.ones(n, 1024).sum(), start=1, budget=1 * gl.MiB,
        ...                                 time_trials=False)     # 4 KiB per row: 256 rows fill 1 MiB
        >>> 240 <= search.max_batch_size < 256
        True
    """
    if not callable(step):
        raise TypeError(f"step must be a callable taking a batch size, got {type(step).__name__}")
    if not isinstance(start, int) or start < 1 or not isinstance(limit, int) or limit < start:
        raise ValueError(f"need whole numbers 1 <= start <= limit, got start={start!r}, limit={limit!r}")
    if not 0 < margin <= 1:
        raise ValueError(f"margin must be in (0, 1], got {margin!r}")
    if isinstance(max_trials, bool) or not isinstance(max_trials, int) or max_trials < 1:
        raise ValueError(f"max_trials must be a whole number >= 1, got {max_trials!r}")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
        raise ValueError(f"budget must be whole bytes > 0, e.g. 16 * gl.GiB or int(1.5 * gl.GiB), got {budget!r}")
    torch = _torch()
    if device is None:
        from ..system import device_kind

        device = "cuda" if device_kind() == "cuda" else "cpu"
    cuda = _is_cuda(device)
    notes: list[str] = []
    if cuda:
        # What this process can still get: the CUDA context, tensors already resident (the model) and other
        # processes are all outside the free memory the driver reports once the allocator's cache is returned.
        free_memory(device)
        free, total = torch.cuda.mem_get_info(torch.device(device))
        capacity = int(free)
        notes.append(f"capacity: {fmt_bytes(free)} free at the start of {fmt_bytes(total)} (CUDA context, resident "
                     "tensors and other processes already excluded)")
        from ..rehearsal import memory_cap_bytes

        cap = memory_cap_bytes()
        if cap is not None:           # this process's allocator is capped (a rehearsed GPU, or a shared one)
            left = max(0, cap - int(torch.cuda.memory_reserved(torch.device(device))))
            if left < capacity:
                capacity = left
                notes.append(f"capacity: {fmt_bytes(left)} left under this process's allocator cap of {fmt_bytes(cap)}")
    elif budget is None:
        raise ValueError("on CPU pass budget=... (bytes, e.g. 16 * gl.GiB) to simulate a GPU's memory")
    else:
        capacity = budget
    trials: list[BatchTrial] = []
    watch = _LargestTensor()

    def attempt(bs: int) -> bool:
        free_memory(device if cuda else None)
        ok, peak = True, None
        try:
            with watch if not trials else contextlib.nullcontext():   # sizes tensors in the first trial only
                if cuda:
                    base = torch.cuda.memory_allocated(device)
                    step(bs)
                    torch.cuda.synchronize(device)
                    peak = int(torch.cuda.max_memory_allocated(device) - base)
                else:
                    with memory_budget(capacity) as card:
                        step(bs)
                    peak = card.peak_bytes
        except Exception as e:  # only OOM is expected; anything else is the caller's bug
            if not is_oom(e):
                raise
            ok = False
        if not ok:  # recover here, outside the except block, where the traceback is gone
            free_memory(device if cuda else None)
        trials.append(BatchTrial(bs, ok, peak))
        return ok

    try:
        if attempt(start) and watch.numel:
            # Tensors past 2**31 elements break 32-bit indexing in many CUDA kernels (errors, not OOM): stop before.
            cap = max(start, (2**31 - 1) * start // watch.numel)
            if cap < limit:
                limit = cap
                notes.append(f"batch sizes capped at {cap}: beyond it the largest tensor (shape {watch.shape} at batch "
                             f"{start}) would pass 2**31 elements")
        lo, hi, bs = (start, None, start * 2) if trials[0].fits else (0, start, start)
        while hi is None and bs <= limit and len(trials) < max_trials:
            if attempt(bs):
                lo, bs = bs, bs * 2
            else:
                hi = bs
        if hi is None and lo < limit < bs and len(trials) < max_trials:   # the last doubling overshot the limit
            if attempt(limit):
                lo = limit
            else:
                hi = limit
        if lo == 0 and hi is not None:
            raise MemoryError(f"even batch size {start} does not fit in {fmt_bytes(capacity)}: start lower, use a "
                              "smaller model, mixed precision or gradient checkpointing")
        if hi is not None:
            while hi - lo > max(1, lo // 64) and len(trials) < max_trials:
                mid = (lo + hi) // 2
                if attempt(mid):
                    lo = mid
                else:
                    hi = mid
        if time_trials:
            from ..timing import benchmark

            timed = []
            for t in trials:
                if not t.fits:
                    timed.append(t)
                    continue
                m = None
                try:
                    m = benchmark(step, t.batch_size, label=f"batch {t.batch_size}", items=t.batch_size, warmup=1,
                                  min_run_time=min_run_time, device=device, warn_noisy=False)
                except Exception as e:   # fitted once, but not step after step (fragmentation, outputs still held)
                    if not is_oom(e):
                        raise
                if m is None:            # recovered here, outside the except block
                    free_memory(device if cuda else None)
                    timed.append(BatchTrial(t.batch_size, False, t.peak_bytes))
                    notes.append(f"batch {t.batch_size} fitted once but ran out of memory when timed step after step: "
                                 "counted as not fitting")
                else:
                    timed.append(BatchTrial(t.batch_size, True, t.peak_bytes, m.items_per_s))
            trials = timed
        return BatchSizeSearch(tuple(trials), int(capacity), margin, str(device), tuple(notes))
    finally:
        if cuda:   # the cache still holds the largest trial's blocks: return them for TensorFlow or other processes
            free_memory(device)


class _LargestTensor(_Watch):
    """Records the shape of the largest tensor any operation creates inside it."""

    def __init__(self) -> None:
        self.numel, self.shape = 0, ()

    def _seen(self, out: Any, inputs: Any) -> None:
        from torch.utils._pytree import tree_leaves

        for t in tree_leaves(out):
            n = t.numel() if hasattr(t, "numel") else 0
            if n > self.numel:
                self.numel, self.shape = n, tuple(t.shape)
