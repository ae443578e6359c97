"""The machine's measured limits: peak matmul FLOP/s per dtype and memory bandwidth.

Optimised configurations report their share of these measured limits, not only a speedup. A ceiling is
the best this machine showed it can do: the fastest run over a sweep of matmul sizes (as the vendors' and
the STREAM benchmarks report), and a copy much larger than any cache. :func:`machine_limits` measures once
per device (``"cuda"`` is the current GPU, ``"cuda:0"`` when that is GPU 0), machine, library versions and, on a
GPU, whether fp32 matmuls may use TF32, while the Python process (the notebook's kernel) lives, and only adds to
what it knows: a second call never reports a lower ceiling. A run beating a ceiling raises it (:func:`ceiling_for`).

Example:
    >>> import gpulab as gl
    >>> m = gl.limits.measure_matmul(256, "float32", device="cpu", min_run_time=0.05)
    >>> m.flops == 2 * 256**3
    True
"""
from __future__ import annotations

import math
import numbers

import functools
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from . import _numpy_ceilings as _np_ceil
from ._check import checked, nbytes as _nbytes, text, texts, whole
from ._dispatch import dispatch_mode
from ._format import fmt_bytes, fmt_flops, fmt_rate, html_table, text_table
from .caches import cache_copies, cache_levels
from .timing import Env, Measurement, benchmark

__all__ = ["measure_matmul", "measure_bandwidth", "MachineLimits", "machine_limits", "ceiling_for", "forget_limits",
           "step_matmul_ceiling", "StepMatmuls", "cache_levels", "matmul_sweep"]

_DTYPES = ("float32", "bfloat16", "float16", "float64")


def _torch_dtype(name: str, arg: str = "dtype") -> Any:
    import torch

    if not isinstance(name, str) or name not in _DTYPES:
        raise ValueError(f"{arg}: unknown dtype {name!r}: choose from {_DTYPES}")
    return getattr(torch, name)


def _torch_dtype_name(name: Any, arg: str = "dtype") -> str:
    """``name`` checked as one of the dtype names gpulab measures (without importing torch)."""
    if not isinstance(name, str) or name not in _DTYPES:
        raise ValueError(f"{arg}: unknown dtype {name!r}: choose from {_DTYPES}")
    return name


@checked(device="device", min_run_time="pos", warmup="count0")
def measure_matmul(n: int, dtype: str = "float32", device: Any = None, min_run_time: float = 0.5,
                   warmup: int = 2) -> Measurement:
    """Time an ``n x n`` by ``n x n`` matmul into a preallocated output (no allocation in the timed call);
    the Measurement carries ``flops = 2 n^3``; its ``min_s`` is the fastest run. Without PyTorch, on the CPU:
    ``numpy.matmul`` (float32, float64)."""
    n = whole("n", n)
    if _np_ceil.without_torch(device):
        return _np_ceil.matmul(n, dtype, min_run_time, warmup)
    import torch

    from .system import device as pick_device

    dev = pick_device() if device is None else torch.device(device)
    tdtype = _torch_dtype(dtype)
    noise = torch.Generator(device=dev).manual_seed(0)       # the caller's global generator stays untouched
    a = torch.randn(n, n, device=dev, generator=noise).to(tdtype)
    b = torch.randn(n, n, device=dev, generator=noise).to(tdtype)
    c = torch.empty(n, n, device=dev, dtype=a.dtype)
    return benchmark(functools.partial(torch.mm, out=c), a, b, label=f"matmul {n} {dtype}", flops=2 * n**3, device=dev,
                     min_run_time=min_run_time, warmup=warmup, warn_noisy=False)


@checked(device="device", min_run_time="pos", warmup="count0")
def measure_bandwidth(nbytes: int, device: Any = None, min_run_time: float = 0.5, warmup: int = 2) -> Measurement:
    """Time copying ``nbytes`` from one buffer to another; ``bytes_moved`` counts read + write (2 x nbytes).
    Without PyTorch, on the CPU: ``numpy.copyto``."""
    nbytes = whole("nbytes", nbytes, low=4096)
    if _np_ceil.without_torch(device):
        return _np_ceil.copy(nbytes, min_run_time, warmup)
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

    A ceiling is the fastest run observed (not the median) over every size measured: the most this machine
    showed it can do. :attr:`method` says how the figures were obtained. ``fp32_tf32``: whether the fp32
    matmuls were allowed TF32 (on a CUDA GPU; None elsewhere), which makes Ampere and newer GPUs several times faster.
    """

    device: str
    env: Env
    matmul: tuple[Measurement, ...]
    copy: tuple[Measurement, ...]
    fp32_tf32: bool | None = None
    # copies whose working set (source + destination) sits in a cache, labelled "copy 256 KiB (L2)": the ceilings
    # of operators whose tensors fit there (a cache-aware roofline); empty when not measured
    cache_copy: tuple[Measurement, ...] = ()

    def __post_init__(self) -> None:
        if not self.matmul or not self.copy:
            raise ValueError("MachineLimits needs at least one matmul and one copy measurement "
                             "(use gl.machine_limits() to measure them)")

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """Main-memory bandwidth: the fastest run of the largest copy measured.

        Smaller copies that fit in caches run faster, but large tensors stream from main memory
        (DRAM or the GPU's HBM), so that is the roofline's bandwidth ceiling.
        """
        top = max(m.bytes_moved or 0 for m in self.copy)
        return max(m.bytes_moved / m.min_s for m in self.copy if m.bytes_moved == top)

    @property
    def bandwidth_tiers(self) -> tuple[tuple[str, int, float], ...]:
        """``(level, working-set bytes, bandwidth)`` per measured copy, innermost cache first, main memory last
        (``"main memory"``): the copy benchmark at a working set that sits in each level."""
        tiers = []
        for m in sorted(self.cache_copy, key=lambda m: m.bytes_moved or 0):
            level = m.label.rsplit("(", 1)[-1].rstrip(")") if m.label.endswith(")") else fmt_bytes(m.bytes_moved or 0)
            tiers.append((level, int(m.bytes_moved or 0), (m.bytes_moved or 0) / m.min_s))
        top = max(m.bytes_moved or 0 for m in self.copy)
        return (*tiers, ("main memory", int(top), self.bandwidth_bytes_per_s))

    def bandwidth_for(self, working_set: float) -> float:
        """The memory ceiling of an operator that touches ``working_set`` bytes (inputs + outputs): the fastest
        copy measured at a working set at least as large (its data fits where that copy's did), never below the
        main-memory ceiling; the main-memory ceiling beyond every cache measured.

        Example:
            >>> import gpulab as gl
            >>> lim = gl.machine_limits("cpu", dtypes=["float32"], sizes=[128], copy_bytes=1 << 24, min_run_time=0.05)
            >>> lim.bandwidth_for(1 << 34) == lim.bandwidth_bytes_per_s <= lim.bandwidth_for(4096)
            True
        """
        if isinstance(working_set, bool) or not isinstance(working_set, numbers.Real) or not working_set >= 0:
            raise ValueError(f"working_set must be a number of bytes >= 0, got {working_set!r}")
        fits = [bw for _, ws, bw in self.bandwidth_tiers[:-1] if ws >= working_set]
        return max([self.bandwidth_bytes_per_s, *fits])

    def peak_flops(self, dtype: str = "float32") -> float:
        """The best FLOP/s measured for ``dtype`` (fastest run over the sizes tried)."""
        _torch_dtype_name(dtype)
        got = [m.flops / m.min_s for m in self.matmul if m.label.endswith(" " + dtype) and m.flops]
        if not got:
            raise KeyError(f"no matmul measured in {dtype!r}; measured: {self.dtypes}: "
                           f"gl.machine_limits(dtypes=[{dtype!r}]) adds it")
        return max(got)

    def has(self, dtype: str) -> bool:
        """Whether a ceiling was measured for ``dtype`` (a dtype name such as "float32"; any other name: False)."""
        if not isinstance(dtype, str):
            raise TypeError(f"dtype must be a dtype name such as 'float32', got {dtype!r}")
        return dtype in self.dtypes

    @property
    def dtypes(self) -> list[str]:
        return sorted({m.label.rsplit(" ", 1)[-1] for m in self.matmul}, key=_DTYPES.index)

    def ridge_point(self, dtype: str = "float32") -> float:
        """FLOPs per byte where this machine turns compute-bound."""
        return self.peak_flops(dtype) / self.bandwidth_bytes_per_s

    def fastest_16bit(self) -> str | None:
        """The 16-bit dtype with the highest measured ceiling (None when none was measured)."""
        half = [d for d in ("bfloat16", "float16") if self.has(d)]
        return max(half, key=self.peak_flops) if half else None

    @property
    def method(self) -> str:
        """How the ceilings were obtained (sizes, runs, threads, library version)."""
        per = {d: sorted(int(m.label.split()[1]) for m in self.matmul if m.label.endswith(f" {d}")) for d in self.dtypes}
        sizes = sorted({n for ns in per.values() for n in ns})
        fewer = [f"{d}: {', '.join(map(str, ns))}" for d, ns in per.items() if ns != sizes]
        cut = f" ({'; '.join(fewer)}: a larger one would run over {MAX_MATMUL_RUN_S:g} s)" if fewer else ""
        runs = sum(m.runs for m in self.matmul)
        copy = max(self.copy, key=lambda m: m.bytes_moved or 0)
        tf32 = {True: "; fp32 matmuls with TF32 allowed", False: "; fp32 matmuls without TF32", None: ""}
        caches = (f"; copies in the caches: {', '.join(m.label.removeprefix('copy ') for m in self.cache_copy)}"
                  if self.cache_copy else "")
        lib = f"torch {self.env.torch}" if self.env.torch else "numpy (PyTorch is not installed)"
        mm = "torch.mm(out=)" if self.env.torch else "numpy.matmul(out=)"
        return (f"fastest of {runs} runs of {mm} over n = {', '.join(map(str, sizes))} per dtype{cut}; "
                f"{copy.label} (read + write counted), fastest of {copy.runs} runs{caches}; {self.env.threads} threads, "
                f"{lib}{tf32[self.fp32_tf32]}")

    def _rows(self) -> list[tuple[str, str]]:
        tf32 = lambda d: " (TF32)" if d == "float32" and self.fp32_tf32 else ""   # noqa: E731
        rows = [(f"matmul {d}{tf32(d)}", fmt_flops(self.peak_flops(d))) for d in self.dtypes]
        rows += [(f"memory copy, {fmt_bytes(ws)} working set ({level})", fmt_rate(bw))
                 for level, ws, bw in self.bandwidth_tiers[:-1]]
        rows.append(("memory copy (read+write)", fmt_rate(self.bandwidth_bytes_per_s)))
        rows += [(f"ridge point {d}", f"{self.ridge_point(d):.3g} FLOP/byte") for d in self.dtypes]
        return rows

    def to_dataframe(self) -> Any:
        import pandas as pd

        return pd.DataFrame([m.to_dict() for m in (*self.matmul, *self.cache_copy, *self.copy)]).set_index("label")

    def __repr__(self) -> str:
        return (f"MachineLimits on {self.env}\n" + text_table(("limit", "measured"), self._rows())
                + f"\nhow: {self.method}")

    def _repr_html_(self) -> str:
        return html_table(("limit", "measured"), self._rows(), caption=f"Measured limits: {self.env}",
                          footer=f"How: {self.method}")


_CACHE: dict[tuple[Any, ...], MachineLimits] = {}


def _normalised(dev: Any) -> Any:
    """``dev`` as a torch.device with its index: "cuda" (or a bare CUDA device) is the current GPU, "cuda:N"; the CPU
    as numpy's stand-in when torch is not installed."""
    if _np_ceil.without_torch(dev):
        return _np_ceil.Cpu()
    import torch

    dev = torch.device("cuda", dev) if isinstance(dev, int) and not isinstance(dev, bool) else torch.device(dev)
    if dev.type == "cuda" and dev.index is None:
        return torch.device("cuda", int(torch.cuda.current_device()))
    return dev


def _fp32_tf32(dev: Any) -> bool | None:
    """Whether fp32 matmuls on ``dev`` may use TF32 now (CUDA only: None elsewhere)."""
    if dev.type != "cuda":
        return None
    from .system import tf32_state

    return tf32_state().matmul


def _machine_key(dev: Any) -> tuple[Any, ...]:
    """What a measurement depends on, less the TF32 switch (a CUDA device's key ends with it)."""
    from .timing import environment

    env = environment(str(dev) if isinstance(dev, _np_ceil.Cpu) else dev)
    return (str(dev), env.device_name, env.cpu, env.threads, env.torch)


def forget_limits() -> None:
    """Drop every ceiling :func:`machine_limits` remembers (the next call measures again)."""
    _CACHE.clear()


def _sizes(name: str, value: Any) -> list[Any]:
    """``value`` as a list (a list or tuple of sizes, not one number)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, range)):
        raise TypeError(f"{name} must be a list of matrix sizes such as [512, 1024], got {value!r:.60}")
    if not value:
        raise ValueError(f"{name} is empty: give at least one matrix size, or None for the defaults")
    return list(value)


MAX_MATMUL_RUN_S = 1.0     # a ceiling's matmul sweep stops before a size whose one run would take longer


@checked(device="device", min_run_time="pos")
def matmul_sweep(sizes: Sequence[int], dtypes: Sequence[str] = ("float32",), device: Any = None,
                 min_run_time: float = 0.3, *, known: Mapping[str, Measurement] | None = None) -> tuple[Measurement, ...]:
    """:func:`measure_matmul` over ``sizes`` in each of ``dtypes``, smallest first (``known``'s, by label, reused, not
    returned), stopped before a size whose one run would take over :data:`MAX_MATMUL_RUN_S` (bf16 on AVX2: 1 GFLOP/s).

    Example:
        >>> import gpulab as gl
        >>> [m.label for m in gl.limits.matmul_sweep([64, 32], ["float32"], "cpu", min_run_time=0.02)]
        ['matmul 32 float32', 'matmul 64 float32']
    """
    from .system import device as pick_device
    order = sorted(whole("sizes", n) for n in _sizes("sizes", sizes))
    names, known, out, numpy_only = texts("dtypes", dtypes), known or {}, [], _np_ceil.without_torch(device)
    if not names:
        raise ValueError("dtypes is empty: give at least one, e.g. ['float32']")
    for d in names:
        _np_ceil.dtype_name(d, "dtypes") if numpy_only else _torch_dtype(d, "dtypes")
    dev = _normalised("cpu" if numpy_only else pick_device() if device is None else device)
    for d in names:
        for i, n in enumerate(order):
            m = known.get(f"matmul {n} {d}")
            if m is None:
                m = measure_matmul(n, d, dev, min_run_time)
                out.append(m)
            if i + 1 < len(order) and m.min_s * (order[i + 1] / n) ** 3 > MAX_MATMUL_RUN_S:
                break
    return tuple(out)


@checked(device="device", min_run_time="pos", refresh="flag", caches="flag")
def machine_limits(device: Any = None, dtypes: Sequence[str] | None = None, sizes: Sequence[int] | None = None,
                   copy_bytes: int | None = None, min_run_time: float = 0.3, *, refresh: bool = False,
                   caches: bool = True) -> MachineLimits:
    """This device's ceilings. Defaults follow the device: a sweep of n = 512, 1024, 2048 on a CPU and
    2048, 4096, 8192 on a GPU; a 1 GiB copy (beyond any cache); dtypes fp32, plus bf16 where the hardware has
    it (Ampere+, AMX, AVX512-BF16), plus fp16 on CUDA. With ``caches`` (the default), also a copy that sits in
    each cache level (:func:`cache_levels`: L2 and L3 on a CPU, L2 on a GPU), the ceilings of operators whose
    tensors fit there (:meth:`MachineLimits.bandwidth_for`).

    Measured once per device (``"cuda"``, ``"cuda:0"``, ``torch.device("cuda")`` and ``0`` are one GPU when it is
    the current one), machine and torch version while this process lives: later calls measure only the dtypes and
    sizes not measured yet, and return everything known (ceilings only ever rise). On a GPU the fp32 matmuls are
    remembered per TF32 setting (:func:`gpulab.system.tf32_state`): turning TF32 on or off measures fp32 again,
    and shares the other dtypes and the copy. ``refresh=True`` forgets and measures again. Without PyTorch the CPU's
    ceilings come from numpy (``numpy.matmul`` in float32, a ``numpy.copyto``); a GPU needs PyTorch.

    Example:
        >>> import gpulab as gl
        >>> lim = gl.machine_limits("cpu", dtypes=["float32"], sizes=[256], copy_bytes=1 << 20, min_run_time=0.05)
        >>> lim.peak_flops("float32") > 0
        True
        >>> gl.machine_limits("cpu", dtypes=["float32"], sizes=[256], copy_bytes=1 << 20) is lim   # remembered
        True
    """
    from .system import device as pick_device, system_info

    numpy_only = _np_ceil.without_torch(device)
    dev = _normalised("cpu" if numpy_only else pick_device() if device is None else device)
    gpu = dev.type in ("cuda", "mps")
    if dtypes is None and numpy_only:
        dtypes = ["float32"]
    elif dtypes is None:   # bf16 where the hardware has it (Ampere+, AMX, AVX512-BF16): measured, not assumed fast
        info = system_info(frameworks=("torch",))
        bf16 = info.capabilities.bf16 or (dev.type == "cpu" and "avx512_bf16" in info.cpu_flags)
        dtypes = ["float32"] + (["bfloat16"] if bf16 else []) + (["float16"] if dev.type == "cuda" else [])
    sizes = _sizes("sizes", sizes) if sizes is not None else [2048, 4096, 8192] if gpu else [512, 1024, 2048]
    if copy_bytes is not None:
        _nbytes("copy_bytes", copy_bytes, low=4096)
    copy_bytes = copy_bytes or (1 << 30)  # larger than CPU caches (some server L3s exceed 256 MiB)
    base, tf32 = _machine_key(dev), _fp32_tf32(dev)
    key = (*base, tf32)
    if refresh:
        for k in [k for k in _CACHE if k[:-1] == base]:
            del _CACHE[k]
    known = _CACHE.get(key)
    sibling = None if known else next((v for k, v in _CACHE.items() if k[:-1] == base), None)
    if known:
        old_matmul, old_copy, old_cache = known.matmul, known.copy, known.cache_copy
    elif sibling:   # the same GPU with the other TF32 setting: all but its fp32 matmuls hold here too
        old_matmul, old_copy = tuple(m for m in sibling.matmul if not m.label.endswith(" float32")), sibling.copy
        old_cache = sibling.cache_copy
    else:
        old_matmul, old_copy, old_cache = (), (), ()
    matmul = matmul_sweep(sizes, dtypes, dev, min_run_time, known={m.label: m for m in old_matmul})
    copied = 2 * (copy_bytes // 4) * 4 in {m.bytes_moved for m in old_copy}
    copy = () if copied else (measure_bandwidth(copy_bytes, dev, min_run_time),)
    big = max(m.bytes_moved or 0 for m in old_copy + copy)
    cache = cache_copies(measure_bandwidth, dev, {m.label for m in old_cache}, min_run_time, big) if caches else ()
    if known and not matmul and not copy and not cache:
        return known
    env = known.env if known else sibling.env if sibling else (matmul or copy)[0].env
    lim = MachineLimits(str(dev), env, old_matmul + matmul, old_copy + copy, fp32_tf32=tf32,
                        cache_copy=old_cache + cache)
    _CACHE[key] = lim
    return lim


def ceiling_for(ceiling: float | None, rates: Iterable[tuple[str, float | None]], unit: str = "FLOP/s",
                measured_by: str | None = None) -> tuple[float | None, str | None]:
    """The ceiling a table divides by: ``ceiling``, unless a row ran faster, in which case that row's rate
    becomes the ceiling and the returned note says so (a measured ceiling is a lower bound on what the
    machine can do, so a faster run is the better estimate). Shares computed with it never exceed 100%.
    ``measured_by`` names what measured the ceiling (default: the matmul or the copy benchmark).

    Example:
        >>> from gpulab.limits import ceiling_for
        >>> ceiling_for(100e9, [("mlp", 132e9), ("cnn", 50e9)])
        (132000000000.0, "ceiling raised from the measured 100 GFLOP/s to 132 GFLOP/s: 'mlp' ran faster than the matmul benchmark")
        >>> ceiling_for(100e9, [("cnn", 50e9)])
        (100000000000.0, None)
    """
    unit = text("unit", unit, empty=False)
    if measured_by is not None:
        text("measured_by", measured_by)
    rows = _rates(rates)
    if ceiling is None:
        return None, None
    if isinstance(ceiling, bool) or not isinstance(ceiling, numbers.Real) or not math.isfinite(ceiling) or ceiling <= 0:
        raise ValueError(f"ceiling must be a positive finite rate in {unit}, got {ceiling!r}: measure it with "
                         "gl.machine_limits()")
    # a NaN or infinite rate (a diverged or failed run) says nothing about the machine: it never raises the ceiling
    best = max(((label, r) for label, r in rows if r is not None and math.isfinite(r)), key=lambda x: x[1],
               default=None)
    if best is None or best[1] <= ceiling:
        return ceiling, None
    by = measured_by or ("the matmul benchmark" if "FLOP" in unit else "the copy benchmark")
    return float(best[1]), (f"ceiling raised from the measured {fmt_rate(ceiling, unit)} to {fmt_rate(best[1], unit)}: "
                            f"{best[0]!r} ran faster than {by}")


def _rates(rates: Any) -> list[tuple[str, float | None]]:
    """``rates`` checked: (label, rate) pairs, each rate a number >= 0 (NaN allowed: a diverged run) or None."""
    if isinstance(rates, (str, bytes)) or not isinstance(rates, Iterable):
        raise TypeError(f"rates must be (label, rate) pairs, like [('mlp', 1.2e11)], got {rates!r}")
    rows = []
    for row in rates:
        if not isinstance(row, (tuple, list)) or len(row) != 2:
            raise TypeError(f"rates must be (label, rate) pairs, like [('mlp', 1.2e11)], got the entry {row!r}")
        label, rate = row
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, numbers.Real)):
            raise TypeError(f"rates: the rate of {label!r} must be a number or None, got {rate!r}")
        if rate is not None and rate < 0:
            raise ValueError(f"rates: the rate of {label!r} must be >= 0, got {rate!r}")
        rows.append((label, None if rate is None else float(rate)))
    return rows


# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepMatmuls:
    """The matrix multiplications one call of a step performs (op, shapes, dtype), timed alone: the rate at
    which this machine runs exactly those matmuls is the ceiling for that step in its precision and at its
    batch size. Built by :func:`step_matmul_ceiling`."""

    ops: tuple[str, ...]                 # e.g. "addmm bf16 256x784 @ 784x500"
    flops: int
    measurement: Measurement

    @property
    def flops_per_s(self) -> float:
        """The best rate over the timed runs (the fastest run: a lower bound on what the machine can do)."""
        return self.flops / self.measurement.min_s

    def _rows(self) -> list[tuple[str, str]]:
        rows = [("matmuls", f"{len(self.ops)} per step, {fmt_flops(self.flops)}"),
                ("alone", f"{fmt_rate(self.flops_per_s, 'FLOP/s')} (fastest of {self.measurement.runs} runs)")]
        return rows + [("", op) for op in self.ops[:6]] + ([("", f"... {len(self.ops) - 6} more")] if len(self.ops) > 6 else [])

    def __repr__(self) -> str:
        return "StepMatmuls\n" + text_table(("", ""), self._rows())

    def _repr_html_(self) -> str:
        return html_table(("", ""), self._rows(), caption="The step's own matmuls, timed alone")


_MATMULS = ("mm", "addmm", "bmm", "baddbmm")


def _matmul_flops(name: str, shapes: list[tuple[int, ...]]) -> int:
    a, b = (shapes[1], shapes[2]) if name in ("addmm", "baddbmm") else (shapes[0], shapes[1])
    batch = a[0] if len(a) == 3 else 1
    return 2 * batch * a[-2] * a[-1] * b[-1]


@checked(step="fn", min_run_time="pos")
def step_matmul_ceiling(step: Any, *args: Any, min_run_time: float = 0.3, **kwargs: Any) -> StepMatmuls:
    """Record the matmuls ``step(*args, **kwargs)`` performs (forward and backward, in the dtypes autocast
    chose, with their memory layouts), then time them alone, back to back, on fresh tensors of the same
    shapes. Their best rate is what this machine can do for this step's matmuls: a step's counted FLOP/s
    divided by it is the share of the step's own ceiling, which the overhead around the matmuls (data,
    elementwise ops, optimizer) eats. Small or oddly shaped matmuls have a lower ceiling than the square ones
    :func:`machine_limits` measures.

    Example:
        >>> import torch
        >>> lin = torch.nn.Linear(64, 32)
        >>> c = step_matmul_ceiling(lambda: lin(torch.ones(16, 64)).sum().backward(), min_run_time=0.05)
        >>> c.ops[0], c.flops == 2 * 16 * 64 * 32 * 2      # forward, and the weight's gradient
        ('addmm fp32 16x64 @ 64x32', True)
    """
    if not callable(step):
        raise TypeError(f"step must be a callable, got {type(step).__name__}")
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    recorded: list[tuple[Any, list[Any]]] = []

    class Spec(tuple):
        """(shape, stride, dtype, device) of a recorded tensor argument."""

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, a: Any = (), kw: Any = None) -> Any:
            if func.overloadpacket.__name__ in _MATMULS:
                recorded.append((func, [Spec((tuple(x.shape), x.stride(), x.dtype, x.device))
                                        if isinstance(x, torch.Tensor) else x for x in a]))
            return func(*a, **(kw or {}))

    def fresh(spec: Spec) -> Any:
        # the same layout on its own storage (expanded, stride-0 arguments included), filled with noise
        shape, stride, dtype, dev = spec
        size = 1 + sum((n - 1) * st for n, st in zip(shape, stride) if n > 0)
        noise = torch.Generator(device=dev).manual_seed(size)  # the caller's global generator stays untouched
        return torch.randn(size, dtype=dtype, device=dev, generator=noise).as_strided(shape, stride)

    with dispatch_mode(Recorder()):
        step(*args, **kwargs)
    if not recorded:
        raise ValueError("the step performed no matmul (mm, addmm, bmm, baddbmm): nothing to take a ceiling from")
    short = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.float64: "fp64"}
    calls, ops, flops, device = [], [], 0, None
    for func, spec in recorded:
        name = func.overloadpacket.__name__
        tensors = [x for x in spec if isinstance(x, Spec)]
        shapes = [x[0] for x in tensors]
        pair = shapes[1:3] if name in ("addmm", "baddbmm") else shapes[:2]
        device = device or tensors[0][3]
        calls.append((func, [fresh(x) if isinstance(x, Spec) else x for x in spec]))
        ops.append(f"{name} {short.get(tensors[-1][2], str(tensors[-1][2]))} "
                   f"{'x'.join(map(str, pair[0]))} @ {'x'.join(map(str, pair[1]))}")
        flops += _matmul_flops(name, shapes)

    def replay() -> None:
        for func, inputs in calls:
            func(*inputs)

    m = benchmark(replay, label="the step's matmuls", min_run_time=min_run_time, device=device, warn_noisy=False)
    return StepMatmuls(tuple(ops), int(flops), m)
