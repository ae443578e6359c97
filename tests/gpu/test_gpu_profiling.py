"""gl.profile on a real CUDA training step: the steps it reports, the device's idle split and the verdict."""
from __future__ import annotations

import pytest

import gpulab as gl
from gpulab import course

STEPS, WARMUP = 4, 2


def _mlp_step(device):
    """A small MLP training step annotated with the four phases, its data already on the device."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = course.models.mlp(in_features=784, hidden=1024, layers=3).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x_all = torch.randn(4 * 512, 784, device=device)
    y_all = torch.randint(0, 10, (4 * 512,), device=device)
    state = {"i": 0}

    def step():
        with gl.phase("data"):
            i = state["i"] % 4
            state["i"] += 1
            x, y = x_all[i * 512:(i + 1) * 512], y_all[i * 512:(i + 1) * 512]
        with gl.phase("forward"):
            loss = F.cross_entropy(model(x), y)
        with gl.phase("backward"):
            loss.backward()
        with gl.phase("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)

    return step


@pytest.fixture(scope="module")
def summary(tmp_path_factory):
    import torch

    limits = gl.machine_limits("cuda", dtypes=["float32"], sizes=[2048], copy_bytes=1 << 28, min_run_time=0.1)
    step = _mlp_step(torch.device("cuda", torch.cuda.current_device()))
    s = gl.profile(step, steps=STEPS, warmup=WARMUP, label="mlp step on cuda", device="cuda", limits=limits,
                   trace=True, trace_dir=tmp_path_factory.mktemp("traces"))
    yield s
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def test_profile_counts_each_scheduled_step_once(summary, figure):
    s = summary
    assert s.device_kind == "cuda", f"profile(device='cuda') reported device_kind={s.device_kind!r}"
    assert s.steps == STEPS and len(s.step_times_s) == STEPS, (
        f"profile scheduled {STEPS} active steps but the summary reports {s.steps} (step windows "
        f"{len(s.step_times_s)}): on CUDA, kineto also puts each ProfilerStep#N range on the device timeline "
        "(a gpu_user_annotation event, device_type CUDA); the step windows must come from the CPU-side "
        "ProfilerStep events only")
    assert all(t > 0 for t in s.step_times_s), f"a profiled step lasted no time: {s.step_times_s}"
    assert s.trace_path, "trace=True wrote no trace file"
    first = s.trace_ranges(step=STEPS - 1)
    assert first.loc[0, "range"].startswith("ProfilerStep"), (
        f"the last profiled step's trace ranges do not start with its ProfilerStep range: {first.head()}")
    figure("profile_step_time", s.step_s * 1e3, "ms", note=f"mean of {s.steps} profiled steps of a "
           "784-1024x3-10 MLP, batch 512, Adam (profiler overhead included)")


def test_profile_records_device_events_and_a_consistent_idle_split(summary, figure):
    d = summary.device
    assert d.profiled, "CUDA activity was not requested although the step ran on cuda"
    assert d.kernels, (f"no device events came back from the profiler: {d.note}. The device columns and the "
                       "idle split need CUPTI (libcupti for torch.version.cuda, no other profiler attached)")
    parts = {"idle_between_kernels_s": d.idle_between_kernels_s, "idle_host_s": d.idle_host_s,
             "idle_after_sync_s": d.idle_after_sync_s, "busy_s": d.busy_s}
    missing = [k for k, v in parts.items() if v is None]
    assert not missing, f"the device idle split has no value for {missing}: {d}"
    negative = {k: v for k, v in parts.items() if v < 0}
    assert not negative, f"device idle split values must be >= 0 seconds, got {negative}"
    assert d.idle_after_sync_s <= d.idle_host_s + 1e-9, (
        f"idle after a sync ({d.idle_after_sync_s:.6f} s) is part of the idle time waiting for the host "
        f"({d.idle_host_s:.6f} s) and cannot exceed it")
    total = summary.total_s
    accounted = d.busy_s + d.idle_between_kernels_s + d.idle_host_s
    assert accounted == pytest.approx(total, rel=1e-3, abs=1e-6), (
        f"busy ({d.busy_s:.6f} s) + idle between kernels ({d.idle_between_kernels_s:.6f} s) + idle waiting for "
        f"the host ({d.idle_host_s:.6f} s) = {accounted:.6f} s should cover the profiled steps' "
        f"{total:.6f} s exactly")
    assert summary.device_time_s is not None and summary.device_time_s > 0, (
        f"no device time on the operator rows although {d.kernels} device events came back: {d.note}")
    figure("profile_device_busy", 100 * (summary.device_busy_share or 0.0), "%",
           note="share of the profiled steps' wall time with a kernel, copy or memset running")
    figure("profile_idle_waiting_for_host", 1e3 * d.idle_host_s / summary.steps, "ms/step",
           note=f"between kernels: {1e6 * d.idle_between_kernels_s / summary.steps:.1f} us/step; "
                f"{d.kernels / summary.steps:.0f} device events per step")


def test_profile_verdict_is_produced_from_the_ceilings(summary):
    v = summary.verdict
    assert v.verdict in gl.profiling.VERDICTS, (
        f"with the step's work counted and ceilings given, the verdict should be one of "
        f"{sorted(gl.profiling.VERDICTS)}, got {v.verdict!r}:\n{v}")
    assert "measured ceilings" in v.source, f"the verdict was not grounded in the ceilings (source {v.source!r})"
    assert "device-idle" in v.codes, f"a CUDA profile's verdict should report the device's idle split:\n{v}"
    assert summary.roofline is not None, "the step's roofline is missing although work and limits were given"
    assert repr(summary) and summary._repr_html_()


def test_the_backward_phase_has_the_device_time_of_its_kernels(summary, figure):
    import torch

    phases = summary.device_phases_s
    assert phases, f"a CUDA profile with device events has no device phases: {summary.device}"
    # the autograd engine launches the backward kernels from its own thread, outside gl.phase("backward")'s device
    # copy: they reach the backward phase only through their launching operators (linked_correlation_id, or on
    # older torch the cudaLaunchKernel call's thread and time)
    assert phases["backward"] > 0, (f"no device time in the backward phase on torch {torch.__version__}: the "
                                    f"backward kernels were not traced to their launching operators: {phases}")
    # backward runs about twice the forward's matmuls (the weights' and the inputs' gradients)
    assert phases["backward"] >= 0.5 * phases["forward"], (
        f"the backward phase has {phases['backward'] * 1e6:.0f} us of device time against the forward's "
        f"{phases['forward'] * 1e6:.0f} us: backward kernels are landing elsewhere: {phases}")
    figure("profile_backward_device_share", 100 * summary.attribution.phase_share("backward"), "%",
           note=f"device phases per {summary.steps} steps: " + ", ".join(f"{k} {v * 1e3:.2f} ms"
                                                                         for k, v in phases.items()))


def test_holistic_trace_analysis_reads_the_real_trace_and_agrees_on_busy_time(summary, figure):
    """Holistic Trace Analysis (gl.profiling.trace_breakdown) on the trace gl.profile wrote: it parses a real kineto
    trace (correlations, streams, the device copies of the step ranges left out), its split adds up, and its busy
    time (computing plus copies) is the union of kernels gl.profile counted in the same steps."""
    pytest.importorskip("hta", reason="Holistic Trace Analysis (requirements/addons.txt) is not installed")
    r = gl.profiling.trace_breakdown(summary).rank(0)
    assert r.span_s > 0 and r.compute_s > 0, r
    assert r.share("idle") + r.share("compute") + r.share("non_compute") == pytest.approx(1.0, abs=1e-6), r
    busy = summary.device.busy_s
    figure("hta_idle_share_of_span", 100 * r.share("idle"), "%",
           note=f"HTA on gl.profile's trace of an MLP step: busy {1e3 * (r.compute_s + r.non_compute_s):.2f} ms, "
                f"gl.profile busy {1e3 * busy:.2f} ms; idle {r.share('host_wait'):.0%} host wait, "
                f"{r.share('kernel_wait'):.0%} between kernels, {r.share('other_wait'):.0%} other")
    assert r.compute_s + r.non_compute_s == pytest.approx(busy, rel=0.25), (
        f"HTA counts {r.compute_s + r.non_compute_s:.6f} s of kernels where gl.profile counted {busy:.6f} s in the "
        f"same steps: {r}")
