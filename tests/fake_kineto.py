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
"""
from __future__ import annotations

import inspect

from torch.autograd import DeviceType
from torch.autograd.profiler_util import EventList, FunctionEvent as _RealEvent

# torch < 2.6 has no activity_type field: its events carry no such attribute, and the fakes must not either
_HAS_ACTIVITY = "activity_type" in inspect.signature(_RealEvent.__init__).parameters


def FunctionEvent(*args, activity_type: str | None = None, **kwargs) -> _RealEvent:   # noqa: N802 - the real class
    """A real ``FunctionEvent``, given the kineto activity only where the installed torch records it."""
    if _HAS_ACTIVITY and activity_type is not None:
        kwargs["activity_type"] = activity_type
    return _RealEvent(*args, **kwargs)

KW = dict(use_device="cuda", stack=[], input_shapes=[])
HOST_THREAD = 1
STREAM = 7


def host_step(id: int, n: int, start_us: float, end_us: float) -> FunctionEvent:
    """The host's ``ProfilerStep#n`` range."""
    return FunctionEvent(id, "ProfilerStep*", HOST_THREAD, start_us, end_us, trace_name=f"ProfilerStep#{n}",
                         is_user_annotation=True, activity_type="user_annotation", **KW)


def device_step(host: FunctionEvent, start_us: float, end_us: float) -> FunctionEvent:
    """kineto's copy of a host step range on the GPU timeline (from its first to its last kernel)."""
    return device_annotation(host, start_us, end_us)


def annotation(id: int, name: str, start_us: float, end_us: float) -> FunctionEvent:
    """A ``record_function`` / ``gl.phase`` range on the host."""
    return FunctionEvent(id, name, HOST_THREAD, start_us, end_us, trace_name=name, is_user_annotation=True,
                         activity_type="user_annotation", **KW)


def device_annotation(host: FunctionEvent, start_us: float, end_us: float) -> FunctionEvent:
    """kineto's ``gpu_user_annotation`` copy of the host range ``host``."""
    return FunctionEvent(host.id, host.name, STREAM, start_us, end_us, trace_name=host.trace_name,
                         device_type=DeviceType.CUDA, device_resource_id=STREAM, is_user_annotation=True,
                         activity_type="gpu_user_annotation", **KW)


def op(id: int, name: str, start_us: float, end_us: float) -> FunctionEvent:
    """An operator call on the host."""
    return FunctionEvent(id, name, HOST_THREAD, start_us, end_us, trace_name=name, activity_type="cpu_op", **KW)


def kernel(id: int, name: str, start_us: float, end_us: float, launcher: FunctionEvent | None = None) -> FunctionEvent:
    """A kernel on the device; ``launcher`` (the host operator) gets it appended, as the post-processing does."""
    if launcher is not None:
        launcher.append_kernel(name, 0, end_us - start_us)
    return FunctionEvent(id, name, STREAM, start_us, end_us, trace_name=name, device_type=DeviceType.CUDA,
                         device_resource_id=STREAM, activity_type="kernel", **KW)


def event_list(events: list[FunctionEvent]) -> EventList:
    """``prof.events()``: the events with their host tree built, as torch.profiler hands them out."""
    el = EventList(events, use_device="cuda")
    el._build_tree()
    return el
