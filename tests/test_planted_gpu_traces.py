"""The planted bottlenecks on a GPU, from recorded-shape traces: one profiled step laid out as torch.profiler
lays out a CUDA step (real ``FunctionEvent`` objects from ``tests/fake_kineto.py``: host operators,
``aten::_local_scalar_dense`` syncs, the device's kernels, and kineto's device copy of the ``ProfilerStep#N``
range), summarised by the real ``_summarise`` with a real :class:`~gpulab.work.Work` and real
:class:`~gpulab.MachineLimits` shaped like a T4's measured ceilings. Each verdict must name its cause.
"""
from __future__ import annotations

import pytest

import fake_kineto as K
import gpulab as gl
from gpulab.profiling import run
from gpulab.profiling.events import idle_split
from gpulab.timing import Env, Measurement
from gpulab.work import Work

STEP_US = 10_000


def _t4_limits(fp32=8e12, fp16=60e12, bandwidth=280e9) -> gl.MachineLimits:
    env = Env("cuda", "Tesla T4", 2, "Intel Xeon", "3.11", "2.14.1", "2026-11-24")

    def m(label, rate, flops=None, nbytes=None):
        work = flops or nbytes
        return Measurement(label, (work / rate,), 1, "cuda", 2, env, "cuda", 0, flops=flops, bytes_moved=nbytes)
    return gl.MachineLimits("cuda:0", env, (m("matmul 4096 float32", fp32, flops=2 * 4096**3),
                                            m("matmul 4096 float16", fp16, flops=2 * 4096**3)),
                            (m("copy 1 GiB", bandwidth, nbytes=2 << 30),))


def _work(flops, nbytes, dtype="float32", ops=40, syncs=0) -> Work:
    per = tuple((dtype, flops // ops, nbytes // ops) for _ in range(ops))
    return Work(ops, flops // ops * ops, nbytes // ops * ops, syncs, {dtype: flops // ops * ops} if flops else {}, per)


def _step(kernels, syncs=(), data=None, host_ops=None):
    """One 10 ms ProfilerStep: ``kernels`` (start, end) us on the device, each launched by an aten op on the host
    just before it (or at ``host_ops``), ``syncs`` (start, end) us of aten::_local_scalar_dense on the host; on
    the device, kineto's copy of the step range from its first kernel to its last."""
    step = K.host_step(1, 0, 0, STEP_US)
    evs, i = [step], 2
    if data:
        evs.append(K.annotation(i, "data", data[0], data[1]))
        i += 1
    for n, (a, b) in enumerate(kernels):
        h = host_ops[n] if host_ops else max(0, a - 5)
        op = K.op(i, "aten::mm", h, h + 4)
        evs += [op, K.kernel(i + 1, "gemm", a, b, launcher=op)]
        i += 2
    for a, b in syncs:
        evs.append(K.op(i, "aten::_local_scalar_dense", a, b))
        i += 1
    if kernels:
        evs.append(K.device_step(step, min(a for a, _ in kernels), max(b for _, b in kernels)))
    return K.event_list(evs)


class _Prof:
    def __init__(self, events):
        self._events = events

    def events(self):
        return self._events

    def key_averages(self):
        return self._events.key_averages()


def _verdict(events, work, limits=None):
    s = run._summarise(_Prof(events), "gpu step", "cuda", 1, 1, True, True, False, None, work=work,
                       limits=limits or _t4_limits(), kept_graph=(0, 0))
    print(f"\n{s.verdict!r}")
    return s


def test_syncs_that_leave_the_device_idle_are_sync_bound():
    # two bursts of kernels, each followed by .item(): the host waits, then spends 4 ms before queueing more
    ev = _step([(100, 2000), (6000, 7000)], syncs=[(200, 2010), (6100, 7010)], host_ops=[95, 5995])
    s = _verdict(ev, _work(int(2e9), int(2e8)))
    assert s.verdict.verdict == "sync-bound"
    assert s.device.idle_after_sync_s == pytest.approx(6.99e-3, rel=0.01)
    sync = next(f for f in s.verdict.findings if f.code == "host-syncs")
    assert sync.level == "warning" and "idled" in sync.message


def test_many_tiny_kernels_are_overhead_bound():
    kernels = [(10 + 5 * k, 12 + 5 * k) for k in range(1900)]        # 2 us kernels, 3 us apart
    s = _verdict(_step(kernels), _work(int(1e8), int(1e8), ops=1900))
    assert s.verdict.verdict == "overhead-bound"
    assert "tiny kernels" in s.verdict.findings[0].message and s.device.idle_between_kernels_s > 0


def test_a_long_data_phase_is_input_bound():
    s = _verdict(_step([(6000, 9500)], data=(0, 6000)), _work(int(2.5e10), int(5e8)))
    assert s.verdict.verdict == "input-bound" and s.device.idle_host_s == pytest.approx(6.5e-3, rel=0.01)


def test_fp16_near_its_ceiling_is_compute_bound():
    s = _verdict(_step([(50, 9950)]), _work(int(5.5e11), int(1e9), dtype="float16"))
    assert s.verdict.verdict == "compute-bound" and s.roofline.compute_share == pytest.approx(0.917, rel=0.01)


def test_fp32_on_a_t4_is_precision_bound_with_the_expected_gain():
    s = _verdict(_step([(50, 9950)]), _work(int(7e10), int(1e9)))
    f = s.verdict.findings[0]
    assert s.verdict.verdict == "precision-bound" and "float16 ceiling is 7.5x" in f.message
    assert "up to ~" in f.advice


def test_elementwise_near_the_bandwidth_is_memory_bound():
    s = _verdict(_step([(50, 9950)]), _work(0, int(2.4e9)))
    assert s.verdict.verdict == "memory-bound" and s.roofline.memory_share == pytest.approx(0.857, rel=0.01)


def test_a_step_beating_a_ceiling_raises_it_and_never_shows_over_100():
    s = _verdict(_step([(50, 9950)]), _work(int(1e11), int(1e9)))     # 10 TFLOP/s fp32 on an "8 TFLOP/s" card
    assert s.roofline.compute_share == 1.0 and "ceiling raised" in s.roofline.notes[0]


def test_idle_split_example():
    assert idle_split([(0.0, 1.0), (1.000005, 2.0)], [(0.0, 3.0)], syncs=[(1.5, 2.0)]) == (5e-06, 1.0, 1.0)


def test_busy_device_far_below_its_ceiling():
    # long kernels, device busy 99%: at 35% of the fp32 ceiling the compute side sets the pace (slow kernels);
    # at 5% the kernels are too small to fill the GPU: overhead-bound, and the evidence says the device was busy
    slow = _verdict(_step([(50, 9950)]), _work(int(2.8e10), int(1e8)))
    assert slow.verdict.verdict == "compute-bound" and "compute side sets the pace" in slow.verdict.findings[0].message
    small = _verdict(_step([(50, 9950)]), _work(int(4e9), int(1e8)))
    assert small.verdict.verdict == "overhead-bound"
    assert "too small to fill it" in small.verdict.findings[0].message
