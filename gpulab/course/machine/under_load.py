"""What a GPU runs at *while* it works (lessons 00 and 04): SM clock, power, clock event reasons and the energy
counter sampled at 20 Hz by ``gl.Monitor`` during a sustained load, not read once after it.

A reading taken after a timed run can come from a card that has already gone idle: NVML's power reading is
instantaneous on a T4 or an A100 (averaged over a second only from Hopper on), and the clocks rise again the moment
the load stops. :func:`clocks_under_load` runs ``work`` back to back for ``seconds`` under a Monitor and summarises
the samples taken inside that span: the median SM clock and power, the share of samples each clock event reason was
active in, and the joules the energy counter added. :attr:`LoadClocks.clocks` hands the summary to
``course.explain_share``; :meth:`LoadClocks.plot` draws the trace (a T4 reaching its 70 W cap and lowering its
clocks within the first second is the picture lesson 00 explains).

Example:
    >>> from gpulab import course
    >>> load = course.clocks_under_load(lambda: None, seconds=1, device="cpu")
    >>> load.samples, load.clocks.available
    (0, False)
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..._check import callable_arg, positive
from ..._format import html_table, text_table
from .sustained import GPUClocks, _cuda_index, _gpu_name

__all__ = ["LoadClocks", "clocks_under_load"]

#: the sampling interval: 20 Hz, fast enough to see a T4 settle at its power cap within a second
INTERVAL_S = 0.05


@dataclass(frozen=True, repr=False)
class LoadClocks:
    """NVML's samples of one GPU during ``calls`` back-to-back runs of a load (``label``) lasting ``seconds``:
    the median SM clock and power draw over ``samples`` samples, the card's maximum SM clock and enforced power
    limit, ``reasons`` (each clock event reason seen, with the share of samples it was active in), ``energy_j`` the
    board's energy counter's increase over the span (None where the card has none), and ``trace`` the Monitor's
    whole :class:`~gpulab.telemetry.trace.Trace`. Where no GPU was read, ``gpu`` is None and ``reason`` says why."""

    gpu: str | None
    label: str
    seconds: float = 0.0
    calls: int = 0
    samples: int = 0
    sm_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    reasons: tuple[tuple[str, float], ...] = ()
    energy_j: float | None = None
    trace: Any = None
    reason: str = ""

    @property
    def clocks(self) -> GPUClocks:
        """The summary as a :class:`GPUClocks` (the reasons active in at least half the samples), for
        ``course.explain_share(..., clocks=load.clocks)``."""
        if self.gpu is None or not self.samples:
            return GPUClocks(None, "", reason=self.reason or "no sample fell inside the load")
        from ...telemetry.gpu import THROTTLE_REASONS

        bits = {name: bit for bit, name in THROTTLE_REASONS.items()}
        mask = sum(bits[name] for name, share in self.reasons if share >= 0.5 and name in bits)
        return GPUClocks(self.gpu, f"during {self.label} (median of {self.samples} samples)", self.sm_clock_mhz,
                         self.max_sm_clock_mhz, self.power_w, self.power_limit_w, mask)

    def rate(self, work_per_call: float) -> float | None:
        """``work_per_call`` (FLOPs, bytes, items) times the calls, over the load's seconds: the rate it sustained."""
        return work_per_call * self.calls / self.seconds if self.seconds > 0 and self.calls else None

    def plot(self) -> Any:
        """The Monitor's figure of the run: SM clock, power and utilisation over time, the load's span marked."""
        if self.trace is None:
            raise ValueError(f"nothing to plot: {self.reason}")
        return self.trace.plot()

    def _rows(self) -> list[tuple[str, str]]:
        if self.gpu is None:
            return [("nothing read", self.reason)]
        def num(v: float | None, unit: str, of: float | None = None) -> str:
            if v is None:
                return "not reported"
            return f"{v:,.0f} {unit}" + (f" of {of:,.0f} ({v / of:.0%})" if of else "")
        seen = ", ".join(f"{name} {share:.0%}" for name, share in self.reasons) or "none"
        return [("load", f"{self.label}: {self.calls:,} calls over {self.seconds:.1f} s, {self.samples} samples"),
                ("SM clock (median)", num(self.sm_clock_mhz, "MHz", self.max_sm_clock_mhz)),
                ("power (median)", num(self.power_w, "W", self.power_limit_w)),
                ("clock event reasons (share of samples)", seen),
                ("energy counter", "not reported" if self.energy_j is None else f"{self.energy_j:,.1f} J")]

    def _caption(self) -> str:
        return f"{self.gpu or 'No GPU'} while it works"

    def __repr__(self) -> str:
        return self._caption() + "\n" + text_table(["", "sampled during the load"], self._rows())

    def _repr_html_(self) -> str:
        return html_table(["", "sampled during the load"], self._rows(), caption=self._caption(),
                          footer="NVML sampled by gl.Monitor at 20 Hz inside the load's span; the maximum clock and "
                                 "the power limit are the card's")


def clocks_under_load(work: Callable[[], Any], *, seconds: float = 5.0, device: Any = None,
                      label: str = "the load", interval: float = INTERVAL_S) -> LoadClocks:
    """Run ``work`` (a callable launching at least a millisecond of GPU work, e.g. a large matmul) back to back for
    ``seconds`` on the CUDA ``device`` (default: the device lessons run on), the device synchronised after each call,
    under ``gl.Monitor(interval)``; summarise NVML's samples inside that span (:class:`LoadClocks`). Off a CUDA GPU
    nothing runs and the result says there is nothing to read. Five seconds or more: a T4 settles at its power cap
    within about a second, and the energy counter advances in steps of tens of milliseconds."""
    callable_arg("work", work)
    seconds = positive("seconds", seconds)
    interval = positive("interval", interval)
    if not isinstance(label, str):
        raise TypeError(f"label must be a string naming the load, got {type(label).__name__}")
    from ..._check import device_arg
    from ...system import device as pick_device

    picked = pick_device() if device is None else device_arg("device", device)
    dev = f"cuda:{picked}" if isinstance(picked, int) else str(picked)
    if not dev.startswith("cuda"):
        return LoadClocks(None, label, reason=f"the device is {dev}: NVML reads NVIDIA GPUs only")
    from ...telemetry.gpu import clock_state
    from ...telemetry.sampler import Monitor
    from ...timing import synchronize

    index = _cuda_index(dev)
    static = clock_state(index)
    if static is None:
        return LoadClocks(None, label, reason="NVML is not available (nvidia-ml-py or the NVIDIA driver missing)")
    work()                                   # warm: allocations, kernels chosen, before the span
    synchronize(dev)
    calls = 0
    with Monitor(interval=interval) as mon:
        with mon.phase(label):
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                work()
                synchronize(dev)             # one call queued at a time: the span ends when the work does
                calls += 1
            elapsed = time.perf_counter() - t0
    trace = mon.trace
    return _summary(trace, f"gpu{index}", _gpu_name(dev), label, elapsed, calls, static)


def _summary(trace: Any, key: str, gpu: str, label: str, elapsed: float, calls: int,
             static: dict[str, Any]) -> LoadClocks:
    """The samples of ``key`` (the Monitor's name for the GPU) inside the phase ``label``, summarised."""
    from ...telemetry.gpu import throttle_names

    span = next(((s, e) for name, s, e in trace.phase_spans() if name == label), None)
    frame = trace.device_frame(key) if key in trace.gpus else None
    if span is None or frame is None:
        return LoadClocks(gpu, label, elapsed, calls, trace=trace,
                          reason=f"the Monitor recorded no sample of {key} during the load")
    inside = frame[(frame.index >= span[0]) & (frame.index <= span[1])]

    def median(column: str) -> float | None:
        if column not in inside:
            return None
        values = [float(v) for v in inside[column] if v is not None and not math.isnan(float(v))]
        return statistics.median(values) if values else None

    reasons: dict[str, int] = {}
    masks = [int(v) for v in inside.get("throttle_reasons", []) if v is not None and not math.isnan(float(v))]
    for mask in masks:
        for name in throttle_names(mask):
            reasons[name] = reasons.get(name, 0) + 1
    energy = None
    if "energy_j" in inside:
        counter = [float(v) for v in inside["energy_j"] if v is not None and not math.isnan(float(v))]
        energy = counter[-1] - counter[0] if len(counter) >= 2 and counter[-1] >= counter[0] else None
    return LoadClocks(gpu, label, elapsed, calls, len(inside), median("sm_clock_mhz"), static.get("max_sm_clock_mhz"),
                      median("power_w"), static.get("power_limit_w"),
                      tuple(sorted(((n, c / len(masks)) for n, c in reasons.items()), key=lambda r: -r[1])),
                      energy, trace)
