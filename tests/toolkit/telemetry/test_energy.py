"""Energy beside time: gpulab.telemetry.energy against a fake RAPL sysfs and the fake NVML (real pynvml errors and
constants), joules per call in gl.benchmark / gl.timer, joules and cost per item in gl.compare, the Monitor's
summary and per-phase joules, and the "not measurable here" path of a machine without counters (this CI's)."""
from __future__ import annotations

import time
from pathlib import Path

from support import fake_nvml
import pandas as pd
import pynvml
import pytest

import gpulab as gl
from gpulab.telemetry import rapl
from gpulab.telemetry.energy import TOO_SHORT, Energy, EnergyMeter
from gpulab.telemetry.rapl import RaplZone
from gpulab.telemetry.trace import Mark, Trace


# ---- the CPU: RAPL ---------------------------------------------------------------------------------------------
def test_cpu_joules_per_call_are_mean_power_times_the_median(package_at):
    package_at(watts=40.0)
    m = gl.benchmark(sum, range(20_000), min_run_time=0.3, items=100, warn_noisy=False)
    assert m.energy.measured and m.energy.counted and "RAPL" in m.energy.source
    assert m.energy.watts == pytest.approx(40.0, rel=0.05)
    assert m.joules_per_call == pytest.approx(m.energy.watts * m.median_s)
    assert m.joules_per_item == pytest.approx(m.joules_per_call / 100)
    assert "J per call" in repr(m) and "W x the median" in repr(m)


def test_the_counter_wrapping_during_a_block_is_added_back(package_at):
    package_at(watts=100.0, wrap=100_000_000, start_uj=99_000_000, limit_w=120.0)   # wraps 10 ms in, then every s
    with gl.timer("block") as t:
        time.sleep(0.5)
    assert t.energy.joules == pytest.approx(100.0 * t.elapsed_s, rel=0.1)
    assert "J)" in repr(t)


def test_counters_only_root_may_read_give_no_figure_and_say_so(package_at, monkeypatch):
    root = package_at()
    monkeypatch.setattr(RaplZone, "read_uj", lambda self: (_ for _ in ()).throw(PermissionError(13, "denied")))
    real = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: (_ for _ in ()).throw(PermissionError(13, "denied"))
                        if self.name == "energy_uj" else real(self, *a, **k))
    e = EnergyMeter("cpu", rapl_root=root).start().stop()
    assert e.joules is None and "root only" in e.reason and "not measurable here" in str(e)
    assert e.watts is None and e.per_call(1.0) is None


def test_this_machine_either_measures_or_says_not_measurable():
    """CI machines are VMs: no RAPL. Wherever a counter is readable, the figure is a positive number instead."""
    m = gl.benchmark(sum, range(1000), min_run_time=0.05, items=1, warn_noisy=False)
    status = rapl.rapl_zones()
    if status.readable:
        assert m.joules_per_call > 0
    else:
        assert m.joules_per_call is None and m.energy.reason == status.cause
        assert "not measurable here" in repr(m)
        table = gl.compare([m], energy=True, price_per_hour=1.0)
        assert "not measurable" in repr(table) and "J per item" in repr(table)
        assert "J per" not in repr(gl.compare([m]))           # by default the column shows only with a figure
        assert pd.isna(table.to_dataframe().loc[m.label, "joules_per_item"])


def test_benchmark_energy_false_reads_nothing(monkeypatch):
    monkeypatch.setattr(EnergyMeter, "start", lambda self: pytest.fail("energy=False must not read a counter"))
    m = gl.benchmark(sum, range(100), min_run_time=0.02, energy=False, warn_noisy=False)
    assert m.energy is None and m.joules_per_call is None


# ---- GPUs: NVML's energy counter, power integrated where there is none ------------------------------------------
def test_the_fake_answers_as_pynvml_does(scripted):
    """The energy call of the fake is pynvml's (same name and parameters, tests/project/test_fakes_match_real.py), a device
    without it (a MIG slice) raises pynvml's own NotSupported error, and, like NVML's, the counter advances with time
    in steps of the GPU's power x its period, not with each read."""
    card = scripted.nvmlDeviceGetHandleByIndex(2)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        scripted.nvmlDeviceGetTotalEnergyConsumption(scripted.nvmlDeviceGetMigDeviceHandleByIndex(card, 0))
    assert pynvml.NVMLError_NotSupported is type(pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED))
    h100, t4 = (scripted.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))
    assert scripted.nvmlDeviceGetPowerUsage(t4) > 0 and scripted.nvmlDeviceGetTotalEnergyConsumption(t4) > 0  # a T4's
    before = [scripted.nvmlDeviceGetTotalEnergyConsumption(h100) for _ in range(20)]    # reads do not advance it
    assert len(set(before)) <= 2 and (before[0] - fake_nvml.ENERGY_AT_LOAD_MJ) % 35_000 == 0
    time.sleep(0.25)
    after = scripted.nvmlDeviceGetTotalEnergyConsumption(h100)
    assert after > before[-1] and (after - before[-1]) % 35_000 == 0          # whole 100 ms steps of 350 W


def _fast_counter(fake, index=0, period_s=0.01, watts=350.0):
    """The fake GPU's counter advancing every ``period_s`` (set before its first read): windows of 10 periods are
    then a tenth of a second, and the tests stay short."""
    fake.gpus[index].energy_period_s, fake.gpus[index].watts = period_s, watts


def test_the_gpu_counter_gives_joules(scripted, pretend_gpus):
    pretend_gpus(3)
    _fast_counter(scripted)
    meter = EnergyMeter("cuda:0").start()
    time.sleep(0.3)                            # 30 periods of 10 ms
    e = meter.stop()
    assert e.counted and "NVML energy counter" in e.source
    assert e.joules == pytest.approx(350.0 * e.seconds, rel=0.15, abs=2 * 3.5)     # about one 3.5 J update per end
    assert meter.period.measured and 0.005 < meter.period.seconds < 0.05


def test_a_gpu_window_shorter_than_ten_counter_periods_has_no_figure(scripted, pretend_gpus):
    """NVML's counter advances in steps (100 ms measured on an H200; each GPU's own period is measured): each of a
    window's two readings is up to one step stale, so a window under ten steps gives no joules, and says why."""
    pretend_gpus(3)
    _fast_counter(scripted, period_s=0.02)
    meter = EnergyMeter("cuda:0").start()
    time.sleep(0.06)                           # three periods: readable, but off by up to a third
    e = meter.stop()
    assert e.joules is None and TOO_SHORT in e.reason and "10 updates" in e.reason and "gl.benchmark" in e.reason
    assert "measured over" in e.reason and "not measurable here" in str(e)
    assert meter.start() and (time.sleep(0.3) or meter.stop().measured)       # a longer window reads


def test_each_gpus_counter_period_is_measured_once_and_remembered(fake_nvml, pretend_gpus, monkeypatch):
    fake = fake_nvml(gpus=(("NVIDIA A100-SXM4-40GB", (8, 0), 40 * 2**30),) * 2)
    pretend_gpus(2)
    _fast_counter(fake, 0, period_s=0.01)
    _fast_counter(fake, 1, period_s=0.04)
    periods = []
    for index in (0, 1):
        meter = EnergyMeter(f"cuda:{index}").start()
        meter.stop()
        periods.append(meter.period.seconds)
    assert periods[0] < periods[1] and 0.005 < periods[0] < 0.03 and 0.02 < periods[1] < 0.12
    reads = []
    real = fake.nvmlDeviceGetTotalEnergyConsumption
    monkeypatch.setattr(fake, "nvmlDeviceGetTotalEnergyConsumption", lambda h: reads.append(h) or real(h))
    again = EnergyMeter("cuda:1").start()
    again.stop()
    assert again.period.seconds == periods[1] and len(reads) == 3     # found, started, stopped: not measured again


def test_a_counter_whose_period_cannot_be_measured_is_assumed_100_ms_and_said(fake_nvml, pretend_gpus, monkeypatch):
    """A counter that never moves (or stops answering) while it is read gives no period: NVML's usual 100 ms is
    assumed, with the reason, so windows under a second give no figure; a window long enough over a counter that
    did not count gives none either (never a measured 0 J). Every read goes through nvml.py's guarded helper: an
    NVML error is an answer of None, never an exception."""
    from gpulab.telemetry import energy, nvml

    fake = fake_nvml()
    pretend_gpus()
    _fast_counter(fake, period_s=0.01, watts=0.0)            # a counter that never moves
    monkeypatch.setattr(energy, "PERIOD_PROBE_S", 0.2)
    meter = EnergyMeter("cuda:0").start()
    e = meter.stop()
    assert not meter.period.measured and meter.period.seconds == energy.GPU_COUNTER_PERIOD_S
    assert e.joules is None and "assumed: the counter changed 0 times in 0.2 s of reads" in e.reason
    assert "under 1 s" in e.reason
    monkeypatch.setattr(energy, "GPU_COUNTER_PERIOD_S", 0.01)
    energy._PERIODS.clear()
    e = EnergyMeter("cuda:0").start()
    time.sleep(0.15)
    e = e.stop()
    assert e.joules is None and "did not advance" in e.reason                 # not a measured 0 J

    calls = []
    queried = []
    real_query = nvml.query
    monkeypatch.setattr(nvml, "query", lambda fn, *a, **k: queried.append(fn) or real_query(fn, *a, **k))

    def lost(handle):
        calls.append(handle)
        if len(calls) > 4:                          # found, started, stopped, one probe read: then the GPU is lost
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return 5_000_000 + 1000 * len(calls)

    monkeypatch.setattr(fake, "nvmlDeviceGetTotalEnergyConsumption", lost)
    energy._PERIODS.clear()
    meter = EnergyMeter("cuda:0").start()
    e = meter.stop()
    assert meter.period.reason == "the counter stopped answering while its period was measured"
    assert e.joules is None and TOO_SHORT in e.reason
    assert queried.count("nvmlDeviceGetTotalEnergyConsumption") == len(calls)    # every read through nvml.query


def test_a_gpu_without_counter_or_power_is_not_measurable(scripted, pretend_gpus):
    pretend_gpus(3)
    e = EnergyMeter("cuda:2").start().stop()          # the scripted A100's MIG slice: power and energy NotSupported
    assert e.joules is None and "neither an energy counter nor power" in e.reason


def test_power_is_integrated_where_the_counter_is_missing(fake_nvml, pretend_gpus):
    fake = fake_nvml(gpus=(("NVIDIA A100-SXM4-40GB", (8, 0), 40 * 2**30),))
    fake.gpus[0].unsupported = frozenset({"nvmlDeviceGetTotalEnergyConsumption"})
    with EnergyMeter("cuda:0") as meter:
        time.sleep(0.3)
    e = meter.energy
    assert not e.counted and "power read every" in e.source
    assert e.joules == pytest.approx(350.0 * e.seconds, rel=0.15)        # the scripted 350 W
    assert "integrated from sampled power" in str(e)


def test_fake_gpu_table_has_joules_and_cost(scripted, pretend_gpus, monkeypatch):
    """Two variants timed on the fake H100 whose counter runs at 300 W and then 150 W: joules per item follow."""
    import torch

    pretend_gpus(3)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    _fast_counter(scripted, watts=300.0)           # updates every 10 ms: windows of 0.1 s or more give joules
    fast = gl.benchmark(lambda: time.sleep(0.002), label="bf16", device="cuda:0", items=64, min_run_time=0.2,
                        warn_noisy=False)
    scripted.gpus[0].watts = 150.0
    slow = gl.benchmark(lambda: time.sleep(0.004), label="fp32", device="cuda:0", items=64, min_run_time=0.2,
                        warn_noisy=False)
    table = gl.compare([slow, fast], baseline="fp32", price_per_hour=3.6)
    text = repr(table)
    assert "mJ per item" in text and "$ per 1M items" in text and "NVML energy counter" in text
    df = table.to_dataframe()
    assert df.loc["bf16", "joules_per_item"] == pytest.approx(300.0 * fast.median_s / 64, rel=0.2)
    assert df.loc["fp32", "usd_per_million"] == pytest.approx(1e6 / slow.items_per_s * 3.6 / 3600, rel=1e-9)
    print(table)


# ---- the Monitor: summary and phases ------------------------------------------------------------------------------
def _trace(**kw) -> Trace:
    t = [0.0, 1.0, 2.0, 3.0, 4.0]
    gpu = pd.DataFrame({"t_s": t, "device": "gpu0", "source": "nvml", "energy_j": [1000.0, 1300.0, 1600.0, 1700.0,
                                                                                    1800.0], "power_w": 300.0})
    old = pd.DataFrame({"t_s": t, "device": "gpu1", "source": "nvml", "power_w": [100.0] * 5})
    host = pd.DataFrame({"t_s": t, "device": "host", "source": "host", "cpu_util_pct": 50.0})
    marks = (Mark("train", 0.0, 2.0), Mark("eval", 2.0, 4.0), Mark("late", 4.5, 5.0))
    return Trace(pd.concat([host, gpu, old], ignore_index=True), 1.0, marks=marks, duration_s=5.0, **kw)


def test_summary_per_item_and_cost_and_the_sampled_fallback_said():
    s = _trace(energy_notes={"host": "no RAPL zones"}).summary(items=2000, price_per_hour=3.6)
    assert s.device("gpu0").energy_j == pytest.approx(800.0) and s.device("gpu0").energy_source == "counter"
    assert s.device("gpu1").energy_j == pytest.approx(400.0) and s.device("gpu1").energy_source == "integrated power"
    assert s.device("gpu0").energy_per_item_j == pytest.approx(0.4) and s.device("host").energy_j is None
    assert s.cost_per_million_items == pytest.approx(3.6 / 3600 * 5.0 / 2000 * 1e6)
    text = repr(s)
    assert "~400" in text and "25% of the" in text and "arXiv 2312.02741" in text
    assert "host energy not measurable here: no RAPL zones" in text and "not measurable" in text.splitlines()[3]
    assert "J per item" in text and "$2.5 per million items" in text
    assert "J per item" not in repr(_trace().summary())             # no items, no column


def test_joules_per_phase_from_the_counter_and_from_power():
    pe = _trace(energy_notes={"host": "no RAPL zones"}).phase_energy()
    assert pe.joules("train", "gpu0") == pytest.approx(600.0) and pe.joules("eval", "gpu0") == pytest.approx(200.0)
    assert pe.joules("train", "gpu1") == pytest.approx(200.0)
    assert pe.joules("late", "gpu0") is None                          # after the last sample: no figure
    assert pe.joules("train", "host") is None and "host energy not measurable here" in repr(pe)
    assert "~200" in repr(pe) and "not covered by samples" in repr(pe)
    assert list(pe.to_dataframe().columns) == ["seconds", "host_j", "gpu0_j", "gpu1_j"]
    with pytest.raises(KeyError, match="phases"):
        pe.joules("nope", "gpu0")


def test_monitor_records_gpu_counters_and_says_which_gpu_has_none(scripted):
    scripted.gpus[1].unsupported = frozenset({"nvmlDeviceGetPowerUsage", "nvmlDeviceGetTotalEnergyConsumption"})
    with gl.Monitor(interval=0.02) as mon:
        with mon.phase("work"):
            time.sleep(0.25)
    tr = mon.trace
    s = tr.summary()
    assert s.device("gpu0").energy_j > 0 and s.device("gpu0").energy_source == "counter"
    assert "neither an energy counter nor power" in tr.energy_notes["gpu1"]     # a board without the sensors
    assert s.device("gpu1").energy_note and "gpu1 energy not measurable here" in repr(s)
    assert "not per MIG slice" in tr.energy_notes["gpu2"]
    assert "host" in tr.energy_notes or s.device("host").energy_j is not None
    assert tr.phase_energy().joules("work", "gpu0") is not None


def test_monitor_reads_rapl_for_the_host(package_at):
    package_at(watts=25.0)
    with gl.Monitor(interval=0.05, gpus=False) as mon:
        time.sleep(0.4)
    s = mon.trace.summary()
    host = s.device("host")
    span = mon.trace.device_frame("host").index
    assert host.energy_j == pytest.approx(25.0 * (span[-1] - span[0]), rel=0.25)
    assert "RAPL" in repr(s) and "host" not in mon.trace.energy_notes


def test_energy_renders():
    e = Energy("cpu", 1.0, None, "", "no RAPL zones")
    assert "not measurable here" in e._repr_html_()
    with pytest.raises(RuntimeError, match="before start"):
        EnergyMeter("cpu").stop()
    with pytest.raises(ValueError, match="tpu"):
        EnergyMeter("tpu")


def test_a_logged_trace_keeps_why_energy_was_not_measurable():
    from gpulab.tracking._store import trace_files, trace_from_files

    tr = _trace(energy_notes={"host": "no RAPL zones"})
    back = trace_from_files(*trace_files(tr).values())
    assert back.energy_notes == {"host": "no RAPL zones"}
    assert back.phase_energy().joules("train", "gpu0") == pytest.approx(600.0)


def test_doctor_says_what_energy_this_machine_can_give(package_at, monkeypatch):
    from gpulab.diagnosis import energy_diagnoses
    from gpulab.telemetry.rapl import RaplStatus

    readable = energy_diagnoses("cpu", rapl.rapl_zones(package_at()), None)
    assert readable[0].level == "ok" and "package-0" in readable[0].message
    root_only = RaplStatus(reason="readable by root only here: CPU energy is not measurable here",
                           unreadable=("package-0",))
    d = energy_diagnoses("cpu", root_only, None)[0]
    assert d.level == "info" and "not measurable here" in d.message and "chmod" in d.fix
    assert energy_diagnoses("cpu", rapl.rapl_zones("/no/such"), None)[0].fix == ""        # a VM: nothing to do
    assert energy_diagnoses("cuda", root_only, True)[0].level == "ok"
    assert "no energy counter" in energy_diagnoses("cuda", root_only, False)[0].message
    codes = [x.code for x in gl.doctor(frameworks=("torch",)).diagnoses]
    assert "energy-cpu" in codes or "energy-gpu" in codes


def test_a_gpu_price_over_cpu_times_is_called_a_what_if():
    from gpulab.cost import hourly_price, price_mismatch

    m = gl.benchmark(sum, range(100), min_run_time=0.02, items=1, warn_noisy=False)
    h100 = hourly_price("aws-p5-h100")
    assert "a what-if: the H100 SXM price" in repr(gl.compare([m], price_per_hour=h100))
    assert "what-if" not in repr(gl.compare([m], price_per_hour=0.5))        # your own price: yours to judge
    assert price_mismatch(h100, "NVIDIA H100 80GB HBM3") is None


def test_interleaved_variants_get_the_joules_of_their_own_blocks(package_at, monkeypatch):
    """The counter runs at 10 W while 'light' runs and 60 W while 'heavy' does: each variant's mean power is its
    own, though they were timed in turn."""
    state = {"w": 10.0, "uj": 0.0, "t": time.monotonic()}

    def tick():
        now = time.monotonic()
        state["uj"] += state["w"] * 1e6 * (now - state["t"])
        state["t"] = now

    def run(watts):
        def fn():
            tick()
            state["w"] = watts
            time.sleep(0.002)
            tick()
        return fn

    package_at()
    monkeypatch.setattr(RaplZone, "read_uj", lambda self: (tick(), int(state["uj"]))[1])
    ms = gl.benchmark_interleaved({"light": run(10.0), "heavy": run(60.0)}, min_run_time=0.4, block_s=0.01)
    assert ms["light"].energy.watts == pytest.approx(10.0, rel=0.2)
    assert ms["heavy"].energy.watts == pytest.approx(60.0, rel=0.2)
    assert ms["heavy"].joules_per_call == pytest.approx(60.0 * ms["heavy"].median_s, rel=0.2)
    none = gl.benchmark_interleaved({"a": lambda: None}, min_run_time=0.02, energy=False)
    assert none["a"].energy is None


def test_a_meter_started_for_every_step_finds_its_counters_once(package_at, monkeypatch):
    from gpulab.telemetry import energy as energy_mod

    package_at(watts=20.0)
    scans = []
    real = energy_mod.rapl_zones
    monkeypatch.setattr(energy_mod, "rapl_zones", lambda root=None: scans.append(root) or real(root))
    meter = EnergyMeter("cpu")
    for _ in range(5):
        meter.start()
        time.sleep(0.01)
        assert meter.stop().joules == pytest.approx(20.0 * meter.energy.seconds, rel=0.3, abs=0.05)
    assert len(scans) == 1


def test_interleaved_gpu_blocks_shorter_than_the_counter_period_give_no_figure():
    """NVML's counter advances about every 100 ms (measured on an H200), each update covering the 100 ms before it:
    a GPU variant's blocks of 250 ms, in turn with another's, mix in about a fifth of their neighbours' joules, so they
    give no figure; blocks of 2.5 s do. A CPU's RAPL counter (about 1 ms) resolves either."""
    from gpulab.interleaved import _variant_energy

    class Meter:
        def part(self, joules, seconds):
            return Energy("dev", seconds, joules, "a counter")

    for rounds in (10, 2):                                     # blocks of 50 ms and of 250 ms
        short = _variant_energy(Meter(), "cuda:0", 5.0, 0.5, rounds=rounds)
        assert short.joules is None and "under a second" in short.reason and "gl.benchmark" in short.reason
    assert _variant_energy(Meter(), "cuda:0", 50.0, 5.0, rounds=2).joules == 50.0
    assert _variant_energy(Meter(), "cpu", 5.0, 0.5, rounds=10).joules == 5.0
    assert _variant_energy(Meter(), "cuda:0", None, 0.5, rounds=2).joules is None


def test_a_phase_between_two_readings_has_no_joules_of_its_own():
    """A mark from 1.2 s to 1.6 s with readings at 1 s and 2 s: interpolating would assume the power was steady
    over a span nothing measured; it is not covered by samples."""
    tr = _trace()
    short = Trace(tr.frame, 1.0, marks=(Mark("blip", 1.2, 1.6), Mark("train", 0.0, 2.0)), duration_s=5.0)
    pe = short.phase_energy()
    assert pe.joules("blip", "gpu0") is None and pe.joules("blip", "gpu1") is None
    assert pe.joules("train", "gpu0") == pytest.approx(600.0)


def test_a_lesson_reads_the_period_measured_on_its_gpu(fake_nvml, pretend_gpus):
    """course.step_energy.gpu_counter_period gives the period gpulab.telemetry.energy measured on that GPU (measured
    once, remembered), and None for a CPU: lesson 04 renders it instead of assuming NVML's usual 100 ms."""
    from gpulab.course.lesson.step_energy import gpu_counter_period

    fake = fake_nvml()
    pretend_gpus()
    _fast_counter(fake, period_s=0.02)
    period = gpu_counter_period("cuda:0")
    assert period is not None and period.measured and 0.01 < period.seconds < 0.06
    assert "on this GPU (measured over" in str(period)
    assert gpu_counter_period("cuda:0") == period and gpu_counter_period("cpu") is None
