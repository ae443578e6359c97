"""gl.Monitor counts the readings that failed (psutil/NVML errors) instead of dropping them silently; the Trace
carries the count and shows it; diagnose() names the failures and refuses to conclude from too few samples."""
from __future__ import annotations

import json
import threading
import time

import pandas as pd
import psutil
import pytest

import gpulab as gl
from gpulab.telemetry.diagnose import MIN_SAMPLES, diagnose
from gpulab.telemetry.sampler import Monitor
from gpulab.telemetry.trace import Trace


def _flaky_virtual_memory(monkeypatch, fail_every: int):
    """psutil.virtual_memory (read by the host sampler on every sample) raises on every ``fail_every``-th call."""
    real = psutil.virtual_memory
    calls = {"n": 0, "failed": 0}
    before = set(threading.enumerate())      # a Monitor another test left running is not the one under test

    def flaky():
        me = threading.current_thread()
        if me in before or me.name != "gpulab-monitor":
            return real()
        calls["n"] += 1
        if calls["n"] % fail_every == 0:
            calls["failed"] += 1
            raise psutil.AccessDenied(pid=1, name="init", msg="no access to /proc/meminfo")
        return real()

    monkeypatch.setattr(psutil, "virtual_memory", flaky)
    return calls


def test_failed_host_readings_are_counted_shown_and_named_in_the_verdict(monkeypatch):
    calls = _flaky_virtual_memory(monkeypatch, fail_every=2)          # half of the readings fail
    with gl.Monitor(interval=0.02, gpus=False) as mon:
        time.sleep(0.8)
    tr = mon.trace
    assert calls["failed"] >= 5
    assert tr.failed_samples == calls["failed"] and tr.failed_by_device == {"host": calls["failed"]}
    assert tr.samples("host") == calls["n"] - calls["failed"]         # every good reading has its row
    assert tr.failed_share("host") == pytest.approx(calls["failed"] / calls["n"])
    assert tr.first_error.startswith("host: AccessDenied") and "meminfo" in tr.first_error
    text, page = repr(tr), tr._repr_html_()
    assert "failed samples" in text and f"host {calls['failed']} of {calls['n']}" in text and "AccessDenied" in text
    assert "failed samples" in page and "AccessDenied" in page
    v = tr.diagnose()
    failed = next(f for f in v.findings if f.code == "failed-samples")
    assert v.findings[0] is failed and failed.level == "warning"      # first, and a warning at ~50%
    assert failed.message.startswith(f"{calls['failed']} of {calls['n']} host readings failed")
    assert "AccessDenied" in failed.evidence and "readings failed" in repr(v) and "failed" in v._repr_html_()


def test_a_rare_failure_is_a_note_not_a_warning():
    tr = Trace(pd.DataFrame({"t_s": [0.1 * i for i in range(30)], "device": "host", "source": "host",
                             "cpu_util_pct": 50.0}), 0.1, duration_s=3.0, failed_samples=1,
               failed_by_device={"host": 1}, first_error="host: AccessDenied: once")
    failed = next(f for f in tr.diagnose().findings if f.code == "failed-samples")
    assert failed.level == "info" and failed.message.startswith("1 of 31 host readings failed (3%)")
    assert tr.diagnose().verdict == "host-partly-busy"


def test_every_reading_failing_gives_no_verdict_but_says_why(monkeypatch):
    calls = _flaky_virtual_memory(monkeypatch, fail_every=1)
    with gl.Monitor(interval=0.02, gpus=False) as mon:
        time.sleep(0.3)
    tr = mon.trace
    assert calls["n"] >= 3 and tr.failed_samples == calls["n"] and tr.samples("host") == 0
    v = tr.diagnose()
    assert v.verdict == "inconclusive", repr(v)
    assert {"failed-samples", "too-few-samples"} <= set(v.codes)
    assert not {"host-saturated", "host-idle", "host-partly-busy", "no-samples"} & set(v.codes)
    assert next(f for f in v.findings if f.code == "failed-samples").message.startswith(
        f"{calls['n']} of {calls['n']} host readings failed (100%)")


def test_a_failing_gpu_reading_drops_only_that_gpu_row():
    class Host:
        def sample(self):
            return {"cpu_util_pct": 10.0}

    class BrokenGPU:
        def sample(self, now):
            raise RuntimeError("GPU is lost")

    class GoodGPU:
        def sample(self, now):
            return {"gpu_util_pct": 90.0}

    mon = Monitor(interval=0.1)
    mon._t0 = time.monotonic()
    rows = mon._take(Host(), [("gpu0", BrokenGPU()), ("gpu1", GoodGPU())], lambda: {}, time.monotonic())
    assert [r["device"] for r in rows] == ["host", "gpu1"]
    assert mon.trace.failed_by_device == {"gpu0": 1} and mon.trace.first_error == "gpu0: RuntimeError: GPU is lost"


# ---- too few samples ----------------------------------------------------------------------------------------
def _host(n: int, cpu: float, gpu_util: float | None = None) -> Trace:
    rows = []
    for i in range(n):
        rows.append({"t_s": 0.1 * i, "device": "host", "source": "host", "cpu_util_pct": cpu, "process_cpu_pct": cpu})
        if gpu_util is not None:
            rows.append({"t_s": 0.1 * i, "device": "gpu0", "source": "nvml", "gpu_util_pct": gpu_util})
    return Trace(pd.DataFrame(rows), 0.1, duration_s=0.1 * n)


@pytest.mark.parametrize("kwargs, claim", [
    (dict(cpu=97.0), "host-saturated"),
    (dict(cpu=5.0), "host-idle"),
    (dict(cpu=10.0, gpu_util=20.0), "overhead-bound"),
    (dict(cpu=95.0, gpu_util=20.0), "input-bound"),
    (dict(cpu=10.0, gpu_util=95.0), "healthy"),
])
def test_too_few_samples_give_an_inconclusive_verdict_not_a_bottleneck(kwargs, claim):
    few, enough = diagnose(_host(MIN_SAMPLES - 1, **kwargs)), diagnose(_host(MIN_SAMPLES, **kwargs))
    assert enough.verdict == claim, repr(enough)                       # the same trace, one sample longer
    assert few.verdict == "inconclusive" and claim not in few.codes, repr(few)
    too_few = next(f for f in few.findings if f.code == "too-few-samples")
    assert f"at least {MIN_SAMPLES} needed" in too_few.message and f"only {MIN_SAMPLES - 1} good" in too_few.message
    assert "at least 1 s" in too_few.advice and "interval=0.1 s" in too_few.advice   # how long to run


def test_an_idle_gpu_with_too_few_host_samples_names_no_cause():
    """Enough GPU samples, too few host ones (its readings failed): idle, but input- or overhead-bound is unknown."""
    gpu = _host(MIN_SAMPLES + 2, cpu=10.0, gpu_util=20.0).frame
    frame = pd.concat([gpu[gpu.device == "gpu0"], gpu[gpu.device == "host"].head(3)])
    tr = Trace(frame, 0.1, duration_s=1.2, failed_samples=9, failed_by_device={"host": 9}, first_error="host: x")
    v = tr.diagnose()
    assert v.verdict == "inconclusive" and "gpu-idle" in v.codes, repr(v)
    assert not {"overhead-bound", "input-bound"} & set(v.codes)


def test_the_first_tenth_of_a_second_of_a_real_run_is_inconclusive():
    with gl.Monitor(interval=0.02, gpus=False) as mon:
        time.sleep(0.1)
    v = mon.trace.diagnose()
    assert mon.trace.samples("host") < MIN_SAMPLES and v.verdict == "inconclusive", repr(v)


def test_timed_phases_still_decide_a_short_run():
    """Phases are timed by the clock, not sampled: a short run that waited for data is input-bound."""
    from gpulab.telemetry.trace import Mark

    short = _host(3, cpu=50.0)
    tr = Trace(short.frame, 0.1, marks=(Mark("data", 0.0, 0.2), Mark("compute", 0.2, 0.3)), duration_s=0.3)
    v = diagnose(tr)
    assert v.verdict == "input-bound" and {"data-wait", "too-few-samples"} <= set(v.codes)


# ---- the Trace fields --------------------------------------------------------------------------------------
def test_a_trace_from_before_the_count_still_builds_loads_and_diagnoses():
    from gpulab.tracking import _store

    old = Trace(pd.DataFrame({"t_s": [0.0], "device": ["host"], "source": ["host"], "cpu_util_pct": [1.0]}), 0.1)
    assert (old.failed_samples, old.failed_by_device, old.first_error) == (0, {}, None)
    assert "failed" not in repr(old)
    files = _store.trace_files(old)                                    # as gl.tracking logs a run's trace
    back = _store.trace_from_files(*files.values())
    assert back.failed_samples == 0 and back.frame.equals(old.frame)
    assert "failed-samples" not in back.diagnose().codes
    files.popitem()
    old_json = json.loads(_store.trace_files(old)[_store.TRACE_FILES[1]])     # a run logged before the count existed
    for key in ("failed_samples", "failed_by_device", "first_error"):
        old_json.pop(key)
    assert _store.trace_from_files(files[_store.TRACE_FILES[0]], json.dumps(old_json)).failed_samples == 0


def test_the_failure_count_survives_tracking():
    from gpulab.tracking import _store

    frame = pd.DataFrame({"t_s": [0.0], "device": ["host"], "source": ["host"], "cpu_util_pct": [1.0]})
    tr = Trace(frame, 0.1, failed_samples=3, failed_by_device={"host": 3}, first_error="AccessDenied")
    back = _store.trace_from_files(*_store.trace_files(tr).values())
    assert (back.failed_samples, back.failed_by_device, back.first_error) == (3, {"host": 3}, "AccessDenied")


@pytest.mark.parametrize("kwargs, match", [
    (dict(failed_samples=-1), "failed_samples"),
    (dict(failed_samples=True), "failed_samples"),
    (dict(failed_samples=2.0), "failed_samples"),
    (dict(failed_samples=3, failed_by_device={"host": 1}), "failed_by_device"),
])
def test_bad_failure_counts_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Trace(pd.DataFrame(columns=["t_s", "device", "source"]), 0.1, **kwargs)


def test_a_cpu_energy_counter_that_stops_answering_keeps_the_cpu_and_memory_rows(monkeypatch):
    """RAPL is an optional reading: when it fails mid-run the host's CPU and memory rows go on, and the host's
    joules are 'not measurable' with why (a part of the window is never given as the whole window's energy)."""
    from gpulab.telemetry import host as host_mod

    calls = {"n": 0}

    def counter() -> float:
        calls["n"] += 1
        if calls["n"] > 3:
            raise OSError(13, "Permission denied")
        return 10.0 * calls["n"]

    real_init = host_mod.HostSampler.__init__

    def init(self):
        real_init(self)
        self.energy_j = counter

    monkeypatch.setattr(host_mod.HostSampler, "__init__", init)
    with gl.Monitor(interval=0.05, gpus=False) as mon:
        time.sleep(0.8)
    tr = mon.trace
    host = tr.frame[tr.frame.device == "host"]
    assert len(host) >= 8 and host["cpu_util_pct"].notna().sum() >= 6 and host["rss_bytes"].notna().all()
    assert tr.failed_samples == 0
    assert host["energy_j"].isna().all()
    assert "stopped answering" in tr.energy_notes["host"] and "Permission denied" in tr.energy_notes["host"]
