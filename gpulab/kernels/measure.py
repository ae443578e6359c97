"""Check, time and count a kernel: correct against a reference, timed the right way for where it runs, and
the bytes it moves.

- :func:`check_kernel` compares a kernel's output with a reference (``torch.testing.assert_close``'s rule:
  ``|actual - expected| <= atol + rtol * |expected|``) and returns a :class:`KernelCheck` you can assert on.
- :func:`bench_kernel` times a launch: with ``triton.testing.do_bench`` on a GPU (CUDA events, L2 flushed
  between runs), with :func:`gpulab.benchmark` elsewhere - and then the figure is the interpreter's or the
  simulator's, labelled so.
- :func:`traffic` counts the bytes a function moves through memory under one model for every operator and
  every kernel: each reads its input tensors once and writes its outputs once. PyTorch operators are
  counted by :func:`gpulab.work.count_work`; Triton kernel launches by the tensors passed to them.
- :func:`autotune` is ``triton.autotune`` on a GPU; under the interpreter, which cannot time kernels, it
  launches the first configuration and says it did not tune.

Example:
    >>> import torch
    >>> from gpulab.kernels import check_kernel
    >>> check_kernel(torch.ones(3), torch.ones(3), label="ones").ok
    True
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from .._check import checked, text, texts
from .._format import fmt_bytes, html_table, text_table

__all__ = ["KernelCheck", "check_kernel", "bench_kernel", "Traffic", "traffic", "autotune", "Tuning", "tuning"]


@dataclass(frozen=True)
class KernelCheck:
    """A kernel's output against the reference: the largest errors and whether they are within tolerance
    (``max_rel_err`` divides by ``max(|expected|, atol)``, so values near zero do not inflate it)."""

    label: str
    ok: bool
    max_abs_err: float
    max_rel_err: float
    mismatched: int          # elements outside atol + rtol * |expected|
    numel: int
    shape: tuple[int, ...]
    atol: float
    rtol: float

    def __repr__(self) -> str:
        verdict = "matches" if self.ok else f"DOES NOT match ({self.mismatched:,} of {self.numel:,} elements off)"
        return (f"{self.label}: {verdict} the reference; max abs error {self.max_abs_err:.3g}, max rel error "
                f"{self.max_rel_err:.3g} (atol {self.atol:g}, rtol {self.rtol:g}, shape {list(self.shape)})")

    def _repr_html_(self) -> str:
        from html import escape

        colour = "#2a7a2a" if self.ok else "#b00020"
        return f'<span style="color:{colour}">{"&#10004;" if self.ok else "&#10008;"}</span> {escape(repr(self))}'


def _as_float_tensor(x: Any, name: str) -> tuple[Any, bool]:
    """``x`` as a float64 CPU tensor (a complex one as its real and imaginary parts, ``torch.view_as_real``) and
    whether it was complex; anything that is not numbers (None, a text, objects) is refused."""
    import numpy as np
    import torch

    if x is None or isinstance(x, (str, bytes)):
        raise TypeError(f"{name} must be a tensor or an array of numbers, got {type(x).__name__}: pass the kernel's "
                        "output buffer (a kernel writes into it and returns None)")
    if not isinstance(x, torch.Tensor):
        try:
            arr = np.asarray(x)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{name} must be a tensor or an array, got {type(x).__name__}") from e
        if arr.dtype.kind not in "biufc":
            raise TypeError(f"{name} must hold numbers, got an array of {arr.dtype} ({type(x).__name__})")
        x = torch.from_numpy(np.ascontiguousarray(arr))
    x = x.detach().to("cpu")
    if x.is_complex():
        return torch.view_as_real(x.resolve_conj()).to(torch.float64), True
    return x.to(torch.float64), False


@checked(atol="pos0", rtol="pos0", label="name")
def check_kernel(actual: Any, expected: Any, *, atol: float = 1e-5, rtol: float = 1e-5,
                 label: str = "kernel") -> KernelCheck:
    """Compare ``actual`` (a kernel's output: tensor or NumPy array, any device) with ``expected``.

    Raises ``ValueError`` when the shapes differ (a wrong grid or a wrong output buffer, not a numerical error).

    Example:
        >>> import torch
        >>> x = torch.arange(4.0)
        >>> check_kernel(x + 1e-3, x, atol=1e-4, label="off by 1e-3").ok
        False
    """
    if atol < 0 or rtol < 0 or not math.isfinite(atol + rtol):
        raise ValueError(f"atol and rtol must be finite and >= 0, got atol={atol!r}, rtol={rtol!r}")
    (a, a_complex), (e, e_complex) = _as_float_tensor(actual, "actual"), _as_float_tensor(expected, "expected")
    if a_complex != e_complex:
        raise ValueError(f"{label}: actual is {'complex' if a_complex else 'real'} but expected is "
                         f"{'complex' if e_complex else 'real'}: compare like with like (torch.view_as_real, .real)")
    if tuple(a.shape) != tuple(e.shape):
        raise ValueError(f"{label}: actual's shape {list(a.shape)} differs from expected's {list(e.shape)}: "
                         "check the grid and the output buffer")
    if a.numel() == 0:
        return KernelCheck(label, True, 0.0, 0.0, 0, 0, tuple(a.shape), atol, rtol)
    err = (a - e).abs()
    nan_mismatch = a.isnan() != e.isnan()
    err = err.nan_to_num(nan=0.0)
    bad = (err > atol + rtol * e.abs().nan_to_num(nan=0.0)) | nan_mismatch
    rel = err / e.abs().clamp_min(max(atol, 1e-12))     # relative to |expected|, not blown up near zero
    return KernelCheck(label, not bool(bad.any()), float(err.max()), float(rel.max()), int(bad.sum()), a.numel(),
                       tuple(a.shape), atol, rtol)


@checked(label="name", device="device", bytes_moved="pos0?", flops="pos0?", min_run_time="pos", rep_ms="count")
def bench_kernel(fn: Callable[[], Any], *, label: str, backend: Any = None, device: Any = None,
                 bytes_moved: float | None = None, flops: float | None = None, min_run_time: float = 0.3,
                 rep_ms: int = 100) -> Any:
    """Time ``fn()`` (a kernel launch, or the PyTorch code it replaces, with its arguments bound) and return a
    :class:`gpulab.Measurement`. Where it runs: ``backend.device`` when a ``backend`` is given, else ``device``
    (default ``"cpu"``).

    On a CUDA device, with Triton installed: ``triton.testing.do_bench(fn, rep=rep_ms, return_mode="all")``,
    which times each run with CUDA events and clears the L2 cache between runs - the same way for a kernel and
    for the PyTorch reference beside it. Otherwise :func:`gpulab.benchmark`; when ``backend.simulated`` the label
    says "(interpreter)" or "(simulator)": that time measures Python executing the kernel, not a GPU.

    Example:
        >>> import torch
        >>> x = torch.ones(1000)
        >>> bench_kernel(lambda: x + x, label="add", min_run_time=0.05).runs >= 1
        True
    """
    import importlib.util

    from ..timing import Measurement, benchmark, environment

    if not callable(fn):
        raise TypeError(f"fn must be a callable that launches the kernel, got {type(fn).__name__}")
    simulated = backend is not None and backend.simulated
    where = str(backend.device if backend is not None else (device if device is not None else "cpu"))
    if where.startswith("cuda") and not simulated and importlib.util.find_spec("triton") is not None:
        import triton.testing

        fn()                                            # compile (or warm up) outside the timed runs
        times_ms = triton.testing.do_bench(fn, rep=rep_ms, return_mode="all")
        return Measurement(label, tuple(t / 1e3 for t in times_ms), 1, where, 1, environment(where),
                           "triton.testing.do_bench", 1, flops=flops, bytes_moved=bytes_moved,
                           description="CUDA events per run, L2 cleared between runs")
    if simulated:
        label = f"{label} ({backend.mode})"
    return benchmark(fn, label=label, warmup=1, min_run_time=min_run_time, flops=flops, bytes_moved=bytes_moved,
                     device=where, warn_noisy=False)


# --------------------------------------------------------------------------------------------- traffic
@dataclass(frozen=True)
class Traffic:
    """Bytes a function moved, by operator or kernel (each reads its input tensors once, writes its outputs once)."""

    label: str
    bytes_moved: int
    by_call: tuple[tuple[str, int], ...]     # (operator or kernel, bytes), in call order
    kernels: int                             # Triton launches among the calls

    @property
    def calls(self) -> int:
        return len(self.by_call)

    def __repr__(self) -> str:
        names = ", ".join(n for n, _ in self.by_call[:6]) + (", ..." if self.calls > 6 else "")
        return f"{self.label}: {fmt_bytes(self.bytes_moved)} moved by {self.calls} calls ({names})"

    def _repr_html_(self) -> str:
        rows = [(n, fmt_bytes(b)) for n, b in self.by_call[:12]]
        return html_table(["call", "bytes"], rows, caption=f"{self.label}: {fmt_bytes(self.bytes_moved)} in all")


def _tensor_bytes(values: Any) -> int:
    import torch

    seen: set[int] = set()
    total = 0
    for v in values:
        if isinstance(v, torch.Tensor) and id(v) not in seen:
            seen.add(id(v))
            total += v.numel() * v.element_size()
    return total


def _uncounted() -> Any:
    """Suspend the counting dispatch mode while a kernel runs (its launch is counted once, by its tensors)."""
    try:
        from torch.utils._python_dispatch import _disable_current_modes
    except ImportError:                                  # pragma: no cover - every supported torch has it
        return contextlib.nullcontext()
    return _disable_current_modes()


@contextlib.contextmanager
def _recording_launches(kernels: Sequence[Any], log: list[tuple[str, int]]) -> Iterator[None]:
    """Record every launch of ``kernels`` (Triton JIT or interpreted functions, or autotuned ones) with the
    bytes of the tensors it was given. ``kernel[grid](...)`` calls ``kernel.run`` at launch time, so an
    instance attribute shadows it for the duration."""
    patched = []
    try:
        for k in kernels:
            run = getattr(k, "run", None)
            if run is None:
                raise TypeError(f"kernels: {k!r:.60} is not a Triton kernel (no .run): pass the @triton.jit function")
            name = getattr(getattr(k, "fn", k), "__name__", None) or getattr(k, "__name__", "kernel")

            def recorded(*args: Any, _run: Any = run, _name: str = name, **kwargs: Any) -> Any:
                log.append((f"triton:{_name}", _tensor_bytes(list(args) + list(kwargs.values()))))
                with _uncounted():                   # the interpreter's own host copies are not the kernel's traffic
                    return _run(*args, **kwargs)

            k.run = recorded
            patched.append(k)
        yield
    finally:
        for k in patched:
            with contextlib.suppress(AttributeError):
                del k.run


def traffic(fn: Callable[..., Any], *args: Any, kernels: Sequence[Any] = (), label: str | None = None,
            **kwargs: Any) -> Traffic:
    """Run ``fn(*args, **kwargs)`` once and count the bytes it moves: every PyTorch operator (its inputs read
    once, its outputs written once; views and allocations move nothing) and every launch of the Triton
    ``kernels`` named (every tensor passed to it, once). A fused kernel scores its true minimum; a chain of
    operators pays for each intermediate tensor twice (written, then read back).

    Example:
        >>> import torch
        >>> x = torch.ones(1000)
        >>> traffic(lambda t: (t * 2) + 1, x).bytes_moved      # 2 operators x (4 kB read + 4 kB written)
        16000
    """
    from ..work import count_work

    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if isinstance(kernels, (str, bytes)) or not isinstance(kernels, (list, tuple)):
        raise TypeError(f"kernels must be a list of the Triton kernels fn launches (the @triton.jit functions), "
                        f"got {kernels!r:.60}")
    if label is not None:
        text("label", label, empty=False)
    launches: list[tuple[str, int]] = []
    with _recording_launches(list(kernels), launches):
        work = count_work(fn, *args, **kwargs)
    names = work.op_names or ("op",) * len(work.per_op)
    by_call = [(f"torch:{name}", int(nbytes)) for name, (_, _, nbytes) in zip(names, work.per_op)] + launches
    total = int(work.bytes_moved) + sum(b for _, b in launches)
    return Traffic(label or getattr(fn, "__name__", "fn"), total, tuple(by_call), len(launches))


# --------------------------------------------------------------------------------------------- autotune
class _UntunedKernel:
    """``triton.autotune``'s stand-in under the interpreter: launches with the first config, records the choice."""

    def __init__(self, fn: Any, configs: Sequence[Any], key: Sequence[str]) -> None:
        self.fn, self.configs, self.key = fn, list(configs), list(key)
        self.best_config = self.configs[0]
        self.configs_timings: dict[Any, Any] = {}

    def run(self, *args: Any, grid: Any, **kwargs: Any) -> Any:
        return self.fn[grid](*args, **{**self.best_config.kwargs, **kwargs})

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)


def autotune(configs: Sequence[Any], key: Sequence[str], backend: Any = None) -> Callable[[Any], Any]:
    """Decorator: ``triton.autotune(configs=configs, key=key)`` when Triton compiles for a GPU, which times every
    config on the first launch per ``key`` value and keeps the fastest (see :func:`tuning`). Under the
    interpreter (``backend.simulated``, or ``TRITON_INTERPRET=1``) nothing can be timed: the kernel launches with
    the first config and :func:`tuning` reports that no tuning happened.

    Example:
        >>> import triton
        >>> from gpulab.kernels import triton_backend
        >>> b = triton_backend("cpu")
        >>> deco = autotune([triton.Config({"BLOCK": 128}), triton.Config({"BLOCK": 1024})], key=["n"], backend=b)
        >>> callable(deco)
        True
    """
    import os

    import triton

    if isinstance(configs, (str, bytes)) or not isinstance(configs, (list, tuple)):
        raise TypeError(f"configs must be a list of triton.Config, got {configs!r:.60}")
    configs = list(configs)
    if not configs:
        raise ValueError("configs is empty: autotune needs at least one triton.Config")
    bad = [c for c in configs if not isinstance(c, triton.Config)]
    if bad:
        raise TypeError(f"configs must be triton.Config objects, like triton.Config({{'BLOCK': 1024}}), got {bad[0]!r:.60}")
    key = texts("key", key)
    from .backends import KernelBackend

    if backend is not None and not isinstance(backend, KernelBackend):
        raise TypeError(f"backend must be gl.kernels.triton_backend()'s KernelBackend or None, got {backend!r:.60}")
    if backend is not None and backend.library != "triton":
        raise ValueError(f"backend is {backend.library!r}: autotune tunes Triton kernels, use triton_backend()")
    simulated = backend.simulated if backend is not None else os.environ.get("TRITON_INTERPRET", "0") == "1"
    if not simulated:
        return triton.autotune(configs=configs, key=list(key))
    return lambda fn: _UntunedKernel(fn, configs, key)


@dataclass(frozen=True)
class Tuning:
    """What the autotuner measured per config (ms per launch, on a GPU) and which config it chose; when nothing
    was timed, ``why`` says which of the two reasons it was: the interpreter cannot time kernels, or there was
    one config to launch (Triton's autotuner times nothing then)."""

    kernel: str
    tuned: bool
    best: str
    timings_ms: tuple[tuple[str, float | None], ...]
    why: str = ""

    def __repr__(self) -> str:
        if not self.tuned:
            return f"{self.kernel}: not tuned{f' ({self.why})' if self.why else ''}; launched with {self.best}."
        lines = [(c, "N/A" if t is None else f"{t * 1e3:.1f}", "<- chosen" if c == self.best else "")
                 for c, t in self.timings_ms]
        return f"{self.kernel}: autotuned\n" + text_table(["config", "us per launch", ""], lines)

    def _repr_html_(self) -> str:
        if not self.tuned:
            from html import escape

            return f"<p>{escape(repr(self))}</p>"
        rows = [(c, "N/A" if t is None else f"{t * 1e3:.1f}", "chosen" if c == self.best else "")
                for c, t in self.timings_ms]
        return html_table(["config", "us per launch", ""], rows, caption=f"{self.kernel}: autotuned")


_INTERPRETER_WHY = ("the interpreter cannot time kernels; on a GPU, triton.autotune times every config on the first "
                   "launch and keeps the fastest")
_ONE_CONFIG_WHY = "one config to launch: Triton's autotuner times nothing when there is nothing to choose between"
_PRUNED_WHY = ("the configs were pruned to one for this input (prune_configs_by), so Triton's autotuner timed "
              "nothing")


def _config_text(cfg: Any) -> str:
    kw = ", ".join(f"{k}={v}" for k, v in getattr(cfg, "kwargs", {}).items())
    return f"{kw}, num_warps={getattr(cfg, 'num_warps', '?')}" if kw else f"num_warps={getattr(cfg, 'num_warps', '?')}"


def tuning(kernel: Any) -> Tuning:
    """The autotuner's record for ``kernel`` (decorated with :func:`autotune` and launched at least once).

    Untimed configs are told apart: :func:`autotune`'s stand-in under the interpreter, a Triton autotuner given a
    single config (its ``run`` launches it without timing), or one whose configs were pruned to one.

    Example:
        >>> import triton
        >>> from gpulab.kernels import triton_backend
        >>> one = autotune([triton.Config({"BLOCK": 128})], key=["n"], backend=triton_backend("cpu"))(lambda: None)
        >>> tuning(one).tuned
        False
    """
    import os

    name = getattr(getattr(kernel, "fn", kernel), "__name__", "kernel")
    best = getattr(kernel, "best_config", None)
    if best is None:
        raise ValueError(f"kernel {name} has not been launched yet (or is not autotuned with gl.kernels.autotune): "
                         "launch it once, then ask")
    timings = getattr(kernel, "configs_timings", None) or {}
    if isinstance(kernel, _UntunedKernel):
        why = _ONE_CONFIG_WHY if len(kernel.configs) == 1 else _INTERPRETER_WHY
        return Tuning(name, False, _config_text(best), (), why)
    if not timings:
        configs = list(getattr(kernel, "configs", None) or ())
        if len(configs) <= 1:
            why = _ONE_CONFIG_WHY
        elif os.environ.get("TRITON_INTERPRET", "0") == "1":
            why = _INTERPRETER_WHY
        else:
            why = _PRUNED_WHY
        return Tuning(name, False, _config_text(best), (), why)
    rows = []
    for cfg, t in timings.items():
        ms = t[0] if isinstance(t, (list, tuple)) else t
        rows.append((_config_text(cfg), None if ms is None or not math.isfinite(ms) else float(ms)))
    return Tuning(name, True, _config_text(best), tuple(rows))
