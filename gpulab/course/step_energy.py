"""Energy read around each timed step of a training loop, outside the step's timing, and summed over the steps kept.

The meter starts after the clock's start (the previous step ended synchronised) and stops after the synchronise that
ends the step, so reading a counter never adds to a step time. A run's :class:`~gpulab.telemetry.energy.Energy`
covers its steady steps only (warm-up steps left out, like their times); where the device's counter cannot be read
it holds no number and says why.

Example:
    >>> meter = StepEnergy("cpu", rapl_root="/no/such/folder")
    >>> for _ in range(3):
    ...     meter.start(); _ = sum(range(100)); meter.stop()
    >>> e = meter.total(skip=1)
    >>> e.joules is None, "RAPL" in e.reason
    (True, True)
"""
from __future__ import annotations

import os
from typing import Any

from ..telemetry.energy import GPU_COUNTER_PERIOD_S, Energy, EnergyMeter, too_short_for_the_gpu_counter

__all__ = ["StepEnergy", "SHORT_STEP_S", "BLOCK_S", "ALONE", "needs_a_block", "block_energy"]

SHORT_STEP_S = GPU_COUNTER_PERIOD_S      # NVML's energy counter advances about every 100 ms


class StepEnergy:
    """Energy of ``device`` (a torch device or its name) over many short windows: :meth:`start` / :meth:`stop`
    around each timed step, :meth:`total` for the steps after the first ``skip``. Once the first window gives no
    figure, later windows read nothing (the reason stays). On a GPU, steps shorter than NVML's counter period
    (``SHORT_STEP_S``) give no figure, with the reason: their windows cannot resolve the counter's updates."""

    def __init__(self, device: Any, rapl_root: str | os.PathLike | None = None) -> None:
        name = str(device)
        self.device = name
        self._steps: list[Energy] = []
        self._reason: str | None = None
        self._meter: EnergyMeter | None = None
        if name.split(":", 1)[0] in ("cpu", "cuda", "mps"):
            self._meter = EnergyMeter(name, rapl_root=rapl_root)
        else:
            self._reason = f"gpulab reads no energy counter for a {name!r} device"

    def start(self) -> None:
        """Read the counter at the start of a step (nothing once a window gave no figure)."""
        if self._meter is not None and self._reason is None:
            self._meter.start()

    def stop(self) -> None:
        """Read it again at the end of the step (after the device was synchronised)."""
        if self._meter is None or self._reason is not None:
            self._steps.append(Energy(self.device, 0.0, None, "", self._reason))
            return
        e = self._meter.stop()
        if e.joules is None:
            self._reason = e.reason
        self._steps.append(e)

    def total(self, skip: int = 0) -> Energy:
        """The energy of the steps after the first ``skip``: joules and seconds summed, None with the reason where
        a window had no figure."""
        kept = self._steps[skip:] or self._steps
        seconds = float(sum(e.seconds for e in kept))
        missing = next((e for e in kept if e.joules is None), None)
        if not kept or missing is not None:
            reason = missing.reason if missing is not None else (self._reason or "no step was timed")
            return Energy(self.device, seconds, None, "", reason or "not read")
        median = sorted(e.seconds for e in kept)[len(kept) // 2]
        if self.device.startswith("cuda") and median < SHORT_STEP_S:
            return Energy(self.device, seconds, None, "", too_short_for_the_gpu_counter("steps"))
        joules = float(sum(e.joules for e in kept))           # type: ignore[misc]
        return Energy(self.device, seconds, joules, kept[0].source, None, all(e.counted for e in kept))


ALONE = ("each step run alone on a copy of its model for a block of seconds, its steps being too short for NVML's "
         "counter, which advances about every 100 ms (gl.published('nvml-energy-window')); lr 0 leaves the runs' "
         "weights as they were")


def needs_a_block(energy: Energy, step_s: float) -> bool:
    """Whether a run's per-step energy was refused only because its GPU steps are shorter than the counter's period:
    a block of its step run alone then gives the figure.

    Example:
        >>> needs_a_block(Energy("cuda:0", 0.4, None, "", too_short_for_the_gpu_counter("steps")), 0.01)
        True
        >>> needs_a_block(Energy("cpu", 0.4, None, "", "no RAPL"), 0.01)
        False
    """
    return (energy.joules is None and energy.device.startswith("cuda") and step_s < SHORT_STEP_S
            and energy.reason in (too_short_for_the_gpu_counter("steps"), too_short_for_the_gpu_counter("windows")))


def block_energy(step: Any, device: Any, seconds: float = 2.0) -> Energy:
    """The energy of ``step`` (a callable) run back to back for ``seconds`` inside one counter window
    (:func:`gpulab.benchmark` with ``energy=True``): a window long enough for NVML's ~100 ms updates, so its mean
    power is this step's own. ``joules`` covers the whole window; ``watts`` is what a run's steps are charged."""
    from ..timing import benchmark

    m = benchmark(step, device=device, min_run_time=seconds, warmup=1, warn_noisy=False, energy=True)
    e = m.energy
    if e is None or not e.measured:
        return e if e is not None else Energy(str(device), 0.0, None, "", "the benchmark read no energy")
    return Energy(e.device, e.seconds, e.joules, f"{e.source}; {ALONE}", None, e.counted)


BLOCK_S = 2.0           # seconds of a step run alone when its steps are too short for the GPU's counter
