"""The caches a tensor can sit in, and copies measured in each: the ceilings of a cache-aware roofline.

An operator whose inputs and outputs fit a cache streams them at that cache's bandwidth, several times main
memory's. :func:`cache_levels` reads the levels beyond L1 (a CPU's L2 and L3 from Linux's ``/sys``, a CUDA GPU's L2
from torch); :func:`cache_copies` times a copy whose working set is half of each level, for
:func:`gpulab.machine_limits` (``MachineLimits.cache_copy``, ``bandwidth_for``).

Example:
    >>> from gpulab.caches import cache_levels
    >>> all(level.startswith("L") and size > 0 for level, size in cache_levels("cpu"))
    True
"""
from __future__ import annotations

from typing import Any, Callable

from ._check import checked
from ._format import fmt_bytes
from .timing import Measurement

__all__ = ["cache_levels", "cache_copies"]

def _size_text(text_: str) -> int | None:
    """``"1024K"``, ``"32M"``, ``"512"`` (the OS's cache size) in bytes; None when unreadable."""
    t = text_.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    digits = t[:-1] if t[-1:] in "KMG" else t
    return int(digits) * scale if digits.isdigit() and int(digits) > 0 else None


_CPU_CACHES = "/sys/devices/system/cpu/cpu0/cache"    # Linux: one indexN folder per cache of the first core


@checked(device="device")
def cache_levels(device: Any = "cpu") -> tuple[tuple[str, int], ...]:
    """The caches beyond L1 a tensor can sit in, innermost first, as ``(level, bytes)``: on a CPU the unified or
    data caches of level 2 and up that the OS reports for the first core (Linux ``/sys``), on a CUDA GPU its L2;
    ``()`` when the device does not say.

    Example:
        >>> from gpulab.limits import cache_levels
        >>> all(level.startswith("L") and size > 0 for level, size in cache_levels("cpu"))
        True
    """
    import os

    if str(device) == "cpu":        # the CPU's caches are read from the OS: no torch needed
        return _cpu_caches()
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        try:
            l2 = int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 0)
        except (RuntimeError, AssertionError):      # no driver answering: the GPU does not say
            return ()
        return (("L2", l2),) if l2 > 0 else ()
    return _cpu_caches() if dev.type == "cpu" else ()


def _cpu_caches() -> tuple[tuple[str, int], ...]:
    import os

    root, found = _CPU_CACHES, {}
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return ()
    for entry in entries:
        try:
            with open(os.path.join(root, entry, "level")) as f:
                level = int(f.read())
            with open(os.path.join(root, entry, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(root, entry, "size")) as f:
                size = _size_text(f.read())
        except (OSError, ValueError):
            continue
        if level >= 2 and kind in ("Unified", "Data") and size:
            found[level] = max(size, found.get(level, 0))
    return tuple((f"L{level}", size) for level, size in sorted(found.items()))


def cache_copies(measure: Callable[..., Measurement], dev: Any, have: set[str], min_run_time: float,
                 below: int) -> tuple[Measurement, ...]:
    """A copy timed by ``measure`` (:func:`gpulab.limits.measure_bandwidth`) whose working set (source +
    destination) is half of each cache level of ``dev`` (a torch.device), labelled with its level: ``"copy 256 KiB
    (L2)"``. Those in ``have`` (by label), and those not smaller than the ``below`` bytes the main-memory copy moves
    (a cache copy must never stand in for main memory), are not measured."""
    import dataclasses
    import importlib.util

    from .interleaved import threads

    # numpy's copy (no torch) runs on one thread: there is no second thread count to try
    torch_threads = importlib.util.find_spec("torch") is not None and dev.type == "cpu"
    out = []
    for level, size in cache_levels("cpu" if dev.type == "cpu" else dev):
        nbytes = max(4096, size // 4 // 4 * 4)
        label = f"copy {fmt_bytes(nbytes)} ({level})"
        if label not in have and 2 * nbytes < below:
            runs = [measure(nbytes, dev, min_run_time)]
            if torch_threads and _torch_threads() > 1:
                # a copy this small is split across the threads, and one descheduled thread (a core busy with
                # other work) stalls the whole call: the best of the threads and of one thread is the ceiling
                with threads(1):
                    runs.append(measure(nbytes, dev, min_run_time))
            best = min(runs, key=lambda m: m.min_s)
            out.append(dataclasses.replace(best, label=label))
    return tuple(out)


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()
