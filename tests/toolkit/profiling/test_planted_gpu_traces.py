"""The planted bottlenecks on a GPU, from recorded-shape traces: one profiled step laid out as torch.profiler
lays out a CUDA step (real ``FunctionEvent`` objects from ``tests/support/fake_kineto.py``: host operators,
``aten::_local_scalar_dense`` syncs, the device's kernels, and kineto's device copies of the ranges the kernels
were launched in: ``ProfilerStep#N``, or the phase ranges), summarised by the real ``_summarise`` with a real
:class:`~gpulab.work.Work` and real :class:`~gpulab.MachineLimits` shaped like a T4's measured ceilings. Each
verdict must name its cause, whether or not the step marks its phases. A training step's phases are the device's
time: an unfused Adam whose host range is short while the device spends most of the step in its kernels is
optimizer-bound; a fused one is not.
"""
from __future__ import annotations

import pytest

from support import fake_kineto as K
import gpulab as gl
from gpulab.profiling import run
from gpulab.profiling.attribution import DEVICE_IDLE
from gpulab.profiling.events import idle_split
from gpulab.profiling.verdict import OPTIMIZER_SHARE
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


def _step(kernels, syncs=(), data=None, host_ops=None, phased=False):
    """One 10 ms ProfilerStep: ``kernels`` (start, end) us on the device, each launched by an aten op on the host
    just before it (or at ``host_ops``), ``syncs`` (start, end) us of aten::_local_scalar_dense on the host; on
    the device, kineto's copy of the step range from its first kernel to its last. ``phased``: the launching ops
    sit in a ``gl.phase("forward")`` range, whose device copy then spans the kernels instead (kineto extends only
    the innermost range a kernel was launched in: no kernel is left to the step range, which gets no copy)."""
    step = K.host_step(1, 0, 0, STEP_US)
    evs, i = [step], 2
    if data:
        evs.append(K.annotation(i, "data", data[0], data[1]))
        i += 1
    launched = [host_ops[n] if host_ops else max(0, a - 5) for n, (a, _) in enumerate(kernels)]
    fwd = K.annotation(i, "forward", min(launched), max(launched) + 4) if phased and kernels else None
    evs += [fwd] if fwd else []
    i += 1
    for h, (a, b) in zip(launched, kernels):
        op = K.op(i, "aten::mm", h, h + 4)
        evs += [op, K.kernel(i + 1, "gemm", a, b, launcher=op)]
        i += 2
    for a, b in syncs:
        evs.append(K.op(i, "aten::_local_scalar_dense", a, b))
        i += 1
    if kernels:
        copy_of = fwd or step
        evs.append(K.device_annotation(copy_of, min(a for a, _ in kernels), max(b for _, b in kernels)))
    return K.event_list(evs)


@pytest.fixture(params=[False, True], ids=["unmarked", "phase-ranges"])
def phased(request):
    """Each planted step twice: without phase ranges, and with its kernels launched inside one."""
    return request.param


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


def test_syncs_that_leave_the_device_idle_are_sync_bound(phased):
    # two bursts of kernels, each followed by .item(): the host waits, then spends 4 ms before queueing more
    ev = _step([(100, 2000), (6000, 7000)], syncs=[(200, 2010), (6100, 7010)], host_ops=[95, 5995], phased=phased)
    s = _verdict(ev, _work(int(2e9), int(2e8)))
    assert s.verdict.verdict == "sync-bound"
    assert s.device.idle_after_sync_s == pytest.approx(6.99e-3, rel=0.01)
    sync = next(f for f in s.verdict.findings if f.code == "host-syncs")
    assert sync.level == "warning" and "idled" in sync.message


def test_many_tiny_kernels_are_overhead_bound(phased):
    kernels = [(10 + 5 * k, 12 + 5 * k) for k in range(1900)]        # 2 us kernels, 3 us apart
    s = _verdict(_step(kernels, phased=phased), _work(int(1e8), int(1e8), ops=1900))
    assert s.verdict.verdict == "overhead-bound"
    assert "tiny kernels" in s.verdict.findings[0].message and s.device.idle_between_kernels_s > 0


def test_a_long_data_phase_is_input_bound(phased):
    s = _verdict(_step([(6000, 9500)], data=(0, 6000), phased=phased), _work(int(2.5e10), int(5e8)))
    assert s.verdict.verdict == "input-bound" and s.device.idle_host_s == pytest.approx(6.5e-3, rel=0.01)


def test_fp16_near_its_ceiling_is_compute_bound(phased):
    s = _verdict(_step([(50, 9950)], phased=phased), _work(int(5.5e11), int(1e9), dtype="float16"))
    assert s.verdict.verdict == "compute-bound" and s.roofline.compute_share == pytest.approx(0.917, rel=0.01)
    # the attribution's phases are the device's: its one kernel is in the forward phase when its range is marked
    att = s.attribution
    assert att.phase_share("forward") == pytest.approx(0.99 if phased else 0.0)
    assert att.phase_share("other") == pytest.approx(0.0 if phased else 0.99)
    assert att.phase_share(DEVICE_IDLE) == pytest.approx(0.01) and att.basis == "device time"


def test_fp32_on_a_t4_is_precision_bound_with_the_expected_gain(phased):
    s = _verdict(_step([(50, 9950)], phased=phased), _work(int(7e10), int(1e9)))
    f = s.verdict.findings[0]
    assert s.verdict.verdict == "precision-bound" and "float16 ceiling is 7.5x" in f.message
    assert "up to ~" in f.advice


def test_elementwise_near_the_bandwidth_is_memory_bound(phased):
    s = _verdict(_step([(50, 9950)], phased=phased), _work(0, int(2.4e9)))
    assert s.verdict.verdict == "memory-bound" and s.roofline.memory_share == pytest.approx(0.857, rel=0.01)


def test_a_step_beating_a_ceiling_raises_it_and_never_shows_over_100(phased):
    # 10 TFLOP/s fp32 on an "8 TFLOP/s" card
    s = _verdict(_step([(50, 9950)], phased=phased), _work(int(1e11), int(1e9)))
    assert s.roofline.compute_share == 1.0 and "ceiling raised" in s.roofline.notes[0]


def test_a_device_waiting_for_the_host_between_kernels_is_told_the_gain(phased):
    """Ten 300 us kernels, each queued 1 ms apart by a host that does Python work between them: the device is busy 30%
    of the step and waits for the host the rest. Overhead-bound, with the gain if it never waited (1/0.3) and how
    (launch the whole step at once: CUDA graphs; or work on a second stream)."""
    kernels = [(100 + 1000 * k, 400 + 1000 * k) for k in range(10)]
    s = _verdict(_step(kernels, phased=phased), _work(int(5e8), int(1e8), ops=10))
    assert s.verdict.verdict == "overhead-bound" and s.device_busy_share == pytest.approx(0.3)
    first = s.verdict.findings[0]
    assert "waits for the host between kernels: busy 30% of the step, up to 3.3x if it never waited" in first.message
    assert "CUDA graphs" in first.message and "second CUDA stream" in first.message


def test_idle_split_example():
    assert idle_split([(0.0, 1.0), (1.000005, 2.0)], [(0.0, 3.0)], syncs=[(1.5, 2.0)]) == (5e-06, 1.0, 1.0)


def test_busy_device_far_below_its_ceiling(phased):
    # long kernels, device busy 99%: at 35% of the fp32 ceiling the compute side sets the pace (slow kernels);
    # at 5% the kernels are too small to fill the GPU: overhead-bound, and the evidence says the device was busy
    slow = _verdict(_step([(50, 9950)], phased=phased), _work(int(2.8e10), int(1e8)))
    assert slow.verdict.verdict == "compute-bound" and "compute side sets the pace" in slow.verdict.findings[0].message
    small = _verdict(_step([(50, 9950)], phased=phased), _work(int(4e9), int(1e8)))
    assert small.verdict.verdict == "overhead-bound"
    assert "too small to fill it" in small.verdict.findings[0].message


ADAM_KERNEL = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
               "at::native::binary_internal::MulFunctor<float>>, std::array<char*, 3ul>>")
FUSED_KERNEL = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)"
                "::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
                "(at::native::ADAM_MODE)0, false>, float*, double, double, double, double, double, bool, float*, "
                "float*>")
UNFUSED_KERNELS, UNFUSED_US = 420, 15


def _training_step(fused: bool):
    """One 10 ms training step on a GPU as kineto records it. Host (us): forward 10-300 (10 matmuls),
    ``gl.phase("backward")`` 300-600 (the gradient seed on the calling thread; the autograd engine's device thread
    runs 10 ``evaluate_function`` ranges, each launching a matmul), ``Optimizer.step#Adam.step`` 600-1500 (unfused:
    420 elementwise updates, 1.5 us each to launch) or 600-700 (fused: 2 ``_fused_adam_`` calls), then a running
    loss sum outside every range. Device: the matmuls 100-1590, the seed 1600-1602, backward 1610-3100, then the
    optimizer's kernels from 3150 (unfused: 420 x 15 us, 1 us apart; fused: 2 x 150 us), the running sum last. kineto
    copies each range onto the device from the first to the last kernel launched inside it (the backward range:
    the seed only; the step range: the running sum only)."""
    host = K.host_step(1, 0, 0, STEP_US)
    evs, ids = [host], iter(range(2, 10_000))
    fwd, bwd = K.annotation(next(ids), "forward", 10, 300), K.annotation(next(ids), "backward", 300, 600)
    evs += [fwd, bwd]
    fwd_k = []
    for k in range(10):
        op = K.op(next(ids), "aten::mm", 20 + 25 * k, 24 + 25 * k)
        fwd_k.append(K.kernel(next(ids), "ampere_sgemm_128x64_nn", 100 + 150 * k, 240 + 150 * k, launcher=op))
        evs.append(op)
    seed = K.op(next(ids), "aten::ones_like", 310, 314)
    evs += [seed, K.kernel(next(ids), "void at::native::vectorized_elementwise_kernel<4, FillFunctor<float>>",
                           1600, 1602, launcher=seed)]
    for k in range(10):
        node = K.engine_range(next(ids), "MmBackward0", 320 + 25 * k, 340 + 25 * k)
        op = K.op(next(ids), "aten::mm", 325 + 25 * k, 329 + 25 * k, thread=K.AUTOGRAD_THREAD)
        evs += [node, op, K.kernel(next(ids), "ampere_sgemm_128x64_tn", 1610 + 150 * k, 1750 + 150 * k,
                                   launcher=op)]
    opt = K.annotation(next(ids), "Optimizer.step#Adam.step", 600, 700 if fused else 1500)
    evs.append(opt)
    opt_k = []
    if fused:
        for k in range(2):
            op = K.op(next(ids), "aten::_fused_adam_", 610 + 40 * k, 640 + 40 * k)
            opt_k.append(K.kernel(next(ids), FUSED_KERNEL, 3150 + 160 * k, 3300 + 160 * k, launcher=op))
            evs.append(op)
    else:
        names = ("aten::lerp_", "aten::mul_", "aten::addcmul_", "aten::sqrt", "aten::div_", "aten::addcdiv_")
        for k in range(UNFUSED_KERNELS):
            op = K.op(next(ids), names[k % len(names)], 610 + 2 * k, 611.5 + 2 * k)
            start = 3150 + (UNFUSED_US + 1) * k
            opt_k.append(K.kernel(next(ids), ADAM_KERNEL, start, start + UNFUSED_US, launcher=op))
            evs.append(op)
    last = opt_k[-1].time_range.end + 20
    total_op = K.op(next(ids), "aten::add_", 1510, 1514)
    total_k = K.kernel(next(ids), "void at::native::vectorized_elementwise_kernel<4, CUDAFunctor_add<float>>",
                       last, last + 3, launcher=total_op)
    evs += [total_op, *fwd_k, *opt_k, total_k,
            K.device_annotation(fwd, 100, 1590), K.device_annotation(bwd, 1600, 1602),
            K.device_annotation(opt, opt_k[0].time_range.start, opt_k[-1].time_range.end),
            K.device_step(host, last, last + 3)]
    return K.event_list(evs)


def test_an_unfused_adam_whose_kernels_fill_the_device_is_optimizer_bound():
    s = _verdict(_training_step(fused=False), _work(int(3e9), int(6e8), ops=460))
    laid_out = UNFUSED_KERNELS * UNFUSED_US / STEP_US                   # 63% of the step in the optimizer's kernels
    assert laid_out >= 0.6 and s.share("optimizer") == pytest.approx(0.09)   # the host's range: 0.9 ms of 10
    att = s.attribution
    assert s.verdict.verdict == "optimizer-bound" and "takes 63% of the step" in s.verdict.findings[0].message
    assert att.phase_share("optimizer") == pytest.approx(laid_out) and att.basis == "device time"
    assert att.share("optimizer updates") == pytest.approx(laid_out)    # elementwise by name, updates by range
    # backward: the seed in its range's device copy, the engine's kernels by the host ranges they were launched in
    # (torch before 2.6 keeps no kernel -> launcher link: the engine's kernels then fall in "other")
    backward, other = (0.1402, 0.0003) if K._HAS_LINKED else (0.0002, 0.1403)
    assert att.phase_share("forward") == pytest.approx(0.14) and att.phase_share("backward") == pytest.approx(backward)
    assert att.phase_share("other") == pytest.approx(other) and att.largest_phase[0] == "optimizer"
    busy = s.device.busy_s
    assert att.phase_share(DEVICE_IDLE) == pytest.approx(1 - busy / s.total_s)
    assert sum(t for _, t in att.phases) == pytest.approx(s.total_s)
    assert s.phases_s["optimizer"] == pytest.approx(900e-6)     # the host's view, kept for the host's verdicts


def test_a_fused_adam_taking_a_small_share_is_not_optimizer_bound():
    s = _verdict(_training_step(fused=True), _work(int(3e9), int(6e8), ops=42))
    att = s.attribution
    assert att.phase_share("optimizer") == pytest.approx(0.03) and 0.03 < OPTIMIZER_SHARE
    assert att.share("optimizer updates") == pytest.approx(0.03)
    assert s.verdict.verdict != "optimizer-bound" and "optimizer" not in s.verdict.codes


def test_an_optimizer_that_keeps_the_host_launching_is_optimizer_bound():
    """An unfused optimizer on a small model: the host spends most of the step launching its per-tensor kernels while
    the device, done with each in microseconds, idles. The device's share in the optimizer is small, the host's range
    is not: the verdict takes the larger and names the optimizer, citing both."""
    from dataclasses import replace

    s = _verdict(_training_step(fused=True), _work(int(3e9), int(6e8), ops=42))
    phases = dict(s.phases_s)
    phases["optimizer"], phases["other"] = 0.6 * s.total_s, max(0.0, phases.get("other", 0.0) - 0.6 * s.total_s)
    host_bound = replace(s, phases_s=phases)
    assert host_bound.attribution.phase_share("optimizer") == pytest.approx(0.03)
    v = host_bound.verdict
    assert v.verdict == "optimizer-bound" and "takes 60% of the step" in v.findings[0].message
    assert "the host's optimizer range 60% of the step" in v.findings[0].evidence
