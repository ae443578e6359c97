"""Where your own kernels run: Triton and Numba's CUDA target, compiled on an NVIDIA GPU, simulated elsewhere.

- :func:`triton_backend`: on a CUDA GPU Triton compiles kernels to GPU code; anywhere else it runs them in its
  interpreter (``TRITON_INTERPRET=1``), which executes each program instance with NumPy on CPU tensors:
  the results are the kernel's results, the time is the interpreter's.
- :func:`numba_backend`: on a CUDA GPU ``numba.cuda`` compiles ``@cuda.jit`` kernels (the ``numba-cuda``
  package); elsewhere Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) runs every thread of every block
  as Python, with real ``syncthreads`` barriers and shared arrays.

Both variables are read by the libraries themselves: Triton's ``@triton.jit`` reads ``TRITON_INTERPRET`` when
a kernel is *defined*, Numba reads ``NUMBA_ENABLE_CUDASIM`` when ``numba.cuda`` is first *imported*. So call
the backend function before defining kernels; it refuses (with the fix) when that order was broken.

Example:
    >>> from gpulab.kernels import triton_backend
    >>> b = triton_backend("cpu")
    >>> b.mode, b.simulated
    ('interpreter', True)
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal

from .._check import checked

__all__ = ["KernelBackend", "triton_backend", "numba_backend"]

Mode = Literal["compiled", "interpreter", "simulator"]


@dataclass(frozen=True)
class KernelBackend:
    """How kernels written with ``library`` run in this process: ``mode`` and on which ``device``.

    ``module`` is the imported library (``triton`` or ``numba.cuda``); ``device`` is where the kernel's tensors
    or arrays must live (``"cuda"`` when compiled, ``"cpu"`` when interpreted or simulated).
    """

    library: Literal["triton", "numba"]
    mode: Mode
    device: str
    version: str
    note: str
    module: ModuleType | None = field(default=None, repr=False, compare=False)

    @property
    def simulated(self) -> bool:
        """True when kernels run in an interpreter or simulator: results are real, run times are not kernel speed."""
        return self.mode != "compiled"

    def __repr__(self) -> str:
        return f"{self.library} {self.version}: {self.mode} on {self.device} - {self.note}"

    def _repr_html_(self) -> str:
        from html import escape

        return f"<b>{escape(self.library)} {escape(self.version)}</b>: {escape(self.mode)} on " \
               f"<code>{escape(self.device)}</code> - {escape(self.note)}"


def _cuda_available(device: Any) -> bool:
    kind = "cuda" if device is None else str(getattr(device, "type", device)).split(":")[0]
    if kind not in ("cuda", "cpu", "mps"):
        raise ValueError(f"device must be 'cuda', 'cpu' or 'mps' (or None for the best available), got {device!r}")
    if kind != "cuda" and device is not None:
        return False
    try:
        import torch
    except ImportError:
        return False
    if device is not None and kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but torch sees no CUDA GPU here; pass device='cpu' (kernels then run "
                         "in the interpreter/simulator) or run on a GPU machine")
    return torch.cuda.is_available()


@checked(device="devspec")
def triton_backend(device: Any = None) -> KernelBackend:
    """Prepare Triton for ``device`` (default: a CUDA GPU if torch sees one, else the CPU) and say how it runs.

    On a CPU this sets ``TRITON_INTERPRET=1`` so kernels defined *afterwards* with ``@triton.jit`` run in
    Triton's interpreter on CPU tensors. Triton's autotuner and ``triton.testing.do_bench`` need a GPU driver:
    use :func:`gpulab.kernels.autotune` and :func:`gpulab.kernels.bench_kernel`, which know the difference.

    Example:
        >>> triton_backend("cpu").device
        'cpu'
    """
    gpu = _cuda_available(device)
    if gpu and os.environ.get("TRITON_INTERPRET", "0") != "1":
        mode, where, note = "compiled", "cuda", "kernels compile to GPU code on first launch (then cached)"
    else:
        os.environ["TRITON_INTERPRET"] = "1"
        mode, where = "interpreter", "cpu"
        note = ("TRITON_INTERPRET=1: each program instance runs in NumPy on CPU tensors - exact results, "
                "interpreter speed (not kernel speed)")
        if gpu:
            note = "TRITON_INTERPRET=1 was already set: " + note
    try:
        import triton
        import triton.language as tl
    except ImportError as e:
        raise ImportError("Triton is not installed: pip install triton (it comes with torch's Linux wheels)") from e
    if mode == "interpreter" and not _interpreted(tl):
        raise RuntimeError("Triton was imported before TRITON_INTERPRET=1 was set, so its library functions "
                           "(tl.max, tl.sum) cannot run in the interpreter: restart the kernel and call "
                           "gpulab.setup() or gpulab.kernels.triton_backend() before anything imports triton")
    return KernelBackend("triton", mode, where, triton.__version__, note, triton)


def _interpreted(tl: ModuleType) -> bool:
    """Whether Triton's own @jit library functions were made for the interpreter (decided at import)."""
    fn = getattr(tl, "max", None)
    return fn is None or type(fn).__name__ != "JITFunction"


def _numba_sim_active() -> bool | None:
    """Whether an already imported ``numba.cuda`` is the simulator (None: not imported yet)."""
    mod = sys.modules.get("numba.cuda")
    if mod is None:
        return None
    for cfg_name in ("numba.cuda.core.config", "numba.core.config"):   # numba-cuda, then numba's built-in target
        cfg = sys.modules.get(cfg_name)
        if cfg is not None and hasattr(cfg, "ENABLE_CUDASIM"):
            return bool(cfg.ENABLE_CUDASIM)
    return bool(getattr(mod, "simulator", None)) and not hasattr(mod, "_auto_device")


@checked(device="devspec")
def numba_backend(device: Any = None) -> KernelBackend:
    """Import ``numba.cuda`` for ``device``: compiled on a CUDA GPU, Numba's CUDA simulator on a CPU.

    The simulator is chosen by ``NUMBA_ENABLE_CUDASIM=1`` before ``numba.cuda`` is imported; if it was already
    imported the other way, this raises with the fix (restart the kernel and call this first).

    Example:
        >>> b = numba_backend("cpu")
        >>> b.mode, b.module.__name__
        ('simulator', 'numba.cuda')
    """
    gpu = _cuda_available(device)
    want_sim = not gpu or os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"
    active = _numba_sim_active()
    if active is not None and active != want_sim:
        raise RuntimeError(
            f"numba.cuda was already imported {'as the simulator' if active else 'for a real GPU'} in this process, "
            f"but device={device!r} needs {'the simulator' if want_sim else 'the GPU target'}: restart the kernel "
            "and call gpulab.kernels.numba_backend() before anything imports numba.cuda")
    if want_sim:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        if "numba" in sys.modules and active is None:        # numba imported, numba.cuda not yet: re-read the env
            import numba.core.config as cfg

            cfg.reload_config()
    try:
        import numba
        from numba import cuda
    except ImportError as e:
        raise ImportError("Numba's CUDA target is not installed: pip install numba numba-cuda "
                          "(on a GPU machine numba-cuda[cu12] or [cu13], matching torch.version.cuda)") from e
    if want_sim:
        note = ("NUMBA_ENABLE_CUDASIM=1: every thread of every block runs as Python on the CPU, with real "
                "syncthreads barriers and shared arrays - exact results, far slower than any GPU")
        return KernelBackend("numba", "simulator", "cpu", numba.__version__, note, cuda)
    note = "@cuda.jit kernels compile to PTX for this GPU on first launch (numba-cuda, NVVM)"
    restored = _numpy_aliases_for_numba()
    if restored:
        note += (f"; numpy {_version('numpy')} removed np.{', np.'.join(restored)}, which numba-cuda "
                 f"{_version('numba-cuda')} still registers: restored as the alias it was (np.vstack)")
    why = _compile_probe(cuda)
    if why:
        raise ImportError(f"Numba's CUDA target cannot compile a kernel here (numba-cuda {_version('numba-cuda')}, "
                          f"numba {numba.__version__}, numpy {_version('numpy')}): {why}. Install a numba-cuda that "
                          "supports this numpy (the course pins numba-cuda[cu12]/[cu13]==0.30.4 with numpy < 2.5), or "
                          "run the Numba kernels on a CPU in the simulator (numba_backend('cpu'), in a fresh kernel)")
    return KernelBackend("numba", "compiled", "cuda", numba.__version__, note, cuda)


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def _numpy_aliases_for_numba() -> list[str]:
    """NumPy 2.5 removed ``np.row_stack`` (an alias of ``np.vstack`` since NumPy 1.x); numba-cuda 0.30 still
    overloads it while loading its typing registries, so its first compile fails. Restore the alias (the same
    function it always named) and return what was restored."""
    import numpy as np

    restored = []
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack
        restored.append("row_stack")
    return restored


def _compile_probe(cuda: ModuleType) -> str | None:
    """Compile a one-line kernel to PTX (no launch): None when Numba's CUDA target compiles here, else why not."""
    def one(x: Any) -> None:
        i = cuda.grid(1)
        if i < x.size:
            x[i] = 1.0

    try:
        cuda.compile_ptx(one, "void(float32[:])", cc=(7, 5))
        return None
    except Exception as e:           # whatever broke inside numba's pipeline: reported with the versions
        return f"{type(e).__name__}: {e}"
