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
from typing import Any, Callable, Sequence

from ...telemetry.energy import TOO_SHORT, CounterPeriod, Energy, EnergyMeter

__all__ = ["StepEnergy", "BLOCK_S", "ALONE", "EPOCHS_ALONE", "needs_a_block", "block_energy", "charge_short_windows",
           "gpu_counter_period"]

# Seconds of a step run alone when its GPU windows are too short for NVML's counter: the lessons' short steps and the
# capstone's short epochs are charged the same block. ML.ENERGY measure GPU energy over windows of at least 5 s
# (gpulab.published("nvml-energy-window")): shorter ones read scattered and low while the board's power settles.
BLOCK_S = 5.0


class StepEnergy:
    """Energy of ``device`` (a torch device or its name) over many short windows: :meth:`start` / :meth:`stop`
    around each timed step, :meth:`total` for the steps after the first ``skip``. Once the first window gives no
    figure, later windows read nothing (the reason stays). On a GPU, steps shorter than ten periods of NVML's counter
    (measured on the GPU, about 100 ms each) give no figure, with the reason: their windows cannot resolve its updates."""

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
        joules = float(sum(e.joules for e in kept))           # type: ignore[misc]
        return Energy(self.device, seconds, joules, kept[0].source, None, all(e.counted for e in kept))


ALONE = (f"each step run alone on a copy of its model for a block of {BLOCK_S:g} s, its steps being too short for "
         "NVML's counter, which advances about every 100 ms (gl.published('nvml-energy-window')); lr 0 leaves the "
         "runs' weights as they were")
EPOCHS_ALONE = (f"each epoch charged the mean power of {BLOCK_S:g} s of the same training steps run back to back after "
                "training, at lr 0, its epochs being too short for NVML's counter, which advances about every 100 ms "
                "(gl.published('nvml-energy-window'))")


def needs_a_block(energy: Energy) -> bool:
    """Whether a GPU window's energy was refused only because it is too short for NVML's counter
    (:data:`~gpulab.telemetry.energy.TOO_SHORT`): a block of the same step run alone then gives the figure.

    Example:
        >>> from gpulab.telemetry.energy import too_short_for_the_gpu_counter
        >>> needs_a_block(Energy("cuda:0", 0.4, None, "", too_short_for_the_gpu_counter("steps")))
        True
        >>> needs_a_block(Energy("cpu", 0.4, None, "", "no RAPL"))
        False
    """
    return energy.joules is None and energy.device.startswith("cuda") and TOO_SHORT in (energy.reason or "")


def block_energy(step: Any, device: Any, seconds: float = BLOCK_S, how: str = ALONE) -> Energy:
    """The energy of ``step`` (a callable) run back to back for ``seconds`` inside one counter window
    (:func:`gpulab.benchmark` with ``energy=True``): a window long enough for NVML's ~100 ms updates, so its mean
    power is this step's own. ``joules`` covers the whole window; ``watts`` is what a run's steps are charged;
    ``how`` is added to its source."""
    from ...timing import benchmark

    m = benchmark(step, device=device, min_run_time=seconds, warmup=1, warn_noisy=False, energy=True)
    e = m.energy
    if e is None or not e.measured:
        return e if e is not None else Energy(str(device), 0.0, None, "", "the benchmark read no energy")
    return Energy(e.device, e.seconds, e.joules, f"{e.source}; {how}", None, e.counted)


def charge_short_windows(windows: Sequence[Energy], step: Callable[[], Any], *, skip: int = 1,
                         seconds: float = BLOCK_S, how: str = EPOCHS_ALONE) -> tuple[Energy, ...]:
    """``windows`` (e.g. a run's epochs), charged at the mean power of ``seconds`` of ``step`` run alone
    (:func:`block_energy`) where one kept after the first ``skip`` was refused as too short for a GPU's counter: each
    window's joules are then that power x its own seconds, and its source says so. Otherwise they are returned as they
    are; where the block gives no figure either, the refused windows keep their reason and say why.

    Example:
        >>> e = Energy("cpu", 1.0, None, "", "no RAPL")
        >>> charge_short_windows([e, e], lambda: None) == (e, e)      # nothing refused for its length: as they are
        True
    """
    windows = tuple(windows)
    refused = [e for e in windows[skip:] or windows if needs_a_block(e)]
    if not refused:
        return windows
    try:
        block = block_energy(step, refused[0].device, seconds, how)
    except Exception as ex:      # the step fails when run again: no figure, and both reasons
        block = Energy(refused[0].device, 0.0, None, "", f"a block of the step alone could not run "
                                                          f"({type(ex).__name__}: {ex})")
    if block.watts is None:
        return tuple(Energy(e.device, e.seconds, None, "", f"{e.reason}; {block.reason}") if needs_a_block(e) else e
                     for e in windows)
    return tuple(Energy(e.device, e.seconds, block.watts * e.seconds, block.source, None, block.counted)
                 for e in windows)


def gpu_counter_period(device: Any) -> CounterPeriod | None:
    """How often ``device``'s NVML energy counter advances: what :mod:`gpulab.telemetry.energy` measured on that GPU at
    its first counter window (measured now, once per GPU and process, where none was read yet), or NVML's usual period
    assumed with the reason it could not be measured. None for a CPU, and for a GPU whose counter cannot be read.

    Example:
        >>> gpu_counter_period("cpu") is None
        True
    """
    name = str(device)
    if not name.startswith("cuda"):
        return None
    meter = EnergyMeter(name)
    meter.start()
    meter.stop()
    return meter.period
