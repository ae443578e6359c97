"""Nsight Systems / Nsight Compute command lines, and an NVTX-marked capture region."""
from __future__ import annotations

import contextlib
import shlex
from dataclasses import dataclass
from typing import Any, Iterator

from .._check import flag, whole
from .._format import html_table
from .events import _torch

__all__ = ['NsightCommands', 'nsight_commands', 'nvtx_capture']


# ----------------------------------------------------------------------------------------------
# Nsight
@dataclass(frozen=True)
class NsightCommands:
    """The command lines to profile a script with Nsight Systems (timeline) and Nsight Compute (kernels),
    shell-quoted: paste them into a terminal as they are (``shlex.split`` gives the argument lists back)."""

    nsys: str
    nsys_stats: str
    ncu: str
    notes: tuple[str, ...]

    def __repr__(self) -> str:
        return "\n".join([f"Nsight Systems:  {self.nsys}", f"  then:          {self.nsys_stats}",
                          f"Nsight Compute:  {self.ncu}"] + [f"- {n}" for n in self.notes])

    def _repr_html_(self) -> str:
        rows = [("Nsight Systems (timeline)", self.nsys), ("summary tables", self.nsys_stats),
                ("Nsight Compute (kernels)", self.ncu)]
        return html_table(("tool", "command"), rows, caption="Run on a GPU machine",
                          footer=" ".join(self.notes))


def nsight_commands(script: str = "train.py", output: str = "gpulab-profile", nvtx_range: str = "forward",
                    kernels: int = 20, capture_range: bool = True) -> NsightCommands:
    """Command lines for a GPU machine. ``capture_range=True`` records only between
    ``cudaProfilerStart``/``Stop`` (see :func:`nvtx_capture`); Nsight Compute profiles ``kernels`` kernels
    inside the NVTX range ``nvtx_range`` (a :func:`phase` name).

    Every value is shell-quoted, so a path with spaces or shell characters stays one argument.

    Example:
        >>> import gpulab as gl
        >>> gl.profiling.nsight_commands("train.py").nsys.startswith("nsys profile")
        True
        >>> gl.profiling.nsight_commands("my runs/train.py").nsys.endswith("python 'my runs/train.py'")
        True
    """
    for name, v in (("script", script), ("output", output), ("nvtx_range", nvtx_range)):
        if not isinstance(v, str):
            raise TypeError(f"{name} must be a text, got {v!r}")
        if not v.strip() or any(c in v for c in "\n\r\0"):
            raise ValueError(f"{name} must be a non-empty text on one line, got {v!r}")
    whole("kernels", kernels)
    flag("capture_range", capture_range)
    cap = ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"] if capture_range else []
    nsys = shlex.join(["nsys", "profile", "--trace=cuda,nvtx,osrt,cudnn,cublas", *cap, f"--output={output}",
                       "--force-overwrite=true", "python", script])
    ncu = shlex.join(["ncu", "--nvtx", "--nvtx-include", f"{nvtx_range}/", "--launch-count", str(kernels), "--set",
                      "full", "--export", f"{output}-kernels", "--force-overwrite", "python", script])
    notes = ("nsys writes <output>.nsys-rep: open it in the Nsight Systems GUI (File > Open) on any machine.",
             "gl.phase(...) ranges appear as NVTX ranges on the timeline; the trailing '/' in --nvtx-include "
             "selects a push/pop range.",
             "ncu replays each kernel many times (minutes, not seconds): keep --launch-count small.",
             "Profiling GPU counters may need admin rights (ERR_NVGPUCTRPERM): see NVIDIA's "
             "'Permission issue with Performance Counters' page.")
    return NsightCommands(nsys, shlex.join(["nsys", "stats", f"{output}.nsys-rep"]), ncu, notes)


@contextlib.contextmanager
def nvtx_capture(record_shapes: bool = False, cuda: Any = None) -> Iterator[bool]:
    """Mark the region Nsight should record: ``cudaProfilerStart``/``Stop`` around it (for
    ``--capture-range=cudaProfilerApi``) and an NVTX range per PyTorch operator (``emit_nvtx``).
    Yields whether it is active; without CUDA it does nothing and yields False.

    Example:
        >>> import torch, gpulab as gl
        >>> with gl.profiling.nvtx_capture() as active:
        ...     _ = torch.ones(2) + 1
        >>> active == torch.cuda.is_available()
        True
    """
    torch = _torch()
    cuda = torch.cuda if cuda is None else cuda
    if not cuda.is_available():
        yield False
        return
    cuda.profiler.start()
    try:
        with torch.autograd.profiler.emit_nvtx(record_shapes=record_shapes):
            yield True
    finally:
        cuda.synchronize()
        cuda.profiler.stop()


# ----------------------------------------------------------------------------------------------
