"""Peak memory of a call, and a memory budget that turns the CPU into a card of a chosen size.

On CUDA the numbers come from PyTorch's caching allocator. On CPU, a dispatch-mode tracker counts the
bytes of every tensor storage created while the code runs and frees them as they die, so memory
lessons are real on a laptop too. :func:`memory_budget` turns that tracker into a simulated card: an
allocation beyond the budget raises the same ``torch.OutOfMemoryError`` a GPU raises."""
from __future__ import annotations

import contextlib
import gc
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Literal

from .._check import checked, install_hint
from .._dispatch import dispatch_mode
from .._format import fmt_bytes

__all__ = ['KiB', 'MiB', 'GiB', 'is_oom', 'free_memory', 'MemoryTracker', 'memory_budget', 'PeakMemory', 'peak_memory', 'CUDA_CONTEXT_BYTES']


KiB, MiB, GiB = 2**10, 2**20, 2**30
# What a GPU loses before the first tensor: the CUDA context plus cuBLAS/cuDNN workspaces. Typically
# 0.3-1 GiB depending on GPU, driver and libraries; estimates reserve this much.
CUDA_CONTEXT_BYTES = int(0.75 * GiB)


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:  # pragma: no cover
        raise ImportError(f"gpulab's memory tools need PyTorch: {install_hint('torch')}") from e
    return torch


def _is_cuda(device: Any) -> bool:
    return device is not None and str(device).startswith("cuda")


def is_oom(exc: BaseException) -> bool:
    """True for an out-of-memory error from CUDA, the CPU allocator or :func:`memory_budget`."""
    torch = _torch()
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


@checked(device="device")
def free_memory(device: Any = None) -> None:
    """Collect garbage and, on CUDA, return cached blocks and reset the peak counter.
    Call it *outside* an ``except`` block: the exception keeps the failed step's tensors alive.

    Example:
        >>> import gpulab as gl
        >>> gl.free_memory("cpu") is None
        True
    """
    gc.collect()
    torch = _torch()
    if _is_cuda(device) or (device is None and torch.cuda.is_available()):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


# ----------------------------------------------------------------------------------------------
# the CPU tracker
class _Watch:
    """Shows every tensor operation run inside it to ``self._seen(outputs, (args, kwargs))`` (a
    ``TorchDispatchMode``); subclasses decide what to record."""

    _mode: Any = None

    def __enter__(self) -> Any:
        from torch.utils._python_dispatch import TorchDispatchMode

        watch = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                watch._seen(out, (args, kwargs))
                return out

        self._mode = dispatch_mode(_Mode())   # a compiled step met inside still compiles after it
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)
        self._mode = None

    def _seen(self, out: Any, inputs: Any) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class MemoryTracker(_Watch):
    """Counts live tensor-storage bytes created inside it (a ``TorchDispatchMode``); optionally enforces
    a budget. ``current_bytes``, ``peak_bytes``; use through :func:`memory_budget` or :func:`peak_memory`."""

    def __init__(self, budget_bytes: int | None = None, label: str = "simulated GPU") -> None:
        if budget_bytes is not None and (not isinstance(budget_bytes, int) or isinstance(budget_bytes, bool)
                                         or budget_bytes <= 0):
            raise ValueError(f"budget must be a positive number of bytes (e.g. 16 * gl.GiB), got {budget_bytes!r}")
        self.budget_bytes = budget_bytes
        self.label = label
        self.current_bytes = 0
        self.peak_bytes = 0
        self.allocations = 0
        self._live: dict[int, int] = {}
        self._refs: dict[int, Any] = {}

    def reset_peak(self) -> None:
        self.peak_bytes = self.current_bytes

    def _seen(self, out: Any, inputs: Any) -> None:
        torch = _torch()
        from torch.utils._pytree import tree_leaves

        # Views and in-place results share an input's storage: not an allocation (e.g. weight.t()).
        shared = {_storage_key(t) for t in tree_leaves(inputs) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            try:
                st = t.untyped_storage()
                key, nbytes = st._cdata, int(st.nbytes())
            except Exception:  # tensors without storage (e.g. some subclasses)
                continue
            if key in self._live or key in shared or nbytes == 0:
                continue
            if self.budget_bytes is not None and self.current_bytes + nbytes > self.budget_bytes:
                free = self.budget_bytes - self.current_bytes
                raise torch.OutOfMemoryError(
                    f"CUDA out of memory. Tried to allocate {fmt_bytes(nbytes)}. {self.label} has a total capacity "
                    f"of {fmt_bytes(self.budget_bytes)} of which {fmt_bytes(max(free, 0))} is free. Of the "
                    f"allocated memory {fmt_bytes(self.current_bytes)} is allocated by PyTorch. "
                    "(Simulated by gpulab.memory_budget on this machine.)")
            self._live[key] = nbytes
            self._refs[key] = weakref.ref(st, lambda _ref, key=key: self._freed(key))
            self.current_bytes += nbytes
            self.allocations += 1
            self.peak_bytes = max(self.peak_bytes, self.current_bytes)

    def _freed(self, key: int) -> None:
        nbytes = self._live.pop(key, 0)
        self._refs.pop(key, None)
        self.current_bytes -= nbytes

    def __repr__(self) -> str:
        budget = f" of {fmt_bytes(self.budget_bytes)}" if self.budget_bytes else ""
        return f"MemoryTracker: {fmt_bytes(self.current_bytes)} live{budget}, peak {fmt_bytes(self.peak_bytes)}"


def _storage_key(t: Any) -> int | None:
    try:
        return t.untyped_storage()._cdata
    except Exception:
        return None


@checked("torch", budget_bytes="bytes1", label="name?")
@contextlib.contextmanager
def memory_budget(budget_bytes: int, label: str | None = None) -> Iterator[MemoryTracker]:
    """Simulate a GPU with ``budget_bytes`` of memory: tensors created inside count against it, and an
    allocation beyond it raises ``torch.OutOfMemoryError`` with CUDA's wording.

    Example:
        >>> import torch, gpulab as gl
        >>> with gl.memory_budget(1 * gl.MiB) as card:
        ...     try:
        ...         torch.ones(1024, 1024)            # 4 MiB
        ...     except torch.OutOfMemoryError as e:
        ...         print("OOM")
        OOM
    """
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int):
        raise TypeError(f"budget_bytes must be whole bytes, e.g. 16 * gl.GiB or int(1.5 * gl.GiB), got {budget_bytes!r}")
    tracker = MemoryTracker(budget_bytes, label or f"simulated {fmt_bytes(max(budget_bytes, 0))} card")
    with tracker:
        yield tracker


# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PeakMemory:
    """Extra bytes held at peak while a function ran, above what was allocated before it."""

    peak_bytes: int
    retained_bytes: int          # still allocated when the function returned (e.g. its result)
    device: str
    method: Literal["cuda-allocator", "tracked-tensors"]
    result: Any = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:
        return (f"peak {fmt_bytes(self.peak_bytes)} (retained {fmt_bytes(self.retained_bytes)}) on {self.device}, "
                f"from {self.method}")

    def _repr_html_(self) -> str:
        return f"<code>{self!r}</code>"


@checked(fn="fn", device="device")
def peak_memory(fn: Callable[..., Any], *args: Any, device: Any = None, **kwargs: Any) -> PeakMemory:
    """Run ``fn(*args, **kwargs)`` once and report its peak memory (``.result`` holds its return value).

    CUDA: the caching allocator's peak (reset first). CPU: live tensor storages created during the call.
    """
    if not callable(fn):
        raise TypeError(f"peak_memory needs a callable, got {type(fn).__name__}")
    torch = _torch()
    if device is None:
        from ..timing import _infer_device

        device = _infer_device(args, kwargs)
    if _is_cuda(device):
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        result = fn(*args, **kwargs)
        torch.cuda.synchronize(device)
        return PeakMemory(int(torch.cuda.max_memory_allocated(device) - base),
                          int(torch.cuda.memory_allocated(device) - base), str(device), "cuda-allocator", result)
    with MemoryTracker() as tracker:
        result = fn(*args, **kwargs)
    return PeakMemory(tracker.peak_bytes, tracker.current_bytes, str(device), "tracked-tensors", result)
