"""gpulab.profiling on CUDA, without a GPU: device times from torch.profiler's rows counted once per kernel, and
steps counted from the host's step ranges alone.

The events are real ``torch.autograd.profiler_util.FunctionEvent`` objects laid out as the kineto
post-processing in ``torch/autograd/profiler.py`` lays them out on CUDA (``tests/support/fake_kineto.py``: a CPU operator
with its kernel appended, the kernel's own device row, and kineto's device copies of the ``record_function``
ranges, the ``ProfilerStep#N`` ranges among them), averaged by the real ``EventList.key_averages()``; rows in
older torch's spelling are fakes whose every attribute is checked against the installed classes.
"""
from __future__ import annotations

import warnings

import pytest
import torch
from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent, FunctionEventAvg

from support import fake_kineto as K
import gpulab.profiling as P
from gpulab.profiling import events, run

KW = K.KW
STEP_US = 1000


def _cuda_events(legacy: bool = False, steps: int = 1, lag_us: float = 0):
    """``steps`` profiled steps of 1 ms: ProfilerStep > phase('forward') > aten::mm launching a 300 us kernel; on
    the device the kernel and kineto's gpu_user_annotation copies of the 'forward' and the step ranges (first to
    last kernel). ``lag_us`` delays each step's kernel, as in a loop where the GPU runs behind the host."""
    evs, i = [], 1
    for n in range(steps):
        t0 = n * STEP_US
        step, fwd, mm = (K.host_step(i, n, t0, t0 + STEP_US), K.annotation(i + 1, "forward", t0 + 10, t0 + 500),
                         K.op(i + 2, "aten::mm", t0 + 20, t0 + 60))
        evs += [step, fwd, mm]
        a, b = t0 + 100 + lag_us, t0 + 400 + lag_us
        if legacy:                  # the legacy profiler: the kernel time lives on the CPU event only
            mm.append_kernel("sgemm_kernel", 0, b - a)
            mm.is_legacy = True
        else:
            evs += [K.kernel(i + 3, "sgemm_kernel", a, b, launcher=mm), K.device_annotation(fwd, a, b),
                    K.device_step(step, a, b)]
        i += 4
    return K.event_list(evs)     # what torch.profiler does before handing out events()


class _Prof:
    """The two methods of torch.profiler.profile that _summarise reads."""

    def __init__(self, events, rows=None):
        self._events, self._rows = events, rows

    def events(self):
        return self._events

    def key_averages(self):
        return self._events.key_averages() if self._rows is None else self._rows


def _summary(prof, cuda=True):
    return run._summarise(prof, "fab", "cuda" if cuda else "cpu", 1, 0, cuda, cuda, False, None)


def test_real_rows_double_count_and_summary_counts_each_kernel_once():
    rows = {(a.key, str(a.device_type)): a for a in _cuda_events().key_averages()}
    mm, kern = rows[("aten::mm", "DeviceType.CPU")], rows[("sgemm_kernel", "DeviceType.CUDA")]
    # the premise, from the real classes: the operator row and the kernel row carry the same device time
    assert mm.self_device_time_total == kern.self_device_time_total == 300
    assert mm.device_time_total == 300
    s = _summary(_Prof(_cuda_events()))
    ops = {o.name: o for o in s.ops}
    assert ops["sgemm_kernel"].device_work and not ops["aten::mm"].device_work
    assert sum(o.self_device_s for o in s.ops if o.self_device_s) == pytest.approx(600e-6)   # naive sum: twice
    assert s.device_time_s == pytest.approx(300e-6)                                           # each kernel once
    df = s.to_dataframe()
    assert df.loc["sgemm_kernel", "self_device_pct"] == pytest.approx(100.0)
    assert df.loc[df["device_work"], "self_device_ms_per_step"].sum() == pytest.approx(0.3)
    assert "Device time 300" in repr(s)


def test_gpu_user_annotations_are_not_kernels():
    """kineto's device-side copy of a record_function range spans its kernels and the gaps between them:
    counting it would make an idle GPU look busy."""
    step, fwd = K.host_step(1, 0, 0, STEP_US), K.annotation(2, "forward", 10, 500)
    mm1, mm2 = K.op(3, "aten::mm", 20, 60), K.op(4, "aten::mm", 70, 110)
    evs = K.event_list([step, fwd, mm1, mm2, K.kernel(5, "sgemm_kernel", 100, 200, launcher=mm1),
                        K.kernel(6, "sgemm_kernel", 300, 400, launcher=mm2),
                        K.device_annotation(fwd, 100, 400), K.device_step(step, 100, 400)])
    d = events.check_device_events(list(evs), profiled=True, cuda_used=True, windows=[(0.0, 1e-3)])
    assert d.kernels == 2
    assert d.busy_s == pytest.approx(200e-6)          # the kernels alone, not the 300 us annotations
    assert d.median_kernel_s == pytest.approx(100e-6)


def test_device_copies_of_the_step_ranges_are_not_steps():
    """kineto puts a copy of each ProfilerStep#N on the device timeline under the same name: the steps, their
    times and the device's busy share come from the host's ranges alone."""
    evs = _cuda_events(steps=3, lag_us=600)           # each step's kernel runs at the end of its host step
    named = [e for e in evs if e.name == "ProfilerStep*"]
    assert len(named) == 6 and sum(e.device_type == DeviceType.CUDA for e in named) == 3    # the premise
    assert {e.trace_name for e in named} == {"ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"}
    assert all(e.is_user_annotation for e in named)
    if K._HAS_ACTIVITY:                               # torch >= 2.6 records kineto's activity type
        assert {e.activity_type for e in named} == {"user_annotation", "gpu_user_annotation"}
    s = run._summarise(_Prof(evs), "fab", "cuda", 3, 0, True, True, False, None)
    assert s.steps == 3 and s.step_times_s == pytest.approx((1e-3,) * 3)
    assert s.step_s == pytest.approx(1e-3) and s.total_s == pytest.approx(3e-3)
    assert s.device.kernels == 3 and s.device.busy_s == pytest.approx(900e-6)
    assert s.device_busy_share == pytest.approx(0.3)
    assert s.device.idle_host_s == pytest.approx(3 * 700e-6)       # each window, until its kernel starts
    assert s.device_time_s == pytest.approx(900e-6) and "ProfilerStep*" not in {o.name for o in s.ops}
    assert s.phases_s["forward"] == pytest.approx(3 * 490e-6)


def test_legacy_rows_count_their_own_kernel_time():
    s = _summary(_Prof(_cuda_events(legacy=True)))
    ops = {o.name: o for o in s.ops}
    assert ops["aten::mm"].device_work and s.device_time_s == pytest.approx(300e-6)


def test_cpu_profile_has_no_device_time():
    s = _summary(_Prof(_cuda_events()), cuda=False)
    assert s.device_time_s is None and all(o.self_device_s is None and not o.device_work for o in s.ops)


# ---- rows in older torch's spelling (before 2.4: self_cuda_time_total, cuda_time_total) ----------------
NEW_NAMES = {"key", "count", "self_cpu_time_total", "cpu_time_total", "self_cpu_memory_usage", "device_type",
             "is_legacy", "is_user_annotation"}
OLD_NAMES = {"self_cuda_time_total", "cuda_time_total", "self_cuda_memory_usage"}


class _OldRow:
    """A key_averages() row of torch < 2.4: device figures spelled 'cuda'."""

    def __init__(self, key, device_type, self_cuda_us, cuda_us, self_cpu_us=0, cpu_us=0, old_names=True):
        self.key, self.count, self.device_type, self.is_legacy = key, 1, device_type, False
        self.is_user_annotation = False
        self.self_cpu_time_total, self.cpu_time_total, self.self_cpu_memory_usage = self_cpu_us, cpu_us, 0
        if old_names:
            self.self_cuda_time_total, self.cuda_time_total, self.self_cuda_memory_usage = self_cuda_us, cuda_us, 64


def test_old_row_fake_is_shaped_like_the_real_classes():
    fake = vars(_OldRow("k", DeviceType.CUDA, 1, 1))
    assert set(fake) == NEW_NAMES | OLD_NAMES
    real_avg = FunctionEventAvg()
    real_avg.is_user_annotation = False     # set by FunctionEventAvg.add(), not __init__
    assert all(hasattr(real_avg, n) for n in NEW_NAMES)
    # the old spellings survive on FunctionEvent as deprecated aliases of the device_* properties
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        ev = FunctionEvent(9, "k", 1, 0, 10, **KW)
        for old in OLD_NAMES:
            assert hasattr(ev, old)
    assert set(events._DEVICE_NAMES.values()) == OLD_NAMES
    assert all(hasattr(real_avg, new) for new in events._DEVICE_NAMES)


def test_old_torch_names_fill_the_device_columns():
    rows = [_OldRow("aten::mm", DeviceType.CPU, 300, 300, 40, 40), _OldRow("sgemm_kernel", DeviceType.CUDA, 300, 300)]
    s = _summary(_Prof(_cuda_events(), rows))
    ops = {o.name: o for o in s.ops}
    assert ops["sgemm_kernel"].self_device_s == pytest.approx(300e-6)
    assert ops["aten::mm"].device_total_s == pytest.approx(300e-6)
    assert s.device_time_s == pytest.approx(300e-6)
    assert "CUPTI working" in s.device.note and "no device time" not in s.device.note


def test_device_columns_never_silently_empty():
    rows = [_OldRow("aten::mm", DeviceType.CPU, 0, 0, 40, 40, old_names=False),
            _OldRow("sgemm_kernel", DeviceType.CUDA, 0, 0, old_names=False)]
    s = _summary(_Prof(_cuda_events(), rows))
    assert s.device.kernels == 1 and s.device_time_s is None
    assert "carry no device time" in s.device.note and "read the trace" in s.device.note
    with pytest.raises(ValueError, match="no device time"):
        s.top(by="self_device")


def test_new_names_read_without_deprecation_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        _summary(_Prof(_cuda_events()))
        # and on a real FunctionEvent, which still has the deprecated 'cuda' aliases, the new name wins
        assert events._device_attr(FunctionEvent(9, "k", 1, 0, 10, **KW), "self_device_time_total") == 0


def test_memory_by_operator_uses_either_spelling():
    rows = [_OldRow("sgemm_kernel", DeviceType.CUDA, 300, 300)]
    s = run._summarise(_Prof(_cuda_events(), rows), "fab", "cuda", 1, 0, True, True, True, None)
    assert s.ops[0].self_device_memory_bytes == 64
    assert torch.autograd.profiler_util.FunctionEventAvg().self_device_memory_usage == 0


def test_legacy_fallback_times_are_explained_in_the_note():
    """No kernel events (CUPTI missing) but the CUDA-event fallback timed operators: the note says where the
    device time came from instead of only 'not recorded'."""
    s = _summary(_Prof(_cuda_events(legacy=True)))
    assert s.device.kernels == 0 and "not recorded" in s.device.note and "CUDA-event fallback" in s.device.note


# ---- profile() on CUDA: the recorded steps run as a loop runs, with no device sync between them --------------
class _FakeProfiler:
    """torch.profiler.profile as profile() drives it: the real ``schedule`` passed in decides each step's action
    (``step()`` moves to ``schedule(step_num + 1)``; leaving RECORD_AND_SAVE stops the trace and calls
    ``on_trace_ready``), as ``torch/profiler/profiler.py`` does. Every call is logged with the action current then."""

    active = None

    def __init__(self, activities=None, *, schedule=None, on_trace_ready=None, record_shapes=False,
                 profile_memory=False, **kwargs):
        self.schedule, self.on_trace_ready, self.log = schedule, on_trace_ready, []
        _FakeProfiler.active = self

    def __enter__(self):
        self.step_num, self.action = 0, self.schedule(0)
        return self

    def __exit__(self, *exc):
        self.log.append(("exit", self.action))

    def step(self):
        prev = self.action
        self.step_num += 1
        self.action = self.schedule(self.step_num)
        self.log.append(("step", prev))
        if prev == torch.profiler.ProfilerAction.RECORD_AND_SAVE:
            self.log.append(("stop", prev))
            if self.on_trace_ready:
                self.on_trace_ready(self)

    def events(self):
        return _cuda_events(steps=3)

    def key_averages(self):
        return self.events().key_averages()

    def export_chrome_trace(self, path):
        raise AssertionError("profile(trace=False) writes no trace")


def test_the_fake_profiler_takes_the_real_arguments():
    import inspect

    real = set(inspect.signature(torch.profiler.profile).parameters)
    assert {"activities", "schedule", "on_trace_ready", "record_shapes", "profile_memory"} <= real
    for name in ("step", "events", "key_averages", "export_chrome_trace", "__enter__", "__exit__"):
        assert hasattr(torch.profiler.profile, name) and hasattr(_FakeProfiler, name), name


@pytest.mark.parametrize("warmup", [0, 2])
def test_profile_on_cuda_syncs_only_outside_the_recorded_steps_and_once_at_their_end(monkeypatch, warmup):
    import gpulab.system

    from torch.profiler import ProfilerAction as A

    def synchronize(device=None):
        p = _FakeProfiler.active
        (p.log if p else outside).append(("sync", p.action if p else None))

    outside = []
    monkeypatch.setattr(gpulab.system, "device_kind", lambda: "cuda")
    monkeypatch.setattr(torch.profiler, "profile", _FakeProfiler)
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: {})
    _FakeProfiler.active = None

    def fn():
        p = _FakeProfiler.active
        p.log.append(("fn", p.action))

    s = P.profile(fn, steps=3, warmup=warmup, trace=False, limits=False, count_work=False)
    log = _FakeProfiler.active.log
    assert s.steps == 3 and s.device_kind == "cuda"
    assert [a for w, a in log if w == "fn"] == [A.WARMUP] * warmup + [A.RECORD] * 2 + [A.RECORD_AND_SAVE]
    recording = (A.RECORD, A.RECORD_AND_SAVE)
    # inside the recorded steps: one sync, after the last step's work, before the profiler stops
    assert [(w, a) for w, a in log if w == "sync" and a in recording] == [("sync", A.RECORD_AND_SAVE)]
    assert outside == [("sync", None)]                             # the steps start from an idle device
    last = [w for w, a in log if a == A.RECORD_AND_SAVE]
    assert last == ["fn", "sync", "step", "stop"]
    # no sync between one recorded step and the next: the host queues step k+1 while the GPU runs step k
    assert [w for w, a in log if a == A.RECORD] == ["fn", "step"] * 2
    # the warm-up may drain the device once, before recording starts
    assert [w for w, a in log if a == A.WARMUP] == (["fn", "step"] * (warmup - 1) + ["fn", "sync", "step"]
                                                    if warmup else [])
