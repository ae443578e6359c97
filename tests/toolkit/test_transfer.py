"""gpulab.transfer: measure_transfer (CPU for real, CUDA through fakes with the real API's shape) and
find_host_syncs (every kind of hidden host-device synchronisation, with the line that made it)."""
from __future__ import annotations

import io
import itertools

import numpy as np
import pytest
import torch

import gpulab as gl
import gpulab.transfer as transfer


# ---------------------------------------------------------------------------------------------- CPU, for real
def test_cpu_transfer_is_a_host_copy_with_payload_bytes():
    m = gl.transfer.measure_transfer(1 << 20, device="cpu", min_run_time=0.02)
    assert isinstance(m, gl.Measurement)
    assert m.bytes_moved == 1 << 20 and m.bytes_per_s > 0 and m.runs >= 5
    assert m.label == "host copy 1 MiB" and m.device == "cpu"
    assert "memcpy" in m.description and "no link" in m.description


def test_cpu_says_what_it_could_not_do():
    m = gl.transfer.measure_transfer(4096, device="cpu", pinned=True, non_blocking=True, until="returned", min_run_time=0.01)
    assert m.label == "host copy 4 KiB (pinned n/a: no CUDA; non_blocking: no effect on CPU) (host wait)"
    assert "until the call returned" in m.description
    d2h = gl.transfer.measure_transfer(4096, device="cpu", direction="d2h", min_run_time=0.01, label="mine")
    assert d2h.label == "mine"


def test_max_runs_bounds_the_loop():
    m = gl.transfer.measure_transfer(64, device="cpu", min_run_time=10.0, min_runs=3, max_runs=7)
    assert m.runs == 7


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(nbytes=0), ValueError, "nbytes must be >= 1"),
    (dict(nbytes=1.5), TypeError, "whole number of bytes"),
    (dict(nbytes=True), TypeError, "whole number of bytes"),
    (dict(nbytes=64, pinned="yes"), TypeError, "pinned must be True or False"),
    (dict(nbytes=64, non_blocking=1), TypeError, "non_blocking must be True or False"),
    (dict(nbytes=64, direction="up"), ValueError, "direction must be 'h2d'"),
    (dict(nbytes=64, until="never"), ValueError, "until must be 'complete' or 'returned'"),
    (dict(nbytes=64, min_run_time=0), ValueError, "min_run_time"),
    (dict(nbytes=64, warmup=-1), ValueError, "warmup"),
    (dict(nbytes=64, min_runs=5, max_runs=2), ValueError, "max_runs"),
    (dict(nbytes=64, device="meta"), ValueError, "device='meta' is not a device gpulab can use"),
])
def test_measure_transfer_rejects_bad_input(kwargs, error, match):
    kwargs = {"device": "cpu", **kwargs}
    nbytes = kwargs.pop("nbytes")
    with pytest.raises(error, match=match):
        gl.transfer.measure_transfer(nbytes, **kwargs)


# ---------------------------------------------------------------------------------------------- CUDA, faked
class _Recorder:
    """Fakes for the CUDA path: torch.empty (records pin_memory/device, returns CPU tensors), Tensor.copy_
    (records non_blocking), gpulab's synchronize (records the device) and a clock (records reads)."""

    def __init__(self, monkeypatch):
        self.events: list[tuple] = []
        self.allocs: list[dict] = []
        real_empty, real_copy = torch.empty, torch.Tensor.copy_
        tick = itertools.count()

        def empty(*size, dtype=None, device=None, pin_memory=False, **kw):
            self.allocs.append({"device": None if device is None else torch.device(device), "pin_memory": pin_memory})
            return real_empty(*size, dtype=dtype)          # no CUDA here: a CPU tensor stands in

        def copy_(dst, src, non_blocking=False):
            self.events.append(("copy", non_blocking))
            return real_copy(dst, src, non_blocking=non_blocking)

        class Clock:
            @staticmethod
            def perf_counter():
                self.events.append(("clock",))
                return next(tick) * 1e-3

        monkeypatch.setattr(torch, "empty", empty)
        monkeypatch.setattr(torch.Tensor, "copy_", copy_)
        monkeypatch.setattr(transfer, "synchronize", lambda dev: self.events.append(("sync", str(dev))))
        monkeypatch.setattr(transfer, "environment", lambda dev: gl.timing.environment("cpu"))
        monkeypatch.setattr(transfer, "time", Clock)

    def timed(self, warmup: int) -> list[tuple]:
        """Events after warm-up (warm-up copies, then one sync) and the deadline's clock read."""
        return self.events[warmup + 2:]


@pytest.mark.parametrize("pinned", [False, True])
def test_cuda_h2d_complete_syncs_before_the_clock_stops(monkeypatch, pinned, pretend_gpus):
    rec = _Recorder(monkeypatch)
    m = gl.transfer.measure_transfer(1 << 20, device="cuda", pinned=pinned, non_blocking=True, warmup=1, min_runs=2,
                            max_runs=2, min_run_time=0.001)
    host, dev = rec.allocs
    assert host == {"device": None, "pin_memory": pinned} and dev["device"] == torch.device("cuda")
    # per run: sync, clock, copy, sync, clock (the copy is finished when the clock stops)
    run = [("sync", "cuda"), ("clock",), ("copy", True), ("sync", "cuda"), ("clock",)]
    assert rec.timed(warmup=1) == run * 2
    assert m.label == f"H2D 1 MiB {'pinned' if pinned else 'pageable'} non_blocking"
    assert m.runs == 2 and m.bytes_moved == 1 << 20


def test_cuda_returned_stops_the_clock_before_syncing(monkeypatch, pretend_gpus):
    rec = _Recorder(monkeypatch)
    m = gl.transfer.measure_transfer(4096, device="cuda:0", pinned=True, non_blocking=True, until="returned", warmup=0,
                            min_runs=1, max_runs=1, min_run_time=0.001)
    assert rec.timed(warmup=0) == [("sync", "cuda:0"), ("clock",), ("copy", True), ("clock",), ("sync", "cuda:0")]
    assert m.label == "H2D 4 KiB pinned non_blocking (host wait)" and "host thread is blocked" in m.description


def test_cuda_d2h_copies_from_the_device_buffer(monkeypatch, pretend_gpus):
    rec = _Recorder(monkeypatch)
    m = gl.transfer.measure_transfer(4096, device="cuda", direction="d2h", warmup=0, min_runs=1, max_runs=1)
    assert ("copy", False) in rec.events and m.label == "D2H 4 KiB pageable"
    assert "device to host" in m.description


def test_pinned_request_on_mps_is_reported_not_faked(monkeypatch):
    rec = _Recorder(monkeypatch)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    m = gl.transfer.measure_transfer(4096, device="mps", pinned=True, warmup=0, min_runs=1, max_runs=1)
    assert rec.allocs[0]["pin_memory"] is False                    # page-locking is a CUDA service
    assert m.label == "H2D 4 KiB pageable (pinned n/a: needs CUDA)"


# ---------------------------------------------------------------------------------------------- host syncs
def test_every_kind_of_sync_is_found_with_its_line():
    buf = io.StringIO()

    def loop(x):
        out = []
        for _ in range(2):
            loss = (x * x).mean()
            out.append(loss.item())                     # value read
            if loss > 0:                                # control flow
                print(f"{loss:.3f}", file=buf)          # print
            loss.cpu()                                  # copy to host
            x.tolist()                                  # copy to host
            np.asarray(x.numpy())                       # copy to host
            x[x > 0]                                    # data-dependent shape
            torch.nonzero(x)                            # data-dependent shape
            torch.where(x > 0)                          # data-dependent shape
            float(loss)                                 # value read
        return out

    report = gl.transfer.find_host_syncs(loop, torch.randn(8))
    assert len(report.result) == 2 and report.device == "cpu"
    assert report.by_kind() == {"value read": 4, "copy to host": 6, "data-dependent shape": 6,
                                "control flow": 2, "print": 2}
    assert report.total == 20 and report.waits_here == 0
    item = next(p for p in report.points if p.call == ".item()")
    assert item.count == 2 and item.where.startswith("test_transfer.py:") and "loss.item()" in item.code
    calls = {p.call for p in report.points}
    assert {"boolean-mask indexing", "torch.nonzero", "torch.where(condition)", ".numpy()", ".tolist()",
            "bool(tensor) / if tensor:", "print / repr / f-string", "float(tensor)"} <= calls


def test_what_is_not_a_sync():
    def quiet(x):
        y = x.to(x.device)                  # same device: a no-op
        z = x.to(torch.float16)             # dtype only
        w = x.to("meta", non_blocking=True)  # non_blocking copies do not wait
        losses = [(x * i).sum() for i in range(3)]
        return torch.stack(losses), y, z, w

    assert gl.transfer.find_host_syncs(quiet, torch.ones(4)).total == 0


def test_device_changes_count_as_blocking_copies():
    def move(x):
        return x.to("meta"), x.to(device="meta"), x.to(torch.empty(1, device="meta"))

    report = gl.transfer.find_host_syncs(move, torch.ones(2))
    assert report.by_kind() == {"copy to device": 3}
    assert {p.call for p in report.points} == {".to('meta')"}


def test_classify_device_to_host():
    cpu = torch.ones(1)
    assert transfer._classify("to", (cpu, "cpu"), {}) is None                         # stays on the host
    assert transfer._classify("item", (1.0,), {}) is None                               # not a tensor
    assert transfer._classify("copy_", (cpu, torch.ones(1, device="meta")), {}) == ("copy to host", ".to('cpu')")
    assert transfer._classify("copy_", (cpu, torch.ones(1, device="meta"), True), {}) is None


def test_report_counts_waits_and_renders():
    pts = (gl.transfer.SyncPoint("value read", ".item()", "cell.py:3", "loss.item()", 10, True),
           gl.transfer.SyncPoint("print", "print / repr / f-string", "cell.py:4", "print(f'<{loss}>')", 10, True),
           *(gl.transfer.SyncPoint("copy to host", ".cpu()", f"cell.py:{i}", "x.cpu()", 1, False) for i in range(10, 16)))
    r = gl.transfer.SyncReport("loop", pts, "cuda:0")
    assert r.total == 26 and r.waits_here == 20
    assert list(r.by_kind()) == ["value read", "print", "copy to host"]
    text = repr(r)
    assert text.startswith("Host syncs in loop: 26 (20 waited on this machine)")
    assert len(text.splitlines()) <= 10 and "2 more" in text
    assert "&lt;" in r._repr_html_() and "<{loss}>" not in r._repr_html_()
    assert list(r.to_dataframe().columns) == ["kind", "call", "where", "code", "count", "waits_here"]
    empty = gl.transfer.SyncReport("f", (), "cpu")
    assert empty.total == 0 and "Host syncs in f: 0" in repr(empty) and empty.to_dataframe().empty
    with pytest.raises(Exception):
        r.total = 3                                     # frozen


def test_find_host_syncs_needs_a_callable():
    with pytest.raises(TypeError, match="fn must be a callable"):
        gl.transfer.find_host_syncs(torch.ones(1).item())


def test_doctests():
    import doctest

    assert doctest.testmod(transfer).failed == 0
