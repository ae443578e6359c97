"""Where a profiled step's time goes, before any roofline: by phase (data, forward, backward, optimizer, the rest)
and by operator class (matmuls and convolutions, elementwise, reductions and norms, optimizer updates, copies and
casts, communication, host syncs, kernel launches), with the time outside every operator (Python between them).

On a CPU the classes share the host's *self* time of the operators in the profiled steps (each microsecond counted
once, in the innermost operator running it); what no operator covers is "outside any operator". On a GPU they
share the device's time (each kernel, copy and memset once, classified by its name), and the device's idle time is
its own row. An operator inside the optimizer's range (``Optimizer.step#Adam.step``, which torch's optimizers open
themselves, or a ``gl.phase("optimizer")``) counts as an optimizer update whatever its name; inside the data phase,
as data loading.

Example:
    >>> from gpulab.profiling.attribution import op_class
    >>> op_class("aten::addmm"), op_class("aten::relu"), op_class("aten::_foreach_add_"), op_class("aten::item")
    ('matmul/conv', 'elementwise', 'optimizer updates', 'host syncs')
    >>> op_class("ampere_sgemm_128x64_nn", device=True), op_class("Memcpy HtoD (Pageable -> Device)", device=True)
    ('matmul/conv', 'copies/casts')
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from .._format import fmt_seconds, html_table, text_table

__all__ = ["CLASSES", "OUTSIDE", "DEVICE_IDLE", "Attribution", "op_class", "attribute_events"]

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
    no phase range covers) and ``classes`` (seconds per operator class, with :data:`OUTSIDE` on a CPU or
    :data:`DEVICE_IDLE` on a GPU), both out of ``total_s``. ``basis`` says whose time the classes share."""

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
        """(phase, share) of the largest phase other than ``other`` (time no phase range covers)."""
        named = [(p, s) for p, s in self.phases if p != "other" and s > 0]
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
                     interval_s: Any, device_busy_s: float | None) -> dict[str, float]:
    """Seconds per operator class over the profiled step ``windows``: host self time of every operator on a CPU
    (an operator inside the optimizer's range is an optimizer update, inside the data phase data loading), or,
    when device events were recorded, device time per kernel class plus :data:`DEVICE_IDLE`; the host's
    uncovered time is :data:`OUTSIDE` on a CPU."""
    events = list(events)
    total = sum(b - a for a, b in windows)
    device = [e for e in events if is_device(e)]
    out: dict[str, float] = {}
    if device and device_busy_s is not None:
        for e in device:
            a, b = interval_s(e)
            if b > a:
                cls = op_class(e.name, device=True)
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
