"""course.comm_overlap / profile_comm_overlap and the DDP script's --profile-overlap, without a GPU: interval
arithmetic on made-up kernels, and the profiler replaced by a fake whose events have the real FunctionEvent's
attributes (checked against the installed torch first)."""
import argparse
import contextlib
import inspect
import time

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


def test_device_copies_of_the_ranges_are_no_compute(monkeypatch):
    # a DDP step as kineto hands it out: the host ranges' gpu_user_annotation copies (ProfilerStep#N over the whole
    # step, DDP's forward, nccl:all_reduce over its kernel) beside the kernels
    from support import fake_kineto as K
    from torch.autograd import DeviceType

    step, fwd = K.host_step(1, 0, 0, 1000), K.annotation(2, "DistributedDataParallel.forward", 0, 100)
    comm = K.annotation(3, "nccl:all_reduce", 100, 120)
    events = K.event_list([step, fwd, comm, K.device_step(step, 0, 1000), K.device_annotation(fwd, 0, 300),
                           K.device_annotation(comm, 400, 1000, stream=9),
                           K.kernel(10, "sgemm", 0, 300), K.kernel(11, "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                                                                  400, 1000, stream=9),
                           K.kernel(12, "vectorized_elementwise_kernel", 500, 600)])
    assert sum(e.is_user_annotation and e.device_type == DeviceType.CUDA for e in events) == 3

    class Prof:
        def events(self):
            return events

    @contextlib.contextmanager
    def profile(activities=None, **kw):
        yield Prof()

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.profiler, "profile", profile)
    o = course.profile_comm_overlap(lambda: None, steps=1, device_index=0)
    # the all-reduce ran 400-1000 us; only the elementwise kernel (500-600) computed meanwhile, not the step's copy
    assert (o.comm_kernels, o.compute_kernels) == (1, 2)
    assert o.comm_s == pytest.approx(600e-6) and o.compute_s == pytest.approx(400e-6)
    assert o.hidden_share == pytest.approx(100 / 600)


class _NcclLikeBarrier:
    """``torch.distributed.barrier`` as NCCL's behaves for a rank whose peers arrive ``wait_s`` later: the blocking
    call (and ``Work.wait`` before completion) spins until then, as ``cudaStreamSynchronize`` does under CUDA's
    default scheduling; ``async_op=True`` returns at once with a Work whose ``is_completed()`` turns True then."""

    def __init__(self, wait_s, error=None):
        self.wait_s, self.error, self.calls = wait_s, error, []

    def __call__(self, group=None, async_op=False, device_ids=None, timeout=None):
        self.calls.append({"async_op": async_op, "device_ids": device_ids})
        until = time.perf_counter() + self.wait_s
        error = self.error

        def spin():
            while time.perf_counter() < until:
                pass
            if error is not None:
                raise error

        if not async_op:
            return spin()

        class Work:
            def is_completed(self):
                return time.perf_counter() >= until

            def wait(self, timeout=None):
                spin()
                return True

        return Work()


def test_the_ranks_waiting_for_rank_0_alone_sleep_instead_of_spinning(monkeypatch):
    from gpulab.course.scripts import ddp_train
    from gpulab.distributed import WorkerInfo

    barrier = _NcclLikeBarrier(1.0)
    monkeypatch.setattr(torch.distributed, "barrier", barrier)
    info = WorkerInfo(rank=1, local_rank=1, world_size=2, node=0, backend="nccl", device=torch.device("cuda", 1))
    cpu0, t0 = time.thread_time(), time.perf_counter()
    assert ddp_train.baseline_alone(info, ddp_train.parse_args([])) == {}        # rank 1: it only waits
    cpu, wall = time.thread_time() - cpu0, time.perf_counter() - t0
    assert wall >= 1.0
    # this thread's own CPU time: asleep it stays near zero whatever else the machine runs; spinning it is the wall
    assert cpu < 0.1 * wall, f"the waiting rank used {cpu:.2f} s of CPU in a {wall:.2f} s wait"
    assert barrier.calls == [{"async_op": True, "device_ids": [1]}]              # NCCL: the rank's own GPU named


def test_a_quiet_wait_raises_the_barriers_error_and_checks_its_sleeps(monkeypatch):
    from gpulab.course.scripts import ddp_train
    from gpulab.distributed import WorkerInfo

    monkeypatch.setattr(torch.distributed, "barrier", _NcclLikeBarrier(0.05, error=RuntimeError("rank 0 died")))
    info = WorkerInfo(rank=1, local_rank=0, world_size=2, node=0, backend="gloo", device=torch.device("cpu"))
    with pytest.raises(RuntimeError, match="rank 0 died"):
        ddp_train.wait_quietly(info)
    with pytest.raises(ValueError, match=r"poll_s must be \(first, longest\)"):
        ddp_train.wait_quietly(info, poll_s=(0.1, 0.01))
