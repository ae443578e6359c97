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

from ..telemetry.energy import Energy, EnergyMeter

__all__ = ["StepEnergy", "SHORT_STEP_S"]

SHORT_STEP_S = 0.1      # NVML's energy counter advances about every 100 ms (gl.published("nvml-energy-window"))


class StepEnergy:
    """Energy of ``device`` (a torch device or its name) over many short windows: :meth:`start` / :meth:`stop`
    around each timed step, :meth:`total` for the steps after the first ``skip``. Once the first window gives no
    figure, later windows read nothing (the reason stays)."""

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
