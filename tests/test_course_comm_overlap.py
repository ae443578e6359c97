"""course.comm_overlap / profile_comm_overlap and the DDP script's --profile-overlap, without a GPU: interval
arithmetic on made-up kernels, and the profiler replaced by a fake whose events have the real FunctionEvent's
attributes (checked against the installed torch first)."""
import argparse
import contextlib
import inspect

import pytest
import torch

from gpulab import course
from gpulab.course import comm_overlap as co


def test_overlap_arithmetic():
    k = [("sgemm", 0, 100), ("relu", 100, 120), ("ncclDevKernel_AllReduce_Sum_f32", 50, 150),
         ("ncclKernel_AllReduce", 140, 160), ("Memcpy DtoD", 150, 200)]
    o = course.comm_overlap(k)
    assert o.comm_s == pytest.approx(110e-6)          # union 50..160
    assert o.compute_s == pytest.approx(120e-6)       # union 0..120; the memcpy is not compute
    assert o.overlapped_s == pytest.approx(70e-6)     # 50..120
    assert o.hidden_share == pytest.approx(70 / 110)
    assert (o.comm_kernels, o.compute_kernels) == (2, 2)
    assert "NCCL kernels" in repr(o)


def test_no_communication_and_bad_intervals():
    o = course.comm_overlap([("sgemm", 0, 10)])
    assert o.hidden_share is None and "no communication" in repr(o)
    with pytest.raises(ValueError):
        course.comm_overlap([("nccl", 5, 1)])


def test_real_profiler_surface():
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent
    from torch.profiler import ProfilerActivity, profile

    assert hasattr(ProfilerActivity, "CUDA") and hasattr(DeviceType, "CUDA")
    assert "activities" in inspect.signature(profile).parameters
    params = inspect.signature(FunctionEvent.__init__).parameters
    assert {"device_type", "device_index", "start_us", "end_us"} <= set(params)
    e = FunctionEvent(id=0, name="k", thread=0, start_us=1.0, end_us=3.0, device_type=DeviceType.CUDA,
                      device_index=0)
    assert (e.time_range.start, e.time_range.end, e.device_index) == (1.0, 3.0, 0)


def _fake_profiler(monkeypatch, events, log):
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    evts = [FunctionEvent(id=i, name=n, thread=0, start_us=s, end_us=e, device_type=DeviceType.CUDA if dev >= 0
                          else DeviceType.CPU, device_index=max(dev, 0)) for i, (n, s, e, dev) in enumerate(events)]

    class Prof:
        def events(self):
            return evts

    @contextlib.contextmanager
    def profile(activities=None, **kw):
        log.append(("profile", tuple(a.name for a in activities)))
        yield Prof()

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: log.append(("sync",)))
    monkeypatch.setattr(torch.profiler, "profile", profile)


def test_profile_reads_only_this_gpus_kernels(monkeypatch):
    log = []
    _fake_profiler(monkeypatch, [("aten::mm", 0, 500, -1), ("sgemm", 0, 100, 0), ("ncclDevKernel_AllReduce", 50, 150, 0),
                                 ("ncclDevKernel_AllReduce", 0, 1000, 1)], log)
    calls = []
    o = course.profile_comm_overlap(lambda: calls.append(1), steps=3, device_index=0)
    assert len(calls) == 3 and o.hidden_share == pytest.approx(0.5)
    assert ("profile", ("CPU", "CUDA")) in log and log[-1] == ("sync",)


def test_profile_needs_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="CUDA"):
        course.profile_comm_overlap(lambda: None)


def test_script_profiles_only_under_nccl():
    from gpulab.course.scripts import ddp_train

    args = ddp_train.parse_args(["--profile-overlap"])
    assert args.profile_overlap is True and ddp_train.parse_args([]).profile_overlap is False
    info = argparse.Namespace(backend="gloo")
    assert ddp_train.overlap_profile(info, args) == {}
