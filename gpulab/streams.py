"""What runs at once on a GPU: tasks on CUDA streams, measured with CUDA events or modelled from datasheets.

Two independent pieces of work - the copy of the next batch and the kernel on this one, a device-to-host
copy and a host-to-device copy - can overlap when they are queued on two streams *and* the GPU has a free
engine for each. :func:`measure_streams` times the tasks on a CUDA GPU twice, all on one stream and with each
``stream`` label on its own ``torch.cuda.Stream``, from CUDA events. :func:`model_streams` draws the same kind
of :class:`StreamTimeline` on any machine from a model of the GPU's engines fed with datasheet figures, and
says everywhere that it is a model, not a measurement.

Example:
    >>> from gpulab.streams import StreamTask, model_streams
    >>> tasks = [StreamTask("copy batch 2", "copy", "h2d", bytes_moved=64 << 20),
    ...          StreamTask("matmul batch 1", "compute", "kernel", flops=2 * 4096**3)]
    >>> t = model_streams(tasks, gpu="T4")
    >>> t.measured, t.overlapped_s < t.serial_s
    (False, True)
    >>> print(t)                                      # doctest: +ELLIPSIS
    StreamTimeline: MODEL (not a measurement) of a T4, durations from T4 datasheet figures
    serial 21.2 ms -> overlapped 17 ms: 1.25x faster; 4.26 ms with 2+ tasks at once
    ...
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence

from ._check import device_arg, install_hint, positive, whole
from ._format import fmt_bytes, fmt_flops, fmt_rate, fmt_seconds, html_table, text_table
from ._spans import covered, merge_spans

__all__ = ["StreamTask", "Span", "StreamTimeline", "measure_streams", "model_streams", "KINDS"]

Kind = Literal["h2d", "d2h", "kernel"]
KINDS: tuple[str, ...] = ("h2d", "d2h", "kernel")
_COLOURS = {"h2d": "#2a7ab9", "d2h": "#d9822b", "kernel": "#76b900"}
SERIAL = "serial"        # the label of the one stream every task runs on in the serial schedule


def _label(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a non-empty str, got {value!r}")
    if not value.strip():
        raise ValueError(f"{name} must be a non-empty str, got {value!r}")
    return value


@dataclass(frozen=True)
class StreamTask:
    """One piece of GPU work queued on the stream labelled ``stream``.

    ``kind`` is ``"h2d"`` (host-to-device copy), ``"d2h"`` (device-to-host copy) or ``"kernel"``. ``fn`` does
    the work when measured on a GPU (no arguments; its result is ignored). ``bytes_moved`` and ``flops`` feed
    the model: bytes crossing the host link for a copy, bytes read and written in device memory and FLOPs for a
    kernel.

    Example:
        >>> StreamTask("load", "copy", "h2d", bytes_moved=1 << 20).kind
        'h2d'
        >>> StreamTask("load", "copy", "upload")
        Traceback (most recent call last):
        ...
        ValueError: kind must be one of 'h2d', 'd2h', 'kernel', got 'upload'
    """

    name: str
    stream: str
    kind: Kind
    fn: Callable[[], Any] | None = None
    bytes_moved: int = 0
    flops: float = 0

    def __post_init__(self) -> None:
        _label("name", self.name)
        _label("stream", self.stream)
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(map(repr, KINDS))}, got {self.kind!r}")
        if self.fn is not None and not callable(self.fn):
            raise TypeError(f"fn of task {self.name!r} must be a function of no arguments or None, got {self.fn!r}")
        whole(f"bytes_moved of task {self.name!r}", self.bytes_moved, low=0)
        positive(f"flops of task {self.name!r}", self.flops, allow_zero=True)


@dataclass(frozen=True)
class Span:
    """When one task ran: ``start_s`` and ``end_s`` in seconds from the start of its schedule."""

    stream: str
    name: str
    kind: Kind
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class StreamTimeline:
    """Tasks on streams, serial and overlapped, from CUDA events (``measured=True``) or a model.

    ``spans``: each task on its own stream; ``serial_spans``: the same tasks one after another on one stream
    (labelled ``"serial"``). ``serial_s`` and ``overlapped_s`` are the two schedules' lengths (for a
    measurement: from the first event to the last, which also holds the gaps between tasks). ``device`` is the
    GPU measured or modelled; ``source`` says where the durations come from; ``note`` the assumptions.
    See :func:`model_streams` for an example.
    """

    spans: tuple[Span, ...]
    serial_spans: tuple[Span, ...]
    serial_s: float
    overlapped_s: float
    measured: bool
    device: str
    source: str
    note: str = ""

    @property
    def speedup(self) -> float | None:
        """Serial time over overlapped time (None when the overlapped schedule took no time)."""
        return self.serial_s / self.overlapped_s if self.overlapped_s > 0 else None

    @property
    def overlap_s(self) -> float:
        """Time during which two or more tasks ran at once (in the overlapped schedule)."""
        pairs = [(max(a.start_s, b.start_s), min(a.end_s, b.end_s))
                 for i, a in enumerate(self.spans) for b in self.spans[i + 1:]]
        return covered(merge_spans(p for p in pairs if p[1] > p[0]))

    @property
    def busy_by_stream(self) -> dict[str, float]:
        """Seconds each stream had a task running (overlapped schedule), streams in order of first use."""
        out: dict[str, list[tuple[float, float]]] = {}
        for s in self.spans:
            out.setdefault(s.stream, []).append((s.start_s, s.end_s))
        return {k: covered(v) for k, v in out.items()}

    @property
    def title(self) -> str:
        if self.measured:
            return f"StreamTimeline: measured with CUDA events on {self.device}"
        return f"StreamTimeline: MODEL (not a measurement) of a {self.device}, {self.source}"

    def _summary(self) -> str:
        speed = "" if self.speedup is None else f": {self.speedup:.3g}x faster"
        return (f"serial {fmt_seconds(self.serial_s)} -> overlapped {fmt_seconds(self.overlapped_s)}{speed}; "
                f"{fmt_seconds(self.overlap_s)} with 2+ tasks at once")

    def _stream_rows(self) -> list[list[str]]:
        rows = []
        for stream, busy in self.busy_by_stream.items():
            mine = [s for s in self.spans if s.stream == stream]
            rows.append([stream, ", ".join(sorted({s.kind for s in mine})), str(len(mine)), fmt_seconds(busy),
                         fmt_seconds(min(s.start_s for s in mine)), fmt_seconds(max(s.end_s for s in mine))])
        return rows

    def __repr__(self) -> str:
        rows = self._stream_rows()
        shown = rows[:5] + ([[f"... {len(rows) - 5} more streams", "", "", "", "", ""]] if len(rows) > 5 else [])
        table = text_table(("stream", "kinds", "tasks", "busy", "first start", "last end"), shown)
        return f"{self.title}\n{self._summary()}\n{table}"

    def _repr_html_(self) -> str:
        rows = [[s.stream, s.name, s.kind, fmt_seconds(s.start_s), fmt_seconds(s.end_s), fmt_seconds(s.duration_s)]
                for s in sorted(self.spans, key=lambda s: (s.start_s, s.stream))]
        footer = self._summary() + (f". {self.note}" if self.note else "")
        return html_table(("stream", "task", "kind", "start", "end", "duration"), rows, caption=self.title,
                          footer=footer)

    def to_dataframe(self) -> Any:
        """One row per task and schedule: schedule, stream, task, kind, start_s, end_s, duration_s."""
        import pandas as pd

        rows = [{"schedule": schedule, "stream": s.stream, "task": s.name, "kind": s.kind, "start_s": s.start_s,
                 "end_s": s.end_s, "duration_s": s.duration_s}
                for schedule, spans in (("overlapped", self.spans), ("serial", self.serial_spans)) for s in spans]
        return pd.DataFrame(rows, columns=["schedule", "stream", "task", "kind", "start_s", "end_s", "duration_s"])

    def plot(self, ax: Any = None) -> Any:
        """A Gantt chart: one lane per stream, one colour per kind, a dashed line where the serial schedule ends.

        Without ``ax``, a second panel below shows the serial schedule. Returns the overlapped panel's Axes
        (its title says "measured with CUDA events on ..." or "MODEL (not a measurement) of a ...").
        """
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch

        serial_ax = None
        if ax is None:
            _, (ax, serial_ax) = plt.subplots(2, 1, sharex=True, figsize=(9, 4.5),
                                              gridspec_kw={"height_ratios": [max(len(self.busy_by_stream), 1), 1]})
        scale, unit = _time_unit(max(self.serial_s, self.overlapped_s))
        _lanes(ax, self.spans, list(self.busy_by_stream), scale)
        ax.axvline(self.serial_s * scale, ls="--", color="k", lw=1)
        ax.annotate(f"serial ends: {fmt_seconds(self.serial_s)} ", (self.serial_s * scale, 0.02),
                    xycoords=("data", "axes fraction"), ha="right", va="bottom", fontsize=8)
        kinds = [k for k in KINDS if any(s.kind == k for s in self.spans)]
        ax.legend(handles=[Patch(color=_COLOURS[k], label=k) for k in kinds], fontsize=8, loc="lower right",
                  bbox_to_anchor=(1.0, 1.0), ncol=len(kinds), frameon=False, borderaxespad=0.2)
        what = ("measured with CUDA events on " + self.device if self.measured
                else f"MODEL (not a measurement) of a {self.device}")
        speed = "" if self.speedup is None else f", {self.speedup:.2f}x"
        ax.set_title(f"Streams {what}: overlapped {fmt_seconds(self.overlapped_s)}{speed}", fontsize=10, loc="left",
                     pad=18)
        if serial_ax is not None:
            _lanes(serial_ax, self.serial_spans, [SERIAL], scale)
            serial_ax.set_title(f"the same tasks on one stream: {fmt_seconds(self.serial_s)}", fontsize=9)
            serial_ax.set_xlabel(f"time ({unit})")
        else:
            ax.set_xlabel(f"time ({unit})")
        ax.figure.tight_layout()
        return ax


def _time_unit(longest_s: float) -> tuple[float, str]:
    for scale, unit in ((1.0, "s"), (1e3, "ms"), (1e6, "us")):
        if longest_s * scale >= 1:
            return scale, unit
    return 1e9, "ns"


def _lanes(ax: Any, spans: Sequence[Span], lanes: list[str], scale: float) -> None:
    end = max((s.start_s + s.duration_s for s in spans), default=0.0) or 1.0
    width = lambda name: 0.0085 * end * (len(name) + 1)   # noqa: E731  (the name's width at fontsize 8, roughly)
    for i, lane in enumerate(lanes):
        mine = sorted((s for s in spans if s.stream == lane), key=lambda s: s.start_s)
        for k, s in enumerate(mine):
            ax.barh(i, s.duration_s * scale, left=s.start_s * scale, color=_COLOURS[s.kind], edgecolor="k", lw=0.5)
            room = (mine[k + 1].start_s if k + 1 < len(mine) else 1.15 * end) - s.start_s - s.duration_s
            if s.duration_s > width(s.name):                   # the name fits inside its bar
                ax.text((s.start_s + s.duration_s / 2) * scale, i, s.name, ha="center", va="center", fontsize=8)
            elif room > width(s.name):                         # or in the free space after it
                ax.text((s.start_s + s.duration_s) * scale, i, f" {s.name}", ha="left", va="center", fontsize=8)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(lanes)
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.grid(True, axis="x", alpha=0.3)


def _check_tasks(tasks: Any) -> tuple[StreamTask, ...]:
    if isinstance(tasks, StreamTask) or not isinstance(tasks, Sequence) or isinstance(tasks, str):
        raise TypeError(f"tasks must be a list of StreamTask, got {tasks!r}")
    if not tasks:
        raise ValueError("tasks must hold at least one StreamTask, got an empty list")
    bad = [type(t).__name__ for t in tasks if not isinstance(t, StreamTask)]
    if bad:
        raise TypeError(f"tasks must be StreamTask objects, got {', '.join(bad)}")
    names = [t.name for t in tasks]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"task names must be unique (each names a span), got {twice} more than once")
    return tuple(tasks)


# ---------------------------------------------------------------------------------------------- measured
class _EventClock:
    """CUDA timing events on one device, all read against one start event recorded on the current stream.

    ``mark(stream)`` records a new event on ``stream``; ``stop()`` records the end event on the current stream
    and makes the host wait for it; ``seconds(event)`` is then the time from the start event to ``event``.
    Every event must be complete before it is read: whatever precedes the end event on the current stream is,
    so work on other streams must be joined to it (``current.wait_stream(side)``) before ``stop()``.
    """

    def __init__(self, device: Any) -> None:
        import torch

        self.current = torch.cuda.current_stream(device)
        self.start = self.mark(self.current)

    def mark(self, stream: Any) -> Any:
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record(stream)
        return event

    def stop(self) -> Any:
        end = self.mark(self.current)
        end.synchronize()                    # the host waits for the GPU before any event is read
        return end

    def seconds(self, event: Any) -> float:
        return self.start.elapsed_time(event) / 1e3          # elapsed_time is in milliseconds


def _run(tasks: Sequence[StreamTask], streams: dict[str, Any], device: Any) -> tuple[float, list[Span]]:
    """Queue every task on ``streams[task.stream]`` between two events; return the run's length and spans."""
    import torch

    clock = _EventClock(device)
    # streams compare by value: torch.cuda.current_stream() hands out a new Stream object on every call, equal
    # (same stream id, device index and device type) to the others for the same CUDA stream, never the same object
    sides = [s for s in dict.fromkeys(streams.values()) if s != clock.current]
    for side in sides:
        side.wait_event(clock.start)         # no side stream starts before the start event
    marks = []
    for task in tasks:
        stream = streams[task.stream]
        with torch.cuda.stream(stream):
            before = clock.mark(stream)
            task.fn()
            after = clock.mark(stream)
        marks.append((task, before, after))
    for side in sides:
        clock.current.wait_stream(side)      # later work on the current stream waits for every side stream
    end = clock.stop()
    spans = [Span(t.stream if sides else SERIAL, t.name, t.kind, clock.seconds(b), clock.seconds(a))
             for t, b, a in marks]
    return clock.seconds(end), spans


def _cuda_device(device: Any) -> Any:
    from .timing import _device_type

    kind = "cuda" if isinstance(device, int) and not isinstance(device, bool) else _device_type(device)
    hint = "model_streams(tasks, gpu='T4') draws the same timeline from a model of a GPU's engines"
    if kind != "cuda":
        raise ValueError(f"measure_streams times CUDA streams, and device={device!r} is not a CUDA device; "
                         f"on this machine, {hint}")
    try:
        import torch
    except ImportError as e:                  # pragma: no cover - the compat venv has torch
        raise ImportError(f"measure_streams needs PyTorch: {install_hint('torch')}") from e
    if torch.cuda.is_available():
        device_arg("device", device)             # cuda:N past the GPU count
    else:
        raise RuntimeError(f"measure_streams(device={device!r}) needs a CUDA GPU and this machine has none; "
                           f"{hint}, labelled as a model")
    return torch


def measure_streams(tasks: Sequence[StreamTask], *, device: Any = "cuda", repeats: int = 3) -> StreamTimeline:
    """Time ``tasks`` on a CUDA ``device``: all on one stream, then each ``stream`` label on its own stream.

    Both schedules run once untimed (warm-up), then ``repeats`` times each; the fastest run of each is kept.
    A run records a start event on the current stream; every side stream waits for it; each task is queued on
    its stream between two timing events; the current stream then waits for every side stream, and the host
    for the end event, before the events are read (``start.elapsed_time(event)``: milliseconds, resolution
    about 0.5 us). Within a stream tasks run in the order given. A span runs from the moment its stream
    reached the task (the previous task on that stream had finished) to its end, so it includes any wait for
    a busy engine - two kernels on two streams that share the SMs both look long. Needs CUDA; on a CPU call
    :func:`model_streams`.

    What the caller must get right (PyTorch's CUDA semantics):

    - tasks on different streams must be independent: nothing orders them, so a task may not read what a task
      on another stream writes (put such tasks on the same stream);
    - a copy overlaps only if the host does not wait for it: ``x.to(device, non_blocking=True)`` from pinned
      host memory (``tensor.pin_memory()``), and device-to-host ``host_buf.copy_(y, non_blocking=True)`` into a
      pinned buffer; a pageable copy, ``.item()`` or ``print(tensor)`` inside ``fn`` blocks the host, so the
      next task is queued only after it finished and nothing overlaps;
    - tensors made before the call may be used on any stream (every side stream waits for the start event and
      the host waits for the end of every run); a tensor a task allocates on its side stream and keeps for use
      on another stream afterwards needs ``tensor.record_stream(that_stream)``, or the caching allocator may
      hand its memory to another tensor while that stream still reads it.

    Example (needs a GPU; on a CPU the same call raises and points to :func:`model_streams`):
        >>> from gpulab.streams import StreamTask, measure_streams
        >>> t = StreamTask("k", "s", "kernel", fn=lambda: None)
        >>> measure_streams([t], device="cpu")    # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: measure_streams times CUDA streams, and device='cpu' is not a CUDA device; ...
    """
    tasks = _check_tasks(tasks)
    whole("repeats", repeats)
    missing = [t.name for t in tasks if t.fn is None]
    if missing:
        raise ValueError(f"measure_streams runs each task's fn; these tasks have fn=None: {missing}")
    torch = _cuda_device(device)
    current = torch.cuda.current_stream(device)
    labels = list(dict.fromkeys(t.stream for t in tasks))
    serial = {k: current for k in labels}
    sides = {k: torch.cuda.Stream(device=device) for k in labels}
    _run(tasks, serial, device)              # warm-up: kernels, cuBLAS handles, allocator pools per stream
    _run(tasks, sides, device)
    serial_runs, overlapped_runs = [], []
    for _ in range(repeats):                 # the two schedules alternate, so drift hits both alike
        serial_runs.append(_run(tasks, serial, device))
        overlapped_runs.append(_run(tasks, sides, device))
    best_serial = min(serial_runs, key=lambda run: run[0])
    best = min(overlapped_runs, key=lambda run: run[0])
    name = torch.cuda.get_device_name(device)
    note = (f"Fastest of {repeats} runs per schedule after one warm-up each; events resolve about 0.5 us. "
            "Spans include waiting for a busy engine.")
    return StreamTimeline(tuple(best[1]), tuple(best_serial[1]), best_serial[0], best[0], True, name,
                          "CUDA events", note)


# ---------------------------------------------------------------------------------------------- modelled
# The host link by architecture: the datasheets list PCIe Gen3 x16 for T4 and V100, Gen4 for A100 and L4,
# Gen5 for H100 (SXM and PCIe); reference.py holds the per-direction figures with their sources.
_LINK = {"Turing": "pcie-gen3-x16", "Volta": "pcie-gen3-x16", "Ampere": "pcie-gen4-x16",
         "Ada Lovelace": "pcie-gen4-x16", "Hopper": "pcie-gen5-x16"}


def _gpu_figures(gpu: Any) -> tuple[Any, Any]:
    from .reference import gpu_spec, published

    if not isinstance(gpu, str):
        raise TypeError(f"gpu must be a GPU name such as 'T4' or 'H100 SXM', got {gpu!r}")
    try:
        spec = gpu_spec(gpu)
    except (KeyError, ValueError) as e:
        raise ValueError(f"gpu={gpu!r}: {e.args[0]}") from None
    if spec.architecture not in _LINK:       # pragma: no cover - every card in reference.py has a link
        raise ValueError(f"gpu={gpu!r}: no published host-link figure for the {spec.architecture} architecture")
    return spec, published(_LINK[spec.architecture])


def _schedule(tasks: Sequence[StreamTask], durations: Sequence[float], one_stream: bool) -> tuple[float, list[Span]]:
    """Place each task, in the order given, when its stream and its engine are both free."""
    stream_free: dict[str, float] = {}
    engine_free: dict[str, float] = {}       # one engine per kind: compute, H2D copy, D2H copy
    spans = []
    for task, duration in zip(tasks, durations):
        lane = SERIAL if one_stream else task.stream
        start = max(stream_free.get(lane, 0.0), engine_free.get(task.kind, 0.0))
        stream_free[lane] = engine_free[task.kind] = start + duration
        spans.append(Span(lane, task.name, task.kind, start, start + duration))
    return max(s.end_s for s in spans), spans


def model_streams(tasks: Sequence[StreamTask], *, gpu: str = "T4", launch_s: float = 5e-6) -> StreamTimeline:
    """The timeline :func:`measure_streams` would draw on ``gpu``, from a model - not a measurement.

    Durations come from the datasheet figures in :func:`gpulab.reference.gpu_spec` and the published PCIe
    rates: a kernel takes ``max(bytes_moved / bandwidth, flops / fp32 peak) + launch_s``; a copy takes
    ``bytes_moved / per-direction PCIe rate`` (Gen3 x16, 15.75 GB/s, for a T4 or V100; Gen4, 31.5 GB/s, for an
    A100 or L4; Gen5, 63 GB/s, for an H100): peaks, so real tasks take longer. The GPU has three engines:

    - one compute engine: kernels from different streams are modelled as not sharing the SMs, so they never
      overlap here (real small kernels that leave SMs free can run concurrently);
    - one host-to-device and one device-to-host copy engine: T4, A100 and H100 report three copy engines
      (``asyncEngineCount``, "with 3 copy engine(s)" in ``deviceQuery``) and the driver assigns them by
      direction, so copies in opposite directions overlap while copies in one direction queue behind each other
      (NVIDIA's answer on the developer forum: H2D copies on three streams of an H100 serialise).

    A task starts when the previous task on its stream has ended and its engine is free, in the order given.
    The serial schedule runs every task on one stream. Not modelled: host launch gaps, pageable copies (slower,
    and they block the host), the copies' share of device-memory bandwidth.

    Example:
        >>> from gpulab.streams import StreamTask, model_streams
        >>> up = StreamTask("upload", "a", "h2d", bytes_moved=1_575_000_000)
        >>> down = StreamTask("download", "b", "d2h", bytes_moved=1_575_000_000)
        >>> t = model_streams([up, down], gpu="T4")
        >>> round(t.serial_s, 3), round(t.overlapped_s, 3), round(t.speedup, 2)
        (0.2, 0.1, 2.0)
        >>> "model" in t.title.lower()
        True
    """
    tasks = _check_tasks(tasks)
    launch_s = positive("launch_s", launch_s, allow_zero=True, unit="seconds")
    spec, link = _gpu_figures(gpu)
    link_bytes_per_s = link.low * 1e9        # per direction, after encoding (reference.py: GB/s)
    durations = []
    for t in tasks:
        if t.kind == "kernel":
            if t.bytes_moved == 0 and t.flops == 0:
                raise ValueError(f"the model times kernel {t.name!r} from bytes_moved or flops; both are 0")
            durations.append(max(t.bytes_moved / spec.bandwidth_bytes_per_s, t.flops / spec.fp32_flops) + launch_s)
        else:
            if t.bytes_moved == 0:
                raise ValueError(f"the model times copy {t.name!r} from bytes_moved, which is 0")
            durations.append(t.bytes_moved / link_bytes_per_s)
    serial_s, serial_spans = _schedule(tasks, durations, one_stream=True)
    overlapped_s, spans = _schedule(tasks, durations, one_stream=False)
    pcie = link.key.replace("pcie-", "PCIe ").replace("-x16", " x16").replace("gen", "Gen")
    note = (f"MODEL, not a measurement: durations from {spec.name} datasheet figures ({spec.source}): kernels "
            f"max(bytes / {fmt_rate(spec.bandwidth_bytes_per_s)}, FLOPs / {fmt_flops(spec.fp32_flops)} fp32) + "
            f"{fmt_seconds(launch_s)} launch; copies bytes / {link.low:g} GB/s ({pcie} per direction, "
            f"{link.source}). One compute engine (kernels on different streams modelled as not sharing SMs; real "
            "small kernels can run concurrently), one H2D and one D2H copy engine (copies in one direction queue).")
    return StreamTimeline(tuple(spans), tuple(serial_spans), serial_s, overlapped_s, False, spec.name,
                          f"durations from {spec.name} datasheet figures", note)
