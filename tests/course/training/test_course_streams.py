"""Lesson 02's CUDA stream demonstrations (gpulab.course.training.streams) on a machine without a GPU: torch.cuda's
streams and events are replaced by fakes that log the order in which work is queued and on which stream, and
the fakes are checked against the real API's signatures first."""
from __future__ import annotations

import contextlib
import inspect

import pytest
import torch

from gpulab.course.training import streams as overlap


def test_fakes_match_the_real_cuda_api():
    assert "enable_timing" in inspect.signature(torch.cuda.Event).parameters
    for name in ("record", "synchronize", "elapsed_time"):
        assert hasattr(torch.cuda.Event, name)
    assert list(inspect.signature(torch.cuda.Event.record).parameters) == ["self", "stream"]
    for name in ("wait_event", "wait_stream"):
        assert hasattr(torch.cuda.Stream, name)
    assert "device" in inspect.signature(torch.cuda.Stream).parameters
    assert list(inspect.signature(torch.cuda.stream).parameters) == ["stream"]
    assert "device" in inspect.signature(torch.cuda.current_stream).parameters
    assert hasattr(torch.Tensor, "record_stream") and hasattr(torch.Tensor, "pin_memory")


CUDA_TYPE = 1                      # c10::DeviceType::CUDA


class FakeStream(torch.Stream):
    """A handle on one fake CUDA stream. Like torch.cuda.Stream it is a torch.Stream: handles on one stream
    (same stream_id, device_index, device_type) are equal and hash alike but are different objects, and
    ``current_stream()`` hands out a new one on every call."""

    cuda: "FakeCuda"

    @property
    def name(self):
        return self.cuda.names[self.stream_id]

    def wait_event(self, event):
        self.cuda.log.append((self.name, f"wait {event.name}"))

    def wait_stream(self, stream):
        self.cuda.log.append((self.name, f"wait stream {stream.name}"))


class FakeCuda:
    """Streams, events and a clock: every queued operation is logged as (stream, what)."""

    def __init__(self):
        self.log, self.clock = [], 0.0
        self.names = {0: "main"}          # stream id -> name; 0 is the default stream
        self.current_id = 0

    def _handle(self, stream_id):
        s = FakeStream(stream_id=stream_id, device_index=0, device_type=CUDA_TYPE)
        s.cuda = self
        return s

    @property
    def current(self):
        return self._handle(self.current_id)

    def Stream(self, name="side", device=None):
        self.names[len(self.names)] = name
        return self._handle(len(self.names) - 1)

    def Event(self, enable_timing=False, blocking=False, interprocess=False, external=False):
        cuda = self

        class _Event:
            def __init__(self):
                self.name, self.t = None, None

            def record(self, stream=None):
                stream = stream or cuda.current
                self.name = f"event{len(cuda.log)}"
                self.t = cuda.clock
                cuda.log.append((stream.name, f"record {self.name}"))

            def synchronize(self):
                cuda.log.append(("host", f"sync {self.name}"))

            def elapsed_time(self, end):
                return (end.t - self.t) * 1e3

        return _Event()

    @contextlib.contextmanager
    def stream(self, s):
        prev, self.current_id = self.current_id, s.stream_id
        yield
        self.current_id = prev

    def current_stream(self, device=None):
        return self._handle(self.current_id)

    def install(self, monkeypatch):
        for name in ("Event", "Stream", "stream", "current_stream"):
            monkeypatch.setattr(torch.cuda, name, getattr(self, name))
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: self.log.append(("host", "sync all")))


def test_the_fake_current_stream_is_a_new_equal_handle_per_call(monkeypatch):
    assert issubclass(torch.cuda.Stream, torch.Stream) and "__eq__" in vars(torch.cuda.Stream)
    cuda = FakeCuda()
    cuda.install(monkeypatch)
    one, two = torch.cuda.current_stream("cuda"), torch.cuda.current_stream("cuda")
    assert one is not two and one == two and hash(one) == hash(two)
    side = torch.cuda.Stream(device="cuda")
    assert side != one
    with torch.cuda.stream(side):
        assert torch.cuda.current_stream() == side and torch.cuda.current_stream() is not side


class HostBatch:
    """A pinned host batch whose .to() logs the stream the copy is queued on."""

    def __init__(self, cuda, k):
        self.cuda, self.k = cuda, k

    def to(self, device, non_blocking=False):
        self.cuda.log.append((self.cuda.current.name, f"copy {self.k}" + (" async" if non_blocking else "")))
        self.cuda.clock += 1.0
        return DeviceBatch(self.cuda, self.k)


class DeviceBatch:
    def __init__(self, cuda, k):
        self.cuda, self.k = cuda, k

    def record_stream(self, stream):
        self.cuda.log.append((stream.name, f"record_stream {self.k}"))


def fake_compute(cuda):
    def compute(x):
        cuda.log.append((cuda.current.name, f"compute {x.k}"))
        cuda.clock += 1.0
        return torch.tensor(float(x.k))
    return compute


def test_overlapped_copies_the_next_batch_on_the_side_stream_before_computing_this_one(monkeypatch):
    cuda = FakeCuda()
    cuda.install(monkeypatch)
    host = [HostBatch(cuda, k) for k in range(3)]
    side = cuda.Stream("side")
    outs = overlap._overlapped(host, fake_compute(cuda), "cuda", side)
    assert [float(o) for o in outs] == [0.0, 1.0, 2.0]
    ops = [(s, w) for s, w in cuda.log if not w.startswith(("record event", "wait stream"))]
    copies = [(s, w) for s, w in ops if w.startswith("copy")]
    assert copies == [("side", "copy 0 async"), ("side", "copy 1 async"), ("side", "copy 2 async")]
    order = [w for _, w in ops]
    for k in range(3):   # main waits for batch k's copy event, then marks the tensor, before computing on it
        wait = next(i for i, (s, w) in enumerate(ops) if s == "main" and w.startswith("wait") and
                    i < order.index(f"compute {k}") and i > order.index(f"copy {k} async"))
        assert order.index(f"record_stream {k}") < order.index(f"compute {k}") and wait >= 0
        if k + 1 < 3:    # batch k+1's copy is queued before batch k's compute: they overlap on the GPU
            assert order.index(f"copy {k + 1} async") < order.index(f"compute {k}")
    assert all(s == "main" for s, w in ops if w.startswith("compute"))
    # each event the main stream waits for was recorded on the side stream right after its copy
    recorded = {w.split()[1]: s for s, w in cuda.log if w.startswith("record event")}
    waited = [w.split()[1] for s, w in cuda.log if s == "main" and w.startswith("wait event")]
    assert len(waited) == 3 and all(recorded[e] == "side" for e in waited)


def test_timing_reads_the_events_only_after_synchronising(monkeypatch, pretend_gpus):
    cuda = FakeCuda()
    cuda.install(monkeypatch)
    host = [HostBatch(cuda, k) for k in range(4)]
    result = overlap.copy_compute_overlap(host, fake_compute(cuda), device="cuda", same=lambda a, b: bool(a == b))
    assert result.batches == 4 and result.same
    # the fake clock ticks once per queued copy or compute (no real overlap): the protocol is what is checked
    assert result.serial_s == pytest.approx(8.0) and result.overlapped_s == pytest.approx(8.0)
    assert result.copy_s == pytest.approx(4.0) and result.compute_s == pytest.approx(4.0)
    syncs = [i for i, (s, w) in enumerate(cuda.log) if s == "host" and w.startswith("sync")]
    assert len(syncs) >= 4   # one per timed variant
    assert "4 batches" in repr(result) and "same results: True" in repr(result)


def test_overlap_checks_its_arguments():
    with pytest.raises(ValueError, match="at least one"):
        overlap.copy_compute_overlap([], lambda x: x)
    with pytest.raises(TypeError, match="compute"):
        overlap.copy_compute_overlap([object()], None)


def test_stale_read_reads_before_and_after_the_event(monkeypatch):
    cuda = FakeCuda()
    cuda.install(monkeypatch)
    pending = []

    def deferred_copy(dst, src):           # what a real non-blocking copy looks like to the host: not yet done
        pending.append((dst, src.clone()))

    real_event = cuda.Event

    def event(**kw):
        e = real_event(**kw)
        sync = e.synchronize

        def synchronize():
            for dst, src in pending:       # the GPU reaches the copy: the data lands
                dst.copy_(src)
            sync()
        e.synchronize = synchronize
        return e

    monkeypatch.setattr(torch.cuda, "Event", event)
    monkeypatch.setattr(overlap, "_copy_async", deferred_copy)
    r = overlap.stale_read(device="cpu", n=1000, busy_matmuls=2, size=8, pin=False)
    assert r.n == 1000 and r.wrong_before_sync == 1000 and r.wrong_after_sync == 0 and r.stale
    assert "after waiting" in repr(r)


def test_stale_read_with_a_copy_that_already_landed_reports_nothing_stale(monkeypatch):
    cuda = FakeCuda()
    cuda.install(monkeypatch)
    r = overlap.stale_read(device="cpu", n=100, busy_matmuls=1, size=4, pin=False)   # CPU copies are synchronous
    assert r.wrong_before_sync == 0 and r.wrong_after_sync == 0 and not r.stale
