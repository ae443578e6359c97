"""Set-up for a notebook: one call at the top (device banner, seeds, quiet logs, TensorFlow sharing the GPU).

Example:
    >>> import gpulab as gl
    >>> session = gl.setup(seed=0)
    >>> gl.by_device(cpu=256, cuda=4096) in (256, 4096)
    True
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any, TypeVar

from ._check import flag, whole
from ._tf import QUIET_ENV
from .system import device_kind

__all__ = ["Session", "setup", "by_device", "QUIET_ENV"]

T = TypeVar("T")



@dataclass(frozen=True)
class Session:
    """What :func:`setup` chose: the device, its kind, and the one-line banner."""

    device: Any
    kind: str
    banner: str
    notes: tuple[str, ...] = ()   # what setup changed, said once per process (e.g. TensorFlow's GPU memory)
    hardware: str = ""            # the device in words: "Tesla T4 (15 GiB)", "AMD EPYC (2 threads)"

    @property
    def is_gpu(self) -> bool:
        return self.kind in ("cuda", "mps")

    def __repr__(self) -> str:
        return "\n".join((self.banner, *self.notes))

    def _repr_html_(self) -> str:
        import html

        color = "#1b7a2b" if self.is_gpu else "#8a5a00"
        notes = "".join(f"<br><small>{html.escape(n)}</small>" for n in self.notes)
        return f'<div style="border-left:4px solid {color};padding:4px 8px"><b>{self.banner}</b>{notes}</div>'


_said: set[str] = set()


def _tf_memory_on_demand() -> str | None:
    """Make TensorFlow take GPU memory as it needs it instead of nearly all of every GPU at start-up, so a
    notebook that runs TensorFlow and then PyTorch (or two notebooks on one card) does not find it full."""
    import sys

    if os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH", "").lower() == "false":
        return None    # the learner chose otherwise
    tf = sys.modules.get("tensorflow")
    if tf is None:     # TensorFlow reads the variable when it first sets up a GPU
        os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
        return "TensorFlow will take GPU memory as it needs it (TF_FORCE_GPU_ALLOW_GROWTH=true), leaving the rest to PyTorch"
    try:
        for gpu in tf.config.list_physical_devices("GPU"):
            tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError:   # its GPUs are initialised: too late in this process
        return ("TensorFlow already holds its GPU memory: restart the kernel and call gl.setup() before "
                "importing TensorFlow to share the card with PyTorch")
    return "TensorFlow will take GPU memory as it needs it (memory growth on), leaving the rest to PyTorch"


def setup(seed: int | None = 0, quiet: bool = True) -> Session:
    """Pick the device, seed the random generators, quiet framework logs; return a :class:`Session`.

    The banner names the device work runs on, e.g. ``"cuda: Tesla T4 (15 GiB)"`` or ``"cpu: AMD EPYC (2 threads); no
    CUDA or MPS GPU found"``. Under ``GPULAB_AS=t4`` a CUDA GPU rehearses a T4 (:mod:`gpulab.rehearsal`: its memory,
    fp16 instead of bf16, no TF32, its attention kernels; said in ``notes``). On a CUDA machine TensorFlow is set to
    allocate GPU memory on demand (before it starts; said once in ``notes``). When TensorFlow and Triton are
    both installed, Triton is loaded first, so importing TensorFlow later in the notebook cannot crash
    PyTorch's compiler (tensorflow/tensorflow#124205); without a CUDA GPU it is loaded in interpreter mode
    (``TRITON_INTERPRET=1`` unless set), the only way Triton kernels run on a CPU.
    """
    if seed is not None and whole("seed", seed, low=0) >= 2**32:
        raise ValueError(f"seed must be a whole number from 0 to 2**32 - 1, or None (no seeding), got {seed!r}")
    flag("quiet", quiet)
    if quiet:
        for k, v in QUIET_ENV.items():
            os.environ.setdefault(k, v)
    from ._tf import preload_triton

    kind = device_kind()
    if kind != "cuda":      # Triton can only interpret kernels without a CUDA GPU, and must know before it loads
        os.environ.setdefault("TRITON_INTERPRET", "1")
    preload_triton()   # before any TensorFlow import: Triton loaded after TF 2.20+ crashes the kernel
    notes = []
    if kind != "cuda":
        from .rehearsal import ENV, active

        if active() is not None:
            notes.append(f"{ENV}={os.environ[ENV]!r} is ignored: there is no CUDA GPU here to rehearse it on")
    if kind == "cuda":
        note = _tf_memory_on_demand()
        if note and note not in _said:
            _said.add(note)
            notes.append(note)
    dev: Any = kind
    try:
        import torch

        from .system import device

        dev = device()
        if seed is not None:
            torch.manual_seed(seed)
    except ImportError:
        torch = None  # type: ignore[assignment]
    if seed is not None:
        random.seed(seed)
        try:
            import numpy as np

            np.random.seed(seed)
        except ImportError:  # pragma: no cover - numpy is a core dependency
            pass
    if kind == "cuda":
        from . import rehearsal
        from ._format import fmt_bytes

        notes.extend(n for n in rehearsal.apply() if n not in notes)   # GPULAB_AS=t4: a T4 rehearsed on this GPU

        p = torch.cuda.get_device_properties(dev)
        n = torch.cuda.device_count()
        hardware = f"{p.name} ({fmt_bytes(p.total_memory)})" + (f", {n} GPUs visible" if n > 1 else "")
        banner = f"cuda: {hardware}"
    elif kind == "mps":
        hardware = "Apple GPU (MPS)"
        banner = f"mps: {hardware}"
    else:
        from .system import _cpu_model_and_flags
        from .timing import _threads

        hardware = f"{_cpu_model_and_flags()[0]} ({_threads()} threads)"
        banner = f"cpu: {hardware}; no CUDA or MPS GPU found"
    return Session(dev, kind, banner, tuple(notes), hardware)


def by_device(cpu: T, cuda: T, mps: T | None = None) -> T:
    """Pick a value (a size, a batch, a step count) for the device work runs on.

    ``mps`` defaults to the CPU value: Apple GPUs are far smaller than data-centre GPUs. The values must be of
    one kind (numbers, or the same type), so a typo cannot give a notebook a text where a size belongs.

    Example:
        >>> by_device(cpu=1_000, cuda=60_000) in (1_000, 60_000)
        True
    """
    for name, value in (("cuda", cuda), ("mps", mps)):
        if value is None:               # no value for that device (the lesson computes it there)
            continue
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (cpu, value))
        if not numbers and type(value) is not type(cpu):
            raise TypeError(f"{name}={value!r} is a {type(value).__name__} but cpu={cpu!r} is a {type(cpu).__name__}: "
                            f"by_device picks one of values of the same kind")
    kind = device_kind()
    if kind == "cuda":
        return cuda
    if kind == "mps":
        return cpu if mps is None else mps
    return cpu
