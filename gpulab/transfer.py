"""Moving data between host and device: what a copy costs, and where code makes the host wait.

:func:`measure_transfer` times one copy of ``nbytes`` between host memory (pageable or pinned) and the
device, blocking or ``non_blocking``, as a :class:`~gpulab.Measurement` whose ``bytes_moved`` is the
payload. On a machine without CUDA there is no pinned memory and no link to cross: it says so in the
label and measures the host copy (which is also the staging copy that pinned memory saves a GPU).

:func:`find_host_syncs` runs a function once and lists every call that makes the host wait for a GPU -
``.item()``, ``print(tensor)``, ``.cpu()``, ``bool(tensor)``, ``nonzero`` ... - with the line that made
it. It watches the calls, not the device, so it finds them on a CPU-only laptop too.

Example:
    >>> import torch, gpulab as gl
    >>> m = gl.transfer.measure_transfer(1 << 20, device="cpu", min_run_time=0.02)
    >>> m.bytes_moved == 1 << 20 and m.bytes_per_s > 0
    True
    >>> def log(loss):
    ...     return loss.item()
    >>> gl.transfer.find_host_syncs(log, torch.tensor(1.0)).total
    1
"""
from __future__ import annotations

import linecache
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from ._format import fmt_bytes, html_table, text_table
from ._check import checked, flag, positive, whole
from .timing import Measurement, environment, synchronize

__all__ = ["measure_transfer", "find_host_syncs", "SyncReport", "SyncPoint", "SYNC_KINDS"]

Direction = Literal["h2d", "d2h"]
Until = Literal["complete", "returned"]


@checked(device="device")
def measure_transfer(nbytes: int, *, pinned: bool = False, non_blocking: bool = False, device: Any = None,
                     direction: Direction = "h2d", until: Until = "complete", min_run_time: float = 0.2,
                     warmup: int = 2, min_runs: int = 5, max_runs: int = 10_000,
                     label: str | None = None) -> Measurement:
    """Time copying ``nbytes`` between host memory and ``device`` (default: the lesson's device).

    Each run copies into a preallocated buffer (like NVIDIA's ``bandwidthTest``), so the time is the
    transfer alone, not the allocation that ``.to()`` adds. Runs are timed one by one for about
    ``min_run_time`` seconds.

    Args:
        nbytes: payload per copy; ``bytes_moved`` of the result, so ``bytes_per_s`` is the link's rate.
        pinned: host side in page-locked memory (``torch.empty(..., pin_memory=True)``). Needs CUDA:
            elsewhere the label says "pinned n/a" and pageable memory is measured.
        non_blocking: ``copy_(src, non_blocking=True)``: from pinned memory the call returns before the
            copy finishes. No effect on CPU, where copies are synchronous.
        direction: ``"h2d"`` (host to device) or ``"d2h"`` (device to host).
        until: ``"complete"`` times until the data is usable (the device is synchronised before the
            clock stops); ``"returned"`` times only until the call returns, i.e. how long the host
            thread is blocked (the device is synchronised after the clock stops).

    On a CPU the "device" is host memory too: the copy is a single-threaded memcpy (as the CUDA driver's
    staging copy is) that reads and writes every byte, so compare ``bytes_per_s`` with half the
    read+write bandwidth of :func:`gpulab.limits.measure_bandwidth`.

    Example:
        >>> import gpulab as gl
        >>> m = gl.transfer.measure_transfer(4096, pinned=True, device="cpu", min_run_time=0.02)
        >>> m.label
        'host copy 4 KiB (pinned n/a: no CUDA)'
    """
    if isinstance(nbytes, bool) or not isinstance(nbytes, int):
        raise TypeError(f"nbytes must be a whole number of bytes, got {nbytes!r}")
    if nbytes < 1:
        raise ValueError(f"nbytes must be >= 1, got {nbytes!r}")
    flag("pinned", pinned)
    flag("non_blocking", non_blocking)
    if direction not in ("h2d", "d2h"):
        raise ValueError(f"direction must be 'h2d' (host to device) or 'd2h' (device to host), got {direction!r}")
    if until not in ("complete", "returned"):
        raise ValueError(f"until must be 'complete' or 'returned', got {until!r}")
    positive("min_run_time", min_run_time, unit="seconds")
    whole("warmup", warmup, low=0)
    whole("min_runs", min_runs)
    whole("max_runs", max_runs)
    if max_runs < min_runs:
        raise ValueError(f"max_runs ({max_runs}) must be >= min_runs ({min_runs})")
    import torch

    from .system import device as pick_device

    dev = pick_device() if device is None else torch.device(device)
    if dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"unsupported device {str(dev)!r}: use 'cpu', 'cuda', 'cuda:N' or 'mps'")
    cuda = dev.type == "cuda"
    pin = pinned and cuda
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin)
    host.fill_(1)
    other = torch.empty(nbytes, dtype=torch.uint8, device=dev)   # on a CPU: a second host buffer
    other.fill_(0)
    src, dst = (host, other) if direction == "h2d" else (other, host)

    if dev.type == "cpu":
        # One thread, like the CUDA driver's staging copy, and robust on a busy machine: a multi-threaded
        # copy waits at every parallel region for a thread that another program may have descheduled.
        import numpy as np

        src_np, dst_np = src.numpy(), dst.numpy()

        def copy() -> None:
            np.copyto(dst_np, src_np)
    else:
        def copy() -> None:
            dst.copy_(src, non_blocking=non_blocking)

    for _ in range(warmup):
        copy()
    synchronize(dev)
    times: list[float] = []
    deadline = time.perf_counter() + min_run_time
    while len(times) < max_runs and (len(times) < min_runs or time.perf_counter() < deadline):
        synchronize(dev)
        t0 = time.perf_counter()
        copy()
        if until == "complete":
            synchronize(dev)
        times.append(time.perf_counter() - t0)
        if until == "returned":
            synchronize(dev)

    label, description = _describe(nbytes, dev, direction, pinned, pin, non_blocking, until, label)
    return Measurement(label=label, times_s=tuple(times), number_per_run=1, device=str(dev),
                       num_threads=torch.get_num_threads(), env=environment(dev), backend="perf_counter per copy",
                       warmup=warmup, bytes_moved=float(nbytes), description=description)


def _describe(nbytes: int, dev: Any, direction: str, pinned: bool, pin: bool, non_blocking: bool, until: str,
              label: str | None) -> tuple[str, str]:
    size = fmt_bytes(nbytes)
    if dev.type == "cpu":
        text = f"host copy {size}"
        notes = []
        if pinned:
            notes.append("pinned n/a: no CUDA")
        if non_blocking:
            notes.append("non_blocking: no effect on CPU")
        auto = text + (f" ({'; '.join(notes)})" if notes else "")
        what = (f"single-threaded memcpy of {size} between two host buffers (the copy a CUDA driver makes to stage "
                "a pageable transfer): without a GPU there is no link to cross and no pinned memory (page-locking "
                "is a CUDA driver service)")
    else:
        memory = "pinned" if pin else ("pageable (pinned n/a: needs CUDA)" if pinned else "pageable")
        auto = f"{direction.upper()} {size} {memory}" + (" non_blocking" if non_blocking else "")
        what = f"{'host to device' if direction == 'h2d' else 'device to host'} copy of {size} on {dev}, host " \
               f"side {memory}{', non_blocking' if non_blocking else ''}"
    if until == "returned":
        auto += " (host wait)"
        what += "; timed until the call returned (how long the host thread is blocked)"
    else:
        what += "; timed until the data is usable (device synchronised)"
    return label or auto, what


# ----------------------------------------------------------------------------------------------
# hidden host syncs
SYNC_KINDS: dict[str, str] = {
    "value read": "a tensor's value becomes a Python number (.item(), float(), int())",
    "control flow": "Python branches on a tensor (if tensor:, bool(), while tensor:)",
    "print": "the tensor is formatted (print, f-string, repr): its values are copied to the host",
    "copy to host": "the data is copied to host memory (.cpu(), .numpy(), .tolist(), .to('cpu'))",
    "copy to device": "a blocking copy between devices (.to(device), .cuda() without non_blocking)",
    "data-dependent shape": "the output's size depends on values (nonzero, boolean-mask indexing, unique, "
                            "masked_select): the host must read the count",
}
_VALUE = {"item", "__float__", "__int__", "__index__", "__complex__"}
_BOOL = {"__bool__"}
_PRINT = {"__repr__", "__str__", "__format__"}
_HOST = {"cpu", "numpy", "tolist", "__array__"}
_SHAPE = {"nonzero", "masked_select", "unique", "unique_consecutive", "argwhere"}
_MOVE = {"to", "cuda", "copy_"}
_ACCELERATORS = ("cuda", "mps", "xpu")


@dataclass(frozen=True)
class SyncPoint:
    """One place in the code that makes the host wait for a GPU, and how often it ran.

    Example:
        >>> SyncPoint("value read", ".item()", "cell line 3", "loss.item()", 10, False).count
        10
    """

    kind: str            # a key of SYNC_KINDS
    call: str            # e.g. ".item()", "print / repr", "torch.nonzero"
    where: str           # "file:line" of the first frame outside torch and gpulab
    code: str            # that line's source text ("" when unknown)
    count: int
    waits_here: bool     # the tensor was on an accelerator: this call really waited on this machine


@dataclass(frozen=True)
class SyncReport:
    """Every host-device synchronisation point one call of a function hit (see :func:`find_host_syncs`).

    ``total`` counts calls; ``waits_here`` counts those that really waited on this machine (tensors on
    a GPU). On a CPU nothing waits, but each point would cost a full synchronisation on a GPU.

    Example:
        >>> r = SyncReport("f", (SyncPoint("value read", ".item()", "cell line 3", "x.item()", 2, False),), "cpu")
        >>> r.total, r.waits_here, r.by_kind()
        (2, 0, {'value read': 2})
    """

    label: str
    points: tuple[SyncPoint, ...]
    device: str
    result: Any = field(default=None, repr=False, compare=False)
    total: int = field(init=False)
    waits_here: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "total", sum(p.count for p in self.points))
        object.__setattr__(self, "waits_here", sum(p.count for p in self.points if p.waits_here))

    def by_kind(self) -> dict[str, int]:
        """Counts per kind of synchronisation, most frequent first."""
        out: dict[str, int] = {}
        for p in self.points:
            out[p.kind] = out.get(p.kind, 0) + p.count
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def to_dataframe(self) -> Any:
        import pandas as pd

        cols = ["kind", "call", "where", "code", "count", "waits_here"]
        return pd.DataFrame([{c: getattr(p, c) for c in cols} for p in self.points], columns=cols)

    def _caption(self) -> str:
        here = (f"{self.waits_here} waited on this machine" if self.waits_here
                else "none waited here (tensors on the host); each would on a GPU")
        return f"Host syncs in {self.label}: {self.total} ({here})"

    def _rows(self, limit: int | None = None) -> list[list[str]]:
        pts = self.points if limit is None else self.points[:limit]
        return [[p.kind, p.call, str(p.count), p.where, p.code[:60]] for p in pts]

    def __repr__(self) -> str:
        head = self._caption()
        if not self.points:
            return head
        rows = self._rows(limit=6)
        more = len(self.points) - len(rows)
        return (head + "\n" + text_table(("kind", "call", "count", "where", "code"), rows)
                + (f"\n... {more} more (to_dataframe() lists all)" if more else ""))

    def _repr_html_(self) -> str:
        if not self.points:
            return f"<b>{self._caption()}</b>"
        return html_table(("kind", "call", "count", "where", "code"), self._rows(), caption=self._caption())


def _tensor_device(x: Any) -> Any:
    dev = getattr(x, "device", None)
    return dev if hasattr(dev, "type") else None


def _target_device(args: tuple, kwargs: dict) -> Any:
    """The device a ``Tensor.to(...)`` call moves to, or None when it keeps the device."""
    import torch

    if "device" in kwargs and kwargs["device"] is not None:
        return torch.device(kwargs["device"])
    for a in args[1:]:
        if isinstance(a, torch.device):
            return a
        if isinstance(a, str):
            try:
                return torch.device(a)
            except RuntimeError:
                continue
        if isinstance(a, int) and not isinstance(a, bool):
            return torch.device("cuda", a)
        if isinstance(a, torch.Tensor):
            return a.device
    return None


def _is_bool_index(index: Any) -> bool:
    import torch

    items = index if isinstance(index, (tuple, list)) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in items)


def _classify(name: str, args: tuple, kwargs: dict) -> tuple[str, str] | None:
    """(kind, call) when ``name(*args)`` synchronises the host with a GPU, else None."""
    import torch

    first = args[0] if args else None
    if not isinstance(first, torch.Tensor):
        return None
    if name in _VALUE:
        return "value read", ".item()" if name == "item" else f"{name.strip('_')}(tensor)"
    if name in _BOOL:
        return "control flow", "bool(tensor) / if tensor:"
    if name in _PRINT:
        return "print", "print / repr / f-string"
    if name in _HOST:
        return "copy to host", f".{name.strip('_')}()"
    if name in _SHAPE or (name == "where" and len(args) == 1 and not kwargs):
        return "data-dependent shape", f"torch.{name}" if name != "where" else "torch.where(condition)"
    if name == "__getitem__" and len(args) > 1 and _is_bool_index(args[1]):
        return "data-dependent shape", "boolean-mask indexing"
    if name in _MOVE:
        # In every signature (to(device, dtype, non_blocking), to(dtype, non_blocking), to(other, non_blocking),
        # cuda(device, non_blocking), copy_(src, non_blocking)) the first positional bool is non_blocking.
        flags = [a for a in args[1:] if isinstance(a, bool)]
        if kwargs.get("non_blocking") is True or (flags and flags[0]):
            return None
        if name == "copy_":
            if len(args) < 2 or not isinstance(args[1], torch.Tensor):
                return None
            src, dst = args[1].device, first.device
        else:
            dst = torch.device("cuda") if name == "cuda" else _target_device(args, kwargs)
            src = first.device
        if dst is None or dst.type == src.type:
            return None
        return ("copy to host", ".to('cpu')") if dst.type == "cpu" else ("copy to device", f".to('{dst.type}')")
    return None


def _user_frame() -> tuple[str, str]:
    """``("file:line", source)`` of the innermost frame outside torch and gpulab."""
    import torch

    skip = (os.path.dirname(torch.__file__), os.path.dirname(os.path.abspath(__file__)))
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if not (path.startswith(skip) or path.startswith("<frozen")):
            code = linecache.getline(path, frame.f_lineno, frame.f_globals).strip()
            in_cell = os.path.basename(os.path.dirname(path)).startswith("ipykernel_") or path.startswith("<ipython")
            return (f"cell line {frame.f_lineno}" if in_cell else f"{os.path.basename(path)}:{frame.f_lineno}"), code
        frame = frame.f_back
    return "?", ""


@checked(label="name?")
def find_host_syncs(fn: Callable[..., Any], *args: Any, label: str | None = None, **kwargs: Any) -> SyncReport:
    """Run ``fn(*args, **kwargs)`` once and list every call in it that makes the host wait for a GPU.

    CUDA kernels run asynchronously: the host queues work and runs ahead, which keeps the GPU busy. A
    call that needs a value on the host (``.item()``, ``print``, ``.cpu()``, ``if tensor:``, ``nonzero``)
    stops that: the host waits until the GPU has finished everything queued, and the GPU then idles
    while the host queues the next work. The report groups the calls by kind and source line
    (``.result`` holds ``fn``'s return value). It watches PyTorch calls (a ``TorchFunctionMode``), so
    it works on any device; on CUDA, ``torch.cuda.set_sync_debug_mode("warn")`` is the runtime's own
    (partial) check. ``.to(device)`` counts only when the device changes; ``non_blocking`` copies do not.

    Example:
        >>> import torch, gpulab as gl
        >>> def step(x):
        ...     loss = (x * 2).sum()
        ...     if loss > 0:                 # control flow on a tensor
        ...         print(f"{loss:.2f}")     # formatting a tensor
        ...     return loss.item()           # reading its value
        >>> report = gl.transfer.find_host_syncs(step, torch.ones(3))
        6.00
        >>> report.total, sorted(report.by_kind())
        (3, ['control flow', 'print', 'value read'])
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable, got {type(fn).__name__}: pass the function and its "
                        "arguments, e.g. find_host_syncs(step, batch), not find_host_syncs(step(batch))")
    from torch.overrides import TorchFunctionMode

    from .timing import _infer_device

    counts: dict[tuple[str, str, str, str, bool], int] = {}
    order: list[tuple[str, str, str, str, bool]] = []

    class _Watch(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            hit = _classify(name, tuple(args), kwargs) if name else None
            if hit is not None:
                where, code = _user_frame()
                devs = [_tensor_device(a) for a in args[:2]]
                here = any(d is not None and d.type in _ACCELERATORS for d in devs)
                key = (hit[0], hit[1], where, code, here)
                if key not in counts:
                    order.append(key)
                    counts[key] = 0
                counts[key] += 1
            return func(*args, **kwargs)

    with _Watch():
        result = fn(*args, **kwargs)
    points = tuple(SyncPoint(k[0], k[1], k[2], k[3], counts[k], k[4]) for k in order)
    name = label or getattr(fn, "__name__", None) or type(fn).__name__
    return SyncReport(name, points, _infer_device(args, kwargs), result)
