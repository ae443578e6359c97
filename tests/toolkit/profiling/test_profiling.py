"""gpulab.profiling: profile() summaries (phases, operators, syncs, trace), the verdict rules and their
agreement with telemetry's diagnose(), the device-event check against fakes shaped like FunctionEvent,
NVTX / Nsight helpers against a fake torch.cuda, and tf_profile against a fake tensorflow module."""
from __future__ import annotations

import doctest
import json
import sys
import time
import types

import pytest
import torch

import gpulab
import gpulab.profiling as P
from gpulab.profiling import DeviceCheck, ProfileSummary, check_device_events, diagnose_profile


def test_doctests(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)                      # trace files go to ./traces
    assert doctest.testmod(P).failed == 0


@pytest.fixture(autouse=True)
def _one_thread():
    """These steps do microseconds of math, which their verdicts rely on. On a machine with a busy core a 2-thread
    operator waits a time slice for its stalled thread (milliseconds), a different loop from the one tested; one
    thread keeps the premise on any machine (gl.interleaved.threads)."""
    with gpulab.interleaved.threads(1):
        yield


def _annotated_step(data_s=0.0, tiny_ops=0, items=0, big=64):
    w = torch.randn(big, big, requires_grad=True)

    def step():
        with P.phase("data"):
            if data_s:
                time.sleep(data_s)
            x = torch.randn(8, big)
        with P.phase("forward"):
            loss = (x @ w).square().mean()
            t = torch.zeros(1)
            for _ in range(tiny_ops):
                t = t.neg()
        with P.phase("backward"):
            loss.backward()
        with P.phase("optimizer"):
            with torch.no_grad():
                w.sub_(0.01 * w.grad)
            w.grad = None
        for _ in range(items):
            loss.item()
    return step


def test_phases_shares_and_input_bound_verdict(tmp_path):
    s = gpulab.profile(_annotated_step(data_s=0.02), steps=3, warmup=1, label="sleepy data", trace_dir=tmp_path)
    assert s.steps == 3 and len(s.step_times_s) == 3
    assert set(s.phases_s) == {"data", "forward", "backward", "optimizer", "other"}
    assert sum(s.phases_s.values()) == pytest.approx(s.total_s, rel=1e-6)
    assert s.share("data") > 0.5                       # 20 ms of sleep against microseconds of math
    assert s.phases_s["forward"] > 0 and s.phases_s["backward"] > 0 and s.phases_s["optimizer"] > 0
    v = s.verdict
    assert v.verdict == "input-bound" and "input-bound" in v.codes
    assert f"{s.share('data'):.0%} of step time in data loading" in v.findings[0].message
    assert s.device.kernels is None and s.device.profiled is False
    # the trace is a Chrome trace with our ranges in it
    trace = json.loads(open(s.trace_path).read())
    names = {e["name"] for e in trace["traceEvents"] if e.get("cat") == "user_annotation"}
    assert {"data", "forward", "backward", "optimizer"} <= names
    assert "sleepy data" in repr(s) and "<table" in s._repr_html_()


def test_overhead_bound_and_the_fallback_without_ceilings():
    tiny = gpulab.profile(_annotated_step(tiny_ops=400), steps=2, warmup=1, trace=False)
    assert tiny.op_calls_per_step >= 400 and tiny.median_op_s < P.TINY_OP_S
    assert tiny.verdict.verdict == "overhead-bound" and tiny.roofline.efficiency < 0.5
    assert tiny.work.ops >= 400 and tiny.limits is gpulab.machine_limits("cpu")     # measured once, remembered
    # without ceilings the thresholds decide, and the verdict says it was not checked against a roofline
    big = gpulab.profile(_annotated_step(big=768), steps=2, warmup=1, trace=False, limits=False)
    assert big.op_calls_per_step < 50 and big.roofline is None
    assert big.verdict.verdict == "compute-bound" and big.trace_path is None
    assert "not checked against a roofline" in next(f for f in big.verdict.findings if f.code == "compute-bound").message
    assert big.top(3).index[0].startswith("aten::")
    uncounted = gpulab.profile(_annotated_step(), steps=2, warmup=0, trace=False)
    assert uncounted.work is None and uncounted.roofline is None


def test_item_calls_counted_outside_data_and_optimizer():
    s = gpulab.profile(_annotated_step(items=3), steps=2, warmup=0, trace=False)
    assert s.syncs_per_step == 3
    assert "host-syncs" in s.verdict.codes

    def step():  # .item() inside data loading reads CPU scalars: not a device sync
        with P.phase("data"):
            torch.ones(1).item()
        torch.ones(4).sum()
    assert gpulab.profile(step, steps=2, trace=False).syncs_per_step == 0


def test_pytorch_own_ranges_count_without_annotation():
    model = torch.nn.Linear(32, 4)
    opt = torch.optim.Adam(model.parameters())
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(256, 32)), batch_size=16)
    it = iter(loader)

    def step():
        (x,) = next(it)
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    s = gpulab.profile(step, steps=3, warmup=1, trace=False)
    assert s.phases_s["data"] > 0 and s.phases_s["optimizer"] > 0
    assert s.syncs_per_step == 0                      # Adam's .item() on CPU step counters is not counted
    assert any("DataLoader" in k for k in s.ranges_s)


def test_nested_ranges_not_double_counted():
    def step():
        with P.phase("forward"):
            with P.phase("loss"):                     # also a forward prefix: counted once
                time.sleep(0.005)
    s = gpulab.profile(step, steps=2, trace=False)
    assert s.share("forward") <= 1.0 and s.phases_s["other"] >= 0


def test_memory_by_operator():
    s = gpulab.profile(lambda: torch.ones(256, 256) @ torch.ones(256, 256), steps=2, memory=True, trace=False)
    df = s.to_dataframe()
    assert "self_cpu_memory_bytes_per_step" in df
    assert df["self_cpu_memory_bytes_per_step"].max() >= 256 * 256 * 4


def test_compare_profiles():
    a = gpulab.profile(_annotated_step(data_s=0.01), steps=2, label="slow", trace=False)
    b = gpulab.profile(_annotated_step(), steps=2, label="fast", trace=False)
    c = gpulab.compare_profiles([a, b])
    assert c.baseline == "slow" and c.speedup("fast") > 1
    df = c.to_dataframe()
    assert list(df.index) == ["slow", "fast"] and df.loc["slow", "verdict"] == "input-bound"
    assert "slow" in repr(c) and c.plot() is not None
    with pytest.raises(ValueError):
        gpulab.compare_profiles([a, a])
    with pytest.raises(ValueError):
        gpulab.compare_profiles([a, b], baseline="nope")
    with pytest.raises(TypeError):
        gpulab.compare_profiles(["x"])


def test_compare_profiles_with_unprofiled_timings():
    a = gpulab.profile(_annotated_step(data_s=0.01), steps=2, label="slow", trace=False)
    b = gpulab.profile(_annotated_step(), steps=2, label="fast", trace=False)
    timed = gpulab.benchmark_interleaved({"slow": _annotated_step(data_s=0.004), "fast": _annotated_step()},
                                         min_run_time=0.1, min_rounds=3)
    c = gpulab.compare_profiles([a, b], timings=timed)      # Measurements, as benchmark_interleaved returns
    assert c.step_s("slow") == timed["slow"].median_s != a.step_s
    assert c.speedup("fast") == pytest.approx(timed["slow"].median_s / timed["fast"].median_s)
    assert "step, no profiler" in repr(c) and "without the profiler" in c._repr_html_()
    assert gpulab.compare_profiles([a, b], timings={"slow": 0.02, "fast": 0.01}).speedup("fast") == pytest.approx(2)
    assert "unprofiled_step_ms" in c.to_dataframe()
    with pytest.raises(ValueError, match="no entry for \\['fast'\\]"):
        gpulab.compare_profiles([a, b], timings={"slow": 0.02})
    with pytest.raises(ValueError, match="positive"):
        gpulab.compare_profiles([a, b], timings={"slow": 0.02, "fast": 0.0})
    with pytest.raises(TypeError, match="mapping"):
        gpulab.compare_profiles([a, b], timings=[0.02, 0.01])


def test_bad_input():
    with pytest.raises(TypeError):
        gpulab.profile("not callable")
    with pytest.raises(ValueError):
        gpulab.profile(lambda: None, steps=0)
    with pytest.raises(TypeError):
        gpulab.profile(lambda: None, memory="yes")
    with pytest.raises(TypeError):
        with gpulab.phase(""):
            pass
    s = gpulab.profile(lambda: torch.ones(2) + 1, steps=1, trace=False)
    with pytest.raises(ValueError):
        s.top(by="gpu")
    with pytest.raises(ValueError):
        s.top(by="self_device")                         # no device profiled: says so instead of an empty table
    with pytest.raises(KeyError):
        s.share("nope")
    with pytest.raises(ValueError, match="script"):
        gpulab.profiling.nsight_commands("train.py\nrm -rf /")
    with pytest.raises(ValueError):
        gpulab.profiling.nsight_commands(kernels=0)


# ---- device events: fakes shaped like torch.autograd.profiler_util.FunctionEvent ------------------
class _Range:
    def __init__(self, start, end):
        self.start, self.end = start, end


class _Ev:
    def __init__(self, name, start_us, end_us, device="DeviceType.CUDA"):
        self.name, self.time_range = name, _Range(start_us, end_us)
        self.device_type = device


def test_device_check_against_fakes():
    assert check_device_events([], profiled=False, cuda_used=False).kernels is None
    none = check_device_events([_Ev("aten::mm", 0, 10, "DeviceType.CPU")], profiled=True, cuda_used=True)
    assert none.kernels == 0 and not none.ok and "CUPTI" in none.note and none.busy_s is None
    idle = check_device_events([], profiled=True, cuda_used=False)
    assert idle.ok and idle.kernels == 0
    kernels = [_Ev("gemm", 0, 100), _Ev("relu", 50, 150), _Ev("copy", 300, 310), _Ev("cpu", 0, 1000, "DeviceType.CPU")]
    d = check_device_events(kernels, profiled=True, cuda_used=True, windows=[(0.0, 1e-3)])
    assert d.ok and d.kernels == 3
    assert d.busy_s == pytest.approx(160e-6)           # union: [0, 150] + [300, 310] us
    assert d.median_kernel_s == pytest.approx(100e-6)


def _fabricated(**kw):
    base = dict(label="fab", device_kind="cuda", steps=10, warmup=1, step_times_s=(0.01,) * 10,
                phases_s={"data": 0.01, "forward": 0.04, "backward": 0.04, "optimizer": 0.01, "other": 0.0},
                ops=(P.OpStat("aten::mm", 20, 0.01, 0.01, 0.05, 0.05),), op_calls_per_step=50.0, median_op_s=5e-6,
                syncs_per_step=0.0, device=DeviceCheck(True, 100, 0.08, 50e-6, "100 device events recorded"))
    base.update(kw)
    return ProfileSummary(**base)


def test_gpu_verdicts_on_fabricated_profiles():
    assert diagnose_profile(_fabricated()).verdict == "healthy"          # busy 80% of the step
    launch = _fabricated(device=DeviceCheck(True, 3000, 0.02, 3e-6, "3000 device events recorded"),
                         op_calls_per_step=3000.0)
    v = diagnose_profile(launch)
    assert v.verdict == "overhead-bound" and "kernels per step" in v.findings[0].evidence
    lost = _fabricated(device=DeviceCheck(True, 0, None, None, "device events not recorded although ..."))
    assert "no-device-events" in diagnose_profile(lost).codes
    # on a GPU the host-side op rule does not fire: many short host calls are normal there
    many_host_calls = _fabricated(op_calls_per_step=5000.0, median_op_s=2e-6)
    assert diagnose_profile(many_host_calls).verdict == "healthy"


def test_verdict_agrees_with_telemetry_diagnose():
    """The same 60% data share gives the same verdict code from a profile and from Monitor telemetry."""
    import pandas as pd

    from gpulab.telemetry.diagnose import DATA_SHARE, diagnose
    from gpulab.telemetry.trace import Mark, Trace

    frame = pd.DataFrame({"t_s": [0.1 * i for i in range(10)], "device": "host", "source": "host",
                          "cpu_util_pct": 50.0, "process_cpu_pct": 50.0})
    trace = Trace(frame, 0.1, marks=(Mark("data", 0.0, 0.6), Mark("compute", 0.6, 1.0)), duration_s=1.0)
    assert diagnose(trace).verdict == "input-bound"
    prof = _fabricated(device=DeviceCheck(False, None, None, None, "CPU only"), device_kind="cpu",
                       phases_s={"data": 0.06, "forward": 0.02, "backward": 0.02, "optimizer": 0.0, "other": 0.0})
    assert prof.share("data") == pytest.approx(0.6) and prof.share("data") >= DATA_SHARE
    assert diagnose_profile(prof).verdict == "input-bound"


# ---- NVTX and Nsight against a fake torch.cuda ---------------------------------------------------
def test_phase_pushes_nvtx_when_cuda(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda name: calls.append(("push", name)))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: calls.append(("pop",)))
    with gpulab.phase("forward"):
        calls.append(("body",))
    assert calls == [("push", "forward"), ("body",), ("pop",)]


def test_nvtx_capture_with_fake_cuda(monkeypatch):
    calls = []
    fake = types.SimpleNamespace(
        is_available=lambda: True, synchronize=lambda: calls.append("sync"),
        profiler=types.SimpleNamespace(start=lambda: calls.append("start"), stop=lambda: calls.append("stop")))

    class FakeEmit:
        def __init__(self, record_shapes=False):
            calls.append(f"emit_nvtx(record_shapes={record_shapes})")

        def __enter__(self):
            return self

        def __exit__(self, *a):
            calls.append("emit_done")
    monkeypatch.setattr(torch.autograd.profiler, "emit_nvtx", FakeEmit)
    with gpulab.profiling.nvtx_capture(cuda=fake) as active:
        calls.append("body")
    assert active is True
    assert calls == ["start", "emit_nvtx(record_shapes=False)", "body", "emit_done", "sync", "stop"]
    off = types.SimpleNamespace(is_available=lambda: False)
    with gpulab.profiling.nvtx_capture(cuda=off) as active:
        pass
    assert active is False


def test_nsight_commands():
    c = gpulab.profiling.nsight_commands("train.py", output="run1", nvtx_range="forward", kernels=5)
    assert c.nsys.startswith("nsys profile --trace=cuda,nvtx")
    assert "--capture-range=cudaProfilerApi" in c.nsys and "--output=run1" in c.nsys and c.nsys.endswith("train.py")
    assert "--nvtx-include forward/" in c.ncu and "--launch-count 5" in c.ncu
    assert c.nsys_stats == "nsys stats run1.nsys-rep"
    assert "--capture-range" not in gpulab.profiling.nsight_commands(capture_range=False).nsys
    assert "nsys" in repr(c) and "<table" in c._repr_html_()


def test_nsight_commands_are_shell_quoted():
    """A path with spaces, quotes or shell characters stays one argument: the text splits back exactly."""
    import shlex

    script = 'my runs/train "v2".py; rm -rf ~ $(reboot)'
    c = gpulab.profiling.nsight_commands(script, output="run 1", nvtx_range="fwd pass")
    nsys, ncu = shlex.split(c.nsys), shlex.split(c.ncu)
    assert nsys[-2:] == ["python", script] and "--output=run 1" in nsys
    assert ncu[-2:] == ["python", script] and ncu[ncu.index("--nvtx-include") + 1] == "fwd pass/"
    assert shlex.split(c.nsys_stats) == ["nsys", "stats", "run 1.nsys-rep"]

# ---- TensorFlow profiler against a fake tensorflow module ----------------------------------------
def test_tf_profile_with_fake_tensorflow(monkeypatch, tmp_path):
    calls = []

    class Trace:
        def __init__(self, name, step_num, _r):
            calls.append(("trace", name, step_num, _r))

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    def start(logdir):
        calls.append(("start", logdir))
        out = tmp_path / "tf" / "plugins" / "profile" / "run1"
        out.mkdir(parents=True)
        (out / "host.xplane.pb").write_bytes(b"")

    tf = types.ModuleType("tensorflow")
    tf.profiler = types.SimpleNamespace(experimental=types.SimpleNamespace(
        start=start, stop=lambda: calls.append(("stop",)), Trace=Trace))
    monkeypatch.setitem(sys.modules, "tensorflow", tf)
    steps = []
    prof = gpulab.profiling.tf_profile(lambda: steps.append(1), steps=3, warmup=2, logdir=tmp_path / "tf")
    assert len(steps) == 5
    assert calls[0] == ("start", str(tmp_path / "tf")) and calls[-1] == ("stop",)
    assert [c[2] for c in calls if c[0] == "trace"] == [0, 1, 2]
    assert prof.files and prof.files[0].endswith(".xplane.pb") and prof.command == f"tensorboard --logdir {tmp_path / 'tf'}"
    assert prof.top == () and "tensorboard-plugin-profile" in repr(prof)
    with pytest.raises(ValueError):
        gpulab.profiling.tf_profile(lambda: None, steps=0)


def test_trace_ranges(tmp_path):
    s = gpulab.profile(_annotated_step(data_s=0.002), steps=3, warmup=1, trace_dir=tmp_path, label="ranges")
    df = s.trace_ranges(1)
    assert df.loc[0, "range"].startswith("ProfilerStep") and df.loc[0, "starts at (ms)"] == 0
    names = list(df["range"])
    assert [n for n in names if n in ("data", "forward", "backward", "optimizer")] == \
        ["data", "forward", "backward", "optimizer"]                     # one step's phases, in order
    assert df.loc[names.index("data"), "lasts (ms)"] >= 2.0             # the 2 ms sleep
    assert df["starts at (ms)"].max() < 1e3 * s.step_times_s[1] + 1
    with pytest.raises(ValueError, match="below the 3"):
        s.trace_ranges(3)
    with pytest.raises(FileNotFoundError, match="trace=True"):
        gpulab.profile(_annotated_step(), steps=1, trace=False).trace_ranges()
