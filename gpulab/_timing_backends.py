"""How :func:`gpulab.timing.benchmark` gets its times: torch.utils.benchmark's Timer (imported quietly) and its
statistics, a ``perf_counter`` loop of the same blocked design without torch, and NVML's view of the GPU's clocks.

Example:
    >>> times, number = _perf_counter_loop(sum, (range(100),), {}, 0.02)
    >>> number >= 1 and len(times) >= 1
    True
"""
from __future__ import annotations

import time
from typing import Any, Callable

__all__: list[str] = []


def _torch_stats(m: Any, runs: int) -> tuple[float, float, float, bool] | None:
    """Median, IQR, mean and noise flag (``has_warnings``) of a ``torch.utils.benchmark`` Measurement; None
    for a median of zero, where torch's IQR / median check raises ZeroDivisionError."""
    if len(m.times) != runs:
        raise ValueError(f"torch_measurement has {len(m.times)} runs, times_s {runs}: pass the one they came from")
    try:
        return float(m.median), float(m.iqr), float(m.mean), bool(m.has_warnings)
    except ZeroDivisionError:
        return None


def _gpu_clock_state(dev: str) -> dict[str, Any] | None:
    """NVML's view of the CUDA device's clocks, when NVML is there (None otherwise)."""
    from .telemetry.gpu import clock_state

    try:
        if ":" in dev:
            index = int(dev.split(":")[1])
        else:   # "cuda": the current device
            import torch

            index = int(torch.cuda.current_device())
        return clock_state(index)
    except Exception:
        return None


def _torch_timer() -> Any:
    """``torch.utils.benchmark.Timer``, imported without its "No CUDA runtime is found" log line
    (its C++ extension helper logs that on machines without a GPU; irrelevant to Python timing)."""
    from ._tf import quiet_cpp_extension_log

    with quiet_cpp_extension_log():
        from torch.utils.benchmark import Timer
    return Timer


def _perf_counter_loop(fn: Callable[..., Any], args: tuple, kwargs: dict,
                       min_run_time: float) -> tuple[tuple[float, ...], int]:
    """Blocked timing without torch: grow the block until it lasts >= 10 ms, then repeat blocks."""
    number, block_target = 1, min(0.01, min_run_time / 10)
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn(*args, **kwargs)
        dt = time.perf_counter() - t0
        if dt >= block_target or number >= 1 << 20:
            break
        number *= 10 if dt < block_target / 10 else 2
    times, total = [dt / number], dt
    while total < min_run_time:
        t0 = time.perf_counter()
        for _ in range(number):
            fn(*args, **kwargs)
        dt = time.perf_counter() - t0
        times.append(dt / number)
        total += dt
    return tuple(times), number
