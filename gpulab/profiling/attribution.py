"""Where a profiled step's time goes, before any roofline: by phase (data, forward, backward, optimizer, the rest)
and by operator class (matmuls and convolutions, elementwise, reductions and norms, optimizer updates, copies and
casts, communication, host syncs, kernel launches), with the time outside every operator (Python between them).

On a CPU the classes share the host's *self* time of the operators in the profiled steps (each microsecond counted
once, in the innermost operator running it); what no operator covers is "outside any operator". On a GPU they
share the device's time (each kernel, copy and memset once, classified by its name), and the device's idle time is
its own row. An operator inside the optimizer's range (``Optimizer.step#Adam.step``, which torch's optimizers open
themselves, or a ``gl.phase("optimizer")``) counts as an optimizer update whatever its name; inside the data phase,
as data loading.

On a GPU the phases are device time too (:func:`device_phases`): the host runs ahead of the device, so a host
range says how long the CPU took to queue a phase's work, not how long the GPU ran it. kineto copies every
``record_function`` range onto the device timeline (``gpu_user_annotation``) from the first to the last kernel
launched inside it; each kernel, copy and memset counts in the phase of the innermost such copy that holds it,
else in the phase of the host operator that launched it, else in ``other``; the device's idle time is the
:data:`DEVICE_IDLE` row, so the phases still add up to the steps' wall time.

Example:
    >>> from gpulab.profiling.attribution import op_class
    >>> op_class("aten::addmm"), op_class("aten::relu"), op_class("aten::_foreach_add_"), op_class("aten::item")
    ('matmul/conv', 'elementwise', 'optimizer updates', 'host syncs')
    >>> op_class("ampere_sgemm_128x64_nn", device=True), op_class("Memcpy HtoD (Pageable -> Device)", device=True)
    ('matmul/conv', 'copies/casts')
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

from .._format import fmt_seconds, html_table, text_table
from .events import PHASES

__all__ = ["CLASSES", "OUTSIDE", "DEVICE_IDLE", "Attribution", "op_class", "attribute_events", "device_phases",
           "device_work_phases", "launching_ranges"]

OUTSIDE = "outside any operator"
DEVICE_IDLE = "device idle"
# the operator classes, each with the (lower-case) names that place an operator or a kernel in it, tried in this
# order: an ``aten::`` name matches itself and its in-place form (``aten::add`` and ``aten::add_``), or every name
# it begins when it ends in ``*``; any other text matches a kernel or runtime call whose name contains it. An
# operator none of them names is elementwise (add, mul, relu, where, ...)
CLASSES: dict[str, tuple[str, ...]] = {
    "host syncs": ("aten::item", "aten::_local_scalar_dense", "cudastreamsynchronize", "cudadevicesynchronize",
                   "cudaeventsynchronize"),
    "communication": ("c10d::", "nccl", "gloo", "allreduce", "all_reduce", "all_gather", "allgather",
                      "reduce_scatter", "broadcast_", "record_param_comms"),
    "optimizer updates": ("aten::_foreach_*", "aten::_fused_adam*", "aten::_fused_sgd*", "aten::_fused_adagrad*",
                          "multi_tensor_apply", "fused_adam", "fusedadam", "fused_sgd"),
    "matmul/conv": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::addmv",
                    "aten::mv", "aten::dot", "aten::conv*", "aten::_convolution*", "aten::convolution*",
                    "aten::mkldnn_conv*", "aten::cudnn_conv*", "aten::_scaled_dot_product*", "aten::_scaled_mm",
                    "aten::_int_mm", "aten::mkldnn_linear", "aten::_mkldnn_*", "aten::linear", "gemm", "gemv", "cutlass", "xmma",
                    "cublas", "conv2d", "convolve", "winograd", "implicit_convolve", "flash", "fmha", "wgmma", "hmma"),
    "copies/casts": ("aten::copy_", "aten::_to_copy", "aten::to", "aten::clone", "aten::contiguous",
                     "aten::_copy_from", "aten::cat", "aten::stack", "aten::index_select", "aten::gather",
                     "aten::fill_", "aten::zero_", "memcpy", "memset", "copy_kernel", "cat_", "catarray"),
    "reductions/norms": ("aten::sum", "aten::mean", "aten::max", "aten::min", "aten::amax", "aten::amin",
                         "aten::argmax", "aten::argmin", "aten::softmax", "aten::_softmax*", "aten::log_softmax",
                         "aten::_log_softmax*", "aten::layer_norm", "aten::native_layer_norm*", "aten::batch_norm",
                         "aten::native_batch_norm*", "aten::_batch_norm*", "aten::group_norm", "aten::native_group_norm",
                         "aten::nll_loss*", "aten::cross_entropy*", "aten::mse_loss*", "aten::norm",
                         "aten::linalg_vector_norm", "aten::var", "aten::std", "aten::cumsum", "aten::topk",
                         "aten::sort", "aten::rms_norm", "aten::_fused_rms_norm", "reduce", "softmax", "norm_kernel",
                         "layer_norm", "batch_norm", "rmsnorm", "welford", "nll_loss"),
    "kernel launches": ("cudalaunchkernel", "culaunchkernel", "cudalaunchkernelexc", "cudamemcpyasync",
                        "cudamemsetasync", "cudagraphlaunch"),
}
_VIEWS = ("aten::view", "aten::reshape", "aten::_reshape_alias", "aten::t", "aten::transpose", "aten::permute",
          "aten::expand", "aten::as_strided", "aten::detach", "aten::alias", "aten::slice", "aten::select",
          "aten::unsqueeze", "aten::squeeze", "aten::flatten", "aten::unflatten", "aten::empty", "aten::empty_like",
          "aten::empty_strided", "aten::resize_", "aten::lift_fresh", "aten::result_type", "aten::numpy_t",
          "aten::split", "aten::chunk", "aten::narrow", "aten::unbind")
VIEWS = "views/allocations"


def _matches(low: str, f: str) -> bool:
    if not f.startswith("aten::"):
        return f in low
    if f.endswith("*"):
        return low.startswith(f[:-1])
    return low == f or low == f + "_"


def op_class(name: str, *, device: bool = False) -> str:
    """The class of an operator (``aten::addmm``) or, with ``device``, of a kernel, copy or memset by its name."""
    low = name.lower()
    if not device and (low in _VIEWS or low.rstrip("_") in _VIEWS):
        return VIEWS
    for cls, fragments in CLASSES.items():
        if device and cls in ("host syncs", "kernel launches"):
            continue
        if any(_matches(low, f) for f in fragments):
            return cls
    return "elementwise"


@dataclass(frozen=True)
class Attribution:
    """A profiled step's time, summed over the profiled steps: ``phases`` (seconds per phase, ``other`` being what
    no phase range covers; on a GPU, device time with :data:`DEVICE_IDLE` as its own row) and ``classes`` (seconds
    per operator class, with :data:`OUTSIDE` on a CPU or :data:`DEVICE_IDLE` on a GPU), both out of ``total_s``,
    the steps' wall time. ``basis`` says whose time they share."""

    total_s: float
    steps: int
    basis: str
    phases: tuple[tuple[str, float], ...]
    classes: tuple[tuple[str, float], ...]

    def phase_share(self, name: str) -> float:
        return dict(self.phases).get(name, 0.0) / self.total_s if self.total_s > 0 else 0.0

    def share(self, name: str) -> float:
        """Share of the profiled time in operator class ``name`` (or :data:`OUTSIDE`, :data:`DEVICE_IDLE`)."""
        return dict(self.classes).get(name, 0.0) / self.total_s if self.total_s > 0 else 0.0

    @property
    def largest(self) -> tuple[str, float]:
        """(class, share) of the largest operator class, or of the time outside every operator."""
        name, seconds = max(self.classes, key=lambda c: c[1], default=("nothing", 0.0))
        return name, (seconds / self.total_s if self.total_s > 0 else 0.0)

    @property
    def largest_phase(self) -> tuple[str, float]:
        """(phase, share) of the largest phase other than ``other`` (time no phase range covers) and the device's
        idle time."""
        named = [(p, s) for p, s in self.phases if p not in ("other", DEVICE_IDLE) and s > 0]
        name, seconds = max(named, key=lambda c: c[1], default=("other", dict(self.phases).get("other", 0.0)))
        return name, (seconds / self.total_s if self.total_s > 0 else 0.0)

    def summary(self, most: int = 4) -> str:
        """One line: the largest classes with their shares, then the phases."""
        ranked = sorted(self.classes, key=lambda c: c[1], reverse=True)
        top = ", ".join(f"{n} {s / self.total_s:.0%}" for n, s in ranked[:most] if s > 0) if self.total_s else ""
        ph = ", ".join(f"{n} {s / self.total_s:.0%}" for n, s in self.phases if s > 0) if self.total_s else ""
        return f"{top} ({self.basis}); by phase: {ph}"

    def _rows(self) -> list[tuple[str, str, str, str]]:
        per = lambda s: fmt_seconds(s / max(self.steps, 1))        # noqa: E731
        share = lambda s: f"{s / self.total_s:.0%}" if self.total_s > 0 else "N/A"   # noqa: E731
        rows = [("phase", n, per(s), share(s)) for n, s in self.phases]
        rows += [("operators", n, per(s), share(s)) for n, s in sorted(self.classes, key=lambda c: c[1], reverse=True)
                 if s > 0]
        return rows

    def __repr__(self) -> str:
        return (f"Where the step's time goes ({self.basis}, per step)\n"
                + text_table(("by", "what", "time", "share"), self._rows()))

    def _repr_html_(self) -> str:
        return html_table(("by", "what", "time", "share"), self._rows(),
                          caption=f"Where the step's time goes ({self.basis}, per step)")


def attribute_events(events: Iterable[Any], windows: list[tuple[float, float]], phase_of: Any, is_device: Any,
                     interval_s: Any, device_busy_s: float | None,
                     work: list[tuple[float, float, str, str | None]] | None = None) -> dict[str, float]:
    """Seconds per operator class over the profiled step ``windows``: host self time of every operator on a CPU
    (an operator inside the optimizer's range is an optimizer update, inside the data phase data loading), or,
    when device events were recorded, device time per kernel class plus :data:`DEVICE_IDLE` (a kernel in the
    optimizer's phase, by :func:`device_work_phases`, is an optimizer update, in the data phase data loading; the
    device copies of the ranges are no work); the host's uncovered time is :data:`OUTSIDE` on a CPU. ``work``: the
    events' :func:`device_work_phases` where the caller has them already."""
    events = list(events)
    total = sum(b - a for a, b in windows)
    out: dict[str, float] = {}
    if device_busy_s is not None and any(is_device(e) for e in events):
        for a, b, name, ph in work if work is not None else device_work_phases(events, phase_of, is_device,
                                                                                interval_s):
            if b > a:
                cls = ("optimizer updates" if ph == "optimizer" else "data loading" if ph == "data"
                       else op_class(name, device=True))
                out[cls] = out.get(cls, 0.0) + (b - a)
        out[DEVICE_IDLE] = max(0.0, total - device_busy_s)
        return out
    for e in events:
        name = e.name
        if is_device(e) or name.startswith("ProfilerStep") or getattr(e, "is_user_annotation", False):
            continue
        if phase_of(name) is not None:            # a phase range (record_function): its time is its children's
            continue
        self_s = max(0.0, getattr(e, "self_cpu_time_total", 0.0) / 1e6)
        if self_s <= 0:
            continue
        cls, parent = None, e.cpu_parent
        while parent is not None and cls is None:
            ph = phase_of(parent.name)
            cls = "optimizer updates" if ph == "optimizer" else "data loading" if ph == "data" else None
            parent = parent.cpu_parent
        cls = cls or op_class(name)
        out[cls] = out.get(cls, 0.0) + self_s
    out[OUTSIDE] = max(0.0, total - sum(out.values()))
    return out


_EPS_S = 1e-9     # a kineto range copy starts and ends exactly at a kernel's timestamps (ns): allow rounding only


def _stream(e: Any) -> tuple[Any, Any]:
    return getattr(e, "device_index", None), getattr(e, "device_resource_id", None)


def device_work_phases(events: Iterable[Any], phase_of: Any, is_device: Any,
                       interval_s: Any) -> list[tuple[float, float, str, str | None]]:
    """``(start_s, end_s, name, phase)`` of each kernel, copy and memset among profiler ``events``.

    Its phase is that of the innermost device-side range copy (kineto's ``gpu_user_annotation``: a device event with
    ``is_user_annotation``, named as its host range) on the same stream whose interval holds it and whose name
    ``phase_of`` maps to a phase (``forward``, ``Optimizer.step#Adam.step``; ``ProfilerStep*`` and other ranges
    are passed over). kineto ties a kernel to the innermost ``record_function`` range open on the thread that
    launched it, so the kernels the autograd engine launches from its own device thread have none: those, and
    any kernel no phase copy holds, take the phase of the host operator that launched it (its
    ``linked_correlation_id``, then the host ranges around it: ``autograd::engine::evaluate_function`` is the
    backward phase); otherwise the phase is None. Older torch builds keep no ``linked_correlation_id`` on their
    events: there the launching operator is found by thread and time, as :func:`launching_ranges` does.

    Example:
        >>> from types import SimpleNamespace as E
        >>> ev = [E(name="forward", t=(0, 10), dev=True, is_user_annotation=True),
        ...       E(name="gemm", t=(1, 9), dev=True, is_user_annotation=False),
        ...       E(name="gemm", t=(12, 15), dev=True, is_user_annotation=False)]
        >>> from gpulab.profiling.events import _phase_of
        >>> [p for *_, p in device_work_phases(ev, _phase_of, lambda e: e.dev, lambda e: e.t)]
        ['forward', None]
    """
    events = list(events)
    ranges: list[tuple[float, float, tuple[Any, Any], str]] = []
    work: list[tuple[float, float, Any]] = []
    host: dict[Any, Any] = {}
    for e in events:
        if not is_device(e):
            # the operators and ranges Python opened (runtime calls carry CUPTI's correlation ids, not theirs)
            if (not _is_runtime_call(e) and not getattr(e, "linked_correlation_id", 0)
                    and getattr(e, "id", None) is not None):
                host.setdefault(e.id, e)
            continue
        a, b = interval_s(e)
        if getattr(e, "is_user_annotation", False):
            ph = phase_of(e.name)
            if ph is not None:
                ranges.append((a, b, _stream(e), ph))
        else:
            work.append((a, b, e))
    ranges.sort(key=lambda r: r[0])
    work.sort(key=lambda w: w[0])
    unlinked = [e for _, _, e in work if host.get(getattr(e, "linked_correlation_id", 0) or None) is None]
    around = launching_ranges(events, unlinked, is_device, interval_s) if unlinked else {}
    out: list[tuple[float, float, str, str | None]] = []
    active: list[tuple[float, float, tuple[Any, Any], str]] = []
    j = 0
    for a, b, e in work:
        while j < len(ranges) and ranges[j][0] <= a + _EPS_S:
            active.append(ranges[j])
            j += 1
        active = [r for r in active if r[1] >= a - _EPS_S]     # kernels come in start order: an ended range is done
        key = _stream(e)
        holding = [r for r in active if r[1] >= b - _EPS_S and r[2] == key]
        ph = max(holding, key=lambda r: (r[0], -r[1]))[3] if holding else None
        launcher = host.get(getattr(e, "linked_correlation_id", 0) or None)
        while ph is None and launcher is not None:
            ph = phase_of(launcher.name)
            launcher = getattr(launcher, "cpu_parent", None)
        for host_range in around.get(id(e), ()) if ph is None else ():
            ph = phase_of(host_range.name)
            if ph is not None:
                break
        out.append((a, b, e.name, ph))
    return out


# a CUDA (or HIP) runtime or driver call: cudaLaunchKernel, cuLaunchKernelEx, cudaMemcpyAsync, hipLaunchKernel, ...
_RUNTIME_NAME = re.compile(r"^(cuda|cu|hip|hipExt)[A-Z]\w*$")


def _is_runtime_call(e: Any) -> bool:
    """A host-side runtime or driver call kineto recorded (activity ``cuda_runtime``, ``cuda_driver``,
    ``xpu_runtime``, ...; by its name where torch keeps no activity type). Its ``id`` is CUPTI's correlation id,
    the same as that of the kernel, copy or memset it launched."""
    activity = getattr(e, "activity_type", None)
    if isinstance(activity, str) and activity:
        return activity.endswith(("_runtime", "_driver"))
    return bool(_RUNTIME_NAME.match(str(getattr(e, "name", ""))))


def launching_ranges(events: Iterable[Any], kernels: Iterable[Any], is_device: Any,
                     interval_s: Any) -> dict[int, list[Any]]:
    """For each of ``kernels`` (device events), the host operators and ranges open around the runtime call that
    launched it, innermost first, keyed by ``id(kernel)``: found by thread and time, without the
    ``linked_correlation_id`` that older torch builds do not keep on their events.

    The runtime call (``cudaLaunchKernel``, ``cudaMemcpyAsync``, ...) is the host event whose ``id`` is the kernel's
    (both are CUPTI's correlation id); torch puts it on the thread of the operator that made it. The operators
    and ranges on that thread whose interval holds the call's start are the ones that launched the kernel. A
    kernel whose runtime call was not recorded gets none.

    Example:
        >>> from types import SimpleNamespace as E
        >>> mm = E(name="aten::mm", thread=2, t=(10, 20), dev=False, id=7)
        >>> node = E(name="autograd::engine::evaluate_function: MmBackward0", thread=2, t=(5, 30), dev=False, id=6)
        >>> call = E(name="cudaLaunchKernel", thread=2, t=(12, 13), dev=False, id=501)
        >>> k = E(name="sgemm", thread=2, t=(40, 60), dev=True, id=501)
        >>> [r.name for r in launching_ranges([node, mm, call, k], [k], lambda e: e.dev, lambda e: e.t)[id(k)]]
        ['aten::mm', 'autograd::engine::evaluate_function: MmBackward0']
    """
    calls: dict[Any, Any] = {}
    threads: dict[Any, list[tuple[float, float, Any]]] = {}
    for e in events:
        if is_device(e) or getattr(e, "is_async", False) or getattr(e, "is_python_function", False):
            continue                 # Python frames (with_stack) are named by their file: no range of a phase
        if _is_runtime_call(e):
            calls.setdefault(getattr(e, "id", None), e)
        else:
            a, b = interval_s(e)
            threads.setdefault(getattr(e, "thread", None), []).append((a, b, e))
    asks: dict[Any, list[tuple[float, Any]]] = {}
    for k in kernels:
        call = calls.get(getattr(k, "id", None))
        if call is not None:
            asks.setdefault(getattr(call, "thread", None), []).append((interval_s(call)[0], k))
    out: dict[int, list[Any]] = {}
    for thread, queries in asks.items():
        spans = sorted(threads.get(thread, ()), key=lambda s: (s[0], -s[1]))
        stack: list[tuple[float, float, Any]] = []
        i = 0
        for t, k in sorted(queries, key=lambda q: q[0]):
            while i < len(spans) and spans[i][0] <= t:
                while stack and stack[-1][1] < spans[i][0]:     # host ranges on one thread nest: an ended one is done
                    stack.pop()
                stack.append(spans[i])
                i += 1
            while stack and stack[-1][1] < t:
                stack.pop()
            out[id(k)] = [s[2] for s in reversed(stack) if s[1] >= t]
    return out


def device_phases(events: Iterable[Any], windows: list[tuple[float, float]], phase_of: Any, is_device: Any,
                  interval_s: Any, work: list[tuple[float, float, str, str | None]] | None = None) -> dict[str, float]:
    """The device's time over the profiled step ``windows`` per phase (data, forward, backward, optimizer;
    ``other`` for kernels in no phase, by :func:`device_work_phases`), with :data:`DEVICE_IDLE` for the time no
    kernel, copy or memset runs: the rows add up to the windows' wall time. Concurrent kernels (several streams)
    share the time they overlap equally, so each moment of the device's busy time counts once. ``work``: the
    events' :func:`device_work_phases` where the caller has them already.

    Example:
        >>> from types import SimpleNamespace as E
        >>> from gpulab.profiling.events import _phase_of
        >>> ev = [E(name="Optimizer.step#Adam.step", t=(4, 10), dev=True, is_user_annotation=True),
        ...       E(name="gemm", t=(0, 3), dev=True, is_user_annotation=False),
        ...       E(name="add_", t=(4, 10), dev=True, is_user_annotation=False)]
        >>> device_phases(ev, [(0, 12)], _phase_of, lambda e: e.dev, lambda e: e.t)
        {'data': 0.0, 'forward': 0.0, 'backward': 0.0, 'optimizer': 6.0, 'other': 3.0, 'device idle': 3.0}
    """
    out = {p: 0.0 for p in (*PHASES, "other")}
    marks: list[tuple[float, int, str]] = []
    if work is None:
        work = device_work_phases(events, phase_of, is_device, interval_s)
    for a, b, _, ph in work:
        for lo, hi in windows:
            x, y = max(a, lo), min(b, hi)
            if y > x:
                marks += [(x, 1, ph or "other"), (y, -1, ph or "other")]
    marks.sort(key=lambda m: (m[0], m[1]))
    running: dict[str, int] = {}
    n, prev = 0, 0.0
    for t, d, ph in marks:
        if n and t > prev:
            for p, c in running.items():
                if c:
                    out[p] += (t - prev) * c / n
        running[ph] = running.get(ph, 0) + d
        n += d
        prev = t
    out[DEVICE_IDLE] = max(0.0, sum(b - a for a, b in windows) - sum(out.values()))
    return out
