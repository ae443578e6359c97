"""profile(): torch.profiler over a few steps of a function, summarised."""
from __future__ import annotations

import contextlib
import functools
import inspect
import os
import re
import statistics
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator

from .._check import checked, flag, whole
from .._dispatch import dispatch_mode
from .events import (LONG_OP_S, PHASES, SYNC_CALLS, OpStat, _counts_device_time, _device_attr, _interval_s, _is_device_event,
                     _phase_of, _torch, _union, check_device_events)
from .cores import cpu_snapshot, cpu_use, step_ceilings
from .summary import ProfileSummary

__all__ = ['profile']


# ----------------------------------------------------------------------------------------------
# profile()
def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip("-") or "profile"


def _cuda_allocs(torch: Any) -> int:
    """How many allocations the CUDA caching allocator has served so far (to tell whether code used the GPU).
    torch's memory_summary reads "allocation.*"; the memory_stats docs spell it "allocated.*": try both."""
    try:
        stats = torch.cuda.memory_stats()
        return int(stats.get("allocation.all.allocated", stats.get("allocated.all.allocated", 0)))
    except Exception:
        return 0


def _lazy_kind(fn: Any) -> str | None:
    """What calling ``fn`` makes instead of running it: "a generator function", "an async function", "an async
    generator function" (also behind ``functools.partial`` or an object's ``__call__``), or None."""
    target = fn
    while isinstance(target, functools.partial):
        target = target.func
    candidates = [target] if inspect.isroutine(target) or inspect.isclass(target) else \
        [target, getattr(type(target), "__call__", None)]
    for c in candidates:
        if c is None:
            continue
        if inspect.isasyncgenfunction(c):
            return "an async generator function"
        if inspect.iscoroutinefunction(c):
            return "an async function"
        if inspect.isgeneratorfunction(c):
            return "a generator function"
    return None


def refuse_lazy_fn(fn: Any, caller: str, name: str = "fn") -> None:
    """Refuse a generator or async function before any work: calling it runs none of its body."""
    kind = _lazy_kind(fn)
    if kind is None:
        return
    made, hint = {"a generator function": ("a generator", "lambda: list(f())"),
                  "an async function": ("a coroutine", "lambda: asyncio.run(f())"),
                  "an async generator function": ("an async generator", "a function that runs asyncio.run on a "
                                                  "coroutine iterating it to the end")}[kind]
    raise TypeError(f"{name} is {kind} ({getattr(fn, '__name__', type(fn).__name__)}): calling it only makes {made} "
                    f"and runs none of its body, so {caller} would measure no work. Pass a plain function that runs "
                    f"the step, e.g. {hint}, or drop the yield/async")


def refuse_lazy_result(out: Any, caller: str, name: str = "fn") -> None:
    """Refuse what a call of ``name`` returned when it is a generator or coroutine (no work ran); it is closed
    first, so Python does not warn that a coroutine was never awaited."""
    if inspect.isgenerator(out) or inspect.iscoroutine(out):
        what = "a generator" if inspect.isgenerator(out) else "a coroutine"
        out.close()
    elif inspect.isasyncgen(out):
        what = "an async generator"
    else:
        return
    raise TypeError(f"{name}() returned {what} ({type(out).__name__}) without running it, so {caller} would measure no "
                    f"work: make {name} run it (e.g. lambda: list(gen()) or lambda: asyncio.run(coro())) or return "
                    "its result")


def _meta_tensors(obj: Any, torch: Any) -> list[str]:
    """The meta-device parameters and buffers of a module, or a meta tensor itself, by name."""
    if isinstance(obj, torch.Tensor):
        return ["tensor"] if obj.is_meta else []
    if isinstance(obj, torch.nn.Module):
        named = [*obj.named_parameters(), *obj.named_buffers()]
        return [n for n, t in named if t.is_meta]
    return []


def _refuse_meta_fn(fn: Any, torch: Any) -> None:
    """Refuse a model, or a function whose closure, bound object or globals hold a model or tensor, on the meta
    device (it has shapes but no data: its operators compute nothing)."""
    seen: list[tuple[str, Any]] = [("fn", fn), ("fn's object", getattr(fn, "__self__", None))]
    code = getattr(fn, "__code__", None)
    if code is not None:
        cells = getattr(fn, "__closure__", None) or ()
        seen += [(f"fn's {n}", c.cell_contents) for n, c in zip(code.co_freevars, cells)
                 if not _empty_cell(c)]
        names = getattr(fn, "__globals__", {})
        seen += [(f"fn's global {n}", names[n]) for n in code.co_names if n in names]
    for where, obj in seen:
        meta = _meta_tensors(obj, torch)
        if meta:
            raise ValueError(f"{where} is on the meta device ({', '.join(meta[:3])}"
                             f"{', ...' if len(meta) > 3 else ''}): meta tensors hold shapes but no data, so no work "
                             "would run and the profile would judge nothing. Move it to a real device first "
                             "(model.to_empty(device='cpu') then load the weights, or build it on 'cpu'/'cuda')")


def _empty_cell(cell: Any) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return True
    return False


def _checked_first_call(fn: Callable[[], Any], torch: Any, probe: bool) -> Callable[[], Any]:
    """``fn`` whose first call is checked: what it returns (a generator or coroutine: no work ran; a meta tensor)
    and, with ``probe`` (the counted warm-up call, already under a dispatch mode and unrecorded), whether any of
    its operators made a meta tensor."""
    done: list[bool] = []

    def call() -> Any:
        if done:
            return fn()
        done.append(True)
        meta: list[str] = []
        if probe:
            from torch.utils._python_dispatch import TorchDispatchMode

            class _Meta(TorchDispatchMode):
                def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                    out = func(*args, **(kwargs or {}))
                    if not meta and isinstance(out, torch.Tensor) and out.is_meta:
                        meta.append(f"the output of {func._overloadpacket.__name__}")
                    return out

            with dispatch_mode(_Meta()):
                out = fn()
        else:
            out = fn()
        refuse_lazy_result(out, "profile")
        outs = out if isinstance(out, (tuple, list)) else (out,)
        meta += [f"its result{'' if o is out else f' [{i}]'}" for i, o in enumerate(outs)
                 if isinstance(o, torch.Tensor) and o.is_meta][:1]
        if meta:
            raise ValueError(f"fn's operators ran on the meta device ({meta[0]} is a meta tensor): meta tensors "
                             "hold shapes but no data, so no work ran and the profile would judge nothing. Move the "
                             "model and inputs to a real device (model.to_empty(device='cpu') then load the weights)")
        return out
    return call


@checked(fn="fn", trace_dir="path", device="device")
def profile(fn: Callable[[], Any], steps: int = 5, warmup: int = 1, *, label: str = "profile",
            memory: bool = False, record_shapes: bool = False, trace: bool = True,
            trace_dir: str | os.PathLike[str] = "traces", device: Any = None, limits: Any = None,
            count_work: bool = True) -> ProfileSummary:
    """Profile ``fn`` (one training step, no arguments): ``warmup`` calls unrecorded, then ``steps``
    recorded calls, through ``torch.profiler`` with a schedule.

    Annotate the step with :func:`phase` ("data", "forward", "backward", "optimizer") to get the share of
    each; PyTorch's own ``enumerate(DataLoader)`` and ``Optimizer.step`` ranges count without annotation.
    ``memory=True`` records memory by operator (slower). ``trace=True`` writes a Chrome/Perfetto trace
    file into ``trace_dir`` (default ``traces/``, git-ignored). On CUDA the device is profiled too and
    the summary says whether its events were really recorded.

    On a GPU the recorded steps run back to back as in a training loop: nothing waits for the device between
    them, and it is drained once, at the end of the last one. A step's window and its phases are host-side
    ranges (the CPU time to issue the work; the GPU runs it asynchronously, often later), so the step time is
    the mean over the recorded steps, which together hold all their device work.

    The verdict is grounded in the machine's ceilings: the first warm-up call runs under a counting mode
    (``count_work``; it is slower, and not recorded) to learn the step's FLOPs and bytes per operator, and
    ``limits`` (default: :func:`gpulab.machine_limits` of the device, measured once per process; ``False``
    for none) gives the ceilings to compare the step with. With ``warmup=0`` nothing is counted. The same
    call notes the tensors it made, to tell afterwards whether a step's graph outlives it (a leak). On a CPU the
    ceilings are those of the threads the step ran with (``torch.get_num_threads()``: given ``limits`` measured with
    another count are measured again for it), and a step on fewer threads than the usable cores also gets the
    whole machine's (``whole_machine``), so the verdict can say what the idle cores would give.

    A step that would run no work is refused with a ``TypeError``/``ValueError`` naming ``fn``: a generator or async
    function, a call that returns a generator or coroutine (closed unrun), or a model or tensors on the ``meta``
    device (found in ``fn``, its closure or globals, or in the counted warm-up call's operators and result).
    ``KINETO_LOG_LEVEL`` is set only while the call runs (unless already set) and restored afterwards.
    """
    if not callable(fn):
        raise TypeError(f"profile needs a callable running one step, got {type(fn).__name__}")
    refuse_lazy_fn(fn, "profile")
    steps = whole("steps", steps)
    warmup = whole("warmup", warmup, low=0)
    flag("memory", memory)
    flag("count_work", count_work)
    flag("record_shapes", record_shapes)
    flag("trace", trace)
    if limits is not None and limits is not False and not hasattr(limits, "peak_flops"):
        raise TypeError(f"limits must be gl.machine_limits() of the device, False (no ceilings) or None (measured "
                        f"once), got {type(limits).__name__} {limits!r:.40}")
    if not isinstance(label, str) or not label:
        raise TypeError(f"label must be a non-empty string, got {label!r}")
    torch = _torch()
    _refuse_meta_fn(fn, torch)
    with _kineto_quiet():
        return _profile(_checked_first_call(fn, torch, probe=count_work and warmup >= 1), steps, warmup, label=label, memory=memory,
                        record_shapes=record_shapes, trace=trace, trace_dir=trace_dir, device=device, limits=limits,
                        count_work=count_work)


@contextlib.contextmanager
def _kineto_quiet() -> Iterator[None]:
    """``KINETO_LOG_LEVEL`` set for the duration of a call (unless the caller set it) and restored afterwards,
    also on an error: absent stays absent. kineto logs VERBOSE 0 .. ERROR 4, USDT 5 (a "profiler_start/stop" pair
    on every run since torch 2.14); 6 silences them: missing device events are checked and reported by
    check_device_events instead."""
    before = os.environ.get("KINETO_LOG_LEVEL")
    if before is None:
        os.environ["KINETO_LOG_LEVEL"] = "6"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("KINETO_LOG_LEVEL", None)
        else:
            os.environ["KINETO_LOG_LEVEL"] = before


def _profile(fn: Callable[[], Any], steps: int, warmup: int, *, label: str, memory: bool, record_shapes: bool,
             trace: bool, trace_dir: Any, device: Any, limits: Any, count_work: bool) -> ProfileSummary:
    torch = _torch()
    from torch.profiler import ProfilerActivity, schedule

    from ..system import device_kind

    kind = device_kind() if device is None else torch.device(device).type
    cuda = kind == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    path: list[str] = []

    def on_ready(prof: Any) -> None:
        if trace:
            d = Path(trace_dir)
            d.mkdir(parents=True, exist_ok=True)
            p = d / f"{_slug(label)}-{os.getpid()}-{time.time_ns()}.pt.trace.json"
            prof.export_chrome_trace(str(p))
            path.append(str(p))

    allocs_before = _cuda_allocs(torch) if cuda else 0
    use_before = None
    work, created, rest = None, [], warmup
    if count_work and warmup >= 1:
        from ..work import _count

        work = _count(fn, (), {}, created)
        rest -= 1
    if cuda:
        torch.cuda.synchronize(device)    # the profiled steps start from an idle device
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*warmup.*")   # warmup=0 is a valid choice here
        with torch.profiler.profile(activities=activities, record_shapes=record_shapes, profile_memory=memory,
                                    schedule=schedule(wait=0, warmup=rest, active=steps, repeat=1),
                                    on_trace_ready=on_ready) as prof:
            for i in range(rest + steps):
                if i == rest and not cuda:
                    use_before = cpu_snapshot()
                fn()
                # the recorded steps run as the loop runs: the host queues step k+1 while the GPU still works on
                # step k. The device is drained only after the last warm-up step (before recording starts) and
                # after the last recorded step (inside its window, before the profiler stops), so the recorded
                # windows hold all the device's work for those steps and nothing else.
                if cuda and i in (rest - 1, rest + steps - 1):
                    torch.cuda.synchronize(device)
                prof.step()
    idle, others = cpu_use(use_before, cpu_snapshot()) if not cuda else (None, None)
    cuda_used = cuda and _cuda_allocs(torch) > allocs_before
    kept = _kept_graph(created) if work is not None else None
    c = step_ceilings(kind, limits, work, others)
    summary = _summarise(prof, label, kind, steps, warmup, cuda, cuda_used, memory, path[0] if path else None,
                         work=work, limits=c.ceilings, kept_graph=kept)
    return replace(summary, threads=c.threads, cores=c.cores, whole_machine=c.whole, idle_cores=idle,
                   other_cores=others) if c.threads else summary


def _kept_graph(created: list[Any]) -> tuple[int, int]:
    """Of the tensors the counted warm-up step made, those still alive after all the profiled steps that
    belong to an autograd graph (a ``grad_fn``): ``(tensors, bytes)``. A healthy loop keeps none (its
    optimizer state and gradients carry no graph); ``losses.append(loss)`` keeps one step's graph each step."""
    import gc

    gc.collect()
    alive = [t for t in (r() for r in created) if t is not None and getattr(t, "grad_fn", None) is not None]
    return len(alive), int(sum(t.numel() * t.element_size() for t in alive))


def _step_windows(events: Any) -> list[tuple[float, float]]:
    """The profiled steps as (start, end) seconds: the host's ``ProfilerStep*`` ranges, one per ``prof.step()``.

    On CUDA, kineto also puts a copy of each step range on the device timeline (the same name, device type
    CUDA, activity ``gpu_user_annotation``, ``is_user_annotation`` True) spanning the step's first to last
    device operation. It is the device's view of a step, not another step: counting it would double the steps
    and halve the step time.
    """
    return sorted(_interval_s(e) for e in events if e.name.startswith("ProfilerStep") and not _is_device_event(e))


def _op_stat(a: Any, cuda: bool, memory: bool) -> OpStat:
    """One ``key_averages()`` row (``FunctionEventAvg``, times in microseconds) as an :class:`OpStat`."""
    is_dev = _is_device_event(a)

    def dev_s(name: str) -> float | None:
        v = _device_attr(a, name) if cuda else None
        return None if v is None else v / 1e6

    mem = _device_attr(a, "self_device_memory_usage") if memory and cuda else None
    return OpStat(a.key, int(a.count), 0.0 if is_dev else a.self_cpu_time_total / 1e6,
                  0.0 if is_dev else a.cpu_time_total / 1e6,
                  dev_s("self_device_time_total"), dev_s("device_time_total"),
                  int(a.self_cpu_memory_usage) if memory else None,
                  None if mem is None else int(mem),
                  device_work=cuda and _counts_device_time(a))


def _summarise(prof: Any, label: str, kind: str, steps: int, warmup: int, cuda: bool, cuda_used: bool,
               memory: bool, trace_path: str | None, *, work: Any = None, limits: Any = None,
               kept_graph: tuple[int, int] | None = None) -> ProfileSummary:
    events = list(prof.events())
    windows = _step_windows(events)
    if not windows:   # pragma: no cover - torch always emits ProfilerStep ranges with a schedule
        raise RuntimeError("the profiler recorded no steps: was fn() called?")
    n = len(windows)
    # phases: the outermost classified ranges, as time intervals, clipped to the step windows
    by_phase: dict[str, list[tuple[float, float]]] = {p: [] for p in PHASES}
    ranges: dict[str, float] = {}
    for e in events:
        if _is_device_event(e) or e.name.startswith("ProfilerStep"):
            continue
        if getattr(e, "is_user_annotation", False):
            a, b = _interval_s(e)
            ranges[e.name] = ranges.get(e.name, 0.0) + (b - a)
        ph = _phase_of(e.name)
        if ph is None:
            continue
        parent, nested = e.cpu_parent, False
        while parent is not None:
            if _phase_of(parent.name) is not None:
                nested = True
                break
            parent = parent.cpu_parent
        if not nested:
            by_phase[ph].append(_interval_s(e))
    phases = {p: sum(_union(iv, a, b) for a, b in windows) for p, iv in by_phase.items()}
    total = sum(b - a for a, b in windows)
    phases["other"] = max(0.0, total - sum(phases.values()))
    # operator calls issued by Python code (an aten op without an aten ancestor), outside data loading
    # (CPU-side input work is judged by the data share); and .item()-style reads outside the optimizer and
    # data loading (Adam's step counters and torchvision's random transforms read CPU scalars: no device sync)
    top_ops = []
    syncs = 0
    sync_spans: list[tuple[float, float]] = []
    for e in events:
        if not e.name.startswith("aten::") or _is_device_event(e):
            continue
        parent, in_aten, ph = e.cpu_parent, False, None
        while parent is not None:
            in_aten = in_aten or parent.name.startswith("aten::")
            ph = ph or _phase_of(parent.name)
            parent = parent.cpu_parent
        if in_aten:
            continue
        if e.name in SYNC_CALLS and ph not in ("optimizer", "data"):
            syncs += 1
            sync_spans.append(_interval_s(e))
        if ph != "data":
            a, b = _interval_s(e)
            top_ops.append(b - a)
    dev = check_device_events(events, cuda, cuda_used, windows, sync_spans)
    ops = [_op_stat(a, cuda, memory) for a in prof.key_averages()
           if not a.key.startswith("ProfilerStep") and not getattr(a, "is_user_annotation", False)]
    ops.sort(key=lambda o: (o.self_cpu_s, o.self_device_s or 0.0), reverse=True)
    if dev.kernels and not any(o.device_work and o.self_device_s is not None for o in ops):
        # events came back but the averaged rows carry no device time this code can read: say so rather
        # than show empty device columns under "CUPTI working"
        dev = replace(dev, note=f"{dev.note}, but this torch's key_averages() rows carry no device time gpulab "
                                "can read (neither self_device_time_total nor self_cuda_time_total on kernel "
                                "rows): device columns are empty - read the trace instead")
    elif dev.profiled and not dev.kernels and any(o.device_work and o.self_device_s for o in ops):
        # torch's GPU fallback (no CUPTI): CUDA events around each operator time it, on the CPU rows
        dev = replace(dev, note=f"{dev.note}; torch's CUDA-event fallback timed each operator instead "
                                "(self device times on the operator rows, no kernel rows)")
    from .attribution import attribute_events, device_phases, device_work_phases

    # on a GPU the attribution's phases are the device's: the host's optimizer range can be short while the device
    # spends most of the step in the kernels it queued
    work_phases = device_work_phases(events, _phase_of, _is_device_event, _interval_s) if dev.kernels else None
    classes = attribute_events(events, windows, _phase_of, _is_device_event, _interval_s,
                               dev.busy_s if dev.kernels else None, work_phases)
    dev_phases = (device_phases(events, windows, _phase_of, _is_device_event, _interval_s, work_phases)
                  if work_phases is not None else {})
    return ProfileSummary(
        label=label, device_kind=kind, steps=n, warmup=warmup,
        step_times_s=tuple(b - a for a, b in windows), phases_s=phases, ops=tuple(ops),
        op_calls_per_step=len(top_ops) / n, median_op_s=statistics.median(top_ops) if top_ops else None,
        syncs_per_step=syncs / n, device=dev, trace_path=trace_path, memory=memory, ranges_s=ranges,
        op_time_s=float(sum(top_ops)), long_op_time_s=float(sum(t for t in top_ops if t >= LONG_OP_S)), sync_s=float(sum(b - a for a, b in sync_spans)), work=work, limits=limits,
        kept_graph=kept_graph, op_classes_s=classes, device_phases_s=dev_phases)
