"""Timing that is right on GPU and CPU: :func:`benchmark` -> :class:`Measurement`, :func:`timer`.

``benchmark`` wraps ``torch.utils.benchmark.Timer`` with three corrections learners otherwise get
wrong: it uses the process's thread count (the Timer's default of one thread halves CPU figures on
a 2-core machine), it synchronises CUDA/MPS around every timed block (kernels are asynchronous),
and it warms up first (lazy init, cuDNN autotuning, allocator growth). Without torch it falls back
to a ``time.perf_counter`` loop with the same blocked design.

Example:
    >>> import gpulab as gl
    >>> m = gl.benchmark(sum, range(1000), label="sum", min_run_time=0.05, items=1000)
    >>> m.median_s > 0 and m.items_per_s > 0
    True
"""
from __future__ import annotations

import datetime as _dt
import math
import os
import platform
import statistics
import time
import warnings
from contextlib import contextmanager
from dataclasses import InitVar, dataclass, field
from typing import Any, Callable, Iterator

from ._check import checked, device_arg, positive
from ._format import fmt_bytes, fmt_flops, fmt_number, fmt_rate, fmt_seconds, html_table
from ._timing_backends import _gpu_clock_state, _perf_counter_loop, _torch_stats, _torch_timer

__all__ = ["Env", "environment", "Measurement", "NoisyMeasurementWarning", "benchmark", "synchronize",
           "timer", "Stopwatch", "repeat_for"]

# One noise rule for every backend, torch.utils.benchmark's (Measurement.has_warnings: IQR / median not below 0.1),
# judged from 4 runs on (from 4 runs its Measurement's repr shows the IQR).
NOISE_THRESHOLD, MIN_RUNS_FOR_NOISE = 0.10, 4


class NoisyMeasurementWarning(UserWarning):
    """The spread of a measurement (IQR) is large compared with its median."""


# ----------------------------------------------------------------------------------------------
# device synchronisation: the one place (with system.device) that knows how
def _device_type(device: Any) -> str:
    if device is None:
        return "cpu"
    t = getattr(device, "type", None)
    return t if isinstance(t, str) else str(device).split(":")[0]


def synchronize(device: Any = None) -> None:
    """Wait until queued work on ``device`` finishes (no-op on CPU or without torch).

    Example:
        >>> synchronize("cpu")
    """
    kind = _device_type(device)
    if kind == "cpu":
        return
    import torch

    if kind == "cuda":
        if not torch.cuda.is_available():
            device_arg("device", device)        # one clear error: CUDA is not here
        torch.cuda.synchronize(device)
    elif kind == "mps":
        torch.mps.synchronize()
    else:
        device_arg("device", device)
        raise ValueError(f"cannot synchronise unknown device {device!r}: use 'cpu', 'cuda' or 'mps'")


def _infer_device(args: tuple, kwargs: dict) -> str:
    """The device of the first tensor (or module parameter) among the arguments; ``"cpu"`` otherwise."""
    for a in (*args, *kwargs.values()):
        if type(a).__name__ == "device" and hasattr(a, "type"):   # a torch.device passed as an argument
            return str(a)
        dev = getattr(a, "device", None)
        if dev is not None and hasattr(dev, "type"):
            return str(dev)
        params = getattr(a, "parameters", None)
        if callable(params):
            try:
                return str(next(params()).device)
            except (StopIteration, TypeError):
                pass
    return "cpu"


# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Env:
    """Where a measurement was taken: enough to tell two learners' numbers apart."""

    device: str
    device_name: str
    threads: int
    cpu: str
    python: str
    torch: str | None
    date: str

    def __str__(self) -> str:
        t = f", torch {self.torch}" if self.torch else ""
        return f"{self.device_name} ({self.device}, {self.threads} threads{t}, Python {self.python}, {self.date})"


def _threads() -> int:
    try:
        import torch

        return torch.get_num_threads()
    except ImportError:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@checked(device="devspec")
def environment(device: Any = "cpu") -> Env:
    """The :class:`Env` fingerprint for ``device`` now.

    Example:
        >>> environment("cpu").threads >= 1
        True
    """
    from .system import _cpu_model_and_flags

    kind = _device_type(device)
    cpu = _cpu_model_and_flags()[0]
    name = cpu
    torch_version = None
    try:
        import torch

        torch_version = torch.__version__
        if kind == "cuda":
            name = torch.cuda.get_device_name(torch.device(device))
        elif kind == "mps":
            name = "Apple GPU (MPS)"
    except ImportError:
        pass
    return Env(str(device), name, _threads(), cpu, platform.python_version(), torch_version,
               _dt.date.today().isoformat())


# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Measurement:
    """An immutable timing result. Statistics are per call of the benchmarked function.

    ``times_s`` holds one value per timed block (each block averages ``number_per_run`` calls).
    ``items``, ``flops`` and ``bytes_moved`` describe one call, so throughput follows from the
    median: ``items_per_s``, ``flops_per_s`` (achieved FLOP/s) and ``bytes_per_s`` (bandwidth). ``energy`` is what
    the device's counter read over the timed runs, so ``joules_per_call`` is their mean power times the median
    (``joules_per_item`` per item); both are None where no counter can be read. Given torch's
    Timer result (``torch_measurement``, init-only), its median, IQR, mean and noise flag are used.
    """

    label: str
    times_s: tuple[float, ...]
    number_per_run: int
    device: str
    num_threads: int
    env: Env
    backend: str
    warmup: int
    items: float | None = None
    flops: float | None = None
    bytes_moved: float | None = None
    peak_memory_bytes: int | None = None
    description: str = ""
    gpu_state: dict[str, Any] | None = None  # NVML clocks/throttle reasons before and after (CUDA only)
    energy: Any = None          # the device's Energy over the timed runs (gpulab.telemetry.energy), or None
    median_s: float = field(init=False)
    iqr_s: float = field(init=False)
    mean_s: float = field(init=False)
    min_s: float = field(init=False)
    runs: int = field(init=False)

    torch_measurement: InitVar[Any] = None  # torch.utils.benchmark's Measurement of these times, if any

    def __post_init__(self, torch_measurement: Any) -> None:
        if not self.times_s:
            raise ValueError("a Measurement needs at least one timed run")
        if any((not math.isfinite(t)) or t < 0 for t in self.times_s):
            raise ValueError(f"times must be finite and non-negative, got {self.times_s[:5]}")
        ts = sorted(self.times_s)
        stats = _torch_stats(torch_measurement, len(ts)) if torch_measurement is not None else None
        if stats is None:   # no torch Measurement (perf_counter loop, CUDA events, Triton, by hand): same rule here
            q = statistics.quantiles(ts, n=4, method="inclusive") if len(ts) > 1 else [ts[0]] * 3
            median, iqr = statistics.median(ts), q[2] - q[0]
            stats = (median, iqr, statistics.fmean(ts), median > 0 and iqr / median >= NOISE_THRESHOLD)
        for name, value in (("median_s", stats[0]), ("iqr_s", stats[1]), ("mean_s", stats[2]),
                            ("min_s", ts[0]), ("runs", len(ts)), ("_wide_iqr", bool(stats[3]))):
            object.__setattr__(self, name, value)

    # derived figures (cheap, always consistent with the stored times)
    @property
    def items_per_s(self) -> float | None:
        return None if self.items is None or self.median_s == 0 else self.items / self.median_s

    @property
    def flops_per_s(self) -> float | None:
        return None if self.flops is None or self.median_s == 0 else self.flops / self.median_s

    @property
    def bytes_per_s(self) -> float | None:
        return None if self.bytes_moved is None or self.median_s == 0 else self.bytes_moved / self.median_s

    @property
    def joules_per_call(self) -> float | None:
        """Mean power over the timed runs times the median time (None where energy is not measurable)."""
        return None if self.energy is None else self.energy.per_call(self.median_s)

    @property
    def joules_per_item(self) -> float | None:
        j = self.joules_per_call
        return None if j is None or self.items is None else j / self.items

    @property
    def throttled(self) -> bool | None:
        """True when NVML saw the GPU slowed by heat or hardware protection while timing (HW slowdown, HW or SW
        thermal, HW power brake); the power cap is not a slowdown (see :attr:`power_capped`). None: unknown."""
        if not self.gpu_state or self.gpu_state.get("throttle_reasons") is None:
            return None
        from .telemetry.gpu import SLOWDOWN_MASK

        return bool(self.gpu_state["throttle_reasons"] & SLOWDOWN_MASK)

    @property
    def power_capped(self) -> bool | None:
        """True when the GPU ran at its power cap while timing: its clocks were those its power budget allows,
        which is how a T4 (70 W) runs nearly any real load. Information, not a fault. None: unknown."""
        if not self.gpu_state or self.gpu_state.get("throttle_reasons") is None:
            return None
        from .telemetry.gpu import POWER_CAP_MASK

        return bool(self.gpu_state["throttle_reasons"] & POWER_CAP_MASK)

    @property
    def gpu_note(self) -> str | None:
        """The GPU's clocks while timing, its power cap when it ran at it, and any thermal or hardware slowdown
        (None without NVML's view)."""
        if not self.gpu_state:
            return None
        from .telemetry.gpu import slowdown_names

        g = self.gpu_state
        mhz = lambda v: "?" if v is None else f"{v:.0f}"   # noqa: E731
        note = f"SM clock {mhz(g.get('sm_clock_mhz_before'))} -> {mhz(g.get('sm_clock_mhz'))} MHz"
        if g.get("max_sm_clock_mhz"):
            note += f" (max {mhz(g['max_sm_clock_mhz'])} MHz)"
        if self.power_capped:
            cap = f"{g['power_limit_w']:.0f} W " if g.get("power_limit_w") else ""
            note += f"; at its {cap}power cap: the clocks its power budget allows, as the card is designed to run"
        if self.throttled:
            note += f"; THROTTLED by {', '.join(slowdown_names(g['throttle_reasons']))} (heat or hardware protection)"
        return note

    @property
    def relative_iqr(self) -> float:
        return self.iqr_s / self.median_s if self.median_s else 0.0

    @property
    def noisy(self) -> bool:
        """IQR at least 10% of the median, judged with 4 runs or more: torch.utils.benchmark's
        ``Measurement.has_warnings`` rule, taken from torch's own Measurement when the times came from its Timer."""
        return self.runs >= MIN_RUNS_FOR_NOISE and self._wide_iqr   # type: ignore[attr-defined]

    def fraction_of(self, peak_per_s: float, kind: str = "flops") -> float | None:
        """Achieved FLOP/s (``kind="flops"``) or bytes/s (``"bytes"``) as a fraction of ``peak_per_s``."""
        positive("peak_per_s", peak_per_s, unit="FLOP/s or bytes/s")
        got = {"flops": self.flops_per_s, "bytes": self.bytes_per_s}.get(kind, "?")
        if got == "?":
            raise ValueError(f"kind must be 'flops' or 'bytes', not {kind!r}")
        return None if got is None else got / peak_per_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label, "median_s": self.median_s, "iqr_s": self.iqr_s, "mean_s": self.mean_s,
            "min_s": self.min_s, "runs": self.runs, "number_per_run": self.number_per_run,
            "items_per_s": self.items_per_s, "flops_per_s": self.flops_per_s, "bytes_per_s": self.bytes_per_s,
            "peak_memory_bytes": self.peak_memory_bytes, "joules_per_call": self.joules_per_call,
            "device": self.device, "num_threads": self.num_threads,
            "backend": self.backend, "env": str(self.env),
        }

    def _summary(self) -> list[tuple[str, str]]:
        rows = [("median", f"{fmt_seconds(self.median_s)} (IQR {fmt_seconds(self.iqr_s)}, "
                           f"{self.relative_iqr:.0%}{', NOISY' if self.noisy else ''})"),
                ("runs", f"{self.runs} x {self.number_per_run} call(s), warmup {self.warmup}")]
        if self.items_per_s is not None:
            rows.append(("throughput", f"{fmt_number(self.items_per_s)} items/s"))
        if self.flops_per_s is not None:
            rows.append(("achieved", fmt_flops(self.flops_per_s)))
        if self.bytes_per_s is not None:
            rows.append(("bandwidth", fmt_rate(self.bytes_per_s)))
        if self.peak_memory_bytes is not None:
            rows.append(("peak memory", fmt_bytes(self.peak_memory_bytes)))
        if self.energy is not None:
            per = self.joules_per_call
            rows.append(("energy", f"not measurable here: {self.energy.reason}" if per is None else
                         f"{fmt_number(per)} J per call ({fmt_number(self.energy.watts)} W x the median; "
                         f"{self.energy.source}{'' if self.energy.counted else ', sampled power'})"))
        if self.gpu_state:
            rows.append(("GPU clocks", self.gpu_note))
        rows.append(("where", str(self.env)))
        return rows

    def __repr__(self) -> str:
        return f"Measurement {self.label!r}\n" + "\n".join(f"  {k:<11} {v}" for k, v in self._summary())

    def _repr_html_(self) -> str:
        return html_table(("", ""), self._summary(), caption=f"Measurement: {self.label}")


# ----------------------------------------------------------------------------------------------
def _check_positive(name: str, value: Any, allow_zero: bool = False, integer: bool = False) -> None:
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type:
        raise TypeError(f"{name} must be a {'whole number' if integer else 'number'}, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero) or (not integer and not math.isfinite(value)):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")


@checked(fn="fn", label="name?", device="device", description="text", warn_noisy="flag", energy="flag")
def benchmark(fn: Callable[..., Any], *args: Any, label: str | None = None, warmup: int = 3,
              min_run_time: float = 1.0, items: float | None = None, flops: float | None = None,
              bytes_moved: float | None = None, device: Any = None, num_threads: int | None = None,
              description: str = "", warn_noisy: bool = True, energy: bool = True, **kwargs: Any) -> Measurement:
    """Time ``fn(*args, **kwargs)`` correctly and return a :class:`Measurement`.

    Args:
        fn: what to time; called ``warmup`` times first, then in blocks for ``min_run_time`` seconds.
        label: name in tables (default: the function's name).
        items: items processed per call (e.g. the batch size) -> ``items_per_s``.
        flops / bytes_moved: work per call -> achieved FLOP/s and bandwidth.
        device: where the work runs (default: inferred from tensor arguments) - decides synchronisation.
        num_threads: CPU threads for torch (default: the process's current setting).
        energy: read the device's energy counter around the timed runs (``Measurement.joules_per_call``; an
            :class:`~gpulab.telemetry.energy.Energy` saying why where none can be read). False skips it.

    Example:
        >>> import torch, gpulab as gl
        >>> a = torch.randn(256, 256)
        >>> m = gl.benchmark(torch.mm, a, a, label="mm", flops=2 * 256**3, min_run_time=0.1)
        >>> m.flops_per_s > 0
        True
    """
    if not callable(fn):
        raise TypeError(f"benchmark needs a callable as first argument, got {type(fn).__name__}: "
                        "pass the function itself, e.g. benchmark(model, x), not benchmark(model(x))")
    _check_positive("warmup", warmup, allow_zero=True, integer=True)
    _check_positive("min_run_time", min_run_time)
    for name, v in (("items", items), ("flops", flops), ("bytes_moved", bytes_moved)):
        if v is not None:
            _check_positive(name, v)
    if num_threads is not None:
        _check_positive("num_threads", num_threads, integer=True)
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        if num_threads > cpus:      # more threads than CPUs never times faster; thousands exhaust the process
            raise ValueError(f"num_threads={num_threads} is more than the {cpus} CPUs this process may use: "
                             f"pass at most {cpus} (or None: the current setting)")
    label = label or getattr(fn, "__name__", None) or type(fn).__name__
    dev = str(device) if device is not None else _infer_device(args, kwargs)
    kind = _device_type(dev)

    for _ in range(warmup):
        fn(*args, **kwargs)
    synchronize(dev)
    before = _gpu_clock_state(dev) if kind == "cuda" else None
    meter = _energy_meter(dev) if energy else None

    try:
        import torch

        Timer = _torch_timer()
    except ImportError:
        torch = None  # type: ignore[assignment]

    if torch is not None:
        threads = num_threads or torch.get_num_threads()

        def clock() -> float:
            synchronize(dev) if kind != "cpu" else None
            return time.perf_counter()

        t = Timer(stmt="fn(*args, **kwargs)", globals={"fn": fn, "args": args, "kwargs": kwargs},
                  num_threads=threads, label=label, timer=clock)
        source = t.blocked_autorange(min_run_time=min_run_time)
        times, number, backend = (tuple(float(x) for x in source.times), int(source.number_per_run),
                                  "torch.utils.benchmark")
    else:
        threads = num_threads or _threads()
        times, number = _perf_counter_loop(fn, args, kwargs, min_run_time)
        backend, source = "perf_counter", None

    used = meter.stop() if meter is not None else None   # the Timer's last block ended synchronised
    gpu_state = None
    if before is not None:
        after = _gpu_clock_state(dev) or {}
        mask = (before.get("throttle_reasons") or 0) | (after.get("throttle_reasons") or 0)
        gpu_state = {"sm_clock_mhz_before": before.get("sm_clock_mhz"), "sm_clock_mhz": after.get("sm_clock_mhz"),
                     "max_sm_clock_mhz": after.get("max_sm_clock_mhz") or before.get("max_sm_clock_mhz"),
                     "power_w": after.get("power_w"),
                     "power_limit_w": after.get("power_limit_w") or before.get("power_limit_w"),
                     "throttle_reasons": mask if (before.get("throttle_reasons") is not None
                                                  or after.get("throttle_reasons") is not None) else None}
    result = Measurement(label=label, times_s=times, number_per_run=number, device=dev, num_threads=threads,
                         env=environment(dev), backend=backend, warmup=warmup, items=items, flops=flops,
                         bytes_moved=bytes_moved, description=description, gpu_state=gpu_state, energy=used,
                         torch_measurement=source)
    if result.throttled:   # heat or hardware protection; the power cap is how the card runs, so only noted
        warnings.warn(f"{label}: the GPU slowed its clocks for heat or hardware protection while timing "
                      f"({result.gpu_note}); figures are below what the card can do", UserWarning, stacklevel=3)
    if warn_noisy and result.noisy:
        warnings.warn(f"{label}: IQR is {result.relative_iqr:.0%} of the median over {result.runs} runs - "
                      "the machine was busy or the workload varies; re-run, or compare medians only "
                      "with care", NoisyMeasurementWarning, stacklevel=3)   # 3: the caller of @checked's wrapper
    return result


# ----------------------------------------------------------------------------------------------
class Stopwatch:
    """The result of :func:`timer`: ``elapsed_s`` is ``None`` while running, seconds after; ``energy`` the device's
    :class:`~gpulab.telemetry.energy.Energy` over the block (``energy.joules`` None where it is not measurable)."""

    def __init__(self, label: str, device: str) -> None:
        self.label, self.device = label, device
        self.elapsed_s: float | None = None
        self.energy: Any = None

    def __repr__(self) -> str:
        state = fmt_seconds(self.elapsed_s) if self.elapsed_s is not None else "running"
        joules = self.energy is not None and self.energy.joules is not None
        return f"{self.label}: {state} ({self.device}" + (f"; {fmt_number(self.energy.joules)} J)" if joules else ")")

    def _repr_html_(self) -> str:
        return f"<code>{self!r}</code>"


@checked(label="name", device="device")
@contextmanager
def timer(label: str = "elapsed", device: Any = None) -> Iterator[Stopwatch]:
    """Wall time of a block, with the device synchronised at both ends, and the energy its counter read.

    Example:
        >>> with timer("sleep") as t:
        ...     time.sleep(0.01)
        >>> t.elapsed_s >= 0.01
        True
    """
    if device is None:
        from .system import device_kind

        device = device_kind()
    sw = Stopwatch(label, str(device))
    synchronize(device)
    meter = _energy_meter(str(device))
    t0 = time.perf_counter()
    try:
        yield sw
    finally:
        synchronize(device)
        sw.elapsed_s = time.perf_counter() - t0
        sw.energy = meter.stop() if meter is not None else None


def _energy_meter(device: str) -> Any:
    """A started :class:`~gpulab.telemetry.energy.EnergyMeter` for ``device``, or None where there is no meter
    (an unknown device kind); reading a counter must never stop a timing."""
    from .telemetry.energy import EnergyMeter

    try:
        return EnergyMeter(device).start()
    except Exception:
        return None


@checked(fn="fn", device="device")
def repeat_for(seconds: float, fn: Callable[[], Any], device: Any = None) -> int:
    """Call ``fn()`` again and again for about ``seconds`` (synchronising ``device`` after each call, so
    queued GPU work counts) and return how many calls ran - a steady workload to watch with a Monitor.

    Example:
        >>> repeat_for(0.01, lambda: sum(range(100))) >= 1
        True
    """
    positive("seconds", seconds, unit="seconds")
    if not callable(fn):
        raise TypeError(f"fn must be a callable taking no arguments, got {type(fn).__name__}")
    calls, end = 0, time.monotonic() + seconds
    while True:
        fn()
        if device is not None:
            synchronize(device)
        calls += 1
        if time.monotonic() >= end:
            return calls
