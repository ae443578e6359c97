"""Profiler events of a CUDA run, built as torch.profiler hands them out: real ``FunctionEvent`` objects with the
fields ``torch/autograd/profiler.py`` (``_parse_kineto_results``) copies from each kineto event.

What a CUDA step looks like there:

- on the host, ``prof.step()`` opens a ``record_function`` range ``ProfilerStep#N``: name ``ProfilerStep*`` (the
  wildcard ``_rewrite_name`` puts on every step), ``trace_name`` ``ProfilerStep#N``, device type CPU,
  ``is_user_annotation`` True, activity ``user_annotation``; a ``record_function``/``gl.phase`` range is the same
  under its own name; operators are ``cpu_op`` rows whose launched kernels are appended to them;
- on the device, kineto copies every annotated range, the step ranges included, onto the GPU timeline
  (``GPU_USER_ANNOTATION``): the same name, device type CUDA, ``is_user_annotation`` True, activity
  ``gpu_user_annotation``, the host range's correlation id, spanning its first to last device operation on the
  stream; each kernel is a CUDA row of activity ``kernel``.

Which range a kernel belongs to: a ``record_function`` range (``RecordScope::USER_SCOPE``) pushes its correlation id
as CUPTI's *user* external correlation on the thread that opens it, and kineto extends the range's device copy over
each kernel launched under it (``GenericActivityProfiler::handleGpuActivity`` -> ``GpuUserEventMap``), one copy per
stream. So a kernel extends only the *innermost* range open on its launching thread: a ``ProfilerStep#N`` copy spans
only the kernels launched outside every other range of the step, and the kernels the autograd engine launches from
its own device thread extend no copy (``gl.phase("backward")``'s copy spans only what ``loss.backward()`` launches
on the calling thread, the gradient seed). A kernel's ``linked_correlation_id`` is the correlation id (the
``FunctionEvent`` id) of the host operator that launched it: ``_parse_kineto_results`` appends the kernel to it.

The launch itself is a host event too: the CUDA runtime call (``cudaLaunchKernel``, ``cudaMemcpyAsync``, activity
``cuda_runtime``) whose ``id`` is CUPTI's correlation id, the same as its kernel's, and whose thread torch sets to the
launching operator's (``collection.cpp`` ``setKinetoTID``; ``_parse_kineto_results``: ``f_evt.thread = fe.thread``).
older torch builds keep no ``linked_correlation_id`` on their events (their ``FunctionEvent`` has no such attribute):
:func:`older_torch` hands the same events out that way, so the launching operator can only be found by the runtime
call's thread and time.
"""
from __future__ import annotations

import inspect

from torch.autograd import DeviceType
from torch.autograd.profiler_util import EventList, FunctionEvent as _RealEvent

# torch < 2.6 has no activity_type field: its events carry no such attribute, and the fakes must not either
_HAS_ACTIVITY = "activity_type" in inspect.signature(_RealEvent.__init__).parameters
# ... nor before 2.6 the launching operator's correlation id on a kernel
_HAS_LINKED = "linked_correlation_id" in inspect.signature(_RealEvent.__init__).parameters


def FunctionEvent(*args, activity_type: str | None = None, linked_correlation_id: int = 0,   # noqa: N802
                  **kwargs) -> _RealEvent:
    """A real ``FunctionEvent``, given the kineto activity and the launching operator's correlation id only where
    the installed torch records them."""
    if _HAS_ACTIVITY and activity_type is not None:
        kwargs["activity_type"] = activity_type
    if _HAS_LINKED and linked_correlation_id:
        kwargs["linked_correlation_id"] = linked_correlation_id
    return _RealEvent(*args, **kwargs)

KW = dict(use_device="cuda", stack=[], input_shapes=[])
HOST_THREAD = 1
AUTOGRAD_THREAD = 2     # the autograd engine's thread for the CUDA device: backward kernels are launched there
STREAM = 7


def host_step(id: int, n: int, start_us: float, end_us: float) -> FunctionEvent:
    """The host's ``ProfilerStep#n`` range."""
    return FunctionEvent(id, "ProfilerStep*", HOST_THREAD, start_us, end_us, trace_name=f"ProfilerStep#{n}",
                         is_user_annotation=True, activity_type="user_annotation", **KW)


def device_step(host: FunctionEvent, start_us: float, end_us: float) -> FunctionEvent:
    """kineto's copy of a host step range on the GPU timeline (from its first to its last kernel)."""
    return device_annotation(host, start_us, end_us)


def annotation(id: int, name: str, start_us: float, end_us: float, thread: int = HOST_THREAD) -> FunctionEvent:
    """A ``record_function`` / ``gl.phase`` range on the host (``Optimizer.step#Adam.step`` is one too)."""
    return FunctionEvent(id, name, thread, start_us, end_us, trace_name=name, is_user_annotation=True,
                         activity_type="user_annotation", **KW)


def engine_range(id: int, node: str, start_us: float, end_us: float) -> FunctionEvent:
    """The autograd engine's ``autograd::engine::evaluate_function: <node>`` range on its device thread: a host
    range of ``RecordScope::BACKWARD_FUNCTION``, not a user annotation (no device copy), recorded as a ``cpu_op``."""
    name = f"autograd::engine::evaluate_function: {node}"
    return FunctionEvent(id, name, AUTOGRAD_THREAD, start_us, end_us, trace_name=name, activity_type="cpu_op", **KW)


def device_annotation(host: FunctionEvent, start_us: float, end_us: float, stream: int = STREAM) -> FunctionEvent:
    """kineto's ``gpu_user_annotation`` copy of the host range ``host`` on ``stream`` (one copy per stream)."""
    return FunctionEvent(host.id, host.name, stream, start_us, end_us, trace_name=host.trace_name,
                         device_type=DeviceType.CUDA, device_resource_id=stream, is_user_annotation=True,
                         activity_type="gpu_user_annotation", **KW)


def op(id: int, name: str, start_us: float, end_us: float, thread: int = HOST_THREAD) -> FunctionEvent:
    """An operator call on the host (on the autograd engine's thread with ``thread=AUTOGRAD_THREAD``)."""
    return FunctionEvent(id, name, thread, start_us, end_us, trace_name=name, activity_type="cpu_op", **KW)


def kernel(id: int, name: str, start_us: float, end_us: float, launcher: FunctionEvent | None = None,
           stream: int = STREAM) -> FunctionEvent:
    """A kernel on the device; ``launcher`` (the host operator) gets it appended, as the post-processing does, and
    is its linked correlation. ``id`` stands for CUPTI's own correlation id of the launch."""
    if launcher is not None:
        launcher.append_kernel(name, 0, end_us - start_us)
    return FunctionEvent(id, name, stream, start_us, end_us, trace_name=name, device_type=DeviceType.CUDA,
                         device_resource_id=stream, activity_type="kernel",
                         linked_correlation_id=launcher.id if launcher is not None else 0, **KW)


def launch(id: int, launcher: FunctionEvent, start_us: float, end_us: float | None = None,
           name: str = "cudaLaunchKernel") -> FunctionEvent:
    """The runtime call that launched kernel ``id`` (CUPTI's correlation id, the kernel's own): a host event on the
    launching operator's thread, inside its interval, linked to it."""
    return FunctionEvent(id, name, launcher.thread, start_us, start_us + 2 if end_us is None else end_us,
                         trace_name=name, activity_type="cuda_runtime", linked_correlation_id=launcher.id, **KW)


def older_torch(events: list[FunctionEvent]) -> list[FunctionEvent]:
    """The same events as older torch builds hand them out: without the ``linked_correlation_id`` attribute."""
    for e in events:
        if hasattr(e, "linked_correlation_id"):
            del e.linked_correlation_id
    return events


def event_list(events: list[FunctionEvent]) -> EventList:
    """``prof.events()``: the events with their host tree built, as torch.profiler hands them out."""
    el = EventList(events, use_device="cuda")
    el._build_tree()
    return el
