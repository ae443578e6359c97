"""Memory that stays when it should not: measuring growth across steps, finding the usual culprits
(lists of tensors that keep autograd graphs, the last exception's traceback, notebook output history),
and recovering without restarting the kernel.

Example:
    >>> import torch, gpulab as gl
    >>> kept = []
    >>> g = gl.memory.memory_growth(lambda: kept.append(torch.ones(1024)), steps=4)
    >>> g.leaks, g.growth_per_step_bytes
    (True, 4096)
"""
from __future__ import annotations

import gc
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .._check import checked, whole
from .._format import fmt_bytes, html_table, text_table

__all__ = ["MemoryGrowth", "memory_growth", "GraphHolder", "graph_holders", "Recovery", "recover_memory",
           "LEAK_BYTES_PER_STEP"]

LEAK_BYTES_PER_STEP = 1   # any steady growth is a leak; how much it matters depends on how long you train


@dataclass(frozen=True)
class MemoryGrowth:
    """Live tensor bytes after each call of a step (garbage collected first): a leak grows every step."""

    label: str
    live_bytes: tuple[int, ...]
    device: str
    method: str

    @property
    def deltas(self) -> tuple[int, ...]:
        return tuple(b - a for a, b in zip(self.live_bytes, self.live_bytes[1:]))

    @property
    def growth_per_step_bytes(self) -> int:
        """Median growth between consecutive steps (the first step, which may allocate state, excluded)."""
        d = sorted(self.deltas)
        return int(d[len(d) // 2]) if d else 0

    @property
    def leaks(self) -> bool:
        """True when memory grew on every step after the first."""
        return bool(self.deltas) and all(x >= LEAK_BYTES_PER_STEP for x in self.deltas)

    def to_dataframe(self) -> Any:
        import pandas as pd

        return pd.DataFrame({"live_bytes": self.live_bytes,
                             "growth_bytes": (None, *self.deltas)}, index=range(1, len(self.live_bytes) + 1))

    def _verdict(self) -> str:
        return (f"leaks {fmt_bytes(self.growth_per_step_bytes)} per step" if self.leaks
                else "no growth after the first step")

    def _rows(self) -> list[tuple[str, str, str]]:
        return [(str(i + 1), fmt_bytes(b), "" if i == 0 else f"+{fmt_bytes(b - self.live_bytes[i - 1])}"
                 if b >= self.live_bytes[i - 1] else f"-{fmt_bytes(self.live_bytes[i - 1] - b)}")
                for i, b in enumerate(self.live_bytes)]

    def __repr__(self) -> str:
        return (f"{self.label}: {self._verdict()} ({self.method} on {self.device})\n"
                + text_table(("after step", "live", "change"), self._rows()))

    def _repr_html_(self) -> str:
        return html_table(("after step", "live", "change"), self._rows(),
                          caption=f"{self.label}: {self._verdict()}", footer=f"{self.method} on {self.device}")


@checked(device="device", label="name")
def memory_growth(step: Callable[[], Any], steps: int = 5, device: Any = None, label: str = "step") -> MemoryGrowth:
    """Call ``step()`` ``steps`` times and record the live tensor bytes after each call (after garbage
    collection). On CUDA: ``torch.cuda.memory_allocated`` above the starting point; elsewhere: every
    tensor storage created during the calls and still alive (gpulab's tracker).

    Example:
        >>> import torch, gpulab as gl
        >>> gl.memory.memory_growth(lambda: torch.ones(1024).sum(), steps=3).leaks
        False
    """
    if not callable(step):
        raise TypeError(f"step must be a callable running one step, got {type(step).__name__}")
    whole("steps", steps, low=2)
    import torch

    from .peak import MemoryTracker, _is_cuda

    if device is None:
        from ..system import device_kind

        device = "cuda" if device_kind() == "cuda" else "cpu"
    live: list[int] = []
    if _is_cuda(device):
        torch.cuda.synchronize(device)
        gc.collect()
        base = torch.cuda.memory_allocated(device)
        for _ in range(steps):
            step()
            torch.cuda.synchronize(device)
            gc.collect()
            live.append(int(torch.cuda.memory_allocated(device) - base))
        method = "CUDA allocator"
    else:
        with MemoryTracker() as tracker:
            for _ in range(steps):
                step()
                gc.collect()
                live.append(int(tracker.current_bytes))
        method = "tracked tensors"
    return MemoryGrowth(label, tuple(live), str(device), method)


@dataclass(frozen=True)
class GraphHolder:
    """A list, tuple or dict holding tensors that still carry an autograd graph (``grad_fn``)."""

    kind: str
    length: int
    graph_tensors: int
    bytes: int            # the tensors' own storage (their graphs' saved tensors come on top)
    names: tuple[str, ...] = ()   # notebook (``__main__``) variables bound to it; "globals()" for the namespace


def graph_holders(min_tensors: int = 2) -> list[GraphHolder]:
    """Containers (lists, tuples, dicts) that hold at least ``min_tensors`` tensors with autograd history,
    found by walking the garbage collector's objects: the signature of ``losses.append(loss)``.

    Example:
        >>> import torch, gpulab as gl
        >>> w = torch.ones(3, requires_grad=True)
        >>> losses = [(w * 2).sum() for _ in range(3)]
        >>> any(h.graph_tensors >= 3 for h in gl.memory.graph_holders())
        True
    """
    whole("min_tensors", min_tensors)
    import torch

    out = []
    main = getattr(sys.modules.get("__main__"), "__dict__", {})
    with warnings.catch_warnings():      # isinstance() on deprecated module attributes warns
        warnings.simplefilter("ignore")
        objects = gc.get_objects()
        for obj in objects:
            holder = _holder(obj, min_tensors, torch)
            if holder is not None:
                names = ("globals()",) if obj is main else tuple(k for k, v in main.items() if v is obj)
                out.append(GraphHolder(holder.kind, holder.length, holder.graph_tensors, holder.bytes, names))
    del objects
    return sorted(out, key=lambda h: h.graph_tensors, reverse=True)


def _holder(obj: Any, min_tensors: int, torch: Any) -> GraphHolder | None:
    t = type(obj)
    if t is list or t is tuple:
        items: Sequence[Any] = obj
    elif t is dict:
        items = list(obj.values())
    else:
        return None
    if len(items) < min_tensors:
        return None
    graph = [x for x in items[:10_000] if isinstance(x, torch.Tensor) and x.grad_fn is not None]
    if len(graph) < min_tensors:
        return None
    seen, nbytes = set(), 0
    for x in graph:
        try:
            st = x.untyped_storage()
            if st.data_ptr() not in seen:
                seen.add(st.data_ptr())
                nbytes += st.nbytes()
        except Exception:  # pragma: no cover - exotic tensor subclasses
            pass
    return GraphHolder(t.__name__, len(items), len(graph), int(nbytes))


@dataclass(frozen=True)
class Recovery:
    """What :func:`recover_memory` released, and the allocator's figures before and after (CUDA)."""

    actions: tuple[str, ...]
    allocated_before: int | None
    allocated_after: int | None

    def __repr__(self) -> str:
        mem = ""
        if self.allocated_before is not None:
            mem = (f"; CUDA allocated {fmt_bytes(self.allocated_before)} -> {fmt_bytes(self.allocated_after)}")
        return "Recovered: " + ("; ".join(self.actions) or "nothing to clear") + mem

    def _repr_html_(self) -> str:
        import html

        return f"<div>{html.escape(repr(self))}</div>"


def recover_memory(namespace: dict[str, Any] | None = None, names: Sequence[str] = (), *,
                   clear_exception: bool = True, clear_outputs: bool = True) -> Recovery:
    """Free memory that a notebook keeps alive, without restarting the kernel:

    - delete ``names`` from ``namespace`` (e.g. ``gl.memory.recover_memory(globals(), ["out", "losses"])``);
    - forget the last exception (``sys.last_value`` / ``sys.last_traceback``, which IPython keeps for
      ``%debug``): its traceback holds every frame of the failed step, and their tensors;
    - clear IPython's output history (``Out``, ``_``, ``__``, ``___``), which keeps every displayed result;
    - then collect garbage and, on CUDA, return cached blocks to the driver (``empty_cache``).

    Example:
        >>> import gpulab as gl
        >>> ns = {"big": bytearray(10)}
        >>> r = gl.memory.recover_memory(ns, ["big"])
        >>> "big" in ns
        False
    """
    if isinstance(names, str):
        raise TypeError("names must be a list of variable names, e.g. ['out', 'losses'], not one string")
    if names and namespace is None:
        raise ValueError("pass the namespace holding the names, e.g. gl.memory.recover_memory(globals(), ['out'])")
    torch = sys.modules.get("torch")
    cuda = torch is not None and torch.cuda.is_available()
    before = int(torch.cuda.memory_allocated()) if cuda else None
    actions = []
    for n in names:
        if namespace is not None and n in namespace:
            del namespace[n]
            actions.append(f"deleted {n}")
    if clear_exception:
        cleared = [a for a in ("last_type", "last_value", "last_traceback", "last_exc")
                   if getattr(sys, a, None) is not None]
        for a in cleared:
            setattr(sys, a, None)
        if cleared:
            actions.append("forgot the last exception (sys.last_traceback)")
    if clear_outputs:
        try:
            from IPython import get_ipython
        except ImportError:  # pragma: no cover - IPython is part of the course stack
            get_ipython = lambda: None  # noqa: E731
        ip = get_ipython()
        if ip is not None and getattr(ip, "displayhook", None) is not None:
            n_out = len(ip.user_ns.get("Out", {}))
            ip.displayhook.flush()
            actions.append(f"cleared IPython output history ({n_out} results)")
    from .peak import free_memory

    free_memory()
    actions.append("collected garbage" + (" and emptied the CUDA cache" if cuda else ""))
    after = int(torch.cuda.memory_allocated()) if cuda else None
    return Recovery(tuple(actions), before, after)
