"""gpulab.streams on a machine without a GPU.

measure_streams runs against a fake torch.cuda whose streams keep their own simulated clocks (a stream that
waits on an event or another stream jumps forward to it, an event reads its stream's clock), and whose
signatures are checked against the real torch.cuda first, so the fake cannot drift from the API it stands for.
An event can only be read once the host has waited for an event at or after it, as with cudaEventElapsedTime.
model_streams is checked against hand-computed schedules from the datasheet figures.
"""
from __future__ import annotations

import contextlib
import inspect
import math

import matplotlib
import pytest
import torch

from gpulab import streams as st
from gpulab.reference import gpu_spec, published
from gpulab.streams import Span, StreamTask, StreamTimeline, measure_streams, model_streams

matplotlib.use("Agg")


# ---------------------------------------------------------------------------------------------- the fake
class Queue:
    """One CUDA stream as the device sees it: a name for the log and the stream's simulated clock."""

    def __init__(self, name):
        self.name, self.t = name, 0.0


class Sim:
    """The simulated device: a log of (where, what), its streams by id (0: the default stream, the current one
    until ``torch.cuda.stream(s)`` switches), and the host's view of the clock."""

    active: "Sim"

    def __init__(self):
        self.log, self.created, self.n_events = [], [], 0
        self.queues = {0: Queue("main")}
        self.current_id = 0
        self.synced_t = -math.inf             # every event at or before this time is complete

    @property
    def main(self):
        return self.queues[0]

    @property
    def current(self):
        return self.queues[self.current_id]


CUDA_TYPE = 1                                 # c10::DeviceType::CUDA, what a torch.cuda.Stream reports
REAL_STREAM = torch.cuda.Stream


class FakeStream(torch.Stream):
    """torch.cuda.Stream: a Python handle on a CUDA stream. Like the real class it is a torch.Stream, so two
    handles on one stream (same stream_id, device_index, device_type) are equal and hash alike while being
    different objects; ``FakeStream(device=...)`` makes a new stream, ``FakeStream(stream_id=..., device_index=...,
    device_type=...)`` a handle on an existing one (what the real ``current_stream()`` builds on every call)."""

    def __new__(cls, device=None, priority=0, **kwargs):
        if "stream_id" not in kwargs:
            index = 0 if device is None else (torch.device(device).index or 0)
            kwargs = dict(stream_id=len(Sim.active.queues), device_index=index, device_type=CUDA_TYPE)
            Sim.active.queues[kwargs["stream_id"]] = Queue(f"side{len(Sim.active.created)}")
        return super().__new__(cls, **kwargs)

    def __init__(self, device=None, priority=0, **kwargs):
        if "stream_id" not in kwargs:
            Sim.active.created.append(self)

    def __hash__(self):                       # as torch.cuda.Stream hashes
        return hash((self.cuda_stream, self.device))

    @property
    def cuda_stream(self):                    # the cudaStream_t handle, as an int
        return 0x7F00 + self.stream_id

    @property
    def name(self):
        return Sim.active.queues[self.stream_id].name

    @property
    def t(self):
        return Sim.active.queues[self.stream_id].t

    @t.setter
    def t(self, value):
        Sim.active.queues[self.stream_id].t = value

    def wait_event(self, event):
        if event.t is None:
            raise RuntimeError("waiting on an event that was never recorded")
        Sim.active.log.append((self.name, f"wait {event.name}"))
        self.t = max(self.t, event.t)

    def wait_stream(self, stream):
        Sim.active.log.append((self.name, f"wait stream {stream.name}"))
        self.t = max(self.t, stream.t)


class FakeEvent:
    def __init__(self, enable_timing=False, blocking=False, interprocess=False, external=False):
        sim = Sim.active
        self.timing, self.t, self.stream = enable_timing, None, None
        self.name = f"event{sim.n_events}"
        sim.n_events += 1

    def record(self, stream=None):
        stream = stream or current_stream()
        self.t, self.stream = stream.t, stream
        Sim.active.log.append((stream.name, f"record {self.name}"))

    def synchronize(self):
        Sim.active.log.append(("host", f"sync {self.name}"))
        Sim.active.synced_t = max(Sim.active.synced_t, self.t)

    def elapsed_time(self, end_event):
        if not (self.timing and end_event.timing):
            raise RuntimeError("both events need enable_timing=True")
        if max(self.t, end_event.t) > Sim.active.synced_t:
            raise RuntimeError("cudaErrorNotReady: an event read before the host waited for it")
        return (end_event.t - self.t) * 1e3


@contextlib.contextmanager
def stream(stream):
    sim = Sim.active
    prev, sim.current_id = sim.current_id, stream.stream_id
    try:
        yield
    finally:
        sim.current_id = prev


def current_stream(device=None):
    """A new handle on the current stream per call, as torch.cuda.current_stream builds one."""
    return FakeStream(stream_id=Sim.active.current_id, device_index=0, device_type=CUDA_TYPE)


def synchronize(device=None):
    raise AssertionError("measure_streams waits on its end event, not on the whole device")


def is_available():
    return True


def get_device_name(device=None):
    return "Fake GPU"


def device_count():
    return 1


FAKES = {"Stream": FakeStream, "Event": FakeEvent, "stream": stream, "current_stream": current_stream,
         "synchronize": synchronize, "is_available": is_available, "get_device_name": get_device_name,
         "device_count": device_count}


def _names(fn):
    return [p for p in inspect.signature(fn).parameters]


def test_the_fake_has_the_real_signatures():
    real = torch.cuda
    assert _names(FakeStream) == _names(real.Stream) == ["device", "priority", "kwargs"]
    assert set(_names(real.Event)) <= set(_names(FakeEvent)) and "enable_timing" in _names(real.Event)
    for cls, fake, methods in ((real.Stream, FakeStream, ("wait_event", "wait_stream")),
                               (real.Event, FakeEvent, ("record", "synchronize", "elapsed_time"))):
        for m in methods:
            assert _names(getattr(fake, m)) == _names(getattr(cls, m)), f"{cls.__name__}.{m}"
    for name in ("stream", "current_stream", "synchronize", "is_available", "get_device_name", "device_count"):
        assert _names(FAKES[name]) == _names(getattr(real, name)), name
    assert hasattr(torch.Tensor, "record_stream") and hasattr(torch.Tensor, "pin_memory")


@pytest.fixture
def sim(monkeypatch):
    Sim.active = s = Sim()
    for name, fake in FAKES.items():
        monkeypatch.setattr(torch.cuda, name, fake)
    return s


def work(sim, name, durations):
    """A task body: logs the stream it runs on and advances that stream's clock by the next duration."""
    it = iter(durations)

    def fn():
        d = next(it)
        sim.log.append((sim.current.name, f"run {name}"))
        sim.current.t += d
    return fn


# ---------------------------------------------------------------------------------------------- measured
def test_measure_queues_each_task_on_its_stream_between_events_and_keeps_the_fastest_run(sim):
    # calls per task: warm-up serial, warm-up overlapped, then (serial, overlapped) per repeat
    copy = StreamTask("copy", "copy", "h2d", fn=work(sim, "copy", [9, 9, 2, 2, 2, 2, 2, 2]))
    k1 = StreamTask("k1", "compute", "kernel", fn=work(sim, "k1", [9, 9, 3, 4, 3, 1, 3, 5]))
    k2 = StreamTask("k2", "compute", "kernel", fn=work(sim, "k2", [9, 9, 1, 1, 5, 1, 1, 1]))
    t = measure_streams([copy, k1, k2], device="cuda:0", repeats=3)

    assert t.measured and t.device == "Fake GPU" and t.source == "CUDA events"
    assert [s.device for s in sim.created] == [torch.device("cuda:0")] * 2  # one stream per label, on the device
    # fastest overlapped run is repeat 2: compute stream 1 + 1 = 2, copy stream 2 -> 2 s; serial fastest is
    # repeat 1 or 3 (2 + 3 + 1 = 6 s); ties keep the first
    assert t.overlapped_s == pytest.approx(2.0) and t.serial_s == pytest.approx(6.0)
    assert [(s.stream, s.name, s.kind, s.start_s, s.end_s) for s in t.spans] == [
        ("copy", "copy", "h2d", 0.0, 2.0), ("compute", "k1", "kernel", 0.0, 1.0), ("compute", "k2", "kernel", 1.0, 2.0)]
    assert [(s.stream, s.start_s, s.end_s) for s in t.serial_spans] == [
        ("serial", 0.0, 2.0), ("serial", 2.0, 5.0), ("serial", 5.0, 6.0)]
    assert t.speedup == pytest.approx(3.0) and t.overlap_s == pytest.approx(2.0)

    runs = [w for _, w in sim.log if w == "run copy"]
    assert len(runs) == 2 + 2 * 3                                        # one warm-up per schedule
    ran_on = [(where, w.split()[1]) for where, w in sim.log if w.startswith("run")]
    for i in range(0, len(ran_on), 6):                                   # serial run, then overlapped run
        assert ran_on[i:i + 3] == [("main", "copy"), ("main", "k1"), ("main", "k2")]
        assert ran_on[i + 3:i + 6] == [("side0", "copy"), ("side1", "k1"), ("side1", "k2")]


def _runs(log):
    """Split the log into runs: each starts with an event recorded on main and ends with the host's sync."""
    out, cur = [], []
    for entry in log:
        cur.append(entry)
        if entry[0] == "host":
            out.append(cur)
            cur = []
    return out


def test_the_event_protocol_of_one_overlapped_run(sim):
    tasks = [StreamTask("a", "s1", "h2d", fn=work(sim, "a", [1] * 4)),
             StreamTask("b", "s2", "kernel", fn=work(sim, "b", [2] * 4))]
    measure_streams(tasks, device="cuda", repeats=1)
    runs = _runs(sim.log)
    assert len(runs) == 4                                    # warm-up serial, warm-up overlapped, timed x2
    serial, overlapped = runs[2], runs[3]
    start = overlapped[0]
    assert start[0] == "main" and start[1].startswith("record")
    ev = start[1].split()[1]
    # both side streams wait for the start event before anything is queued on them
    assert overlapped[1:3] == [("side0", f"wait {ev}"), ("side1", f"wait {ev}")]
    # each task sits between two events recorded on its own stream
    assert overlapped[3][0] == overlapped[4][0] == overlapped[5][0] == "side0"
    assert [w.split()[0] for _, w in overlapped[3:6]] == ["record", "run", "record"]
    assert overlapped[6][0] == overlapped[7][0] == overlapped[8][0] == "side1"
    # the current stream waits for every side stream, then records the end event, then the host syncs on it
    assert overlapped[9:11] == [("main", "wait stream side0"), ("main", "wait stream side1")]
    end = overlapped[11]
    assert end[0] == "main" and end[1].startswith("record")
    assert overlapped[12] == ("host", f"sync {end[1].split()[1]}")
    # the serial run: everything on the current stream, no waits
    assert {where for where, _ in serial} == {"main", "host"} and not any("wait" in w for _, w in serial)


def test_stream_handles_compare_by_value_as_in_torch(sim):
    """torch.cuda.current_stream() builds a new Stream on every call; handles on one stream are equal, not the
    same object. The fake's handles are torch.Stream objects, so the real comparison is what is tested."""
    real = REAL_STREAM
    assert issubclass(real, torch.Stream) and "__eq__" in vars(real) and "__hash__" in vars(real)
    for name in ("stream_id", "device_index", "device_type", "cuda_stream", "device"):
        assert hasattr(real, name) and hasattr(FakeStream, name), name
    a = torch.Stream(stream_id=0, device_index=0, device_type=CUDA_TYPE)
    b = torch.Stream(stream_id=0, device_index=0, device_type=CUDA_TYPE)
    assert a == b and a is not b and hash(a) == hash(b)
    assert a != torch.Stream(stream_id=3, device_index=0, device_type=CUDA_TYPE)
    one, two = torch.cuda.current_stream(), torch.cuda.current_stream("cuda")
    assert one is not two and one == two and hash(one) == hash(two) and len({one, two}) == 1
    side = torch.cuda.Stream(device="cuda")
    assert side != one and len({one, side}) == 2
    with torch.cuda.stream(side):
        assert torch.cuda.current_stream() == side and torch.cuda.current_stream() is not side


def test_the_serial_schedule_is_labelled_serial_in_its_panel_and_its_table(sim):
    import matplotlib.pyplot as plt

    tasks = [StreamTask("up", "copy", "h2d", fn=work(sim, "up", [1.0] * 4)),
             StreamTask("mm", "compute", "kernel", fn=work(sim, "mm", [2.0] * 4))]
    t = measure_streams(tasks, device="cuda", repeats=1)
    assert [(s.stream, s.name, s.start_s, s.end_s) for s in t.serial_spans] == [
        ("serial", "up", 0.0, 1.0), ("serial", "mm", 1.0, 3.0)]
    assert [(s.stream, s.name) for s in t.spans] == [("copy", "up"), ("compute", "mm")]
    df = t.to_dataframe()
    assert df.loc[df.schedule == "serial", "stream"].tolist() == ["serial", "serial"]
    assert df.loc[df.schedule == "overlapped", "stream"].tolist() == ["copy", "compute"]
    ax = t.plot()
    serial_ax = ax.figure.axes[1]
    assert len(ax.patches) == 2 and len(serial_ax.patches) == 2          # the serial panel holds both tasks
    assert [x.get_text() for x in serial_ax.get_yticklabels()] == ["serial"]
    plt.close(ax.figure)


def test_without_joining_the_side_streams_the_events_cannot_be_read(sim, monkeypatch):
    """The fake can fail: drop the current stream's wait for the side streams and reading a side event errs."""
    monkeypatch.setattr(FakeStream, "wait_stream", lambda self, stream: None)
    tasks = [StreamTask("a", "s1", "kernel", fn=work(sim, "a", [1.0] * 4))]
    with pytest.raises(RuntimeError, match="NotReady"):
        measure_streams(tasks, device="cuda", repeats=1)


def test_measure_refuses_a_cpu_and_points_to_the_model():
    t = StreamTask("k", "s", "kernel", fn=lambda: None)
    with pytest.raises(ValueError, match=r"device='cpu'.*model_streams"):
        measure_streams([t], device="cpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match=r"device='cuda'.*model_streams"):
            measure_streams([t], device="cuda")


def test_measure_checks_its_arguments(sim):
    with pytest.raises(ValueError, match="fn=None.*'k'"):
        measure_streams([StreamTask("k", "s", "kernel")])
    t = StreamTask("k", "s", "kernel", fn=lambda: None)
    with pytest.raises(ValueError, match="repeats"):
        measure_streams([t], repeats=0)
    with pytest.raises(TypeError, match="repeats"):
        measure_streams([t], repeats=1.5)


def test_lesson_02_times_with_the_same_event_clock(sim):
    from gpulab.course.training import streams as lesson

    sim.main.t = 5.0
    seconds, out = lesson._elapsed_s(lambda: setattr(sim.main, "t", sim.main.t + 0.25) or "done", "cuda")
    assert seconds == pytest.approx(0.25) and out == "done"
    assert [w.split()[0] for _, w in sim.log] == ["record", "record", "sync"]


# ---------------------------------------------------------------------------------------------- the model
T4_LINK = 15.75e9


def test_t4_copy_takes_bytes_over_the_published_pcie_gen3_rate():
    assert published("pcie-gen3-x16").low == 15.75
    t = model_streams([StreamTask("up", "a", "h2d", bytes_moved=315_000_000)], gpu="T4")
    assert t.spans[0].duration_s == pytest.approx(315e6 / T4_LINK) == pytest.approx(0.02)
    assert "PCIe Gen3 x16" in t.note and "15.75 GB/s" in t.note


@pytest.mark.parametrize("gpu, gb_s, gen", [("NVIDIA A100-SXM4-40GB", 31.5, "Gen4"), ("H100 SXM", 63, "Gen5"),
                                            ("Tesla T4", 15.75, "Gen3")])
def test_the_host_link_follows_the_gpu(gpu, gb_s, gen):
    t = model_streams([StreamTask("down", "a", "d2h", bytes_moved=10**9)], gpu=gpu)
    assert t.spans[0].duration_s == pytest.approx(1 / gb_s) and f"PCIe {gen} x16" in t.note


def test_kernel_time_is_the_slower_of_memory_and_compute_plus_the_launch():
    spec = gpu_spec("T4")
    mem = StreamTask("mem", "a", "kernel", bytes_moved=3_200_000_000, flops=1e9)
    flop = StreamTask("flop", "b", "kernel", bytes_moved=1000, flops=8.1e12)
    t = model_streams([mem, flop], gpu="T4", launch_s=1e-3)
    assert t.spans[0].duration_s == pytest.approx(3.2e9 / spec.bandwidth_bytes_per_s + 1e-3) == pytest.approx(0.011)
    assert t.spans[1].duration_s == pytest.approx(1.0 + 1e-3)


def test_a_copy_and_a_kernel_on_two_streams_overlap():
    a, b = 0.02, 0.05
    tasks = [StreamTask("copy", "copy", "h2d", bytes_moved=int(a * T4_LINK)),
             StreamTask("kernel", "compute", "kernel", flops=b * 8.1e12)]
    t = model_streams(tasks, gpu="T4", launch_s=0)
    assert t.overlapped_s < t.serial_s
    assert t.serial_s == pytest.approx(a + b) and t.overlapped_s == pytest.approx(max(a, b))
    assert t.speedup <= (a + b) / max(a, b) + 1e-12
    assert t.overlap_s == pytest.approx(a)
    assert t.busy_by_stream == pytest.approx({"copy": a, "compute": b})
    assert [s.stream for s in t.serial_spans] == ["serial", "serial"] and t.serial_spans[1].start_s == pytest.approx(a)


def test_two_kernels_on_two_streams_do_not_overlap_in_the_model():
    tasks = [StreamTask("k1", "s1", "kernel", flops=8.1e10), StreamTask("k2", "s2", "kernel", flops=8.1e10)]
    t = model_streams(tasks, gpu="T4", launch_s=0)
    assert t.overlapped_s == pytest.approx(t.serial_s) == pytest.approx(0.02)
    assert t.overlap_s == 0 and t.spans[1].start_s == pytest.approx(t.spans[0].end_s)
    assert "not sharing SMs" in t.note


def test_copies_in_one_direction_serialise_and_opposite_directions_overlap():
    up1, up2 = (StreamTask(n, s, "h2d", bytes_moved=157_500_000) for n, s in (("up1", "a"), ("up2", "b")))
    same = model_streams([up1, up2], gpu="T4")
    assert same.overlapped_s == pytest.approx(same.serial_s) == pytest.approx(0.02) and same.overlap_s == 0
    down = StreamTask("down", "b", "d2h", bytes_moved=157_500_000)
    both = model_streams([up1, down], gpu="T4")
    assert both.overlapped_s == pytest.approx(0.01) and both.speedup == pytest.approx(2.0)


def test_tasks_on_one_stream_keep_their_order_even_on_free_engines():
    tasks = [StreamTask("up", "a", "h2d", bytes_moved=157_500_000),
             StreamTask("k", "a", "kernel", flops=8.1e10),
             StreamTask("down", "a", "d2h", bytes_moved=157_500_000)]
    t = model_streams(tasks, gpu="T4", launch_s=0)
    assert t.overlapped_s == pytest.approx(t.serial_s) == pytest.approx(0.03)
    assert [round(s.start_s, 6) for s in t.spans] == [0.0, 0.01, 0.02]


def test_an_engine_serves_tasks_in_the_order_given():
    """A copy queued later on another stream waits for the copy engine even if its stream is free."""
    tasks = [StreamTask("k", "a", "kernel", flops=8.1e10), StreamTask("up_a", "a", "h2d", bytes_moved=157_500_000),
             StreamTask("up_b", "b", "h2d", bytes_moved=157_500_000)]
    t = model_streams(tasks, gpu="T4", launch_s=0)
    by = {s.name: s for s in t.spans}
    assert by["up_a"].start_s == pytest.approx(0.01) and by["up_b"].start_s == pytest.approx(0.02)


def test_the_model_says_it_is_a_model_everywhere():
    t = model_streams([StreamTask("k", "a", "kernel", flops=1e9)], gpu="H100 SXM")
    assert not t.measured and t.device == "H100 SXM"
    text = repr(t)
    assert len(text.splitlines()) <= 10 and "MODEL (not a measurement) of a H100 SXM" in text
    assert "durations from H100 SXM datasheet figures" in text and t.note.startswith("MODEL, not a measurement")
    assert "MODEL (not a measurement)" in t._repr_html_() and "<table" in t._repr_html_()


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(name="", stream="s", kind="h2d"), ValueError, "name"),
    (dict(name=3, stream="s", kind="h2d"), TypeError, "name"),
    (dict(name="t", stream=" ", kind="h2d"), ValueError, "stream"),
    (dict(name="t", stream="s", kind="memcpy"), ValueError, "kind must be one of"),
    (dict(name="t", stream="s", kind="kernel", fn=42), TypeError, "fn of task 't'"),
    (dict(name="t", stream="s", kind="h2d", bytes_moved=-1), ValueError, "bytes_moved of task 't'"),
    (dict(name="t", stream="s", kind="h2d", bytes_moved=1.5), TypeError, "bytes_moved"),
    (dict(name="t", stream="s", kind="h2d", bytes_moved=True), TypeError, "bytes_moved"),
    (dict(name="t", stream="s", kind="kernel", flops=float("nan")), ValueError, "flops of task 't'"),
    (dict(name="t", stream="s", kind="kernel", flops=-1.0), ValueError, "flops"),
])
def test_a_task_checks_its_fields(kwargs, error, match):
    with pytest.raises(error, match=match):
        StreamTask(**kwargs)


def test_the_model_checks_its_arguments():
    k = StreamTask("k", "a", "kernel", flops=1e9)
    with pytest.raises(ValueError, match="at least one"):
        model_streams([])
    with pytest.raises(TypeError, match="list of StreamTask"):
        model_streams(k)
    with pytest.raises(TypeError, match="StreamTask objects, got dict"):
        model_streams([k, {"name": "x"}])
    with pytest.raises(ValueError, match=r"unique.*\['k'\]"):
        model_streams([k, StreamTask("k", "b", "h2d", bytes_moved=1)])
    with pytest.raises(ValueError, match=r"gpu='A100'.*known GPUs"):
        model_streams([k], gpu="A100")
    with pytest.raises(TypeError, match="gpu"):
        model_streams([k], gpu=None)
    with pytest.raises(ValueError, match="launch_s"):
        model_streams([k], launch_s=-1e-6)
    with pytest.raises(ValueError, match="copy 'up'.*bytes_moved"):
        model_streams([StreamTask("up", "a", "h2d")])
    with pytest.raises(ValueError, match="kernel 'k0'.*both are 0"):
        model_streams([StreamTask("k0", "a", "kernel")])


# ---------------------------------------------------------------------------------------------- the result
def _hand_made() -> StreamTimeline:
    spans = (Span("a", "x", "h2d", 0.0, 2.0), Span("b", "y", "kernel", 1.0, 3.0), Span("c", "z", "d2h", 1.5, 4.0),
             Span("a", "w", "kernel", 5.0, 6.0))
    serial = tuple(Span("serial", s.name, s.kind, 0.0, 1.0) for s in spans)
    return StreamTimeline(spans, serial, 8.0, 6.0, True, "Fake GPU", "CUDA events")


def test_overlap_and_busy_time_count_shared_time_once():
    t = _hand_made()
    assert t.overlap_s == pytest.approx(2.0)          # [1, 3]: x with y (and z), then y with z; z alone after 3
    assert t.busy_by_stream == {"a": pytest.approx(3.0), "b": pytest.approx(2.0), "c": pytest.approx(2.5)}
    assert t.speedup == pytest.approx(8 / 6)
    df = t.to_dataframe()
    assert list(df.columns) == ["schedule", "stream", "task", "kind", "start_s", "end_s", "duration_s"]
    assert len(df) == 8 and set(df.schedule) == {"overlapped", "serial"}
    assert "measured with CUDA events on Fake GPU" in repr(t) and "MODEL" not in repr(t)


def test_plot_draws_a_lane_per_stream_and_says_what_it_shows():
    import matplotlib.pyplot as plt

    m = model_streams([StreamTask("up", "copy", "h2d", bytes_moved=10**8),
                       StreamTask("k", "compute", "kernel", flops=1e11)], gpu="T4")
    ax = m.plot()
    title = ax.get_title(loc="left")
    assert "MODEL (not a measurement) of a T4" in title and "model" in title.lower()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["copy", "compute"]
    assert len(ax.patches) == 2 and len(ax.figure.axes) == 2       # the serial schedule below
    plt.close(ax.figure)
    _, own = plt.subplots()
    ax = _hand_made().plot(ax=own)
    assert ax is own and "measured with CUDA events on Fake GPU" in ax.get_title(loc="left")
    assert len(ax.figure.axes) == 1 and len(ax.patches) == 4
    plt.close(ax.figure)
