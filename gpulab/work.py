"""What one call does, op by op: FLOPs (by dtype), bytes read and written, host syncs, and the time the
machine's measured ceilings allow for it (a roofline per operator, summed).

Eager PyTorch runs one operator after another, each reading its inputs from memory and writing its output,
so a step's best possible time at the ceilings is the sum over its operators of
``max(flops / peak_flops[dtype], bytes / bandwidth)``: :meth:`Work.ideal_s`. The measured step time
divided into that is how close the step runs to the machine's limits.

Example:
    >>> import torch, gpulab as gl
    >>> w = gl.work.count_work(torch.mm, torch.ones(64, 32), torch.ones(32, 16))
    >>> w.flops, w.bytes_moved                  # 2*64*32*16 FLOPs; (64*32 + 32*16 + 64*16) * 4 bytes
    (65536, 14336)
    >>> w.flops_by_dtype
    {'float32': 65536}
"""
from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ._dispatch import dispatch_mode
from ._format import fmt_bytes, fmt_rate

__all__ = ["SYNC_OPS", "Work", "count_work"]

# reading a device tensor's value on the host: the host waits for the device's queue
SYNC_OPS = ("_local_scalar_dense", "item", "equal", "is_nonzero")
_NO_TRAFFIC = ("empty", "empty_strided", "empty_like", "lift_fresh", "set_", "resize_", "_local_scalar_dense")


@dataclass(frozen=True)
class Work:
    """The work of one call: ``ops`` operators, ``flops`` (matmuls, convolutions, attention; elementwise ops
    count 0, as in ``torch.utils.flop_counter``), ``bytes_moved`` (each operator's tensor inputs read and
    outputs written once; views move nothing), ``syncs`` (host reads of a tensor's value) and, per operator,
    ``(dtype, flops, bytes)`` for the roofline sum. Gathers (``X[idx]``, ``index_select``, ``embedding``) count the
    rows they read, scatters the rows they write, never the whole table."""

    ops: int
    flops: int
    bytes_moved: int
    syncs: int
    flops_by_dtype: Mapping[str, int]
    per_op: tuple[tuple[str, int, int], ...]
    op_names: tuple[str, ...] = ()          # the operator of each per_op entry (e.g. "mul")

    @property
    def intensity(self) -> float | None:
        """FLOPs per byte moved (None when nothing was moved)."""
        return self.flops / self.bytes_moved if self.bytes_moved else None

    @property
    def main_dtype(self) -> str | None:
        """The dtype doing most of the FLOPs (None without FLOPs)."""
        return max(self.flops_by_dtype, key=self.flops_by_dtype.__getitem__) if self.flops_by_dtype else None

    def ideal_s(self, peak_flops: Callable[[str], float | None],
                bandwidth: float | Callable[[int], float]) -> tuple[float, float]:
        """``(compute_s, memory_s)``: the time the operators need at the ceilings, split by which roof bounds
        each one (``peak_flops(dtype)`` gives the ceiling of a dtype; None falls back to float32's).
        ``bandwidth`` is one ceiling for every operator, or a function of an operator's bytes (its working set)
        giving its ceiling (:meth:`gpulab.MachineLimits.bandwidth_for`: faster where the tensors fit a cache)."""
        bw_of = bandwidth if callable(bandwidth) else (lambda nbytes: bandwidth)
        if not callable(bandwidth) and not bandwidth > 0:
            raise ValueError(f"bandwidth must be positive, got {bandwidth!r}")
        compute = memory = 0.0
        for dtype, flops, nbytes in self.per_op:
            peak = peak_flops(dtype) or peak_flops("float32")
            c = flops / peak if flops and peak else 0.0
            m = nbytes / bw_of(nbytes) if nbytes else 0.0
            if c >= m:
                compute += c
            else:
                memory += m
        return compute, memory

    def __repr__(self) -> str:
        dt = ", ".join(f"{k} {fmt_rate(v, 'FLOP')}" for k, v in self.flops_by_dtype.items())
        return (f"Work: {self.ops} operators, {fmt_rate(self.flops, 'FLOP')} ({dt or 'no matmuls'}), "
                f"{fmt_bytes(self.bytes_moved)} moved, {self.syncs} host syncs")


def _nbytes(x: Any, torch: Any) -> int:
    if isinstance(x, torch.Tensor):
        try:
            return int(x.numel() * x.element_size())
        except Exception:   # pragma: no cover - sparse or exotic tensors
            return 0
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(v, torch) for v in x)
    return 0


# Operators that touch only part of a tensor they are given: the bytes are what the hardware reads and writes
# (the gathered or scattered rows, the indices), never the whole source or destination.
_GATHERS = ("index", "index_select", "embedding", "gather", "take", "take_along_dim", "_embedding_bag",
            "embedding_bag")
_SCATTERS_INPLACE = ("index_put_", "_index_put_impl_", "scatter_", "scatter_add_", "scatter_reduce_", "index_add_",
                     "index_copy_", "index_reduce_")
_SCATTERS = ("index_put", "scatter", "scatter_add", "scatter_reduce", "index_add", "index_copy", "index_reduce")
_ACCUMULATE = ("scatter_add_", "scatter_reduce_", "index_add_", "index_reduce_", "scatter_add", "scatter_reduce",
               "index_add", "index_reduce")
_WRITE_ONLY = ("fill_", "zero_", "normal_", "uniform_", "random_", "bernoulli_", "exponential_")


def _indices(args: Any, kwargs: Any, torch: Any) -> int:
    """Bytes of the integer tensors among the arguments (the indices an indexing operator reads)."""
    def ints(x: Any) -> int:
        if isinstance(x, torch.Tensor):
            return _nbytes(x, torch) if not (x.is_floating_point() or x.is_complex()) and x.dtype != torch.bool else 0
        if isinstance(x, (list, tuple)):
            return sum(ints(v) for v in x)
        return 0
    return ints(list(args)) + ints(list(kwargs.values()))


def _op_bytes(name: str, args: Any, kwargs: Any, out: Any, torch: Any) -> int:
    """Bytes one operator moves as the hardware moves them: its tensor inputs read and outputs written once, except
    where it touches only part of a tensor it is given (gathers read the rows they return, scatters write the rows
    they are given, ``copy_`` and ``fill_`` do not read the tensor they overwrite)."""
    if name in _GATHERS:                                   # read the gathered rows and the indices, write them out
        return 2 * _nbytes(out, torch) + _indices(args, kwargs, torch)
    if name in _SCATTERS_INPLACE or name in _SCATTERS:
        dest = args[0] if args and isinstance(args[0], torch.Tensor) else None
        values = [a for a in list(args[1:]) + list(kwargs.values()) if isinstance(a, torch.Tensor)
                  and a.is_floating_point()]
        if isinstance(args[1:2] and args[1], (list, tuple)):           # index_put's list of index tensors
            values = [a for a in list(args[2:]) if isinstance(a, torch.Tensor) and a.is_floating_point()]
        touched = _nbytes(values, torch) if values else 0
        if not values and dest is not None:                # a scalar value (scatter_(dim, index, 2.0)): one per index
            index = next((a for a in args[1:] if isinstance(a, torch.Tensor)), None)
            touched = 0 if index is None else index.numel() * dest.element_size()
        moved = touched * (3 if name in _ACCUMULATE else 2) + _indices(args[1:], kwargs, torch)
        if name in _SCATTERS and dest is not None:         # out of place: the destination is copied first
            moved += 2 * _nbytes(dest, torch)
        return moved
    if name == "index_fill_" and args and isinstance(args[0], torch.Tensor) and len(args) > 2:
        dest, dim, index = args[0], args[1], args[2]
        rows = dest.numel() // max(1, dest.shape[dim]) * index.numel() if dest.dim() else 1
        return rows * dest.element_size() + _nbytes(index, torch)
    if name == "copy_" and len(args) >= 2:                  # read the source, write the destination
        return _nbytes(args[1], torch) + _nbytes(out, torch)
    if name in _WRITE_ONLY:                                # written, not read
        return _nbytes(out, torch)
    return _nbytes(list(args), torch) + _nbytes(list(kwargs.values()), torch) + _nbytes(out, torch)


def _dtype_of(out: Any, torch: Any) -> str:
    if isinstance(out, torch.Tensor):
        return str(out.dtype).removeprefix("torch.")
    if isinstance(out, (list, tuple)):
        for v in out:
            if isinstance(v, torch.Tensor):
                return str(v.dtype).removeprefix("torch.")
    return "float32"


def count_work(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Work:
    """Run ``fn(*args, **kwargs)`` once under a counting dispatch mode and return its :class:`Work`.

    The call really runs (its side effects happen: an optimizer steps), only slower, since each operator
    passes through Python once. FLOPs come from ``torch.utils.flop_counter``'s formulas; bytes from the
    sizes of each operator's tensor inputs and outputs.
    """
    return _count(fn, args, kwargs, None)


def _count(fn: Callable[..., Any], args: Any, kwargs: Any, created: list[Any] | None) -> Work:
    """:func:`count_work`; with ``created`` a list, also a weak reference to every tensor an operator made
    (to tell afterwards which of them outlived the call: a graph kept from step to step)."""
    if not callable(fn):
        raise TypeError(f"count_work needs a callable, got {type(fn).__name__}")
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    per_op: list[tuple[str, int, int]] = []
    names: list[str] = []
    by_dtype: dict[str, int] = {}
    syncs = [0]

    class _Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            packet = func._overloadpacket
            name = packet.__name__
            if name in SYNC_OPS:
                syncs[0] += 1
            if created is not None and isinstance(out, torch.Tensor):
                created.append(weakref.ref(out))
            if getattr(func, "is_view", False) or name in _NO_TRAFFIC:
                return out
            flops = 0
            if packet in flop_registry:
                flops = int(flop_registry[packet](*args, **kwargs, out_val=out))
            dtype = _dtype_of(out, torch)
            if flops:
                by_dtype[dtype] = by_dtype.get(dtype, 0) + flops
            nbytes = _op_bytes(name, args, kwargs, out, torch)
            per_op.append((dtype, flops, nbytes))
            names.append(name)
            return out

    with dispatch_mode(_Counter()):
        fn(*args, **kwargs)
    return Work(ops=len(per_op), flops=sum(f for _, f, _ in per_op), bytes_moved=sum(b for *_, b in per_op),
                syncs=syncs[0], flops_by_dtype=dict(by_dtype), per_op=tuple(per_op),
                op_names=tuple(names))
