"""Memory tools: what a step really holds, where it goes, whether it fits, and the largest batch that does.

On CUDA the numbers come from PyTorch's caching allocator. On CPU, a dispatch-mode tracker counts the
bytes of every tensor storage created while the code runs and frees them as they die, so memory
lessons are real on a laptop too. :func:`memory_budget` turns that tracker into a simulated card: an
allocation beyond the budget raises the same ``torch.OutOfMemoryError`` a GPU raises.

Example:
    >>> import torch, gpulab as gl
    >>> gl.peak_memory(lambda: torch.ones(1024, 1024).sum()).peak_bytes >= 4 * 1024 * 1024
    True
"""
from __future__ import annotations

import contextlib
import gc
import math
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Literal, Sequence

from ._format import fmt_bytes, fmt_number, html_table, text_table

__all__ = ["KiB", "MiB", "GiB", "PeakMemory", "peak_memory", "memory_budget", "MemoryTracker",
           "MemoryBreakdown", "breakdown", "estimate", "MemoryEstimate", "BatchSizeSearch", "find_max_batch_size",
           "free_memory", "is_oom", "CUDA_CONTEXT_BYTES"]

KiB, MiB, GiB = 2**10, 2**20, 2**30
# What a GPU loses before the first tensor: the CUDA context plus cuBLAS/cuDNN workspaces. Typically
# 0.3-1 GiB depending on GPU, driver and libraries; estimates reserve this much.
CUDA_CONTEXT_BYTES = int(0.75 * GiB)


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:  # pragma: no cover
        raise ImportError("gpulab's memory tools need PyTorch: pip install 'gpulab[torch]'") from e
    return torch


def _is_cuda(device: Any) -> bool:
    return device is not None and str(device).startswith("cuda")


def is_oom(exc: BaseException) -> bool:
    """True for an out-of-memory error from CUDA, the CPU allocator or :func:`memory_budget`."""
    torch = _torch()
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def free_memory(device: Any = None) -> None:
    """Collect garbage and, on CUDA, return cached blocks and reset the peak counter.
    Call it *outside* an ``except`` block: the exception keeps the failed step's tensors alive."""
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

        self._mode = _Mode()
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
    tracker = MemoryTracker(budget_bytes, label or f"simulated {fmt_bytes(budget_bytes)} card")
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


def peak_memory(fn: Callable[..., Any], *args: Any, device: Any = None, **kwargs: Any) -> PeakMemory:
    """Run ``fn(*args, **kwargs)`` once and report its peak memory (``.result`` holds its return value).

    CUDA: the caching allocator's peak (reset first). CPU: live tensor storages created during the call.
    """
    if not callable(fn):
        raise TypeError(f"peak_memory needs a callable, got {type(fn).__name__}")
    torch = _torch()
    if device is None:
        from .timing import _infer_device

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


# ----------------------------------------------------------------------------------------------
def _tensor_bytes(tensors: Any) -> int:
    torch = _torch()
    seen, total = set(), 0
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.numel():
            st = t.untyped_storage()
            if st._cdata not in seen:
                seen.add(st._cdata)
                total += int(st.nbytes())
    return total


def _optimizer_state_tensors(optimizer: Any) -> list[Any]:
    torch = _torch()
    return [v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]


def _loss(out: Any, batch: Any, loss_fn: Callable[..., Any] | None) -> Any:
    torch = _torch()
    if loss_fn is not None:
        return loss_fn(out, batch[1]) if isinstance(batch, (tuple, list)) and len(batch) > 1 else loss_fn(out)
    if isinstance(batch, (tuple, list)) and len(batch) > 1:
        return torch.nn.functional.cross_entropy(out.float(), batch[1])
    return out.float().mean()


def _inputs(batch: Any) -> Any:
    return batch[0] if isinstance(batch, (tuple, list)) else batch


@dataclass(frozen=True)
class MemoryBreakdown:
    """Where one training step's memory went, by category (bytes), and the peak."""

    device: str
    parameters_bytes: int
    gradients_bytes: int
    optimizer_state_bytes: int
    activations_bytes: int      # saved for backward, at the end of the forward pass
    peak_bytes: int             # everything at the step's peak (parameters included)
    method: str
    allocator: dict[str, int | None] = field(default_factory=dict)   # CUDA: allocated, reserved, NVML used

    @property
    def rows(self) -> list[tuple[str, int | None, str]]:
        r = [("parameters", self.parameters_bytes, "the weights"),
             ("gradients", self.gradients_bytes, "one per parameter after backward"),
             ("optimizer state", self.optimizer_state_bytes, "e.g. Adam keeps two moments per parameter"),
             ("activations", self.activations_bytes, "saved by forward for backward; grows with batch size"),
             ("peak during the step", self.peak_bytes, "what must fit on the device")]
        for k, v in self.allocator.items():
            r.append((k, v, {"allocated (torch)": "live tensors, as torch.cuda.memory_allocated",
                             "reserved (allocator cache)": "held by PyTorch's caching allocator",
                             "NVML used": "what nvidia-smi shows: reserved + CUDA context + other processes",
                             "context and others": "NVML used minus reserved",
                             "driver reserve (NVML)": "kept by driver and firmware: not in NVML used (v2)"}.get(k, "")))
        return r

    def to_dataframe(self) -> Any:
        import pandas as pd

        return pd.DataFrame([{"category": c, "bytes": b, "note": n} for c, b, n in self.rows]).set_index("category")

    def __repr__(self) -> str:
        return (f"MemoryBreakdown on {self.device} ({self.method})\n"
                + text_table(("category", "memory", "note"), [(c, fmt_bytes(b), n) for c, b, n in self.rows]))

    def _repr_html_(self) -> str:
        return html_table(("category", "memory", "note"), [(c, fmt_bytes(b), n) for c, b, n in self.rows],
                          caption=f"Memory of one training step on {self.device} ({self.method})")


def breakdown(model: Any, optimizer: Any, batch: Any, loss_fn: Callable[..., Any] | None = None,
              autocast_dtype: Any = None) -> MemoryBreakdown:
    """Run one training step (forward, backward, optimizer step) and split its memory by category.

    ``batch`` is ``(inputs, targets)`` (cross-entropy by default) or inputs alone (mean of the output).
    On CUDA the allocator's allocated/reserved bytes and NVML's view are reconciled too.

    Example:
        >>> import torch, gpulab as gl
        >>> m = torch.nn.Linear(64, 10); opt = torch.optim.Adam(m.parameters())
        >>> b = gl.breakdown(m, opt, (torch.randn(32, 64), torch.randint(0, 10, (32,))))
        >>> b.optimizer_state_bytes >= 2 * b.parameters_bytes
        True
    """
    torch = _torch()
    params = list(model.parameters())
    if not params:
        raise ValueError("breakdown needs a model with parameters")
    device = params[0].device
    param_bytes = _tensor_bytes(params) + _tensor_bytes(model.buffers())
    optimizer.zero_grad(set_to_none=True)
    cast = (torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype is not None
            else contextlib.nullcontext())
    cuda = device.type == "cuda"
    if cuda:
        free_memory(device)
        base = torch.cuda.memory_allocated(device)
        with cast:
            out = model(_inputs(batch))
            loss = _loss(out, batch, loss_fn)
        torch.cuda.synchronize(device)
        activations = torch.cuda.memory_allocated(device) - base
        loss.backward()
        del out, loss
        optimizer.step()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device)
        method = "cuda-allocator"
    else:
        with MemoryTracker() as tracker:
            with cast:
                out = model(_inputs(batch))
                loss = _loss(out, batch, loss_fn)
            activations = tracker.current_bytes
            loss.backward()
            del out, loss
            optimizer.step()
        peak = param_bytes + _tensor_bytes(_input_tensors(batch)) + tracker.peak_bytes
        method = "tracked tensors"
    grads = _tensor_bytes(p.grad for p in params if p.grad is not None)
    opt_state = _tensor_bytes(_optimizer_state_tensors(optimizer))
    allocator: dict[str, int | None] = {}
    if cuda:
        reserved = torch.cuda.memory_reserved(device)
        allocator = {"allocated (torch)": int(torch.cuda.memory_allocated(device)),
                     "reserved (allocator cache)": int(reserved)}
        from .telemetry import nvml

        nv = nvml.cuda_memory_info(device.index if device.index is not None else torch.cuda.current_device())
        if nv is not None:   # v2 "used" leaves the driver's reserve out, so the rest is context + other processes
            allocator["NVML used"] = nv.used_bytes
            allocator["context and others"] = nv.used_bytes - int(reserved)
            if nv.reserved_bytes is not None:
                allocator["driver reserve (NVML)"] = nv.reserved_bytes
    optimizer.zero_grad(set_to_none=True)
    return MemoryBreakdown(str(device), param_bytes, grads, opt_state, int(activations), int(peak), method, allocator)


def _input_tensors(batch: Any) -> list[Any]:
    return list(batch) if isinstance(batch, (tuple, list)) else [batch]


# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MemoryEstimate:
    """A training step's memory computed on fake tensors (nothing allocated), and which GPUs it fits."""

    breakdown: MemoryBreakdown
    batch_size: int
    context_bytes: int

    @property
    def peak_bytes(self) -> int:
        return self.breakdown.peak_bytes

    def fits(self) -> Any:
        """A DataFrame: for each GPU of the course, usable memory, whether the step fits, and the largest
        batch that would (activations scale with the batch, the rest does not)."""
        import pandas as pd

        from .reference import GPU_SPECS

        b = self.breakdown
        static = b.peak_bytes - b.activations_bytes
        per_item = b.activations_bytes / self.batch_size if self.batch_size else 0
        rows = []
        for name in ("T4", "L4", "A100 40GB SXM", "A100 80GB SXM", "H100 SXM"):
            usable = GPU_SPECS[name].memory_bytes - self.context_bytes
            max_batch = int((usable - static) // per_item) if per_item and usable > static else 0
            rows.append({"gpu": name, "memory GiB": GPU_SPECS[name].memory_bytes / GiB,
                         "usable GiB": usable / GiB, "fits": b.peak_bytes <= usable,
                         "largest batch (est.)": max(max_batch, 0)})
        return pd.DataFrame(rows).set_index("gpu")

    def __repr__(self) -> str:
        return (f"MemoryEstimate for batch {self.batch_size}: peak {fmt_bytes(self.peak_bytes)} "
                f"+ {fmt_bytes(self.context_bytes)} CUDA context\n{self.breakdown!r}\n{self.fits()!r}")

    def _repr_html_(self) -> str:
        return self.breakdown._repr_html_() + self.fits().to_html()


def estimate(model_fn: Callable[[], Any], batch_fn: Callable[[int], Any], batch_size: int,
             optimizer: Literal["adam", "adamw", "sgd"] = "adam", autocast_dtype: Any = None,
             context_bytes: int = CUDA_CONTEXT_BYTES) -> MemoryEstimate:
    """Estimate a training step's peak memory without allocating it: the model and batch are built as
    fake tensors (``torch._subclasses.FakeTensorMode``), so a 7B-parameter model costs nothing here.

    ``model_fn()`` builds the model; ``batch_fn(batch_size)`` builds ``(inputs, targets)``.

    Example:
        >>> import torch, gpulab as gl
        >>> est = gl.estimate(lambda: torch.nn.Linear(4096, 4096), lambda n: torch.randn(n, 4096), 8)
        >>> est.breakdown.parameters_bytes == (4096 * 4096 + 4096) * 4
        True
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive whole number, got {batch_size!r}")
    torch = _torch()
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode
    except ImportError as e:  # pragma: no cover - private API moved
        raise RuntimeError("this PyTorch has no FakeTensorMode; estimate() needs torch >= 2.1") from e
    makers = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": lambda p: torch.optim.SGD(p, lr=0.1,
                                                                                                       momentum=0.9)}
    if optimizer not in makers:
        raise ValueError(f"optimizer must be one of {sorted(makers)}, got {optimizer!r}")
    with FakeTensorMode(allow_non_fake_inputs=False):
        model = model_fn()
        opt = makers[optimizer](model.parameters())
        batch = batch_fn(batch_size)
        b = breakdown(model, opt, batch, autocast_dtype=autocast_dtype)
    b = MemoryBreakdown("estimate (fake tensors)", b.parameters_bytes, b.gradients_bytes, b.optimizer_state_bytes,
                        b.activations_bytes, b.peak_bytes, "fake tensors, nothing allocated")
    return MemoryEstimate(b, batch_size, context_bytes)


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
    card and other processes count; elsewhere pass ``budget`` (bytes) to simulate a card with
    :func:`memory_budget`. The search never goes past the batch at which the step's largest tensor would
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
    torch = _torch()
    if device is None:
        from .system import device_kind

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
        from .timing import benchmark

        timed = []
        for t in trials:
            if t.fits:
                m = benchmark(step, t.batch_size, label=f"batch {t.batch_size}", items=t.batch_size, warmup=1,
                              min_run_time=min_run_time, device=device, warn_noisy=False)
                timed.append(BatchTrial(t.batch_size, True, t.peak_bytes, m.items_per_s))
            else:
                timed.append(t)
        trials = timed
    return BatchSizeSearch(tuple(trials), int(capacity), margin, str(device), tuple(notes))


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
