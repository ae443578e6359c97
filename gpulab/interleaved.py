"""Fair timing of several variants on a busy machine: run them in turn, not one after another.

:func:`gpulab.benchmark` times one function for a while; timing variants one after the other is unfair
when other programs share the machine: whichever ran while the machine was busy looks slow.
:func:`benchmark_interleaved` runs one timed block of each variant per round, rotating the order
every round, so background load slows them all alike and their medians compare. Each result is an
ordinary :class:`~gpulab.Measurement` (for :func:`gpulab.compare`).

Fair is not the same as undisturbed: :func:`cpu_contention` measures how much CPU other programs
took while a block ran, so a lesson can say when its numbers were taken on a busy machine.

Example:
    >>> import gpulab as gl
    >>> with gl.interleaved.cpu_contention() as load:
    ...     ms = gl.benchmark_interleaved({"short": lambda: sum(range(1000)), "long": lambda: sum(range(20000))},
    ...                                   min_run_time=0.1)
    >>> ms["short"].median_s < ms["long"].median_s and ms["short"].runs == ms["long"].runs
    True
    >>> 0 <= load.others_pct <= 100
    True
"""
from __future__ import annotations

import math
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping

from .timing import Measurement, _energy_meter, _threads, environment, synchronize
from ._check import checked, per_label, positive, whole

__all__ = ["benchmark_interleaved", "cpu_contention", "Contention", "BUSY_PCT", "threads"]

BUSY_PCT = 10.0   # other programs above this share of the machine's CPU make timings slow and noisy


class Contention:
    """The result of :func:`cpu_contention`: ``others_pct`` is ``None`` while running (or without psutil),
    then the share of the machine's CPU time (all cores) that other programs used during the block.

    Example:
        >>> Contention(cores=2).busy is None     # not measured yet
        True
    """

    def __init__(self, cores: int) -> None:
        self.cores = cores
        self.elapsed_s: float | None = None
        self.others_pct: float | None = None

    @property
    def busy(self) -> bool | None:
        """True when other programs used more than ``BUSY_PCT`` percent of the CPU (None: unknown)."""
        return None if self.others_pct is None else self.others_pct > BUSY_PCT

    def __repr__(self) -> str:
        if self.others_pct is None:
            return "CPU contention: unknown" + (" (psutil missing)" if self.elapsed_s is not None else " (running)")
        where = f"{self.others_pct:.0f}% of this machine's CPU ({self.cores} cores) over {self.elapsed_s:.1f} s"
        if self.busy:
            return (f"Busy machine: other programs used {where}. Timings above are slower and noisier than this "
                    "machine can do; re-run when it is quiet before trusting them.")
        return f"Quiet machine: other programs used {where}."

    def _repr_html_(self) -> str:
        color = "#8a5a00" if self.busy else "#555"
        return f'<div style="color:{color}">{self!r}</div>'


def _cpu_times() -> tuple[float, float, float] | None:
    """(CPU seconds busy on all cores, CPU seconds of this process, monotonic time), or None without psutil."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a core dependency
        return None
    t = psutil.cpu_times()
    busy = sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq", "steal"))
    p = psutil.Process().cpu_times()
    return busy, p.user + p.system + p.children_user + p.children_system, time.monotonic()


@contextmanager
def cpu_contention() -> Iterator[Contention]:
    """Measure how much CPU *other* programs used while the block ran (busy CPU time of the whole machine
    minus this process's own), as a share of all cores. A block timed on a busy machine runs slower and
    noisier; on a 2-core machine one busy program can slow multi-threaded PyTorch far more than 2x,
    because each parallel region waits for its descheduled thread.

    Example:
        >>> with cpu_contention() as load:
        ...     _ = sum(range(10000))
        >>> load.others_pct is None or 0 <= load.others_pct <= 100
        True
    """
    import os

    cores = os.cpu_count() or 1
    result = Contention(cores)
    before = _cpu_times()
    try:
        yield result
    finally:
        after = _cpu_times()
        if before is not None and after is not None:
            wall = after[2] - before[2]
            result.elapsed_s = wall
            others = (after[0] - before[0]) - (after[1] - before[1])
            result.others_pct = min(100.0, max(0.0, 100 * others / (wall * cores))) if wall > 0 else 0.0
        else:  # pragma: no cover
            result.elapsed_s = 0.0


@contextmanager
def threads(n: int | None) -> Iterator[int]:
    """PyTorch's intra-op threads set to ``n`` for the block (``torch.set_num_threads``), restored after, even when
    the block raises; ``None`` leaves them as they are. Yields the count in force.

    On a shared CPU, one thread per call is the fair way to time small operations: a multi-threaded operator waits
    at the end of each parallel region for its slowest thread, and a thread whose core another program holds
    arrives a scheduler time slice late, so a microsecond operator can take milliseconds. One thread runs on
    whichever core is free.

    Example:
        >>> import torch, gpulab as gl
        >>> before = torch.get_num_threads()
        >>> with gl.interleaved.threads(1) as n:
        ...     n, torch.get_num_threads()
        (1, 1)
        >>> torch.get_num_threads() == before
        True
    """
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"n must be a whole number of threads >= 1 (or None: leave them), got {n!r}")
    import torch

    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


@checked(device="device", energy="flag")
def benchmark_interleaved(fns: Mapping[str, Callable[[], Any]], *, min_run_time: float = 1.0, warmup: int = 1,
                          items: Any = None, flops: Any = None, bytes_moved: Any = None, device: Any = None,
                          min_rounds: int = 5, max_rounds: int = 10_000, block_s: float | None = None,
                          energy: bool = True) -> dict[str, Measurement]:
    """Time several zero-argument callables fairly: one block of each per round, in rotating order.

    Args:
        fns: label -> callable taking no arguments (use ``lambda`` or ``functools.partial``).
        min_run_time: total seconds to spend (at least ``min_rounds`` rounds are run, at most ``max_rounds``).
        warmup: untimed calls of each callable first (lazy initialisation, allocator growth).
        items / flops / bytes_moved: per call, one number for all or a mapping label -> number.
        device: synchronised around every block (default: CPU, nothing to synchronise).
        block_s: target duration of one timed block; short calls are repeated within a block so the
            clock's resolution and the loop's own cost do not matter (default: ``min_run_time / 50``,
            between 1 ms and 50 ms).
        energy: read the device's energy counter around every timed block, so each variant's joules are the
            counter over its own blocks (``Measurement.joules_per_call``). NVML's counter updates about every
            100 ms, each update covering the 100 ms before it: on a GPU, blocks under a second mix in their
            neighbours' joules and give no figure, with the reason (``block_s=1.0``, or :func:`gpulab.benchmark`
            per variant, give one). False skips it.

    Returns a dict label -> :class:`~gpulab.Measurement`, in the order given; every Measurement has the
    same number of runs (rounds), so medians compare.

    Example:
        >>> ms = benchmark_interleaved({"a": lambda: sum(range(100)), "b": lambda: sum(range(200))},
        ...                            min_run_time=0.05, items=100)
        >>> list(ms), ms["a"].items, ms["a"].runs == ms["b"].runs
        (['a', 'b'], 100.0, True)
    """
    if not isinstance(fns, Mapping) or not fns:
        raise TypeError("fns must be a non-empty mapping label -> callable, e.g. {'a': f, 'b': g}")
    labels = list(fns)
    for k in labels:
        if not isinstance(k, str) or not k:
            raise TypeError(f"labels must be non-empty strings, got {k!r}")
        if not callable(fns[k]):
            raise TypeError(f"fns[{k!r}] must be a callable taking no arguments, got {type(fns[k]).__name__}")
    positive("min_run_time", min_run_time, unit="seconds")
    whole("warmup", warmup, low=0)
    whole("min_rounds", min_rounds)
    whole("max_rounds", max_rounds)
    if max_rounds < min_rounds:
        raise ValueError(f"max_rounds ({max_rounds}) must be >= min_rounds ({min_rounds})")
    if block_s is None:
        block_s = min(0.05, max(0.001, min_run_time / 50))
    else:
        positive("block_s", block_s, unit="seconds")
    per = {name: per_label(name, v, labels) for name, v in
           (("items", items), ("flops", flops), ("bytes_moved", bytes_moved))}
    dev = "cpu" if device is None else str(device)

    meter = _energy_meter(dev) if energy else None
    joules: dict[str, float | None] = dict.fromkeys(labels, 0.0)
    spent: dict[str, float] = dict.fromkeys(labels, 0.0)

    def timed(fn: Callable[[], Any], number: int, label: str | None = None) -> float:
        synchronize(dev)
        e0 = meter.read() if meter is not None and label is not None else None
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        synchronize(dev)
        dt = time.perf_counter() - t0
        if label is not None:       # each variant's joules: the counter over its own blocks only
            e1 = meter.read() if meter is not None else None
            spent[label] += dt
            joules[label] = None if e0 is None or e1 is None or joules[label] is None else joules[label] + e1 - e0
        return dt

    number: dict[str, int] = {}
    for k in labels:          # warm up, then repeat short calls so one block lasts about block_s
        for _ in range(warmup):
            fns[k]()
        n, dt = 1, timed(fns[k], 1)
        while dt < block_s and n < 1 << 20:
            n *= 2 if dt > block_s / 10 else 10
            dt = timed(fns[k], n)
        number[k] = n
    times: dict[str, list[float]] = {k: [] for k in labels}
    start, r = time.perf_counter(), 0
    while r < max_rounds and (r < min_rounds or time.perf_counter() - start < min_run_time):
        shift = r % len(labels)
        for k in labels[shift:] + labels[:shift]:
            times[k].append(timed(fns[k], number[k], k) / number[k])
        r += 1
    env, threads = environment(dev), _threads()
    return {k: Measurement(label=k, times_s=tuple(times[k]), number_per_run=number[k], device=dev,
                           num_threads=threads, env=env, backend="interleaved rounds", warmup=warmup,
                           items=per["items"][k], flops=per["flops"][k], bytes_moved=per["bytes_moved"][k],
                           description=f"{r} rounds over {len(labels)} variants in rotating order",
                           energy=None if meter is None else _variant_energy(meter, dev, joules[k], spent[k], r))
            for k in labels}


def _variant_energy(meter: Any, dev: str, joules: float | None, spent: float, rounds: int) -> Any:
    """A variant's energy over its own blocks; none on a GPU whose blocks are too short for the counter to tell them
    from their neighbours' (under :data:`~gpulab.telemetry.energy.GPU_INTERLEAVED_WINDOW_S`)."""
    from .telemetry.energy import GPU_INTERLEAVED_WINDOW_S, Energy, too_short_for_the_gpu_counter

    if dev.startswith("cuda") and joules is not None and spent / max(rounds, 1) < GPU_INTERLEAVED_WINDOW_S:
        return Energy(dev, spent, None, "", too_short_for_the_gpu_counter("blocks", interleaved=True))
    return meter.part(joules, spent)
