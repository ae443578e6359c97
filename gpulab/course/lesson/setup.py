"""The first call of every lesson: :func:`gpulab.setup` with the course's banner, which says what mode the lesson
runs in (sizes reduced on a CPU, GPU figures from published sources beside the learner's), and, in a notebook on a
CPU that other programs keep busy, PyTorch's threads cut to the cores they leave free.

Why the threads: a multi-threaded operator waits at the end of each parallel region for its slowest thread, and
PyTorch's OpenMP threads spin while they wait. When another program holds one of two cores, the thread that shares
it arrives a scheduler time slice late at every operator: lesson 12's seed loop (an epoch of 4,000 digits) took
1.6-2.0 s on two threads beside one busy core, 0.53 s on one thread, 0.42 s on two threads of a quiet machine.

Example:
    >>> from gpulab import course
    >>> session = course.setup()
    >>> session.banner.split(":")[0] in ("CPU mode", "GPU mode")
    True
"""
from __future__ import annotations

import dataclasses
import os
import time

from ...session import Session, setup as toolkit_setup

__all__ = ["setup"]

_BANNERS = {
    "cuda": "GPU mode: {hardware}",
    "mps": "GPU mode: {hardware}; CUDA-only parts are explained, not run",
    "cpu": "CPU mode: sizes reduced; GPU figures shown from published sources",
}

SAMPLE_S = 0.3          # how long the other programs' CPU use is sampled
BUSY_CORE = 0.5         # other programs holding this share of a core or more count as holding it


def setup(seed: int | None = 0, quiet: bool = True, adapt_threads: bool = True) -> Session:
    """:func:`gpulab.setup` (device, seeds, quiet logs, TensorFlow sharing the GPU) with the lesson's banner; in a
    notebook kernel on a CPU, with ``adapt_threads``, PyTorch's threads cut to the cores other programs leave free
    (said in the notes; appendix A1, which measures that sharing itself, keeps them)."""
    from ..._check import flag

    adapt_threads = flag("adapt_threads", adapt_threads)
    session = toolkit_setup(seed, quiet)
    banner = _BANNERS.get(session.kind, _BANNERS["cpu"]).format(hardware=session.hardware)
    notes = session.notes
    if adapt_threads and session.kind == "cpu" and _in_kernel():
        note = shared_cpu_threads()
        notes = notes + ((note,) if note else ())
    return dataclasses.replace(session, banner=banner, notes=notes)


def _in_kernel() -> bool:
    """Whether this runs in a notebook's IPython kernel (a learner's lesson), not a script or a test."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def shared_cpu_threads(sample_s: float = SAMPLE_S) -> str | None:
    """Cut PyTorch's threads to the cores other programs leave free, measured over ``sample_s`` seconds; the note
    saying so (and how to undo it), or None when nothing changed (a quiet machine, or threads already that few)."""
    import torch

    from ...interleaved import cpu_contention

    cores = os.cpu_count() or 1
    now = torch.get_num_threads()
    with cpu_contention() as load:
        time.sleep(sample_s)
    if load.others_pct is None:
        return None
    busy = load.others_pct / 100 * cores
    free = max(1, cores - int(busy + (1 - BUSY_CORE)))      # a core counts as held from BUSY_CORE of it
    if free >= now:
        return None
    torch.set_num_threads(free)
    return (f"other programs kept {busy:.1f} of this machine's {cores} cores busy: PyTorch runs on {free} "
            f"thread{'s' if free > 1 else ''} instead of {now} in this lesson (threads that share a busy core wait "
            f"for each other at every operator, several times slower); torch.set_num_threads({now}) gives them back")
