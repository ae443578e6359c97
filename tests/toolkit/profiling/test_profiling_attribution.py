"""Where a step's time goes, before any roofline: operator classes by name, the host's self time per class on a
CPU (optimizer and data ranges taking their operators), the device's time per kernel class on a GPU, and the
verdicts that come from the attribution (optimizer-bound; overhead-bound from the time outside every operator).
On a GPU the phases are the device's time, read from kineto's device copies of the ranges (``tests/support/fake_kineto.py``)."""
from __future__ import annotations

import pytest

from support import fake_kineto as K
from gpulab.profiling import ProfileSummary, diagnose_profile
from gpulab.profiling.attribution import (DEVICE_IDLE, OUTSIDE, Attribution, attribute_events, device_phases,
                                          device_work_phases, launching_ranges, op_class)
from gpulab.profiling.events import DeviceCheck, OpStat, _interval_s, _is_device_event, _phase_of
from gpulab.profiling.verdict import HOST_GAP_SHARE, OPTIMIZER_SHARE


@pytest.mark.parametrize("name, cls", [
    ("aten::addmm", "matmul/conv"), ("aten::mm", "matmul/conv"), ("aten::conv2d", "matmul/conv"),
    ("aten::mkldnn_convolution", "matmul/conv"), ("aten::_scaled_dot_product_flash_attention", "matmul/conv"),
    ("aten::relu", "elementwise"), ("aten::add_", "elementwise"), ("aten::threshold_backward", "elementwise"),
    ("aten::tanh", "elementwise"), ("aten::t", "views/allocations"), ("aten::empty", "views/allocations"),
    ("aten::topk", "reductions/norms"), ("aten::native_layer_norm_backward", "reductions/norms"),
    ("aten::mse_loss_backward", "reductions/norms"), ("aten::_foreach_mul_", "optimizer updates"),
    ("aten::_fused_adam_", "optimizer updates"), ("aten::to", "copies/casts"), ("aten::_to_copy", "copies/casts"),
    ("aten::copy_", "copies/casts"), ("aten::item", "host syncs"), ("c10d::allreduce_", "communication"),
    ("cudaLaunchKernel", "kernel launches"), ("cudaStreamSynchronize", "host syncs"),
])
def test_operators_are_classed_by_their_names(name, cls):
    assert op_class(name) == cls


@pytest.mark.parametrize("name, cls", [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "matmul/conv"),
    ("ampere_sgemm_128x64_nn", "matmul/conv"), ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm>", "matmul/conv"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", "elementwise"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", "reductions/norms"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<...FusedAdamMathFunctor...>",
     "optimizer updates"),
    ("Memcpy HtoD (Pageable -> Device)", "copies/casts"), ("Memset (Device)", "copies/casts"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "communication"),
])
def test_kernels_are_classed_by_their_names(name, cls):
    assert op_class(name, device=True) == cls


class _Ev:
    """A profiler event as torch's FunctionEvent shows it: name, interval (us), self CPU time (us), parent."""

    def __init__(self, name, start, end, self_us=0.0, parent=None, device=False):
        self.name, self.start, self.end, self.self_cpu_time_total = name, start, end, self_us
        self.cpu_parent, self.device, self.is_user_annotation = parent, device, False


def _attr(events, windows, busy=None):
    return attribute_events(events, windows, _phase_of, lambda e: e.device, lambda e: (e.start / 1e6, e.end / 1e6),
                            busy)


def test_host_self_time_per_class_and_the_time_outside_every_operator():
    opt = _Ev("Optimizer.step#Adam.step", 500, 900, 100)          # a range: its own time is Python, not an operator
    data = _Ev("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 100, 20)
    events = [data, _Ev("aten::stack", 10, 90, 80, data),
              _Ev("aten::linear", 100, 300, 10), _Ev("aten::addmm", 110, 290, 180),
              _Ev("aten::relu", 300, 350, 50),
              opt, _Ev("aten::add_", 510, 600, 90, opt), _Ev("aten::addcdiv_", 600, 800, 200, opt),
              _Ev("ProfilerStep#3", 0, 1000, 0)]
    out = _attr(events, [(0.0, 1e-3)])
    assert out["data loading"] == pytest.approx(80e-6)
    assert out["matmul/conv"] == pytest.approx(190e-6)               # addmm and linear's own 10 us
    assert out["elementwise"] == pytest.approx(50e-6)
    assert out["optimizer updates"] == pytest.approx(290e-6)         # every operator inside the optimizer's range
    assert out[OUTSIDE] == pytest.approx(1e-3 - (80 + 190 + 50 + 290) * 1e-6)
    assert sum(out.values()) == pytest.approx(1e-3)


def test_device_time_per_kernel_class_and_the_device_idle():
    events = [_Ev("ampere_sgemm_128x64_nn", 0, 600, device=True), _Ev("Memcpy HtoD", 600, 700, device=True),
              _Ev("aten::mm", 0, 50, 50)]
    out = _attr(events, [(0.0, 1e-3)], busy=700e-6)
    assert out == pytest.approx({"matmul/conv": 600e-6, "copies/casts": 100e-6, DEVICE_IDLE: 300e-6})


def test_the_attribution_table_reads_its_shares():
    att = Attribution(0.01, 2, "host self time", (("data", 0.001), ("optimizer", 0.006), ("other", 0.003)),
                      (("optimizer updates", 0.004), ("matmul/conv", 0.002), (OUTSIDE, 0.004)))
    assert att.largest == ("optimizer updates", pytest.approx(0.4)) and att.largest_phase == ("optimizer",
                                                                                                pytest.approx(0.6))
    assert att.share(OUTSIDE) == pytest.approx(0.4) and att.phase_share("forward") == 0.0
    assert att.summary().startswith("optimizer updates 40%, outside any operator 40%, matmul/conv 20%")
    assert "optimizer updates" in repr(att) and "3 ms" in repr(att) and "<table" in att._repr_html_()


def _cpu_summary(phases, classes, ops=("aten::add_",), **kw):
    total = 0.01
    base = dict(label="fab", device_kind="cpu", steps=1, warmup=1, step_times_s=(total,),
                phases_s=dict(phases), ops=tuple(OpStat(n, 10, 1e-4, 1e-4) for n in ops), op_calls_per_step=50.0,
                median_op_s=5e-6, syncs_per_step=0.0, device=DeviceCheck(False, None, None, None, "CPU only"),
                op_classes_s=dict(classes))
    base.update(kw)
    return ProfileSummary(**base)


def test_an_optimizer_taking_the_largest_phase_is_optimizer_bound_with_the_fix_its_operators_call_for():
    phases = {"data": 0.0, "forward": 0.002, "backward": 0.002, "optimizer": 0.005, "other": 0.001}
    classes = {"optimizer updates": 0.004, "matmul/conv": 0.003, OUTSIDE: 0.003}
    v = diagnose_profile(_cpu_summary(phases, classes))
    assert v.verdict == "optimizer-bound" and 0.005 / 0.01 >= OPTIMIZER_SHARE
    main = v.findings[0]
    assert "takes 50% of the step" in main.message and "up to 2.0x faster" in main.message
    assert "foreach=True or fused=True" in main.advice
    assert v.findings[1].code == "attribution" and "optimizer updates 40%" in v.findings[1].message
    assert "fused=True" in diagnose_profile(_cpu_summary(phases, classes, ops=("aten::_foreach_add_",))).findings[0].advice
    assert "already runs fused" in diagnose_profile(_cpu_summary(phases, classes, ops=("aten::_fused_adam_",))) \
        .findings[0].advice
    # a large optimizer share that is not the largest phase is a note beside the verdict, not the verdict
    second = {"data": 0.0, "forward": 0.001, "backward": 0.005, "optimizer": 0.004, "other": 0.0}
    v = diagnose_profile(_cpu_summary(second, {"matmul/conv": 0.009, OUTSIDE: 0.001}))
    assert v.verdict != "optimizer-bound" and "optimizer" in v.codes


def test_a_step_mostly_outside_every_operator_is_overhead_bound_on_a_cpu():
    phases = {"data": 0.0, "forward": 0.003, "backward": 0.003, "optimizer": 0.001, "other": 0.003}
    classes = {"matmul/conv": 0.002, "elementwise": 0.002, OUTSIDE: 0.006}
    v = diagnose_profile(_cpu_summary(phases, classes))
    assert 0.6 >= HOST_GAP_SHARE and v.verdict == "overhead-bound"
    assert "60% of the step runs outside any operator" in v.findings[0].message
    below = diagnose_profile(_cpu_summary(phases, {"matmul/conv": 0.007, OUTSIDE: 0.003}))
    assert below.verdict != "overhead-bound" or "outside any operator" not in below.findings[0].message


def test_input_bound_still_comes_first_and_a_hand_made_summary_has_no_attribution():
    phases = {"data": 0.004, "forward": 0.0, "backward": 0.0, "optimizer": 0.005, "other": 0.001}
    v = diagnose_profile(_cpu_summary(phases, {"data loading": 0.004, "optimizer updates": 0.005, OUTSIDE: 0.001}))
    assert v.verdict == "input-bound" and v.findings[1].code == "attribution"
    bare = diagnose_profile(_cpu_summary(phases, {}))
    assert "attribution" not in bare.codes


# ---- on a GPU: the phases of the device's time ---------------------------------------------------------------
def _on_device(events):
    return [p for *_, p in device_work_phases(events, _phase_of, _is_device_event, _interval_s)]


def _dev_phases(events, windows=((0.0, 1e-3),)):
    return device_phases(events, list(windows), _phase_of, _is_device_event, _interval_s)


def test_a_kernel_takes_the_phase_of_the_innermost_device_copy_of_a_phase_range_that_holds_it():
    step, fwd = K.host_step(1, 0, 0, 1000), K.annotation(2, "forward", 0, 300)
    aug = K.annotation(3, "data_augment", 10, 50)               # a data range nested in the forward one
    opt = K.annotation(4, "Optimizer.step#Adam.step", 300, 400)
    ev = K.event_list([step, fwd, aug, opt,
                       K.device_annotation(fwd, 100, 400), K.device_annotation(aug, 150, 200),
                       K.device_annotation(opt, 500, 700), K.device_step(step, 800, 900),
                       K.kernel(10, "sgemm", 100, 150), K.kernel(11, "flip_kernel", 150, 200),
                       K.kernel(12, "sgemm", 300, 400), K.kernel(13, "adam_elementwise", 500, 700),
                       K.kernel(14, "add_kernel", 800, 900)])
    # ProfilerStep's copy names no phase; a kernel no phase copy holds, with no launcher known, is in no phase
    assert _on_device(ev) == ["forward", "data", "forward", "optimizer", None]
    out = _dev_phases(ev)
    assert out == pytest.approx({"data": 50e-6, "forward": 150e-6, "backward": 0.0, "optimizer": 200e-6,
                                 "other": 100e-6, DEVICE_IDLE: 500e-6})


def test_a_copy_holds_only_the_kernels_of_its_own_stream():
    fwd = K.annotation(2, "forward", 0, 100)
    ev = K.event_list([fwd, K.device_annotation(fwd, 100, 500, stream=7),
                       K.kernel(10, "sgemm", 100, 500, stream=7), K.kernel(11, "nccl_allreduce", 200, 300, stream=9)])
    assert _on_device(ev) == ["forward", None]


def _backward_step(older: bool):
    """A backward pass as kineto records it: the seed kernel launched on the calling thread inside the backward
    range; the engine's kernels launched from its own thread inside ``evaluate_function`` ranges, with no device copy
    holding them; each launch a ``cudaLaunchKernel`` call on its operator's thread (CUPTI's id, the kernel's own)."""
    bwd = K.annotation(2, "backward", 100, 400)
    seed = K.op(3, "aten::ones_like", 110, 115)
    node = K.engine_range(4, "MmBackward0", 120, 200)
    mm = K.op(5, "aten::mm", 130, 140, thread=K.AUTOGRAD_THREAD)
    hook = K.engine_range(7, "torch::autograd::AccumulateGrad", 200, 260)       # DDP's hook: its all-reduce
    comm = K.op(8, "nccl:all_reduce", 210, 250, thread=K.AUTOGRAD_THREAD)
    loose = K.op(6, "aten::add_", 500, 505)                     # launched outside every range
    events = [bwd, seed, node, mm, hook, comm, loose,
              K.launch(10, seed, 111), K.launch(11, mm, 131), K.launch(13, comm, 220), K.launch(12, loose, 501),
              K.kernel(10, "fill_kernel", 300, 302, launcher=seed), K.kernel(11, "sgemm", 310, 500, launcher=mm),
              K.kernel(13, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 320, 520, launcher=comm, stream=9),
              K.kernel(12, "add_kernel", 600, 610, launcher=loose), K.device_annotation(bwd, 300, 302)]
    return K.event_list(K.older_torch(events) if older else events)


@pytest.mark.parametrize("older", [False, True], ids=["linked", "older-torch"])
def test_kernels_no_copy_holds_take_the_phase_of_the_host_range_that_launched_them(older):
    # the autograd engine launches backward kernels (and DDP's hooks their all-reduce) from its own thread: no user
    # range there, so no device copy holds them; their operators sit in the engine's evaluate_function ranges, the
    # backward phase. Older torch links no kernel to its operator: the launch's thread and time find it.
    ev = _backward_step(older)
    assert all(hasattr(e, "linked_correlation_id") is (K._HAS_LINKED and not older) for e in ev)
    assert _on_device(ev) == ["backward", "backward", "backward", None]
    assert _dev_phases(ev)["backward"] == pytest.approx(212e-6)      # 300-302 and 310-520 us, two streams at once


def test_an_older_torchs_kernel_finds_the_innermost_ranges_open_at_its_launch():
    ev = _backward_step(older=True)
    kernels = [e for e in ev if _is_device_event(e) and not e.is_user_annotation]
    around = launching_ranges(ev, kernels, _is_device_event, _interval_s)
    names = {k.name: [r.name for r in around[id(k)]] for k in kernels}
    assert names["sgemm"] == ["aten::mm", "autograd::engine::evaluate_function: MmBackward0"]
    assert names["fill_kernel"] == ["aten::ones_like", "backward"]
    assert names["add_kernel"] == ["aten::add_"]
    # the runtime call's CUPTI id may equal an operator's own id: only runtime calls are matched to kernels
    mm = K.op(20, "aten::mm", 60, 70)
    clash = K.event_list(K.older_torch([K.annotation(11, "forward", 0, 50), mm, K.launch(11, mm, 61),
                                        K.kernel(11, "sgemm", 80, 90)]))
    assert _on_device(clash) == [None]


def test_device_phases_count_each_busy_moment_once_and_add_up_to_the_wall_time():
    fwd, opt = K.annotation(2, "forward", 0, 100), K.annotation(3, "optimizer", 100, 200)
    ev = K.event_list([fwd, opt, K.device_annotation(fwd, 0, 600, stream=7),
                       K.device_annotation(opt, 400, 800, stream=9),
                       K.kernel(10, "sgemm", 0, 600, stream=7), K.kernel(11, "adam", 400, 800, stream=9),
                       K.kernel(12, "adam", 1900, 2100, stream=9)])    # in no copy; runs past the last window
    out = _dev_phases(ev, windows=[(0.0, 1e-3), (1e-3, 2e-3)])
    # 400-600 us: both streams busy, half each; the windows end at 2 ms
    assert out["forward"] == pytest.approx(500e-6) and out["optimizer"] == pytest.approx(300e-6)
    assert out["other"] == pytest.approx(100e-6)
    assert out[DEVICE_IDLE] == pytest.approx(2e-3 - 900e-6) and sum(out.values()) == pytest.approx(2e-3)


def test_kernels_in_the_optimizer_or_data_phase_are_classed_by_it_and_range_copies_are_no_work():
    step, data, opt = K.host_step(1, 0, 0, 1000), K.annotation(2, "data", 0, 50), K.annotation(3, "optimizer", 50, 90)
    ev = K.event_list([step, data, opt, K.device_annotation(data, 0, 100), K.device_annotation(opt, 200, 500),
                       K.device_step(step, 600, 700), K.kernel(10, "Memcpy HtoD (Pinned -> Device)", 0, 100),
                       K.kernel(11, "vectorized_elementwise_kernel", 200, 500), K.kernel(12, "sgemm", 600, 700)])
    out = attribute_events(ev, [(0.0, 1e-3)], _phase_of, _is_device_event, _interval_s, 500e-6)
    assert out == pytest.approx({"data loading": 100e-6, "optimizer updates": 300e-6, "matmul/conv": 100e-6,
                                 DEVICE_IDLE: 500e-6})


def _gpu_summary(**kw):
    base = dict(label="fab", device_kind="cuda", steps=1, warmup=1, step_times_s=(0.01,),
                phases_s={"data": 0.0, "forward": 0.002, "backward": 0.002, "optimizer": 0.001, "other": 0.005},
                ops=(OpStat("gemm", 1, 0.0, 0.0, 0.004, 0.004, device_work=True),), op_calls_per_step=50.0,
                median_op_s=5e-6, syncs_per_step=0.0, device=DeviceCheck(True, 10, 0.009, 1e-4, "10 device events"),
                op_classes_s={"optimizer updates": 0.006, "matmul/conv": 0.003, DEVICE_IDLE: 0.001})
    base.update(kw)
    return ProfileSummary(**base)


def test_on_a_gpu_the_attribution_reads_the_device_phases_and_the_summary_keeps_the_hosts():
    dev = {"data": 0.0, "forward": 0.0015, "backward": 0.0015, "optimizer": 0.006, "other": 0.0, DEVICE_IDLE: 0.001}
    s = _gpu_summary(device_phases_s=dev)
    att = s.attribution
    assert att.basis == "device time" and att.phase_share("optimizer") == pytest.approx(0.6)
    assert s.share("optimizer") == pytest.approx(0.1)                   # the host's range
    assert att.largest_phase == ("optimizer", pytest.approx(0.6)) and "device idle 10%" in att.summary()
    # the device mostly idle: its idle time is a row, never the largest phase
    idle = Attribution(0.01, 1, "device time", (("forward", 0.002), ("other", 0.0), (DEVICE_IDLE, 0.008)), ())
    assert idle.largest_phase == ("forward", pytest.approx(0.2))
    # a summary without device phases (made by hand) reads the host's, and says so
    bare = _gpu_summary().attribution
    assert bare.basis == "device time, phases by host ranges" and bare.phase_share("optimizer") == pytest.approx(0.1)
    assert _cpu_summary({"optimizer": 0.005, "other": 0.005}, {OUTSIDE: 0.01}).attribution.basis == "host self time"
