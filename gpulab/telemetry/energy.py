"""Energy over a window of time, from the counter the hardware keeps: a GPU's NVML energy counter (Volta and later),
the CPU packages' RAPL counters (:mod:`~gpulab.telemetry.rapl`), or, where a GPU has no counter but reports power,
its power readings integrated (a sampled figure, said so). Where nothing can be read, :class:`Energy` says why and
holds no number: a missing counter is never a zero. NVML's counter advances in steps (about 100 ms apart): each GPU's
period is measured after its first window ends (:class:`CounterPeriod`), and a window under ten periods gives no
figure, with the reason.

Example:
    >>> from gpulab.telemetry.energy import EnergyMeter
    >>> meter = EnergyMeter("cpu", rapl_root="/no/such/folder").start()
    >>> e = meter.stop()
    >>> e.joules is None, e.measured, str(e).startswith("energy not measurable here")
    (True, False, True)
"""
from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from .._format import fmt_number, fmt_seconds
from .rapl import RaplMeter, rapl_zones

__all__ = ["Energy", "EnergyMeter", "CounterPeriod", "SAMPLED_POWER", "NOT_MEASURABLE", "POWER_EVERY_S",
           "GPU_COUNTER_PERIOD_S", "GPU_INTERLEAVED_WINDOW_S", "MIN_WINDOW_PERIODS", "TOO_SHORT",
           "too_short_for_the_gpu_counter", "measure_counter_period"]

NOT_MEASURABLE = "not measurable here"
# why integrated power is an estimate (the published figures are gpulab.published("nvml-power-sampling"))
SAMPLED_POWER = ("NVML's board power is a reading the GPU updates periodically and, on recent cards, averages over "
                 "a window (about 1 s on Ampere and later, A100 excepted); on A100 and H100 only about 25% of the "
                 "runtime is sampled (Yang et al., arXiv 2312.02741), so energy integrated from it can be off where "
                 "the load changes faster than that")
POWER_EVERY_S = 0.05          # how often the fallback reads power
# NVML's energy counter advances in steps (gpulab.published("nvml-energy-window"): about 100 ms; 100 ms measured between
# updates on an H200, idle and under matmuls). Each GPU's own period is measured at its first window (up to
# PERIOD_PROBE_S of reads, remembered per GPU for the process); this is the period assumed where it cannot be.
GPU_COUNTER_PERIOD_S = 0.1
PERIOD_PROBE_S = 1.0          # the longest a GPU's counter is read to find its period
# Each of a window's two readings is up to one update stale, so a window of N periods is off by up to 1/N of its joules:
# windows under 10 periods give no figure
MIN_WINDOW_PERIODS = 10
# A window in turn with other work's windows: the first update inside it covers, on average, half a period of the work
# before it, so its joules mix in about (period / 2) / window of the neighbours': 5% at a second
GPU_INTERLEAVED_WINDOW_S = 10 * GPU_COUNTER_PERIOD_S
TOO_SHORT = "too short for NVML's energy counter"     # in every reason a GPU window is refused for its length


@dataclass(frozen=True)
class CounterPeriod:
    """How often a GPU's NVML energy counter advances: ``seconds`` between updates, measured on the device
    (``measured``, over ``updates`` spacings) or NVML's usual ~100 ms assumed, with the ``reason`` it could not be
    measured. Windows under ``min_window_s`` (:data:`MIN_WINDOW_PERIODS` periods) give no joules.

    Example:
        >>> p = CounterPeriod(0.1, True, 5)
        >>> p.min_window_s, str(p)
        (1.0, 'it advances every 100 ms on this GPU (measured over 5 updates)')
    """

    seconds: float
    measured: bool
    updates: int = 0
    reason: str | None = None

    @property
    def min_window_s(self) -> float:
        """The shortest window whose joules are within 1/:data:`MIN_WINDOW_PERIODS` of the truth."""
        return MIN_WINDOW_PERIODS * self.seconds

    def __str__(self) -> str:
        every = fmt_seconds(self.seconds)
        if self.measured:
            return f"it advances every {every} on this GPU (measured over {self.updates} updates)"
        return f"it advances about every {every} (assumed: {self.reason})"


def measure_counter_period(read_mj: Callable[[], Any], budget_s: float = PERIOD_PROBE_S,
                           spacings: int = 5) -> CounterPeriod:
    """The period of an energy counter that ``read_mj`` reads: the median spacing between its changes, read back to
    back for up to ``budget_s`` seconds (until ``spacings`` spacings are seen). Where fewer than two changes are seen,
    or a read fails, :data:`GPU_COUNTER_PERIOD_S` is assumed and the reason said.

    Example:
        >>> p = measure_counter_period(lambda: 1234, budget_s=0.02)     # a counter that never moves
        >>> p.measured, p.seconds, p.reason
        (False, 0.1, 'the counter changed 0 times in 0.02 s of reads')
    """
    def assumed(reason: str) -> CounterPeriod:
        return CounterPeriod(GPU_COUNTER_PERIOD_S, False, 0, reason)

    start = time.monotonic()
    last, changes = read_mj(), []
    if last is None:
        return assumed("the counter gave no reading")
    while time.monotonic() - start < budget_s and len(changes) <= spacings:
        value = read_mj()
        if value is None:
            return assumed("the counter stopped answering while its period was measured")
        if value != last:
            changes.append(time.monotonic())
            last = value
        time.sleep(0.0005)
    if len(changes) < 2:
        return assumed(f"the counter changed {len(changes)} time{'' if len(changes) == 1 else 's'} in "
                       f"{budget_s:g} s of reads")
    gaps = [b - a for a, b in zip(changes, changes[1:])]
    return CounterPeriod(float(statistics.median(gaps)), True, len(gaps))


_PERIODS: dict[str, CounterPeriod] = {}          # per GPU (its UUID), for this process
_PERIODS_LOCK = threading.Lock()


def too_short_for_the_gpu_counter(what: str = "windows", interleaved: bool = False,
                                  period: CounterPeriod | None = None) -> str:
    """Why a GPU gives no joules for ``what``: each window shorter than :data:`MIN_WINDOW_PERIODS` periods of its
    counter (``period``, measured on the GPU; NVML's usual ~100 ms when None) or, taken in turn with other work's
    windows (``interleaved``), shorter than :data:`GPU_INTERLEAVED_WINDOW_S`. Every such reason holds
    :data:`TOO_SHORT`."""
    if interleaved:
        return (f"{what} of under a second, taken in turn with others', are {TOO_SHORT} to give joules of their "
                "own: it advances about every 100 ms (gpulab.published('nvml-energy-window')), each update "
                "covering the 100 ms before it, so a short window's joules mix in its neighbours'; read energy over a "
                "second or more per variant, e.g. gl.benchmark(fn, energy=True)")
    p = period if period is not None else CounterPeriod(GPU_COUNTER_PERIOD_S, False, 0, "NVML's usual period")
    least = fmt_seconds(p.min_window_s)
    return (f"{what} under {least} are {TOO_SHORT}: {p}, and each of a window's two readings can be up to one update "
            f"stale, so a window needs {MIN_WINDOW_PERIODS} updates ({least}) to be within "
            f"{100 // MIN_WINDOW_PERIODS}% (gpulab.published('nvml-energy-window')); read energy over {least} or more "
            "per variant, e.g. gl.benchmark(fn, energy=True)")


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


def _unreadable(what: str, e: BaseException) -> str:
    """Why a window has no figure: its counter ``what`` ("could not be read", "... again"), with the error."""
    if isinstance(e, ValueError):
        return f"an energy counter {what}: it gave no number ({e}), so this window has no figure"
    return f"an energy counter {what} ({type(e).__name__}: {e}), so this window has no figure"


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
        self._period: CounterPeriod | None = None
        self._window_error: str | None = None
        self.energy: Energy | None = None

    def __enter__(self) -> "EnergyMeter":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> "EnergyMeter":
        """Read the counters now (for a GPU without one, start reading its power). What the device offers is found
        once, at the first start: a meter started again for each step costs one counter read."""
        self.energy, self._power, self._e0, self._rapl = None, None, None, None
        self._window_error: str | None = None      # why this window's counter could not be read (it has no figure)
        if not self._found:
            try:
                self._find()
            except Exception as e:     # a powercap folder that cannot be listed, say: no figure, and why
                self._found, self._reason = True, _unreadable("could not be found", e)
        if self._reason is None:
            try:
                if self._zones is not None:
                    self._rapl = RaplMeter(self._zones).start()
                elif self._counter:
                    from . import nvml

                    mj = nvml.query("nvmlDeviceGetTotalEnergyConsumption", self._handle)
                    self._e0 = None if mj is None else float(mj) / 1000.0
                else:
                    self._power = _PowerIntegrator(self._read_w).start()
            except Exception as e:    # a zone gone or unparsable, a permission taken away: this window has no figure
                self._rapl, self._e0, self._window_error = None, None, _unreadable("could not be read", e)
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
            self._reason = (f"{st.energy_problem}; and NVML gives no power for this GPU" if st.energy_problem else
                            "NVML gives neither an energy counter nor power for this GPU (a MIG slice, a vGPU or a "
                            "board without the sensor)")
        else:
            self._source = (f"NVML power read every {POWER_EVERY_S:g} s ("
                            + (f"the energy counter is not read: {st.energy_problem})" if st.energy_problem else
                               "no energy counter on this GPU)"))

    @property
    def period(self) -> CounterPeriod | None:
        """How often this GPU's energy counter advances (measured at its first window, then remembered for the
        process); None before that, and for a device without NVML's counter."""
        return self._period

    def _counter_period(self) -> CounterPeriod:
        """This GPU's counter period: measured once per GPU per process, after a window's end (never inside it)."""
        from . import nvml

        if self._period is None:
            key = nvml.query("nvmlDeviceGetUUID", self._handle) or self.device
            with _PERIODS_LOCK:
                if key not in _PERIODS:
                    _PERIODS[key] = measure_counter_period(
                        lambda: nvml.query("nvmlDeviceGetTotalEnergyConsumption", self._handle), PERIOD_PROBE_S)
                self._period = _PERIODS[key]
        return self._period

    def _read_w(self) -> float | None:
        from . import nvml

        mw = nvml.query("nvmlDeviceGetPowerUsage", self._handle)
        return None if mw is None else float(mw) / 1000.0

    def read(self) -> float | None:
        """Joules since :meth:`start` from a counter, without stopping (None where there is no counter: nothing
        readable, or a GPU whose power is integrated). Cheap: one counter read."""
        if self._t0 is None:
            raise RuntimeError("EnergyMeter.read() before start()")
        if self._reason is not None or self._power is not None or self._window_error is not None:
            return None
        try:
            if self._rapl is not None:
                return self._rapl.package_joules()
            from . import nvml

            mj = nvml.query("nvmlDeviceGetTotalEnergyConsumption", self._handle)
            return None if mj is None or self._e0 is None else max(0.0, float(mj) / 1000.0 - self._e0)
        except Exception as e:    # a counter read must never stop the work it measures
            self._window_error = _unreadable("could not be read again", e)
            return None

    def part(self, joules: float | None, seconds: float) -> Energy:
        """An :class:`Energy` for part of this meter's window (e.g. the blocks of one variant, summed from
        :meth:`read` differences): this meter's source, or its reason where ``joules`` is None."""
        if joules is None:
            why = self._reason or self._window_error or (self._rapl.problem if self._rapl is not None else None) or (
                "this GPU has no energy counter, and power readings are too coarse for blocks this short"
                if self._power is not None else "no counter reading")
            return Energy(self.device, seconds, None, "", why)
        if joules <= 0:       # never a measured 0 J
            return Energy(self.device, seconds, None, "", f"the counter did not advance over {fmt_seconds(seconds)} "
                                                          "of blocks: a counter that does not count gives no figure")
        return Energy(self.device, seconds, joules, self._source)

    def stop(self) -> Energy:
        """The :class:`Energy` since :meth:`start` (also kept as ``.energy``)."""
        if self._t0 is None:
            raise RuntimeError("EnergyMeter.stop() before start(): use `with EnergyMeter(device) as m:` or m.start()")
        seconds = time.monotonic() - self._t0
        joules, counted, why = None, True, self._reason or self._window_error
        if why is None:
            try:
                joules, counted, why = self._window(seconds)
            except Exception as e:    # a zone gone or unparsable since start(): no figure, never the caller's error
                joules, why = None, _unreadable("could not be read again", e)
        self.energy = Energy(self.device, seconds, joules, self._source if joules is not None else "",
                             None if joules is not None else why, counted)
        return self.energy

    def _window(self, seconds: float) -> tuple[float | None, bool, str | None]:
        """The window's joules from the device's counter (or its integrated power), whether counted, and why none."""
        if self._rapl is not None:
            joules = self._rapl.package_joules()
            if joules is None:
                return None, True, self._rapl.problem
            if not self._rapl.advanced:     # never a measured 0 J
                return None, True, (f"the RAPL package counters did not advance in {fmt_seconds(seconds)} (they "
                                    "update about every millisecond): a counter that does not count gives no figure")
            return joules, True, None
        if self._power is not None:
            joules = self._power.stop()
            return joules, False, None if joules is not None else "the window was too short for two power readings"
        from . import nvml

        mj = None if self._e0 is None else nvml.query("nvmlDeviceGetTotalEnergyConsumption", self._handle)
        joules = None if mj is None else max(0.0, float(mj) / 1000.0 - self._e0)
        if joules is None:
            return None, True, "NVML's energy counter stopped answering"
        if seconds < self._counter_period().min_window_s:     # off by up to one update in either reading
            return None, True, too_short_for_the_gpu_counter("windows", period=self._period)
        if joules == 0:     # ten updates or more and not one joule: a counter that does not count
            return None, True, (f"NVML's energy counter did not advance in {fmt_seconds(seconds)} ({self._period}): "
                                "a counter that does not count gives no figure")
        return joules, True, None

    def __repr__(self) -> str:
        return f"EnergyMeter({self.device!r}{', ' + str(self.energy) if self.energy else ''})"
