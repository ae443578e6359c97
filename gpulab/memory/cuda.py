"""GPU memory as three layers see it: PyTorch's caching allocator (allocated, reserved), the CUDA driver
(free/total), and NVML (``nvidia-smi``: used by every process). Plus allocator memory snapshots for
PyTorch's memory viewer.

Everything here needs CUDA; on other machines each function says so in its result instead of raising.
The ``cuda`` argument (default ``torch.cuda``) lets tests pass a fake with the same API.

Example:
    >>> import gpulab as gl
    >>> r = gl.memory.reconcile_memory()
    >>> r.available or "CUDA" in r.note
    True
"""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .._check import checked, whole
from .._format import fmt_bytes, html_table, text_table

__all__ = ["CudaMemoryState", "cuda_memory_state", "nvml_processes", "MemoryReconciliation", "reconcile_memory",
           "MemorySnapshot", "capture_memory_history", "MEMORY_VIZ_URL"]

MEMORY_VIZ_URL = "https://pytorch.org/memory_viz"
# What a process holds beyond its allocator's reserve: the CUDA context, kernels, cuBLAS/cuDNN/NCCL workspaces
# (a few hundred MiB to about a GiB in practice). A PID whose NVML figure exceeds this process's reserve by at most
# this much can be this process.
CONTEXT_ALLOWANCE_BYTES = 2 * 2**30


def _cuda(cuda: Any) -> Any:
    if cuda is not None:
        return cuda
    try:
        import torch
    except ImportError:
        return None
    return torch.cuda


def _index(device: Any, cuda: Any) -> int:
    if device is None:
        return int(cuda.current_device())
    if isinstance(device, int):
        return device
    idx = getattr(device, "index", None)
    if idx is None and isinstance(device, str) and ":" in device:
        idx = int(device.split(":", 1)[1])
    return int(idx or 0)


@dataclass(frozen=True)
class CudaMemoryState:
    """The caching allocator's and the driver's figures for one CUDA device, captured at one moment."""

    device_index: int
    allocated_bytes: int          # live tensors
    reserved_bytes: int           # held by the caching allocator (live tensors + cached blocks)
    peak_allocated_bytes: int
    total_bytes: int              # the card's memory
    free_bytes: int               # what the driver says is free (all processes)
    inactive_split_bytes: int | None   # cached blocks split by earlier allocations: fragmentation
    alloc_retries: int | None     # cudaMalloc failures the allocator recovered from by freeing its cache
    ooms: int | None
    nvml_used_bytes: int | None = None        # what nvidia-smi shows as used (NVML; None without it)
    driver_reserved_bytes: int | None = None  # kept by driver and firmware (NVML v2; None on older drivers)

    @property
    def cached_bytes(self) -> int:
        """Reserved but not allocated: reusable by this process, invisible to others."""
        return self.reserved_bytes - self.allocated_bytes


@checked(device="devspec")
def cuda_memory_state(device: Any = None, cuda: Any = None) -> CudaMemoryState | None:
    """Allocator and driver memory figures of a CUDA device (None without CUDA).

    Example:
        >>> import torch, gpulab as gl
        >>> gl.memory.cuda_memory_state() is None or gl.memory.cuda_memory_state().total_bytes > 0
        True
    """
    cuda = _cuda(cuda)
    if cuda is None or not cuda.is_available():
        return None
    i = _index(device, cuda)
    free, total = cuda.mem_get_info(i)
    try:
        stats = cuda.memory_stats(i)
    except Exception:  # pragma: no cover - older builds
        stats = {}
    nv = _nvml_memory(i)
    return CudaMemoryState(i, int(cuda.memory_allocated(i)), int(cuda.memory_reserved(i)),
                           int(cuda.max_memory_allocated(i)), int(total), int(free),
                           stats.get("inactive_split_bytes.all.current"), stats.get("num_alloc_retries"),
                           stats.get("num_ooms"), None if nv is None else nv.used_bytes,
                           None if nv is None else nv.reserved_bytes)


def nvml_processes(cuda_index: int = 0) -> list[tuple[int, int | None]] | None:
    """``(pid, used bytes)`` of every compute process on the CUDA device ``cuda_index``, from NVML
    (``nvidia-smi``'s process table). None without NVML; a process's bytes are None when NVML cannot
    tell (e.g. Windows WDDM). In containers NVML may report host PIDs that differ from ``os.getpid()``
    (:func:`reconcile_memory` recognises this process under such a PID by its memory).
    """
    from ..telemetry import nvml

    vis = nvml.visible_devices()
    if not 0 <= cuda_index < len(vis):
        return None
    h = nvml.handle_by_uuid(vis[cuda_index].uuid) or nvml.query("nvmlDeviceGetHandleByIndex", vis[cuda_index].index)
    if h is None:
        return None
    procs = nvml.query("nvmlDeviceGetComputeRunningProcesses", h)
    if procs is None:
        return None
    out = []
    for p in procs:
        used = getattr(p, "usedGpuMemory", None)
        out.append((int(p.pid), None if used is None else int(used)))
    return out


def _pid_visible(pid: int) -> bool | None:
    """Whether ``pid`` is a process in this PID namespace (None without psutil)."""
    try:
        import psutil
    except ImportError:
        return None
    return bool(psutil.pid_exists(pid))


def _this_process_elsewhere(procs: list[tuple[int, int | None]], pid: int,
                            reserved: int) -> tuple[int, int | None, str] | None:
    """The PID under which NVML most likely lists this process when ``pid`` is not in its table: (pid, bytes, the
    evidence), or None. This process holds a CUDA context on the device (reading its memory made one), so NVML
    should list it; when it does not, NVML counts PIDs of another PID namespace (a container's host). Evidence for
    a PID: its memory is this process's reserve plus at most a CUDA context, or, the only one listed, it is not a
    process here."""
    if any(p == pid for p, _ in procs):
        return None
    fits = [(p, b) for p, b in procs if b is not None and reserved <= b <= reserved + CONTEXT_ALLOWANCE_BYTES]
    if fits and reserved > 0:
        p, b = min(fits, key=lambda pb: pb[1] - reserved)
        return p, b, (f"its {fmt_bytes(b)} is this process's {fmt_bytes(reserved)} reserved plus "
                      f"{fmt_bytes(b - reserved)}, about what a CUDA context takes")
    if len(procs) == 1 and (procs[0][1] is None or procs[0][1] >= reserved) and _pid_visible(procs[0][0]) is False:
        return procs[0][0], procs[0][1], "the only process NVML lists, and not a process in this PID namespace"
    return None


def _nvml_memory(cuda_index: int) -> Any:
    """NVML's memory figures for the CUDA device (a MIG slice's own), or None without NVML."""
    from ..telemetry import nvml

    return nvml.cuda_memory_info(cuda_index)


@dataclass(frozen=True)
class MemoryReconciliation:
    """How NVML's "used" (what ``nvidia-smi`` shows) breaks down into PyTorch's allocated and reserved
    memory, the CUDA context and other processes. ``rows`` are (what, bytes or None, explanation)."""

    available: bool
    note: str
    rows: tuple[tuple[str, int | None, str], ...] = ()
    state: CudaMemoryState | None = None

    def value(self, what: str) -> int | None:
        for k, v, _ in self.rows:
            if k == what:
                return v
        raise KeyError(f"no row {what!r}; rows: {[r[0] for r in self.rows]}")

    def to_dataframe(self) -> Any:
        import pandas as pd

        return pd.DataFrame([{"memory": k, "bytes": v, "meaning": n} for k, v, n in self.rows]).set_index("memory")

    def _table(self) -> list[tuple[str, str, str]]:
        return [(k, fmt_bytes(v), n) for k, v, n in self.rows]

    def __repr__(self) -> str:
        if not self.available:
            return f"MemoryReconciliation: {self.note}"
        return f"GPU memory, reconciled ({self.note})\n" + text_table(("memory", "size", "meaning"), self._table())

    def _repr_html_(self) -> str:
        if not self.available:
            return f"<div>Memory reconciliation: {self.note}</div>"
        return html_table(("memory", "size", "meaning"), self._table(), caption=f"GPU memory, reconciled ({self.note})")


@checked(device="devspec")
def reconcile_memory(device: Any = None, cuda: Any = None, pid: int | None = None) -> MemoryReconciliation:
    """NVML "used" vs allocator reserved vs allocated for a CUDA device, with the gaps named:
    cached blocks (reserved - allocated), this process's CUDA context and non-PyTorch allocations
    (NVML's figure for this process - reserved), and other processes. Without CUDA: ``available=False``.

    Inside a container NVML may list this process under its host PID: when this process's PID is not in NVML's
    table, a PID whose memory is this process's reserve plus a CUDA context (or the only one listed, when it is not
    a process here) is shown apart as "another PID, possibly this process", not among the other processes.
    """
    cuda = _cuda(cuda)
    if cuda is None or not cuda.is_available():
        return MemoryReconciliation(False, "no CUDA device: allocator and NVML figures exist only on a GPU")
    st = cuda_memory_state(device, cuda)
    assert st is not None
    nv = _nvml_memory(st.device_index)
    used = None if nv is None else nv.used_bytes
    procs = nvml_processes(st.device_index)
    pid = os.getpid() if pid is None else pid
    mine = others = maybe = None
    if procs is not None:
        mine_list = [b for p, b in procs if p == pid]
        mine = mine_list[0] if mine_list else None
        maybe = _this_process_elsewhere(procs, pid, st.reserved_bytes)
        other = [b for p, b in procs if p != pid and (maybe is None or p != maybe[0])]
        others = sum(b for b in other if b is not None) if other else 0
    own = mine if maybe is None else maybe[1]
    rows: list[tuple[str, int | None, str]] = [
        ("card total", st.total_bytes, "the GPU's memory as CUDA reports it (cudaMemGetInfo)"),
        ("NVML used", used, "what nvidia-smi shows as used: every process, contexts included"
         + ("" if nv is None or nv.version == 2 else "; a pre-R510 driver adds its own reserve to it")),
        ("driver reserve (NVML)", None if nv is None else nv.reserved_bytes,
         "kept by the driver and firmware, never usable by processes; nvidia-smi -q lists it as Reserved"),
        ("this process (NVML)", mine, "NVML's figure for this process (missing when PIDs differ, e.g. containers)"),
        *([] if maybe is None else [(
            "another PID, possibly this process (NVML)", maybe[1],
            f"PID {maybe[0]}: another PID (possibly this process, seen by its host PID inside a container): "
            f"{maybe[2]}; not counted with the other processes")]),
        ("other processes (NVML)", others, "memory you cannot use; close them or pick another GPU"),
        ("PyTorch reserved", st.reserved_bytes, "held by the caching allocator: live tensors + cached blocks"),
        ("PyTorch allocated", st.allocated_bytes, "live tensors (torch.cuda.memory_allocated)"),
        ("cached (reserved - allocated)", st.cached_bytes,
         "free for this process's next tensors; torch.cuda.empty_cache() returns it to others"),
        ("fragmented (inactive split)", st.inactive_split_bytes,
         "cached blocks cut up by earlier allocations; expandable_segments reduces it"),
        ("CUDA context + non-PyTorch", None if own is None else own - st.reserved_bytes,
         "this process's NVML figure minus reserved: context, kernels, cuBLAS/cuDNN/NCCL buffers"
         + ("" if maybe is None else f" (PID {maybe[0]}'s figure, if it is this process)")),
        ("driver free", st.free_bytes, "cudaMemGetInfo: free for any process"),
    ]
    note = f"cuda:{st.device_index}" + ("; NVML unavailable: its rows are missing" if nv is None
                                         else f"; {nv.note}" if nv.note else "")
    if maybe is not None:
        note += (f"; NVML does not list this process's PID {pid}: PID {maybe[0]} is possibly this process, seen by "
                 "its host PID inside a container")
    return MemoryReconciliation(True, note, tuple(rows), st)


@dataclass(frozen=True)
class MemorySnapshot:
    """A CUDA allocator snapshot (allocation history with stack traces) saved for PyTorch's memory viewer."""

    available: bool
    path: str | None
    note: str
    seconds: float = 0.0
    result: Any = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:
        if not self.available:
            return f"MemorySnapshot: {self.note}"
        return (f"MemorySnapshot: {self.path} ({self.seconds:.1f} s recorded). Open {MEMORY_VIZ_URL} and drop the "
                "file on it (it runs locally; nothing is uploaded): Active Memory Timeline shows every live tensor "
                "over time with the stack that allocated it.")

    def _repr_html_(self) -> str:
        import html

        return f"<div>{html.escape(repr(self))}</div>"


def capture_memory_history(fn: Callable[..., Any], *args: Any, path: str | os.PathLike[str] | None = None,
                           max_entries: int = 100_000, cuda: Any = None, **kwargs: Any) -> MemorySnapshot:
    """Run ``fn(*args, **kwargs)`` while the CUDA caching allocator records its history
    (``torch.cuda.memory._record_memory_history``), then dump a snapshot file for
    https://pytorch.org/memory_viz (``torch.cuda.memory._dump_snapshot``) and stop recording - also when
    ``fn`` raises, e.g. an out-of-memory error, which is when the snapshot is most useful (the error is
    re-raised with a note naming the file).

    ``max_entries`` bounds the ring buffer of events (each costs a few KB). Without CUDA, ``fn`` still runs
    and the result says no snapshot was possible.

    Example:
        >>> import torch, gpulab as gl
        >>> snap = gl.memory.capture_memory_history(lambda: torch.ones(4))
        >>> snap.available == torch.cuda.is_available()
        True
    """
    if not callable(fn):
        raise TypeError(f"capture_memory_history needs a callable, got {type(fn).__name__}")
    whole("max_entries", max_entries)
    cuda = _cuda(cuda)
    if cuda is None or not cuda.is_available():
        return MemorySnapshot(False, None, "no CUDA device: allocator snapshots record GPU memory only (fn ran "
                              "normally)", result=fn(*args, **kwargs))
    if path is None:
        d = Path(tempfile.gettempdir()) / "gpulab-memory"
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"snapshot-{os.getpid()}-{time.time_ns()}.pickle"
    path = str(path)
    cuda.memory._record_memory_history(max_entries=max_entries)
    t0 = time.perf_counter()
    result, error = None, None
    try:
        result = fn(*args, **kwargs)
    except BaseException as e:  # dump what led to it, then re-raise
        error = e
    finally:
        try:
            cuda.memory._dump_snapshot(path)
        finally:
            cuda.memory._record_memory_history(enabled=None)
    if error is not None:
        if hasattr(error, "add_note"):
            error.add_note(f"gpulab: CUDA memory snapshot saved to {path} - open it at {MEMORY_VIZ_URL}")
        raise error
    return MemorySnapshot(True, path, "recorded", time.perf_counter() - t0, result)
