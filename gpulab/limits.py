"""The machine's measured limits: peak matmul FLOP/s per dtype and memory bandwidth.

Optimised configurations report their share of these measured limits, not only a speedup.
Sizes follow the device: small on CPU (seconds), large on a GPU (to fill it).

Example:
    >>> import gpulab as gl
    >>> m = gl.limits.measure_matmul(256, "float32", device="cpu", min_run_time=0.05)
    >>> m.flops == 2 * 256**3
    True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ._format import fmt_bytes, fmt_flops, fmt_rate, html_table, text_table
from .timing import Env, Measurement, benchmark

__all__ = ["measure_matmul", "measure_bandwidth", "MachineLimits", "machine_limits"]

_DTYPES = ("float32", "bfloat16", "float16", "float64")


def _torch_dtype(name: str) -> Any:
    import torch

    if name not in _DTYPES:
        raise ValueError(f"unknown dtype {name!r}: choose from {_DTYPES}")
    return getattr(torch, name)


def measure_matmul(n: int, dtype: str = "float32", device: Any = None, min_run_time: float = 0.5,
                   warmup: int = 2) -> Measurement:
    """Time an ``n x n`` by ``n x n`` matmul; the Measurement carries ``flops = 2 n^3``."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive whole number, got {n!r}")
    import torch

    from .system import device as pick_device

    dev = pick_device() if device is None else torch.device(device)
    a = torch.randn(n, n, device=dev).to(_torch_dtype(dtype))
    b = torch.randn(n, n, device=dev).to(_torch_dtype(dtype))
    return benchmark(torch.mm, a, b, label=f"matmul {n} {dtype}", flops=2 * n**3, device=dev,
                     min_run_time=min_run_time, warmup=warmup, warn_noisy=False)


def measure_bandwidth(nbytes: int, device: Any = None, min_run_time: float = 0.5, warmup: int = 2) -> Measurement:
    """Time copying ``nbytes`` from one buffer to another; ``bytes_moved`` counts read + write (2 x nbytes)."""
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 4096:
        raise ValueError(f"nbytes must be a whole number >= 4096, got {nbytes!r}")
    import torch

    from .system import device as pick_device

    dev = pick_device() if device is None else torch.device(device)
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)
    return benchmark(dst.copy_, src, label=f"copy {fmt_bytes(src.numel() * 4)}", bytes_moved=2 * src.numel() * 4,
                     device=dev, min_run_time=min_run_time, warmup=warmup, warn_noisy=False)


@dataclass(frozen=True)
class MachineLimits:
    """Measured ceilings of one device: best matmul FLOP/s per dtype and copy bandwidth.

    A ceiling is the fastest run observed (not the median): the most this machine showed it can do.
    """

    device: str
    env: Env
    matmul: tuple[Measurement, ...]
    copy: tuple[Measurement, ...]

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """Main-memory bandwidth: the fastest run of the largest copy measured.

        Smaller copies that fit in caches run faster, but large tensors stream from main memory
        (DRAM or the GPU's HBM), so that is the roofline's bandwidth ceiling.
        """
        largest = max((m for m in self.copy if m.bytes_moved), key=lambda m: m.bytes_moved)
        return largest.bytes_moved / largest.min_s

    def peak_flops(self, dtype: str = "float32") -> float:
        """The best FLOP/s measured for ``dtype`` (fastest run over the sizes tried)."""
        got = [m.flops / m.min_s for m in self.matmul if m.label.endswith(" " + dtype) and m.flops]
        if not got:
            measured = sorted({m.label.rsplit(" ", 1)[-1] for m in self.matmul})
            raise KeyError(f"no matmul measured in {dtype!r}; measured: {measured}")
        return max(got)

    @property
    def dtypes(self) -> list[str]:
        return sorted({m.label.rsplit(" ", 1)[-1] for m in self.matmul}, key=_DTYPES.index)

    def ridge_point(self, dtype: str = "float32") -> float:
        """FLOPs per byte where this machine turns compute-bound."""
        return self.peak_flops(dtype) / self.bandwidth_bytes_per_s

    def _rows(self) -> list[tuple[str, str]]:
        rows = [(f"matmul {d}", fmt_flops(self.peak_flops(d))) for d in self.dtypes]
        rows.append(("memory copy (read+write)", fmt_rate(self.bandwidth_bytes_per_s)))
        rows += [(f"ridge point {d}", f"{self.ridge_point(d):.3g} FLOP/byte") for d in self.dtypes]
        return rows

    def to_dataframe(self) -> Any:
        import pandas as pd

        return pd.DataFrame([m.to_dict() for m in (*self.matmul, *self.copy)]).set_index("label")

    def __repr__(self) -> str:
        return f"MachineLimits on {self.env}\n" + text_table(("limit", "measured"), self._rows())

    def _repr_html_(self) -> str:
        return html_table(("limit", "measured"), self._rows(), caption=f"Measured limits: {self.env}")


def machine_limits(device: Any = None, dtypes: Sequence[str] | None = None, sizes: Sequence[int] | None = None,
                   copy_bytes: int | None = None, min_run_time: float = 0.3) -> MachineLimits:
    """Measure this device's ceilings. Defaults follow the device: CPU n=1024/2048;
    GPU n=4096/8192; a 1 GiB copy (beyond any cache); dtypes fp32 plus bf16 where it is fast (and fp16 on CUDA).

    Example:
        >>> import gpulab as gl
        >>> lim = gl.machine_limits("cpu", dtypes=["float32"], sizes=[256], copy_bytes=1 << 20, min_run_time=0.05)
        >>> lim.peak_flops("float32") > 0
        True
    """
    import torch

    from .system import device as pick_device, system_info

    dev = pick_device() if device is None else torch.device(device)
    gpu = dev.type in ("cuda", "mps")
    if dtypes is None:
        caps = system_info(frameworks=("torch",)).capabilities
        dtypes = ["float32"] + (["bfloat16"] if caps.bf16 else []) + (["float16"] if dev.type == "cuda" else [])
    sizes = list(sizes or ([4096, 8192] if gpu else [1024, 2048]))
    copy_bytes = copy_bytes or (1 << 30)  # larger than CPU caches (some server L3s exceed 256 MiB)
    matmul = tuple(measure_matmul(n, d, dev, min_run_time) for d in dtypes for n in sizes)
    copy = (measure_bandwidth(copy_bytes, dev, min_run_time),)
    return MachineLimits(str(dev), matmul[0].env, matmul, copy)
