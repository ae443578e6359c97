"""The cache-aware roofline: copies measured at working sets that sit in each cache level, an operator's memory
ceiling from the smallest cache its tensors fit, and a step whose operators all fit the caches judged against those
ceilings rather than main memory's."""
from __future__ import annotations

import pytest

import gpulab as gl
from gpulab import caches as C, limits as L
from gpulab.profiling.verdict import step_roofline
from gpulab.timing import Env, Measurement
from gpulab.work import Work

ENV = Env("cpu", "Test CPU", 2, "Test CPU", "3.11", "2.14.1", "2026-11-26")


def _m(label, seconds, flops=None, nbytes=None):
    return Measurement(label, (seconds,), 1, "cpu", 2, ENV, "torch.utils.benchmark", 0, flops=flops, bytes_moved=nbytes)


def _limits(cache=True) -> gl.MachineLimits:
    """100 GFLOP/s fp32; main memory 20 GB/s; an L2 copy (512 KiB working set) at 100 GB/s and an L3 one (16 MiB)
    at 60 GB/s."""
    matmul = (_m("matmul 1024 float32", 2 * 1024**3 / 100e9, flops=2 * 1024**3),)
    copy = (_m("copy 1 GiB", (2 << 30) / 20e9, nbytes=2 << 30),)
    tiers = (_m("copy 256 KiB (L2)", (512 << 10) / 100e9, nbytes=512 << 10),
             _m("copy 8 MiB (L3)", (16 << 20) / 60e9, nbytes=16 << 20)) if cache else ()
    return gl.MachineLimits("cpu", ENV, matmul, copy, cache_copy=tiers)


def test_an_operator_gets_the_ceiling_of_the_smallest_cache_it_fits():
    lim = _limits()
    assert [t[:2] for t in lim.bandwidth_tiers] == [("L2", 512 << 10), ("L3", 16 << 20), ("main memory", 2 << 30)]
    assert lim.bandwidth_for(0) == pytest.approx(100e9) and lim.bandwidth_for(512 << 10) == pytest.approx(100e9)
    assert lim.bandwidth_for((512 << 10) + 1) == pytest.approx(60e9)
    assert lim.bandwidth_for(16 << 20) == pytest.approx(60e9)
    assert lim.bandwidth_for((16 << 20) + 1) == pytest.approx(20e9) == lim.bandwidth_bytes_per_s
    assert lim.bandwidth_bytes_per_s == pytest.approx(20e9)         # main memory stays the copy beyond the caches
    assert "512 KiB working set (L2)" in repr(lim) and "copies in the caches: 256 KiB (L2), 8 MiB (L3)" in lim.method
    assert "copy 256 KiB (L2)" in lim.to_dataframe().index


def test_a_cache_faster_than_main_memory_never_lowers_a_ceiling():
    """A small copy whose per-call cost makes it slower than main memory's says nothing about the cache: the
    ceiling is never below main memory's."""
    matmul = (_m("matmul 1024 float32", 0.02, flops=2 * 1024**3),)
    slow_l2 = (_m("copy 4 KiB (L2)", (8 << 10) / 5e9, nbytes=8 << 10),)
    lim = gl.MachineLimits("cpu", ENV, matmul, (_m("copy 1 GiB", (2 << 30) / 20e9, nbytes=2 << 30),), cache_copy=slow_l2)
    assert lim.bandwidth_for(1024) == pytest.approx(20e9)


@pytest.mark.parametrize("bad", [-1, float("nan"), "1 MiB", None, True])
def test_bandwidth_for_refuses_what_is_not_a_byte_count(bad):
    with pytest.raises(ValueError, match="working_set must be a number of bytes"):
        _limits().bandwidth_for(bad)


def test_a_step_of_cache_sized_operators_is_judged_against_the_caches():
    """Forty operators of 64 KiB each (an MLP at a batch of 4): against main memory's 20 GB/s their bytes would need
    131 us, the whole of a 131 us step (memory-bound at 100%); against the L2 copy's 100 GB/s they need 26 us, a
    fifth of the step: far from the roof, as the profile of such a step shows."""
    work = Work(40, 0, 40 * (64 << 10), 0, {}, tuple(("float32", 0, 64 << 10) for _ in range(40)))
    step_s = 40 * (64 << 10) / 20e9
    flat = step_roofline(work, _limits(cache=False), step_s)
    aware = step_roofline(work, _limits(), step_s)
    assert flat.efficiency == pytest.approx(1.0) and flat.bandwidth == pytest.approx(20e9)
    assert aware.efficiency == pytest.approx(0.2) and aware.bandwidth == pytest.approx(100e9)
    assert aware.cached_share == 1.0 and aware.dram_bandwidth == pytest.approx(20e9)
    assert "100% of its bytes in operators that fit a cache; main memory 20 GB/s" in aware.evidence
    assert "main memory" not in flat.evidence and flat.cached_share == 0.0


def test_a_step_streaming_from_main_memory_keeps_main_memorys_ceiling():
    work = Work(2, 0, 2 * (256 << 20), 0, {}, (("float32", 0, 256 << 20),) * 2)
    roof = step_roofline(work, _limits(), 2 * (256 << 20) / 18e9)
    assert roof.bandwidth == pytest.approx(20e9) and roof.cached_share == 0.0 and roof.memory_share == pytest.approx(0.9)


def test_ideal_time_takes_one_ceiling_or_one_per_working_set():
    work = Work(2, 0, (1 << 10) + (1 << 30), 0, {}, (("float32", 0, 1 << 10), ("float32", 0, 1 << 30)))
    peak = lambda d: 1e12          # noqa: E731
    assert work.ideal_s(peak, 1e9) == (0.0, pytest.approx(((1 << 10) + (1 << 30)) / 1e9))
    tiered = work.ideal_s(peak, lambda nbytes: 1e11 if nbytes < 1 << 20 else 1e9)
    assert tiered == (0.0, pytest.approx((1 << 10) / 1e11 + (1 << 30) / 1e9))
    with pytest.raises(ValueError, match="bandwidth must be positive"):
        work.ideal_s(peak, 0)


def _fake_caches(tmp_path, entries):
    for i, (level, kind, size) in enumerate(entries):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    return str(tmp_path)


def test_cache_levels_reads_the_levels_beyond_l1_as_linux_lists_them(tmp_path, monkeypatch):
    """As an EPYC's /sys lists them: L1 data and instruction (left out: a copy there measures the call, not the
    cache), a 1 MiB L2, a 32 MiB L3; an unreadable entry is skipped."""
    root = _fake_caches(tmp_path, [(1, "Data", "32K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"),
                                   (3, "Unified", "32768K"), (4, "Unified", "bogus")])
    monkeypatch.setattr(C, "_CPU_CACHES", root)
    assert C.cache_levels("cpu") == (("L2", 1 << 20), ("L3", 32 << 20))
    monkeypatch.setattr(C, "_CPU_CACHES", str(tmp_path / "missing"))
    assert C.cache_levels("cpu") == ()                          # macOS, Windows, a container without /sys


def test_machine_limits_measures_a_copy_in_each_cache_below_the_main_memory_copy(tmp_path, monkeypatch):
    root = _fake_caches(tmp_path, [(2, "Unified", "2M"), (3, "Unified", "105M")])
    monkeypatch.setattr(C, "_CPU_CACHES", root)
    L.forget_limits()
    try:
        lim = gl.machine_limits("cpu", dtypes=["float32"], sizes=[64], copy_bytes=64 << 20, min_run_time=0.02)
        # the L3's copy (26 MiB, a 52 MiB working set) is not below the 128 MiB the main-memory copy moves: kept;
        # an L3 larger than the main-memory copy would be left out (it could not stand for main memory)
        assert [m.label for m in lim.cache_copy] == ["copy 512 KiB (L2)", "copy 26.2 MiB (L3)"]
        small = gl.machine_limits("cpu", dtypes=["float32"], sizes=[64], copy_bytes=16 << 20, min_run_time=0.02,
                                  refresh=True)
        assert [m.label for m in small.cache_copy] == ["copy 512 KiB (L2)"]
        plain = gl.machine_limits("cpu", dtypes=["float32"], sizes=[64], copy_bytes=16 << 20, min_run_time=0.02,
                                  refresh=True, caches=False)
        assert plain.cache_copy == () and plain.bandwidth_tiers[-1][0] == "main memory"
    finally:
        L.forget_limits()


# ---- the verdict's new causes, on summaries laid out by hand -------------------------------------------------------
from gpulab.profiling.attribution import OUTSIDE  # noqa: E402
from gpulab.profiling.events import DeviceCheck, OpStat  # noqa: E402
from gpulab.profiling.summary import ProfileSummary  # noqa: E402
from gpulab.profiling.verdict import CAST_SHARE, THREAD_GAIN, diagnose_profile, thread_gain  # noqa: E402


def _lim(threads: int, flops: float, bw: float) -> gl.MachineLimits:
    env = Env("cpu", "Test CPU", threads, "Test CPU", "3.11", "2.14.1", "2026-11-26")
    m = lambda label, s, **k: Measurement(label, (s,), 1, "cpu", threads, env, "torch.utils.benchmark", 0, **k)  # noqa: E731
    return gl.MachineLimits("cpu", env, (m("matmul 1024 float32", 2 * 1024**3 / flops, flops=2 * 1024**3),),
                            (m("copy 1 GiB", (2 << 30) / bw, bytes_moved=2 << 30),))


def _summary(step_s, work, *, classes, threads=None, cores=None, whole=None, idle=None, limits=None, ops=()):
    phases = {"data": 0.0, "forward": 0.4 * step_s, "backward": 0.5 * step_s, "optimizer": 0.05 * step_s,
              "other": 0.05 * step_s}
    return ProfileSummary(label="fab", device_kind="cpu", steps=1, warmup=1, step_times_s=(step_s,), phases_s=phases,
                          ops=tuple(OpStat(n, c, 1e-4, 1e-4) for n, c in ops), op_calls_per_step=40.0,
                          median_op_s=2e-3, syncs_per_step=0.0, device=DeviceCheck(False, None, None, None, "CPU only"),
                          long_op_time_s=0.95 * step_s, op_time_s=0.97 * step_s, work=work,
                          limits=limits or _lim(1, 100e9, 20e9), op_classes_s=dict(classes), threads=threads,
                          cores=cores, whole_machine=whole, idle_cores=idle)

MATMULS = Work(10, 10 * 2 * 1024**3, 10 * (12 << 20), 0, {"float32": 10 * 2 * 1024**3},
               tuple(("float32", 2 * 1024**3, 12 << 20) for _ in range(10)))


def test_a_step_near_the_ceilings_of_one_thread_of_two_is_thread_bound():
    """Ten 1024^3 matmuls at 100 GFLOP/s on one thread need 215 ms; the step takes 226 ms. Two threads measured
    200 GFLOP/s: ~1.9x, and the other core was idle."""
    step_s = 10 * 2 * 1024**3 / 95e9
    s = _summary(step_s, MATMULS, classes={"matmul/conv": 0.95 * step_s, OUTSIDE: 0.05 * step_s}, threads=1, cores=2,
                 whole=_lim(2, 200e9, 25e9), idle=0.9)
    gain, ev = thread_gain(s, s.roofline, s.roofline.efficiency)
    assert gain == pytest.approx(1 / ((1 - s.roofline.efficiency) + s.roofline.efficiency / 2), rel=1e-3)
    assert gain >= THREAD_GAIN and "with 2: 200 GFLOP/s" in ev and "measured with 1: float32 100 GFLOP/s" in ev
    v = diagnose_profile(s)
    assert v.verdict == "thread-bound" and v.findings[0].code == "thread-bound"
    assert f"uses 1 of 2 threads" in v.findings[0].message and f"~{gain:.1f}x" in v.findings[0].message
    assert "torch.set_num_threads(2)" in v.findings[0].advice and "compute-bound" in v.codes
    # the other core busy with other work during the profile: the threads are a finding, not the verdict
    busy = diagnose_profile(_summary(step_s, MATMULS, classes={"matmul/conv": step_s}, threads=1, cores=2,
                                     whole=_lim(2, 200e9, 25e9), idle=0.2))
    assert busy.verdict == "compute-bound"
    note = next(f for f in busy.findings if f.code == "threads")
    assert note.level == "info" and "other work" in note.evidence and "if the other cores were free" in note.message
    # every thread in use, or no whole-machine ceilings: nothing about threads
    for kw in (dict(threads=2, cores=2, whole=None), dict(threads=1, cores=2, whole=None), {}):
        assert not {"thread-bound", "threads"} & set(diagnose_profile(
            _summary(step_s, MATMULS, classes={"matmul/conv": step_s}, **kw)).codes)


def test_a_whole_machine_no_faster_is_no_thread_finding_worth_a_verdict():
    step_s = 10 * 2 * 1024**3 / 95e9
    s = _summary(step_s, MATMULS, classes={"matmul/conv": step_s}, threads=1, cores=2, whole=_lim(2, 105e9, 20e9),
                 idle=1.0)
    v = diagnose_profile(s)
    assert v.verdict == "compute-bound" and next(f for f in v.findings if f.code == "threads").level == "info"


ELEMENTWISE = Work(20, 0, 20 * (256 << 20), 0, {}, tuple(("float32", 0, 256 << 20) for _ in range(20)))


def test_a_memory_bound_step_names_the_class_that_moves_its_bytes():
    step_s = 20 * (256 << 20) / 18e9
    s = _summary(step_s, ELEMENTWISE, classes={"elementwise": 0.8 * step_s, "copies/casts": 0.1 * step_s,
                                               OUTSIDE: 0.1 * step_s}, ops=(("aten::mul", 12), ("aten::add", 8)))
    v = diagnose_profile(s)
    assert v.verdict == "memory-bound"
    assert "20 elementwise operator calls take 80% of the step" in v.findings[0].message
    assert "up to 5.0x" in v.findings[0].message and "torch.compile fuses" in v.findings[0].advice
    casts = _summary(step_s, ELEMENTWISE, classes={"copies/casts": 0.7 * step_s, "elementwise": 0.2 * step_s,
                                                   OUTSIDE: 0.1 * step_s}, ops=(("aten::_to_copy", 30),))
    v = diagnose_profile(casts)
    assert v.verdict == "memory-bound" and "copies and casts take 70% of the step" in v.findings[0].message
    named = next(f for f in v.findings if f.code == "casts")
    assert 0.7 >= CAST_SHARE and "30 aten::_to_copy / to / copy_ calls per step" in named.evidence
    assert "up to 3.3x faster" in named.message and "autocast" in named.advice


def test_cpu_use_splits_the_cores_into_idle_ours_and_others():
    from gpulab.profiling.cores import cpu_use

    # 2 s on 2 CPUs: 1 s idle in all, 2 s of our CPU time -> half a core idle, one ours, half a core others'
    assert cpu_use((10.0, 100.0, 5.0), (12.0, 101.0, 7.0), cpus=2) == (0.5, 0.5)
    assert cpu_use((10.0, 100.0, 5.0), (10.05, 100.0, 5.0), cpus=2) == (None, None)     # too short to say
    assert cpu_use(None, (12.0, 101.0, 7.0)) == (None, None)
    assert cpu_use((0.0, 0.0, 0.0), (1.0, 0.0, 2.0), cpus=2) == (0.0, 0.0)              # all ours


def test_a_step_sharing_its_cores_is_judged_against_the_ceilings_of_the_cores_it_had(monkeypatch):
    """Two threads while another program spins on one of two cores: the step had one core, so its ceilings are one
    thread's (measured once for that count); the finding says so. With the cores free, its own threads'."""
    import torch

    from gpulab.profiling import cores as cores_mod

    measured = []

    def fake_limits(kind):
        measured.append(torch.get_num_threads())
        return _lim(torch.get_num_threads(), 100e9 * torch.get_num_threads(), 20e9)

    monkeypatch.setattr(cores_mod, "usable_cores", lambda: 2)
    monkeypatch.setattr(L, "machine_limits", fake_limits)
    with gl.interleaved.threads(2):
        busy = cores_mod.step_ceilings("cpu", None, MATMULS, others=0.7)
        free = cores_mod.step_ceilings("cpu", None, MATMULS, others=0.1)
        assert torch.get_num_threads() == 2                           # restored after measuring with one
    assert (busy.threads, busy.ran_on, busy.ceilings.env.threads, busy.whole) == (2, 1, 1, None)
    assert (free.threads, free.ran_on, free.ceilings.env.threads) == (2, 2, 2) and measured == [1, 2]
    given = _lim(2, 200e9, 20e9)
    with gl.interleaved.threads(2):
        assert cores_mod.step_ceilings("cpu", given, MATMULS, others=0.0).ceilings is given
    assert cores_mod.step_ceilings("cpu", False, MATMULS).ceilings is None
    step_s = 10 * 2 * 1024**3 / 60e9
    s = _summary(step_s, MATMULS, classes={"matmul/conv": step_s}, threads=2, cores=2, idle=0.1, limits=busy.ceilings)
    s = __import__("dataclasses").replace(s, other_cores=0.7)
    v = diagnose_profile(s)
    shared = next(f for f in v.findings if f.code == "shared-cpu")
    assert "other work used 0.7 of the 2 cores" in shared.message and "ceilings of 1" in shared.message
    assert "torch.set_num_threads(1)" in shared.advice and v.verdict == "compute-bound"
