"""The CPU ceilings :func:`gpulab.machine_limits` measures when PyTorch is not installed: numpy's matmul (its BLAS)
and a numpy copy, timed by :func:`gpulab.benchmark` as the torch path times ``torch.mm``, so work written in numpy
(or any CPU library) has a measured ceiling to be compared with.

Example:
    >>> from gpulab._numpy_ceilings import matmul
    >>> m = matmul(128, "float32", min_run_time=0.02, warmup=1)
    >>> m.flops == 2 * 128**3 and m.label
    'matmul 128 float32'
"""
from __future__ import annotations

import functools
import importlib.util

from ._format import fmt_bytes
from .timing import Measurement, benchmark

DTYPES = ("float32", "float64")   # numpy has no bfloat16, and its float16 matmul does not use the BLAS


class Cpu(str):
    """``"cpu"``, with the ``type`` and ``index`` of ``torch.device("cpu")``: the host where torch is absent."""

    type = "cpu"
    index = None

    def __new__(cls) -> "Cpu":
        return super().__new__(cls, "cpu")


def without_torch(device: object = None) -> bool:
    """Whether the ceilings of ``device`` (``None`` or the CPU) must be measured with numpy: torch is not installed."""
    return str(device) in ("None", "cpu") and importlib.util.find_spec("torch") is None


def dtype_name(dtype: object, arg: str = "dtype") -> str:
    """``dtype`` checked as one numpy measures here."""
    if dtype not in DTYPES:
        raise ValueError(f"{arg}: {dtype!r} cannot be measured without PyTorch (numpy measures {DTYPES}): "
                         "pip install torch for bfloat16 and float16, or choose one of those")
    return str(dtype)


def matmul(n: int, dtype: str = "float32", min_run_time: float = 0.5, warmup: int = 2) -> Measurement:
    """Time ``numpy.matmul`` of two ``n x n`` matrices into a preallocated output; ``flops = 2 n^3``."""
    import numpy as np

    noise = np.random.default_rng(0)            # numpy's global generator stays untouched
    a = noise.standard_normal((n, n)).astype(dtype_name(dtype))
    b = noise.standard_normal((n, n)).astype(a.dtype)
    out = np.empty_like(a)
    return benchmark(functools.partial(np.matmul, out=out), a, b, label=f"matmul {n} {dtype}", flops=2 * n**3,
                     device="cpu", min_run_time=min_run_time, warmup=warmup, warn_noisy=False)


def copy(nbytes: int, min_run_time: float = 0.5, warmup: int = 2) -> Measurement:
    """Time ``numpy.copyto`` of ``nbytes`` into a second buffer; ``bytes_moved`` counts read + write."""
    import numpy as np

    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    return benchmark(np.copyto, dst, src, label=f"copy {fmt_bytes(src.nbytes)}", bytes_moved=2 * src.nbytes,
                     device="cpu", min_run_time=min_run_time, warmup=warmup, warn_noisy=False)
