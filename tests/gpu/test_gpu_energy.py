"""Energy on a real GPU: NVML's energy counter read around timed work (gl.benchmark, gl.timer, EnergyMeter), its
update period measured on the card, its mean power within the card's range and below its enforced power limit plus a margin, a matmul loop drawing more than
an idle wait, and a Monitor's per-phase joules agreeing with the counter read directly."""
from __future__ import annotations

import time

import pytest

import gpulab as gl
from gpulab.telemetry.energy import EnergyMeter
from gpulab.telemetry.gpu import clock_state


def _matmuls(cuda, seconds: float) -> None:
    import torch

    a = torch.randn(4096, 4096, device=cuda, dtype=torch.float16)
    gl.timing.repeat_for(seconds, lambda: a @ a, device=cuda)


@pytest.mark.alone          # idle vs loaded power, overlap, peak speed: the whole GPU, nothing beside it
def test_the_counter_reads_joules_around_work(cuda, figure):
    idle = EnergyMeter(cuda).start()
    time.sleep(1.5)                     # over ten of the counter's ~100 ms periods
    idle_e = idle.stop()
    if not idle_e.measured:
        pytest.skip(f"this GPU's energy is not measurable: {idle_e.reason}")
    p = idle.period
    figure("nvml_energy_counter_period", p.seconds, "s", note=str(p))
    assert p.measured and 0.001 < p.seconds < 1.0, p
    with EnergyMeter(cuda) as busy:
        _matmuls(cuda, 2.0)
    e = busy.energy
    limit = (clock_state(cuda.index or 0) or {}).get("power_limit_w")
    figure("gpu_power_matmul", e.watts, "W", datasheet=limit, note=f"fp16 4096^3 matmuls for 2 s; {e.source}")
    figure("gpu_power_idle", idle_e.watts, "W", note="1 s of sleep")
    assert e.counted and 10.0 < e.watts < 1500.0, e
    if limit:
        assert e.watts < limit * 1.15, f"{e} above the {limit:.0f} W enforced limit"
    assert e.watts > idle_e.watts, f"matmuls {e} drew no more than idle {idle_e}"


def test_benchmark_and_timer_carry_joules(cuda, figure):
    import torch

    a = torch.randn(2048, 2048, device=cuda)
    m = gl.benchmark(torch.mm, a, a, items=2048, min_run_time=1.5, warn_noisy=False)
    if m.energy is None or not m.energy.measured:
        pytest.skip(f"energy not measurable: {m.energy}")
    figure("gpu_joules_per_fp32_matmul_2048", m.joules_per_call, "J", note=str(m.energy))
    assert 0 < m.joules_per_call < 100 and m.joules_per_item == pytest.approx(m.joules_per_call / 2048)
    table = gl.compare([m], price_per_hour=1.0)
    assert "J per item" in repr(table) or "mJ per item" in repr(table)
    with gl.timer("matmuls", cuda) as t:
        _matmuls(cuda, 1.5)
    assert t.energy.measured and t.energy.joules > 0


def test_monitor_phase_joules_match_the_counter(cuda, figure):
    with gl.Monitor(interval=0.05) as mon:
        with mon.phase("work"):
            with EnergyMeter(cuda) as direct:
                _matmuls(cuda, 2.0)
    gpu = f"gpu{cuda.index or 0}"
    s = mon.trace.summary(items=1)
    if s.device(gpu).energy_j is None:
        pytest.skip(f"no energy in the trace: {mon.trace.energy_notes}")
    phase = mon.trace.phase_energy().joules("work", gpu)
    figure("monitor_phase_vs_counter", None if phase is None else phase / direct.energy.joules, "x",
           note=f"phase {phase} J vs direct {direct.energy.joules:.1f} J; source {s.device(gpu).energy_source}")
    assert phase is not None and phase == pytest.approx(direct.energy.joules, rel=0.25)


@pytest.mark.alone          # idle vs loaded power, overlap, peak speed: the whole GPU, nothing beside it
def test_interleaved_variants_get_their_own_power_only_in_second_long_blocks(cuda, figure):
    """NVML's counter advances every 100 ms (an H200, 2026-11-26): blocks of a second per variant give each its own
    power; the default short blocks give no figure, with the reason."""
    import torch

    a = torch.randn(4096, 4096, device=cuda, dtype=torch.float16)
    fns = {"matmuls": lambda: a @ a, "sleep": lambda: time.sleep(0.005)}
    long = gl.benchmark_interleaved(fns, min_run_time=4.0, block_s=1.0, device=cuda)
    if not long["matmuls"].energy.measured:
        pytest.skip(f"energy not measurable: {long['matmuls'].energy.reason}")
    busy, idle = long["matmuls"].energy.watts, long["sleep"].energy.watts
    figure("interleaved_power_matmuls_vs_sleep", busy / idle, "x", note=f"{busy:.0f} W vs {idle:.0f} W, 1 s blocks")
    assert busy > 1.3 * idle, (busy, idle)
    short = gl.benchmark_interleaved(fns, min_run_time=0.5, device=cuda)
    assert short["matmuls"].energy.joules is None and "under a second" in short["matmuls"].energy.reason
