from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time

from support import fake_nvml
from support import fake_nvml as fake_nvml_module
import pandas as pd
import pytest
import torch

import gpulab as gl
from gpulab.telemetry import nvml
from gpulab.telemetry.diagnose import diagnose
from gpulab.telemetry.gpu import GPUSampler, throttle_names
from gpulab.telemetry.trace import Mark, Trace


def sample_n(sampler, n, dt=0.1):
    return [sampler.sample(now=i * dt) for i in range(n)]


# ---- nvml.py against the scripted NVML -------------------------------------------------------
def test_every_metric_of_a_hopper_gpu(scripted):
    h100 = nvml.visible_devices()[0]
    assert h100.name == "NVIDIA H100 80GB HBM3" and h100.compute_capability == (9, 0)
    rows = sample_n(GPUSampler(h100), 12)
    r = rows[3]
    assert r["gpu_util_pct"] == 95 and r["mem_util_pct"] == 40
    assert r["mem_used_bytes"] == 13 * 2**30 and r["mem_total_bytes"] == 80 * 2**30   # v2: the reserve apart
    assert r["mem_reserved_bytes"] == 512 * 2**20
    assert r["power_w"] == pytest.approx(353.0)                       # power follows the script's ticks; energy, time
    assert round(r["energy_j"] * 1000 - fake_nvml.ENERGY_AT_LOAD_MJ) % 35_000 == 0   # whole 100 ms steps of 350 W
    assert r["temp_c"] == 63 and r["sm_clock_mhz"] == 1980 and r["mem_clock_mhz"] == 2619
    assert rows[0]["pcie_tx_bytes_per_s"] == 1000 * 1024 and rows[0]["pcie_rx_bytes_per_s"] == 2000 * 1024
    assert r["throttle_reasons"] == 0 and r["throttled"] is False
    assert "sm_active_pct" not in rows[0]                       # GPM needs two samples
    assert r["sm_active_pct"] == 88.0 and r["tensor_active_pct"] == 61.5
    assert scripted.freed                                        # GPM samples are freed


def test_pcie_is_read_at_most_once_a_second(scripted):
    s = GPUSampler(nvml.visible_devices()[0])
    rows = sample_n(s, 12, dt=0.1)
    assert rows[5]["pcie_tx_bytes_per_s"] == rows[0]["pcie_tx_bytes_per_s"]   # reused within 1 s
    assert rows[11]["pcie_tx_bytes_per_s"] != rows[0]["pcie_tx_bytes_per_s"]  # re-read after 1 s


def test_throttle_episode(scripted):
    rows = sample_n(GPUSampler(nvml.visible_devices()[0]), 12)
    throttled = [i for i, r in enumerate(rows) if r["throttled"]]
    assert throttled == [5, 6, 7, 8]
    assert rows[6]["sm_clock_mhz"] == 1500
    assert throttle_names(rows[6]["throttle_reasons"]) == ["hw_thermal"]


def test_not_supported_metrics_are_missing_data_logged_once(scripted, caplog):
    scripted.gpus[1].unsupported |= {"nvmlDeviceGetPowerUsage"}         # a T4 reads power; this board has no sensor
    t4 = nvml.visible_devices()[1]
    with caplog.at_level(logging.INFO, logger="gpulab"):
        rows = sample_n(GPUSampler(t4), 4)
    assert all(r["power_w"] is None and r["pcie_tx_bytes_per_s"] is None for r in rows)
    assert all(r["energy_j"] > 0 for r in rows)                          # its energy counter still answers
    assert rows[0]["gpu_util_pct"] == 30 and "sm_active_pct" not in rows[0]
    power_logs = [rec for rec in caplog.records if "nvmlDeviceGetPowerUsage" in rec.getMessage()]
    assert len(power_logs) == 1


def test_driver_error_mid_run_keeps_sampling(scripted):
    rows = sample_n(GPUSampler(nvml.visible_devices()[1]), 14)
    assert rows[9]["gpu_util_pct"] == 30 and rows[9]["mem_used_bytes"] == 2 * 2**30
    assert [r["gpu_util_pct"] for r in rows[10:]] == [None] * 4   # GPU lost: missing, not raised
    assert [r["mem_used_bytes"] for r in rows[11:]] == [None] * 3  # every later call fails too: still no raise


def test_mig_slice_reports_its_own_memory_and_the_card_sums_them(scripted):
    a100_slice = nvml.visible_devices()[2]
    assert a100_slice.is_mig and a100_slice.uuid.startswith("MIG-") and a100_slice.name.endswith("MIG 3g.20gb")
    rows = sample_n(GPUSampler(a100_slice), 3)
    assert rows[0]["mem_used_bytes"] == 2**30 and rows[0]["mem_total_bytes"] == 20 * 2**30
    assert "gpu_util_pct" not in rows[0]          # per-card metrics are not reported for a slice
    card = nvml.devices()[2]
    assert card.mig_enabled is True and not card.is_mig
    rows = sample_n(GPUSampler(card), 3)
    assert rows[0]["gpu_util_pct"] is None
    assert rows[0]["mig_mem_used_bytes"] == 3 * 2**30          # 1 GiB + 2 GiB over two MIG instances


@pytest.mark.parametrize("value,names", [
    ("1,0", ["Tesla T4", "NVIDIA H100 80GB HBM3"]),
    ("2", ["NVIDIA A100-SXM4-40GB MIG 3g.20gb"]),             # a MIG card is used through a slice
    ("GPU-bbbb", ["Tesla T4"]),                              # unique UUID prefix
    ("0,7,1", ["NVIDIA H100 80GB HBM3"]),                    # CUDA stops at the first invalid entry
    ("", []),
    ("0,1,0", []),                                            # a duplicate hides every GPU (as torch.cuda reads it)
    ("MIG-6666", ["NVIDIA A100-SXM4-40GB MIG 1g.5gb"]),       # a MIG slice by its UUID
    ("MIG-6666,MIG-1111", ["NVIDIA A100-SXM4-40GB MIG 1g.5gb"]),  # one MIG slice per process
    ("MIG-GPU-cccccccc-cccc-cccc-cccc-cccccccccccc/9/0", ["NVIDIA A100-SXM4-40GB MIG 1g.5gb"]),  # the older form
])
def test_visible_devices_follow_cuda_visible_devices(scripted, value, names):
    env = {"CUDA_VISIBLE_DEVICES": value, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert [d.name for d in nvml.visible_devices(env)] == names


def test_visible_devices_prefer_torch_uuids(scripted, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    props = type("P", (), {"uuid": "cccccccc-cccc-cccc-cccc-cccccccccccc"})()
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    assert [d.name for d in nvml.visible_devices({})] == ["NVIDIA A100-SXM4-40GB"]


# ---- Monitor ------------------------------------------------------------------------------------
def test_monitor_with_scripted_gpus(scripted, monkeypatch):
    """The verdict's logic on scripted GPUs and a scripted host: what the real host runs beside the test (a busy
    core, another suite) must not change it."""
    from gpulab.telemetry import host as host_mod

    def quiet(self):
        return {"cpu_util_pct": 12.0, "process_cpu_pct": 6.0, "cpu0_util_pct": 14.0, "cpu1_util_pct": 10.0,
                "rss_bytes": 2 * 2**30, "host_mem_used_bytes": 6 * 2**30}

    monkeypatch.setattr(host_mod.HostSampler, "sample", quiet)
    threads = threading.active_count()
    with gl.Monitor(interval=0.05) as mon:
        time.sleep(0.8)
        mon.mark("eval")
    tr = mon.trace
    assert threading.active_count() == threads and not mon.running
    assert set(tr.devices) == {"host", "gpu0", "gpu1", "gpu2"}
    assert set(tr.frame.loc[tr.frame.device != "host", "source"]) == {"nvml"}
    assert "H100" in tr.devices_info["gpu0"] and any("MIG" in n for n in tr.notes)
    s = tr.summary()
    assert s.device("gpu0").gpu_util_mean_pct == pytest.approx(95)
    assert s.device("gpu0").energy_j > 0 and s.device("gpu0").throttled_s > 0
    assert s.device("gpu1").energy_j > 0                          # the T4's counter, until the GPU is lost
    assert s.device("gpu2").energy_j is None                     # a MIG slice: no counter, no power: unknown
    df = s.to_dataframe()
    assert df.loc["gpu0", "gpu_util_mean_pct"] == pytest.approx(95) and pd.isna(df.loc["gpu2", "energy_j"])
    assert [line.split()[0] for line in repr(s).splitlines()[3:7]] == ["host", "gpu0", "gpu1", "gpu2"]
    v = tr.diagnose()
    assert v.verdict == "healthy" and "throttled" in v.codes and "overhead-bound" in v.codes
    fig = tr.plot()
    assert len(fig.axes) >= 3


def test_host_only_cpu_bound_vs_sleeping():
    """Real host metrics: a busy body shows high CPU, a sleeping body low."""
    a = torch.randn(768, 768)
    with gl.Monitor(interval=0.1) as busy:
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            a @ a
    with gl.Monitor(interval=0.1) as idle:
        time.sleep(1.5)
    b, i = busy.trace.summary().device("host"), idle.trace.summary().device("host")
    print(f"busy: CPU {b.cpu_util_mean_pct:.0f}%, process {b.process_cpu_mean_pct:.0f}%; "
          f"sleeping: CPU {i.cpu_util_mean_pct:.0f}%, process {i.process_cpu_mean_pct:.0f}%")
    assert busy.trace.gpus == [] and any("host metrics only" in n for n in busy.trace.notes)
    assert b.process_cpu_mean_pct > i.process_cpu_mean_pct + 40
    assert i.process_cpu_mean_pct < 20


def test_sampler_overhead_is_small():
    with gl.Monitor(interval=0.1) as mon:
        time.sleep(3)
    pct = mon.trace.sampler_overhead_pct
    print(f"sampler: {mon.trace.sampler_cpu_s * 1e3:.1f} ms CPU over {mon.trace.duration_s:.1f} s = {pct:.2f}% of a core")
    assert 0 < pct < 3.0   # target <= 1% at 10 Hz; generous bound for a busy CI machine


@pytest.mark.parametrize("exc", [ValueError, KeyboardInterrupt])
def test_body_raising_keeps_trace_and_stops_thread(exc):
    threads = threading.active_count()
    with pytest.raises(exc), gl.Monitor(interval=0.02) as mon:
        time.sleep(0.2)
        raise exc("stop")
    assert not mon.running and threading.active_count() == threads
    assert len(mon.trace.frame) >= 3


def test_failing_metric_mid_run_keeps_thread_alive(monkeypatch):
    from gpulab.telemetry import host

    calls = {"n": 0}
    real = host.HostSampler.sample

    before = set(threading.enumerate())      # only the sampling thread of the Monitor under test counts

    def flaky(self):
        if threading.current_thread() in before:
            return real(self)
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("psutil hiccup")
        return real(self)

    monkeypatch.setattr(host.HostSampler, "sample", flaky)
    with gl.Monitor(interval=0.02) as mon:
        time.sleep(0.3)
    tr = mon.trace
    assert calls["n"] > 5 and tr.failed_samples == 1 and tr.failed_by_device == {"host": 1}
    assert tr.first_error == "host: OSError: psutil hiccup" and "psutil hiccup" in repr(tr)
    assert tr.samples("host") == calls["n"] - 1          # the failed reading has no row; the others do


def test_monitor_bad_arguments_and_double_start():
    with pytest.raises(ValueError, match="interval"):
        gl.Monitor(interval=0)
    with pytest.raises(ValueError, match="interval"):
        gl.Monitor(interval="fast")
    mon = gl.Monitor(interval=0.05).start()
    try:
        with pytest.raises(RuntimeError, match="already running"):
            mon.start()
    finally:
        mon.stop()
    mon.stop()  # twice is fine


def test_live_outside_jupyter_falls_back():
    with gl.Monitor(interval=0.05, live=True) as mon:
        time.sleep(0.1)
    assert mon.live is False and any("needs Jupyter" in n for n in mon.trace.notes)


def test_phases_and_marks():
    with gl.Monitor(interval=0.05) as mon:
        with mon.phase("data"):
            time.sleep(0.3)
        with mon.phase("compute"):
            time.sleep(0.1)
    ph = mon.trace.phase_seconds()
    assert ph["data"] == pytest.approx(0.3, abs=0.1) and ph["compute"] == pytest.approx(0.1, abs=0.1)
    assert "data-wait" in mon.trace.diagnose().codes


# ---- diagnose on fabricated traces ------------------------------------------------------------
def fabricate(gpu_util=None, cpu=50.0, mem_used=None, throttled=False, marks=(), n=20):
    rows = []
    for i in range(n):
        t = i * 0.1
        rows.append({"t_s": t, "device": "host", "source": "host", "cpu_util_pct": cpu, "process_cpu_pct": cpu})
        if gpu_util is not None:
            rows.append({"t_s": t, "device": "gpu0", "source": "nvml", "gpu_util_pct": gpu_util,
                         "mem_used_bytes": mem_used or 30 * 2**30, "mem_total_bytes": 40 * 2**30,
                         "throttled": throttled, "throttle_reasons": fake_nvml.HW_THERMAL if throttled else 0})
    return Trace(pd.DataFrame(rows), 0.1, marks=tuple(marks), duration_s=n * 0.1)


@pytest.mark.parametrize("kwargs,verdict,code", [
    ({"gpu_util": 92}, "healthy", "healthy"),
    ({"gpu_util": 30, "cpu": 95}, "input-bound", "input-bound"),
    ({"gpu_util": 30, "cpu": 15}, "overhead-bound", "overhead-bound"),
    ({"gpu_util": 92, "mem_used": 4 * 2**30}, "healthy", "memory-headroom"),
    ({"gpu_util": 92, "throttled": True}, "healthy", "throttled"),
    ({"cpu": 97}, "host-saturated", "host-saturated"),
    ({"cpu": 10}, "host-idle", "host-idle"),
    ({"cpu": 55}, "host-partly-busy", "host-partly-busy"),
    ({"cpu": 55, "marks": (Mark("data", 0.0, 1.2), Mark("compute", 1.2, 2.0))}, "input-bound", "data-wait"),
])
def test_diagnose_rules(kwargs, verdict, code):
    v = diagnose(fabricate(**kwargs))
    assert v.verdict == verdict and code in v.codes, repr(v)
    assert all(f.evidence for f in v.findings)
    if "gpu_util" not in kwargs:  # never a GPU verdict without GPU telemetry
        assert v.source == "host" and not {"healthy", "input-bound", "overhead-bound"} & set(v.codes) - {"input-bound"}
    assert "Verdict" in repr(v) and "<table" in v._repr_html_()


def _phased(marks, cpu=55.0, n=100):
    """A host-only 10 s run (n samples every 0.1 s) with the given marks."""
    return fabricate(cpu=cpu, marks=marks, n=n)


def test_short_data_phase_in_a_mostly_unmarked_run_is_not_input_bound():
    v = diagnose(_phased((Mark("data", 0.0, 1.0), Mark("compute", 1.0, 2.0))))
    assert v.verdict == "host-partly-busy" and "input-bound" not in v.codes, repr(v)
    data = next(f for f in v.findings if f.code == "data-wait")
    assert data.level == "ok" and data.message == "data loading took 10% of the run"
    assert data.evidence.startswith("data 1.0 s (10%), compute 1.0 s (10%), unmarked 8.0 s (80%) of a 10.0 s run")
    unmarked = next(f for f in v.findings if f.code == "unmarked-time")
    assert unmarked.level == "info" and unmarked.message.startswith("80% of the run is unmarked")
    assert "mon.mark" in unmarked.advice and "gl.profile" in unmarked.advice


def test_data_phase_share_is_of_the_whole_run():
    v = diagnose(_phased((Mark("data", 0.0, 4.0), Mark("compute", 4.0, 5.0))))
    assert v.verdict == "input-bound", repr(v)
    data = next(f for f in v.findings if f.code == "data-wait")
    assert data.level == "warning" and data.message == "40% of the run went to loading data"
    assert "unmarked 5.0 s (50%)" in data.evidence and "unmarked-time" not in v.codes  # data decides: no note


def test_overlapping_phases_count_marked_time_once():
    marks = (Mark("step", 0.0, 10.0), Mark("data", 1.0, 3.0), Mark("load_more", 2.0, 4.0))
    v = diagnose(_phased(marks))
    data = next(f for f in v.findings if f.code == "data-wait")
    assert data.message == "30% of the run went to loading data" and v.verdict == "input-bound"
    assert "unmarked 0.0 s (0%)" in data.evidence and "unmarked-time" not in v.codes


def test_host_only_verdicts_point_to_the_profiler():
    sat = next(f for f in diagnose(fabricate(cpu=97)).findings if f.code == "host-saturated")
    assert sat.message == "the host CPU is busy (97% of all cores)" and "gl.profile(step).verdict" in sat.advice
    assert "ceiling" in sat.advice and "on CPU this is the ceiling" not in sat.advice
    assert sat.evidence == "host CPU mean 97% of all cores; this process 97%"
    idle = next(f for f in diagnose(fabricate(cpu=10)).findings if f.code == "host-idle")
    assert "gl.profile" in idle.advice and "torch.get_num_threads()" in idle.advice and "a GPU" in idle.advice


def test_gpu_idle_and_host_idle_is_overhead_bound():
    v = diagnose(fabricate(gpu_util=20, cpu=10))
    assert v.verdict == "overhead-bound" and v.codes[0] == "overhead-bound" and "launch-bound" not in v.codes
    f = v.findings[0]
    assert f.level == "warning" and "cannot tell" in f.message and "gl.profile(step).verdict" in f.message


# ---- the summary table ---------------------------------------------------------------------------
def _summary_trace():
    rows = []
    for i in range(5):
        t = i * 0.1
        rows.append({"t_s": t, "device": "host", "source": "host", "cpu_util_pct": 50.0 + 10 * i,
                     "process_cpu_pct": 100.0, "rss_bytes": (i + 1) * 2**30})
        rows.append({"t_s": t, "device": "gpu0", "source": "nvml", "gpu_util_pct": 80.0, "mem_used_bytes": 20 * 2**30,
                     "mem_total_bytes": 40 * 2**30, "power_w": 300.0, "energy_j": 1000.0 + 30 * i, "temp_c": 60.0 + i,
                     "throttled": i >= 3, "sm_active_pct": 70.0, "tensor_active_pct": 40.0})
        rows.append({"t_s": t, "device": "gpu1", "source": "nvml", "gpu_util_pct": 10.0, "mem_used_bytes": 2**30,
                     "mem_total_bytes": 16 * 2**30, "power_w": None, "energy_j": None, "temp_c": 40.0,
                     "throttled": False})
    return Trace(pd.DataFrame(rows), 0.1, duration_s=0.5)


# the columns (and their order) Trace.summary() returned as a DataFrame before it returned a TraceSummary
OLD_SUMMARY_COLUMNS = ["samples", "cpu_util_mean_pct", "cpu_util_p95_pct", "process_cpu_mean_pct", "process_cpu_p95_pct",
                       "rss_peak_bytes", "gpu_util_mean_pct", "gpu_util_p95_pct", "mem_used_peak_bytes",
                       "mem_used_peak_pct", "energy_j", "power_mean_w", "temp_max_c", "throttled_s",
                       "sm_active_mean_pct", "tensor_active_mean_pct"]


def test_summary_is_an_aligned_table_with_units():
    s = _summary_trace().summary()
    lines = repr(s).splitlines()
    assert lines[0] == "Telemetry summary" and len(lines) == 7
    header = ["device", "samples", "util mean %", "util p95 %", "process CPU mean %", "mem peak (GiB)", "mem peak %",
              "power mean (W)", "energy (J)", "temp max (°C)", "throttled (s)", "SM active %", "tensor active %"]
    assert [h.strip() for h in lines[1].split("  ") if h.strip()] == header
    expected = {"host": ["host", "5", "70.0", "88.0", "100.0", "5.00", "N/A", "N/A", "N/A", "N/A", "N/A", "N/A", "N/A"],
                "gpu0": ["gpu0", "5", "80.0", "80.0", "N/A", "20.00", "50.0", "300", "120", "64", "0.2", "70.0", "40.0"],
                "gpu1": ["gpu1", "5", "10.0", "10.0", "N/A", "1.00", "6.2", "N/A", "N/A", "40", "0.0", "N/A", "N/A"]}
    starts = [lines[1].index(h) for h in header]
    assert set(lines[2]) == {"-", " "}
    for line in lines[3:6]:
        cells = [line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
        assert cells == expected[cells[0]], line                 # every value under its header
    assert "host: util = CPU" in lines[6] and "0.5 s, every 0.1 s" in lines[6]
    page = s._repr_html_()
    assert page.startswith("<table") and "<th>power mean (W)</th>" in page and "<td>N/A</td>" in page


def test_summary_to_dataframe_is_the_old_frame():
    s = _summary_trace().summary()
    df = s.to_dataframe()
    assert list(df.columns) == OLD_SUMMARY_COLUMNS + ["energy_source"] and list(df.index) == ["host", "gpu0", "gpu1"]
    assert df.loc["host", "rss_peak_bytes"] == 5 * 2**30 and df.loc["gpu0", "energy_j"] == pytest.approx(120)
    assert df.loc["gpu0", "throttled_s"] == pytest.approx(0.2) and pd.isna(df.loc["gpu1", "power_mean_w"])
    assert pd.isna(df.loc["host", "gpu_util_mean_pct"]) and df["samples"].tolist() == [5, 5, 5]
    gpu1 = s.device("gpu1")
    assert gpu1.power_mean_w is None and gpu1.mem_used_peak_pct == pytest.approx(100 / 16)
    with pytest.raises(KeyError, match="gpu0"):
        s.device("gpu7")
    with pytest.raises(AttributeError):
        s.devices = ()


def test_summary_of_an_empty_or_host_only_trace():
    empty = Trace(pd.DataFrame(columns=["t_s", "wall_time", "device", "source"]), 0.1).summary()
    assert empty.devices == () and empty.to_dataframe().empty and "no samples" in repr(empty)
    host = fabricate(cpu=40.0).summary()
    text = repr(host)
    assert "util mean %" in text and "(W)" not in text and "GPUs:" not in text   # no GPU columns without GPUs
    assert list(host.to_dataframe().columns) == ["samples", "cpu_util_mean_pct", "cpu_util_p95_pct",
                                                 "process_cpu_mean_pct", "process_cpu_p95_pct"]


# ---- exports and the command line ----------------------------------------------------------------
def test_csv_and_tensorboard(tmp_path):
    tr = fabricate(gpu_util=80)
    back = pd.read_csv(tr.to_csv(tmp_path / "t.csv"))
    assert len(back) == len(tr.frame) and set(back["device"]) == {"host", "gpu0"}
    logdir = tr.to_tensorboard(tmp_path / "tb")
    assert any(p.name.startswith("events.out.tfevents") for p in logdir.rglob("*"))


def test_benchmark_carries_gpu_clock_state(scripted, monkeypatch, pretend_gpus):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    scripted.ticks[0] = 6   # inside the scripted thermal episode
    with pytest.warns(UserWarning, match="slowed"):
        m = gl.benchmark(lambda: None, device="cuda:0", min_run_time=0.02, warn_noisy=False)
    assert m.gpu_state["sm_clock_mhz"] == 1500 and m.throttled is True and m.power_capped is False
    assert "THROTTLED by hw_thermal" in repr(m) and "max 1980 MHz" in m.gpu_note


def test_cli_monitor_writes_csv(tmp_path):
    out = subprocess.run([sys.executable, "-m", "gpulab", "monitor", "--interval", "0.2", "--duration", "1",
                          "--csv", str(tmp_path / "m.csv")], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count(" host ") >= 3 and "wrote" in out.stdout
    assert len(pd.read_csv(tmp_path / "m.csv")) >= 3


def test_throttled_without_reason_masks_is_still_diagnosed():
    """A trace with a throttled column but no throttle_reasons (an older sampler, a hand-built frame)."""
    t = fabricate(gpu_util=92, throttled=True)
    frame = t.frame.drop(columns=["throttle_reasons"])
    v = Trace(frame, 0.1, duration_s=2.0).diagnose()
    assert "throttled" in v.codes
    assert any("reasons: unknown" in f.evidence for f in v.findings if f.code == "throttled")


# ---- the power cap is how a card runs; heat and hardware protection are slowdowns ----------------------------
def test_reason_bits_are_nvmls_and_the_power_cap_is_no_slowdown():
    import pynvml

    from gpulab.telemetry import gpu

    for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
        bit = lambda name: getattr(pynvml, prefix + name)   # noqa: E731
        assert gpu.SLOWDOWN_MASK == (bit("HwSlowdown") | bit("SwThermalSlowdown") | bit("HwThermalSlowdown")
                                     | bit("HwPowerBrakeSlowdown"))
        assert gpu.POWER_CAP_MASK == bit("SwPowerCap") and not gpu.SLOWDOWN_MASK & bit("SwPowerCap")
    assert gpu.slowdown_names(pynvml.nvmlClocksEventReasonSwPowerCap) == []


def _capped_t4(fake_nvml, pretend_gpus, monkeypatch, reasons):
    """A T4 on Colab (70 W cap) whose NVML reports ``reasons`` at an SM clock of 1365 MHz (max 1590)."""
    fake = fake_nvml(machine="t4_colab")
    fake.gpus[0].reasons_at, fake.gpus[0].sm_clock_at = (lambda t: reasons), (lambda t: 1365)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    return fake


def test_power_cap_alone_is_a_note_with_the_clocks_and_the_cap_not_a_warning(fake_nvml, pretend_gpus, monkeypatch):
    import warnings

    _capped_t4(fake_nvml, pretend_gpus, monkeypatch, fake_nvml_module.SW_POWER_CAP)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)          # any warning fails the test
        m = gl.benchmark(lambda: None, device="cuda", min_run_time=0.02, warn_noisy=False)
    assert m.throttled is False and m.power_capped is True
    assert m.gpu_state["power_limit_w"] == 70 and m.gpu_state["max_sm_clock_mhz"] == 1590
    assert "SM clock 1365 -> 1365 MHz (max 1590 MHz); at its 70 W power cap" in m.gpu_note
    assert "THROTTLED" not in repr(m) and "70 W power cap" in repr(m)
    row = GPUSampler(nvml.visible_devices()[0]).sample(now=0.0)
    assert row["throttle_reasons"] == fake_nvml_module.SW_POWER_CAP and row["throttled"] is False


def test_thermal_slowdown_still_warns_beside_the_power_cap(fake_nvml, pretend_gpus, monkeypatch):
    _capped_t4(fake_nvml, pretend_gpus, monkeypatch, fake_nvml_module.SW_POWER_CAP | fake_nvml_module.HW_THERMAL)
    with pytest.warns(UserWarning, match="heat or hardware protection"):
        m = gl.benchmark(lambda: None, device="cuda:0", min_run_time=0.02, warn_noisy=False)
    assert m.throttled is True and m.power_capped is True and "THROTTLED by hw_thermal" in m.gpu_note


def test_a_power_capped_trace_is_noted_and_an_old_throttled_column_judged_again():
    capped = fabricate(gpu_util=92)
    frame = capped.frame.copy()
    gpu = frame["device"] == "gpu0"
    frame.loc[gpu, "throttle_reasons"] = fake_nvml_module.SW_POWER_CAP
    frame.loc[gpu, "throttled"] = True            # as recorded when the power cap counted as a slowdown
    frame.loc[gpu, "sm_clock_mhz"] = 1365.0
    v = Trace(frame, 0.1, duration_s=2.0).diagnose()
    assert "throttled" not in v.codes and "power-capped" in v.codes
    note = next(f for f in v.findings if f.code == "power-capped")
    assert note.level == "info" and "1365 MHz" in note.evidence
    hot = fabricate(gpu_util=92, throttled=True).diagnose()
    assert "throttled" in hot.codes and "power-capped" not in hot.codes
    assert any("hw_thermal" in f.evidence for f in hot.findings if f.code == "throttled")
