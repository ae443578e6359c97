"""``python -m gpulab monitor``: the dmon-like view (header with units, repeated; no warm-up row; the NVML note
once; the processes that matter), and the host sampler's CPU window (no warm-up artefact in a recorded trace)."""
from __future__ import annotations

import os
import threading
import time
from collections import namedtuple

import pynvml
import pytest

from gpulab.__main__ import main
from gpulab.telemetry import host as host_mod
from gpulab.telemetry.dmon import HEADER_EVERY, Dmon
from gpulab.telemetry.processes import GPUProcess, HostProcess, TopProcesses, gpu_processes
from gpulab.telemetry.sampler import Monitor

T = namedtuple("T", "user nice system idle iowait guest guest_nice")
GIB = 2**30


# ---- the host sampler's CPU window -----------------------------------------------------------------------------
def test_busy_share_counts_iowait_as_idle_and_guest_time_once():
    before, after = T(10, 0, 5, 80, 5, 2, 0), T(14, 0, 6, 83, 7, 4, 0)    # guest (2 s) already inside user
    assert host_mod.busy_pct(before, after) == pytest.approx(100 * 5 / 10)
    assert host_mod.busy_pct(after, after) == 0.0


def test_cpu_share_comes_from_the_samplers_own_counters_in_any_thread(monkeypatch):
    """psutil.cpu_percent keeps its previous reading per thread: a sampler primed in one thread and read in
    another read 0 % on its first reading. The sampler's own counters do not depend on the thread."""
    import psutil

    readings = iter([[T(0, 0, 0, 0, 0, 0, 0)] * 2, [T(50, 0, 0, 50, 0, 0, 0), T(100, 0, 0, 0, 0, 0, 0)]])
    monkeypatch.setattr(psutil, "cpu_times", lambda percpu=False: next(readings))
    s = host_mod.HostSampler()
    s._cpu_at -= 1.0                                   # a second has passed since priming
    got = {}
    t = threading.Thread(target=lambda: got.update(s.sample()))
    t.start()
    t.join()
    assert got["cpu0_util_pct"] == 50.0 and got["cpu1_util_pct"] == 100.0 and got["cpu_util_pct"] == 75.0


def test_a_reading_with_no_window_behind_it_leaves_the_cpu_share_out(monkeypatch):
    monkeypatch.setattr(host_mod, "MIN_CPU_WINDOW_S", 0.5)        # a window this short is none, even on a busy CPU
    s = host_mod.HostSampler()
    first = s.sample()
    assert "cpu_util_pct" not in first and "process_cpu_pct" not in first and "rss_bytes" in first
    time.sleep(0.55)
    assert 0.0 <= s.sample()["cpu_util_pct"] <= 100.0


def test_a_recorded_trace_has_no_warm_up_row(monkeypatch):
    monkeypatch.setattr(host_mod, "MIN_CPU_WINDOW_S", 0.1)        # every later window is 0.2 s
    with Monitor(interval=0.2, gpus=False) as mon:
        time.sleep(0.9)
    host = mon.trace.frame[mon.trace.frame["device"] == "host"]
    assert len(host) >= 3
    assert host["cpu_util_pct"].isna().tolist()[:1] == [True]            # t = 0: no interval behind it
    assert host["cpu_util_pct"].iloc[1:].notna().all() and host["rss_bytes"].notna().all()


# ---- the view -----------------------------------------------------------------------------------------------
def _host_row(t, cpu=50.0):
    return {"t_s": t, "device": "host", "cpu_util_pct": cpu, "cpu0_util_pct": cpu / 2, "cpu1_util_pct": cpu,
            "host_mem_used_bytes": 3 * GIB}


def _gpu_row(t, device="gpu0"):
    return {"t_s": t, "device": device, "gpu_util_pct": 97.0, "mem_used_bytes": 11 * GIB,
            "mem_total_bytes": 80 * GIB, "power_w": 351.25, "temp_c": 64.0, "sm_clock_mhz": 1980.0}


def test_header_names_units_and_repeats_like_dmon():
    view = Dmon(processes=0, host_mem_total_bytes=16 * GIB)
    assert view.lines([{"t_s": 0.0, "device": "host", "host_mem_used_bytes": GIB}, _gpu_row(0.0)]) == []
    lines = [line for t in range(1, 31) for line in view.lines([_host_row(t), _gpu_row(t)])]
    headers = [i for i, line in enumerate(lines) if line.startswith("#")]
    assert headers == [0, HEADER_EVERY + 1, 2 * HEADER_EVERY + 2]
    for unit in ("time s", "util %", "mem used / total GiB", "power W", "temp C", "sm MHz", "top core %"):
        assert unit in lines[0]
    host_line, gpu_line = lines[1].split(), lines[2].split()
    assert host_line[:7] == ["1.0", "host", "50.0", "50.0", "3.0", "/", "16.0"]       # busiest core: cpu1
    assert gpu_line == ["1.0", "gpu0", "97.0", "-", "11.0", "/", "80.0", "351.2", "64", "1980"]
    assert all(len(line) < 130 for line in lines)


def test_processes_end_each_line_and_the_monitor_itself_is_not_among_them():
    top = lambda n: (HostProcess(4121, "python", 99.0), HostProcess(311, "node", 12.4))[:n]
    listing = lambda handle: (GPUProcess(4121, "python", 10 * GIB), GPUProcess(77, "?", None, "C+G"),
                              GPUProcess(78, "Xorg", GIB, "G"))
    view = Dmon(processes=2, gpu_handles={"gpu0": object()}, host_mem_total_bytes=16 * GIB, top=top,
                gpu_processes=listing, interval=0.05)
    host_line, gpu_line = view.lines([_host_row(0.25), _gpu_row(0.25)])[1:]
    assert host_line.startswith("    0.25  host") and host_line.endswith("4121 python 99%, 311 node 12%")
    assert gpu_line.endswith("4121 python 10.0 GiB, 77 ? - (C+G), +1 more")
    real = TopProcesses(min_period_s=0.0)
    time.sleep(0.1)
    assert os.getpid() not in [p.pid for p in real(50)]


def test_processes_and_header_every_must_be_counts():
    with pytest.raises(ValueError, match="processes must be a whole number >= 0, got -1"):
        Dmon(processes=-1, host_mem_total_bytes=GIB)
    with pytest.raises(TypeError, match="header_every must be a whole number >= 1, got 2.5"):
        Dmon(header_every=2.5, host_mem_total_bytes=GIB)


# ---- the processes on a GPU, as nvidia-ml-py hands them out ----------------------------------------------------------
def _listing(processes, not_available_as_none=True):
    """What nvidia-ml-py's nvmlDevice*RunningProcesses return: nvmlFriendlyObjects from c_nvmlProcessInfo_v3_t
    structs; its newer releases turn NVML_VALUE_NOT_AVAILABLE memory into None, older ones leave 2**64 - 1."""
    def call(handle):
        out = []
        for pid, used in processes:
            s = pynvml.c_nvmlProcessInfo_v3_t()
            s.pid, s.usedGpuMemory = pid, pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value if used is None else used
            obj = pynvml.nvmlStructToFriendlyObject(s)
            if not_available_as_none and obj.usedGpuMemory == pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
                obj.usedGpuMemory = None
            out.append(obj)
        return out
    return call


@pytest.mark.parametrize("as_none", [True, False])
def test_gpu_processes_merge_compute_and_graphics_and_name_them(fake_nvml, as_none):
    from gpulab.telemetry import nvml

    fake = fake_nvml(machine="t4_colab")
    me = os.getpid()
    fake.nvmlDeviceGetComputeRunningProcesses = _listing([(me, 3 * GIB), (2**22 + 17, None)], as_none)
    fake.nvmlDeviceGetGraphicsRunningProcesses = _listing([(me, None)], as_none)
    handle = nvml.query("nvmlDeviceGetHandleByIndex", 0)
    got = gpu_processes(handle)
    assert got[0] == GPUProcess(me, got[0].name, 3 * GIB, "C+G") and got[0].name not in ("", "?")
    assert got[1].pid == 2**22 + 17 and got[1].name == "?" and got[1].used_bytes is None    # another pid namespace
    assert str(got[1]) == f"{2**22 + 17} ? -"


def test_gpu_processes_say_none_when_nvml_cannot_list_them(fake_nvml):
    from gpulab.telemetry import nvml

    fake = fake_nvml(machine="t4_colab")

    def refused(handle):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

    fake.nvmlDeviceGetComputeRunningProcesses = fake.nvmlDeviceGetGraphicsRunningProcesses = refused
    assert gpu_processes(nvml.query("nvmlDeviceGetHandleByIndex", 0)) is None
    fake.nvmlDeviceGetComputeRunningProcesses = _listing([])
    assert gpu_processes(nvml.query("nvmlDeviceGetHandleByIndex", 0)) == ()


def test_gpu_processes_fall_back_to_the_v2_call_on_an_older_driver(fake_nvml):
    from gpulab.telemetry import nvml

    fake = fake_nvml(machine="t4_colab")

    def missing(handle):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    fake.nvmlDeviceGetComputeRunningProcesses = missing
    fake.nvmlDeviceGetComputeRunningProcesses_v2 = _listing([(os.getpid(), GIB)])
    got = gpu_processes(nvml.query("nvmlDeviceGetHandleByIndex", 0))
    assert [(p.pid, p.used_bytes, p.kind) for p in got] == [(os.getpid(), GIB, "C")]


# ---- the command ------------------------------------------------------------------------------------------------
def test_monitor_on_the_host_prints_one_header_no_warm_up_row_and_the_note_once(monkeypatch, capsys):
    monkeypatch.setattr(host_mod, "MIN_CPU_WINDOW_S", 0.1)        # every later window is 0.2 s
    assert main(["monitor", "--interval", "0.2", "--duration", "1.1", "--processes", "2"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    data = [line for line in lines if line.split()[1:2] == ["host"]]
    assert len(data) >= 3 and float(data[0].split()[0]) >= 0.15           # the first line covers an interval
    assert sum(line.startswith("# time s") for line in lines) == 1
    assert (out + err).count("NVML not available") <= 1
    assert "proc " not in out and "rss" not in out                          # the monitor's own process is not shown
    assert "Traceback" not in err


def test_monitor_on_a_gpu_lists_the_processes_holding_its_memory(fake_nvml, capsys):
    fake = fake_nvml(machine="t4_colab")
    fake.nvmlDeviceGetComputeRunningProcesses = _listing([(os.getpid(), 5 * GIB)])
    fake.nvmlDeviceGetGraphicsRunningProcesses = _listing([])
    assert main(["monitor", "--interval", "0.1", "--duration", "0.45"]) == 0
    out = capsys.readouterr().out
    gpu = [line for line in out.splitlines() if line.split()[1:2] == ["gpu0"]]
    assert gpu and all(f"  {os.getpid()} " in line and line.endswith(" 5.0 GiB") for line in gpu)
    assert "5.0 GiB" in gpu[0] and "NVML not available" not in out
