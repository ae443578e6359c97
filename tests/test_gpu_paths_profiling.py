"""gpulab.profiling on CUDA, without a GPU: device times from torch.profiler's rows counted once per kernel.

The events are real ``torch.autograd.profiler_util.FunctionEvent`` objects laid out as the kineto
post-processing in ``torch/autograd/profiler.py`` lays them out on CUDA (a CPU operator with its kernel
appended, the kernel's own device row, the device copy of a ``record_function`` range), averaged by the real
``EventList.key_averages()``; rows in older torch's spelling are fakes whose every attribute is checked
against the installed classes.
"""
from __future__ import annotations

import warnings

import pytest
import torch
from torch.autograd import DeviceType
from torch.autograd.profiler_util import EventList, FunctionEvent, FunctionEventAvg

import gpulab.profiling as P
from gpulab.profiling import events, run

KW = dict(use_device="cuda", stack=[], input_shapes=[])


def _cuda_events(legacy: bool = False) -> EventList:
    """One profiled step: ProfilerStep > phase('forward') > aten::mm launching a 300 us kernel; on the
    device the kernel and kineto's gpu_user_annotation copy of the 'forward' range (360 us, gaps included)."""
    evs = [FunctionEvent(1, "ProfilerStep#1", 1, 0, 1000, **KW),
           FunctionEvent(2, "forward", 1, 10, 500, is_user_annotation=True, **KW),
           FunctionEvent(3, "aten::mm", 1, 20, 60, **KW)]
    evs[2].append_kernel("sgemm_kernel", 0, 300)
    if legacy:                      # the legacy profiler: the kernel time lives on the CPU event only
        evs[2].is_legacy = True
    else:
        evs += [FunctionEvent(4, "sgemm_kernel", 7, 100, 400, device_type=DeviceType.CUDA, **KW),
                FunctionEvent(5, "forward", 7, 90, 450, device_type=DeviceType.CUDA, is_user_annotation=True, **KW)]
    el = EventList(evs, use_device="cuda")
    el._build_tree()                # what torch.profiler does before handing out events()
    return el


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
    d = events.check_device_events(list(_cuda_events()), profiled=True, cuda_used=True, windows=[(0.0, 1e-3)])
    assert d.kernels == 1
    assert d.busy_s == pytest.approx(300e-6)          # the kernel alone, not the 360 us annotation
    assert d.median_kernel_s == pytest.approx(300e-6)


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
