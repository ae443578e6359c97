"""Energy over a window of time, from the counter the hardware keeps: a GPU's NVML energy counter (Volta and later),
the CPU packages' RAPL counters (:mod:`~gpulab.telemetry.rapl`), or, where a GPU has no counter but reports power,
its power readings integrated (a sampled figure, said so). Where nothing can be read, :class:`Energy` says why and
holds no number: a missing counter is never a zero.

Example:
    >>> from gpulab.telemetry.energy import EnergyMeter
    >>> meter = EnergyMeter("cpu", rapl_root="/no/such/folder").start()
    >>> e = meter.stop()
    >>> e.joules is None, e.measured, str(e).startswith("energy not measurable here")
    (True, False, True)
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from .._format import fmt_number
from .rapl import RaplMeter, rapl_zones

__all__ = ["Energy", "EnergyMeter", "SAMPLED_POWER", "NOT_MEASURABLE", "POWER_EVERY_S", "GPU_COUNTER_PERIOD_S",
           "GPU_INTERLEAVED_WINDOW_S", "too_short_for_the_gpu_counter"]

NOT_MEASURABLE = "not measurable here"
# why integrated power is an estimate (the published figures are gpulab.published("nvml-power-sampling"))
SAMPLED_POWER = ("NVML's board power is a reading the GPU updates periodically and, on recent cards, averages over "
                 "a window (about 1 s on Ampere and later, A100 excepted); on A100 and H100 only about 25% of the "
                 "runtime is sampled (Yang et al., arXiv 2312.02741), so energy integrated from it can be off where "
                 "the load changes faster than that")
POWER_EVERY_S = 0.05          # how often the fallback reads power
# NVML's energy counter advances in steps about 100 ms apart (gpulab.published("nvml-energy-window"); 100 ms
# measured between updates on an H200, idle and under matmuls): a window much shorter cannot resolve it
GPU_COUNTER_PERIOD_S = 0.1
# A window in turn with other work's windows: the first update inside it covers, on average, half a period of the work
# before it, so its joules mix in about (period / 2) / window of the neighbours': 5% at a second
GPU_INTERLEAVED_WINDOW_S = 10 * GPU_COUNTER_PERIOD_S


def too_short_for_the_gpu_counter(what: str = "windows", interleaved: bool = False) -> str:
    """Why a GPU gives no joules for ``what``: each window shorter than :data:`GPU_COUNTER_PERIOD_S` or, taken in turn
    with other work's windows (``interleaved``), shorter than :data:`GPU_INTERLEAVED_WINDOW_S`."""
    if interleaved:
        return (f"{what} of under a second, taken in turn with others', get no joules of their own from NVML's energy "
                "counter: it advances about every 100 ms (gpulab.published('nvml-energy-window')), each update "
                "covering the 100 ms before it, so a short window's joules mix in its neighbours'; read energy over a "
                "second or more per variant, e.g. gl.benchmark(fn, energy=True)")
    return (f"{what} shorter than the ~100 ms between updates of NVML's energy counter give no joules of their own "
            "(gpulab.published('nvml-energy-window')): each window holds no update, or one that also covers its "
            "neighbours; read energy over a second or more per variant, e.g. gl.benchmark(fn, energy=True)")


@dataclass(frozen=True)
class Energy:
    """Energy one device used over a window of ``seconds``: ``joules`` from ``source``, or None with ``reason``.

    ``counted`` is True for a cumulative hardware counter (NVML's total energy, RAPL) and False for power readings
    integrated over time. A counter covers the whole device: every process on that GPU, every program on those CPU
    packages. ``per_call(s)`` is the mean power times ``s``: the energy of one call that takes ``s`` seconds.

    Example:
        >>> e = Energy("cuda:0", 2.0, 500.0, "NVML energy counter")
        >>> e.watts, e.per_call(0.01), str(e)
        (250.0, 2.5, '500 J over 2.00 s (250 W mean; NVML energy counter, cuda:0)')
    """

    device: str
    seconds: float
    joules: float | None
    source: str
    reason: str | None = None
    counted: bool = True

    @property
    def measured(self) -> bool:
        return self.joules is not None

    @property
    def watts(self) -> float | None:
        """Mean power over the window (None without a figure)."""
        return None if self.joules is None or self.seconds <= 0 else self.joules / self.seconds

    def per_call(self, seconds_per_call: float) -> float | None:
        """Joules of one call lasting ``seconds_per_call`` at this window's mean power (None without a figure)."""
        w = self.watts
        return None if w is None else w * seconds_per_call

    def __str__(self) -> str:
        if self.joules is None:
            return f"energy {NOT_MEASURABLE} ({self.device}): {self.reason}"
        kind = "" if self.counted else ", integrated from sampled power"
        return (f"{fmt_number(self.joules)} J over {self.seconds:.2f} s ({fmt_number(self.watts)} W mean; "
                f"{self.source}{kind}, {self.device})")

    def _repr_html_(self) -> str:
        import html

        return f"<div>{html.escape(str(self))}</div>"


def _cuda_index(device: str) -> int:
    if ":" in device:
        return int(device.split(":", 1)[1])
    import torch

    return int(torch.cuda.current_device())


class _PowerIntegrator:
    """Reads a GPU's power every ``POWER_EVERY_S`` in a daemon thread and integrates it (trapezoids)."""

    def __init__(self, read_w: Any) -> None:
        self._read_w, self._stop = read_w, threading.Event()
        self._points: list[tuple[float, float]] = []
        self._thread = threading.Thread(target=self._run, name="gpulab-energy-power", daemon=True)

    def start(self) -> "_PowerIntegrator":
        self._thread.start()
        return self

    def _run(self) -> None:
        while True:
            w = self._read_w()
            if w is not None:
                self._points.append((time.monotonic(), w))
            if self._stop.wait(POWER_EVERY_S):
                break

    def stop(self) -> float | None:
        self._stop.set()
        self._thread.join(2.0)
        w = self._read_w()
        if w is not None:
            self._points.append((time.monotonic(), w))
        pts = self._points
        if len(pts) < 2:
            return None
        return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(pts, pts[1:]))


class EnergyMeter:
    """Energy one device uses between :meth:`start` and :meth:`stop` (an :class:`Energy`).

    ``device``: ``"cpu"`` (the RAPL package counters; ``rapl_root`` is where the powercap zones live, default
    ``/sys/class/powercap``), ``"cuda"``
    or ``"cuda:N"`` (NVML's energy counter of that GPU; its power integrated where the GPU has no counter), or
    ``"mps"`` (not measurable: Apple's counters need ``sudo powermetrics``). Queued GPU work counts only once it ran:
    synchronise before :meth:`stop` (``gl.timer`` and ``gl.benchmark`` do).

    Example:
        >>> with EnergyMeter("cpu", rapl_root="/no/such/folder") as meter:
        ...     _ = sum(range(1000))
        >>> meter.energy.measured
        False
    """

    def __init__(self, device: Any = "cpu", rapl_root: str | os.PathLike | None = None) -> None:
        self.device = str(device)
        self.kind = self.device.split(":", 1)[0]
        if self.kind not in ("cpu", "cuda", "mps"):
            raise ValueError(f"device={device!r}: energy is read for 'cpu', 'cuda', 'cuda:N' or 'mps'")
        self._rapl_root = rapl_root
        self._t0: float | None = None
        self._reason: str | None = None
        self._source = ""
        self._rapl: RaplMeter | None = None
        self._handle: Any = None
        self._e0: float | None = None
        self._power: _PowerIntegrator | None = None
        self._found, self._zones, self._counter = False, None, False    # what the device offers, found once
        self.energy: Energy | None = None

    def __enter__(self) -> "EnergyMeter":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> "EnergyMeter":
        """Read the counters now (for a GPU without one, start reading its power). What the device offers is found
        once, at the first start: a meter started again for each step costs one counter read."""
        self.energy, self._power, self._e0, self._rapl = None, None, None, None
        if not self._found:
            self._find()
        if self._reason is None:
            if self._zones is not None:
                try:
                    self._rapl = RaplMeter(self._zones).start()
                except OSError as e:      # a zone gone, or its permission taken away, since it was found
                    self._reason = f"a RAPL counter could not be read ({e})"
            elif self._counter:
                from . import nvml

                mj = nvml.query("nvmlDeviceGetTotalEnergyConsumption", self._handle)
                self._e0 = None if mj is None else float(mj) / 1000.0
            else:
                self._power = _PowerIntegrator(self._read_w).start()
        self._t0 = time.monotonic()
        return self

    def _find(self) -> None:
        """What this device offers: RAPL zones, NVML's energy counter, only its power, or nothing (``_reason``)."""
        self._found, self._reason, self._zones, self._counter = True, None, None, False
        if self.kind == "cpu":
            status = rapl_zones(self._rapl_root)
            if not status.readable:
                self._reason = status.cause
                return
            self._zones = status
            packages = [z.name for z in status.zones if z.is_package]
            self._source = f"RAPL package counters ({', '.join(packages)}; every program on them)"
        elif self.kind == "cuda":
            self._find_gpu()
        else:
            self._reason = "Apple GPUs report energy through powermetrics, which needs sudo"

    def _find_gpu(self) -> None:
        from . import nvml

        st = nvml.status()
        if not st.available:
            self._reason = f"NVML is not available ({st.error})"
            return
        self._handle = nvml.cuda_handle(_cuda_index(self.device))
        if self._handle is None:
            self._reason = f"NVML has no device for {self.device}"
        elif nvml.query("nvmlDeviceGetTotalEnergyConsumption", self._handle) is not None:
            self._counter, self._source = True, "NVML energy counter (the whole board)"
        elif self._read_w() is None:
            self._reason = ("NVML gives neither an energy counter nor power for this GPU (a MIG slice, a vGPU or a "
                            "board without the sensor)")
        else:
            self._source = f"NVML power read every {POWER_EVERY_S:g} s (no energy counter on this GPU)"

    def _read_w(self) -> float | None:
        from . import nvml

        mw = nvml.query("nvmlDeviceGetPowerUsage", self._handle)
        return None if mw is None else float(mw) / 1000.0

    def read(self) -> float | None:
        """Joules since :meth:`start` from a counter, without stopping (None where there is no counter: nothing
        readable, or a GPU whose power is integrated). Cheap: one counter read."""
        if self._t0 is None:
            raise RuntimeError("EnergyMeter.read() before start()")
        if self._reason is not None or self._power is not None:
            return None
        if self._rapl is not None:
            try:
                return self._rapl.package_joules()
            except OSError:
                return None
        from . import nvml

        mj = nvml.query("nvmlDeviceGetTotalEnergyConsumption", self._handle)
        return None if mj is None or self._e0 is None else max(0.0, float(mj) / 1000.0 - self._e0)

    def part(self, joules: float | None, seconds: float) -> Energy:
        """An :class:`Energy` for part of this meter's window (e.g. the blocks of one variant, summed from
        :meth:`read` differences): this meter's source, or its reason where ``joules`` is None."""
        if joules is None:
            why = self._reason or ("this GPU has no energy counter, and power readings are too coarse for blocks "
                                   "this short" if self._power is not None else "no counter reading")
            return Energy(self.device, seconds, None, "", why)
        return Energy(self.device, seconds, joules, self._source)

    def stop(self) -> Energy:
        """The :class:`Energy` since :meth:`start` (also kept as ``.energy``)."""
        if self._t0 is None:
            raise RuntimeError("EnergyMeter.stop() before start(): use `with EnergyMeter(device) as m:` or m.start()")
        seconds = time.monotonic() - self._t0
        joules, counted, why = None, True, self._reason
        if why is None:
            if self._rapl is not None:
                try:
                    joules = self._rapl.package_joules()
                except OSError as e:   # a zone that went away or lost its permission since start()
                    why = f"a RAPL counter could not be read again ({e})"
            elif self._power is not None:
                joules, counted = self._power.stop(), False
                if joules is None:
                    why = "the window was too short for two power readings"
            else:
                from . import nvml

                mj = None if self._e0 is None else nvml.query("nvmlDeviceGetTotalEnergyConsumption", self._handle)
                joules = None if mj is None else max(0.0, float(mj) / 1000.0 - self._e0)
                if joules is None:
                    why = "NVML's energy counter stopped answering"
                elif seconds < GPU_COUNTER_PERIOD_S:     # no update, or one that covers time outside the window
                    joules, why = None, too_short_for_the_gpu_counter("windows")
        self.energy = Energy(self.device, seconds, joules, self._source if joules is not None else "",
                             None if joules is not None else why, counted)
        return self.energy

    def __repr__(self) -> str:
        return f"EnergyMeter({self.device!r}{', ' + str(self.energy) if self.energy else ''})"
