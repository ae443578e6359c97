"""Lesson 10's compile modes: what ``torch.compile(mode="max-autotune")`` tunes on the GPU at hand.

``max-autotune`` turns on three things (``torch._inductor.list_mode_options("max-autotune")``): autotuned GEMM
templates (Triton kernels for matmuls, benchmarked against cuBLAS), coordinate-descent tuning of the kernels
Inductor generates (the fused elementwise and reduction ones), and CUDA graphs. The GEMM templates are used only
on a "big" GPU: PyTorch's ``torch._inductor.utils.is_big_gpu`` requires at least 68 streaming multiprocessors
(SMs, ``torch.cuda.get_device_properties(i).multi_processor_count``) on a CUDA GPU, and logs "Not enough SMs to
use max_autotune_gemm mode" below that; on ROCm it requires an architecture of major version 9 (not 10). A GPU
below the threshold keeps every matmul in cuBLAS, and ``max-autotune`` then differs from ``reduce-overhead`` only
by the tuning of the generated kernels.

Example:
    >>> import types
    >>> t4 = types.SimpleNamespace(name="Tesla T4", multi_processor_count=40, major=7, minor=5)
    >>> max_autotune_scope(properties=t4).tunes_gemms
    False
"""
from __future__ import annotations

import html
import sys
from dataclasses import dataclass
from typing import Any

from ..lesson.optional import PartAnswer

__all__ = ["MAX_AUTOTUNE_MIN_SMS", "AutotuneScope", "max_autotune_scope", "CompiledTraining", "compiled_training",
           "TorchFeature", "torch_feature"]

# torch/_inductor/utils.py, is_big_gpu(): a CUDA GPU with fewer SMs gets no autotuned GEMM templates
MAX_AUTOTUNE_MIN_SMS = 68
_PUBLISHED = ("T4", "A100 40GB SXM", "H100 SXM")        # the course's three GPUs, SMs from gpulab.devicequery


@dataclass(frozen=True, repr=False)
class AutotuneScope:
    """Whether ``max-autotune`` tunes matmuls on a GPU (``tunes_gemms``; None without a CUDA GPU), from its SM
    count (``sms``) against PyTorch's threshold (``min_sms``); ``published`` gives the course's GPUs' SM counts."""

    device_name: str | None
    sms: int | None
    min_sms: int
    tunes_gemms: bool | None
    rocm: bool = False
    published: tuple[tuple[str, int], ...] = ()

    @property
    def sentence(self) -> str:
        others = ", ".join(f"{name} {sms}" for name, sms in self.published)
        rule = (f'mode="max-autotune" tunes matmuls (Triton GEMM templates) only on GPUs with at least '
                f"{self.min_sms} SMs (PyTorch's is_big_gpu)" + (f"; published SM counts: {others}" if others else ""))
        if self.tunes_gemms is None:
            return f"No CUDA GPU here: {rule}."
        if self.rocm:
            verdict = "tunes" if self.tunes_gemms else "does not tune"
            return f"{self.device_name} (ROCm): max-autotune {verdict} matmuls here (on ROCm the rule is the architecture)."
        if self.tunes_gemms:
            return (f"{self.device_name}: {self.sms} SMs, at least {self.min_sms}: max-autotune benchmarks Triton GEMM "
                    "templates against cuBLAS for the matmuls, tunes the generated kernels, and adds CUDA graphs.")
        return (f"{self.device_name}: {self.sms} SMs, fewer than {self.min_sms}: max-autotune tunes no matmuls here "
                "(they stay in cuBLAS); it tunes only the generated (fused elementwise and reduction) kernels and adds "
                "CUDA graphs, so it differs from reduce-overhead by that tuning alone.")

    def __repr__(self) -> str:
        return self.sentence

    def _repr_html_(self) -> str:
        return f"<div>{html.escape(self.sentence)}</div>"


def max_autotune_scope(device: Any = None, *, properties: Any = None) -> AutotuneScope:
    """What ``torch.compile(mode="max-autotune")`` tunes on ``device`` (a CUDA device; default: the current one
    when there is a GPU), decided as PyTorch decides it: ``multi_processor_count`` of the device's properties
    against :data:`MAX_AUTOTUNE_MIN_SMS`. ``properties`` (anything with ``name``, ``multi_processor_count`` and
    ``major``, as ``torch.cuda.get_device_properties`` returns) replaces the query. Without a CUDA GPU,
    ``tunes_gemms`` is None and the sentence gives the rule with the course's GPUs' published SM counts.

    Example:
        >>> import types
        >>> h100 = types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", multi_processor_count=132, major=9, minor=0)
        >>> s = max_autotune_scope(properties=h100)
        >>> s.tunes_gemms, s.sms
        (True, 132)
        >>> max_autotune_scope("cpu").tunes_gemms is None
        True
    """
    from ...devicequery import published_device

    published = tuple((name, int(published_device(name).sms)) for name in _PUBLISHED)
    torch = sys.modules.get("torch")
    rocm = bool(getattr(getattr(torch, "version", None), "hip", None))
    if properties is None:
        if device is not None and not isinstance(device, (str, int)) and type(device).__name__ != "device":
            raise TypeError(f"device must be a CUDA device such as 'cuda:0', an index or None, got {device!r}")
        if device is not None and not str(device).startswith("cuda") and not isinstance(device, int):
            return AutotuneScope(None, None, MAX_AUTOTUNE_MIN_SMS, None, published=published)
        if torch is None or not torch.cuda.is_available():
            return AutotuneScope(None, None, MAX_AUTOTUNE_MIN_SMS, None, published=published)
        properties = torch.cuda.get_device_properties(device if device is not None else torch.cuda.current_device())
    for attr in ("name", "multi_processor_count", "major"):
        if not hasattr(properties, attr):
            raise TypeError(f"properties must be a torch.cuda.get_device_properties() result (with {attr}), "
                            f"got {properties!r}")
    sms = int(properties.multi_processor_count)
    if rocm:
        tunes = properties.major is not None and properties.major >= 9 and properties.major != 10
    else:
        tunes = sms >= MAX_AUTOTUNE_MIN_SMS
    return AutotuneScope(str(properties.name), sms, MAX_AUTOTUNE_MIN_SMS, tunes, rocm, published)


# --------------------------------------------------------------------------------------------- a compiled training step
@dataclass(frozen=True, repr=False)
class CompiledTraining:
    """A training step (forward, backward, ``optimizer.step()``) eager and under ``torch.compile``, from the same
    weights: the losses of the first ``len(eager_losses)`` steps of each, the one-off costs of the first calls,
    and the steady step times (timed interleaved, after those first calls)."""

    label: str
    backend: str
    eager_losses: tuple[float, ...]
    compiled_losses: tuple[float, ...]
    first_eager_s: float          # the first eager step: lazy initialisation (optimizer state, kernels)
    first_compiled_s: float       # the first compiled step: tracing, code generation and one step
    graphs: int                   # graphs the compiled step was cut into (torch.compile breaks at backward())
    eager: Any                    # gpulab.Measurement of a steady eager step
    compiled: Any                 # and of a steady compiled one
    atol: float = 1e-4
    mode: str | None = None       # torch.compile's mode ("reduce-overhead": CUDA graphs on a GPU)
    cuda_graphs: bool = False     # the mode records CUDA graphs here (a CUDA device and a CUDA-graph mode)

    @property
    def max_loss_diff(self) -> float:
        return max(abs(a - b) for a, b in zip(self.eager_losses, self.compiled_losses))

    @property
    def same(self) -> bool:
        """The compiled steps gave the eager steps' losses (within ``atol``, relative to the loss)."""
        return all(abs(a - b) <= self.atol * max(1.0, abs(a)) for a, b in zip(self.eager_losses, self.compiled_losses))

    @property
    def compile_s(self) -> float:
        """The one-off cost of compiling: the first compiled step minus a steady one."""
        return max(0.0, self.first_compiled_s - self.compiled.median_s)

    @property
    def speedup(self) -> float:
        return self.eager.median_s / self.compiled.median_s

    @property
    def break_even_steps(self) -> float | None:
        saved = self.eager.median_s - self.compiled.median_s
        return self.compile_s / saved if saved > 0 else None

    @property
    def noisy(self) -> bool:
        return bool(self.eager.noisy or self.compiled.noisy)

    def _rows(self) -> list[tuple[str, str]]:
        from ..._format import fmt_seconds

        be = self.break_even_steps
        return [("same losses as eager", f"{'yes' if self.same else 'NO'} (largest difference {self.max_loss_diff:.1e}, "
                                         f"{len(self.eager_losses)} steps)"),
                ("first eager step (warm-up)", fmt_seconds(self.first_eager_s)),
                ("compile (first compiled step)", fmt_seconds(self.compile_s)),
                ("eager step", fmt_seconds(self.eager.median_s)),
                ("compiled step", fmt_seconds(self.compiled.median_s)),
                ("speedup", f"{self.speedup:.2f}x" + (" (noisy)" if self.noisy else "")),
                ("break-even", "never (not faster)" if be is None else f"{be:,.0f} steps"),
                ("graphs", str(self.graphs))]

    def __repr__(self) -> str:
        from ..._format import text_table

        return f"compiled training step {self.label!r} ({self._how})\n" + text_table(("", ""), self._rows())

    @property
    def _how(self) -> str:
        how = f"backend={self.backend!r}" + (f", mode={self.mode!r}" if self.mode else "")
        if self.mode in _GRAPH_MODES:
            how += ", CUDA graphs" if self.cuda_graphs else ", no CUDA graphs on this device"
        return how

    def _repr_html_(self) -> str:
        from ..._format import html_table

        return html_table(("", ""), self._rows(), caption=f"Compiled training step {html.escape(self.label)} "
                                                          f"({html.escape(self._how)})",
                          footer="steady steps timed interleaved after the first calls; median per step")


_GRAPH_MODES = ("reduce-overhead", "max-autotune")     # the torch.compile modes that record CUDA graphs


def _records_cuda_graphs(mode: str | None, x: Any) -> bool:
    """Whether torch.compile's ``mode`` records CUDA graphs for a step on ``x`` (a graph mode, a CUDA tensor)."""
    return mode in _GRAPH_MODES and bool(getattr(x, "is_cuda", False))


def compiled_training(model: Any, make_optimizer: Any, x: Any, y: Any, *, loss_fn: Any = None, steps: int = 3,
                      backend: str = "inductor", mode: str | None = None, min_run_time: float = 1.0,
                      device: Any = None, label: str = "training step") -> CompiledTraining:
    """Compile a whole training step, optimizer included, and measure it against eager.

    Two copies of ``model`` with their own optimizer (``make_optimizer(parameters)``) run the same step
    (``zero_grad``, ``loss_fn(model(x), y)``, ``backward()``, ``step()``) ``steps`` times, one eagerly and one
    through ``torch.compile(step, backend=backend)``: their losses must agree. The first call of each is timed
    on its own (the compiled one holds the compile); then both are timed interleaved, each stepping its own copy.
    ``loss_fn`` defaults to cross-entropy. ``mode`` is ``torch.compile``'s (``"reduce-overhead"`` records the step's
    graphs as CUDA graphs on a GPU, and each compiled step then starts with
    ``torch.compiler.cudagraph_mark_step_begin()``, which tells the CUDA-graph runtime that the previous step's
    outputs may be overwritten; on a CPU the mode compiles without CUDA graphs).

    Example:
        >>> import torch
        >>> torch.manual_seed(0) and None
        >>> r = compiled_training(torch.nn.Linear(8, 3), lambda p: torch.optim.SGD(p, lr=0.1), torch.randn(16, 8),
        ...                       torch.randint(0, 3, (16,)), backend="eager", min_run_time=0.05)
        >>> r.same, len(r.eager_losses), r.graphs >= 1
        (True, 3, True)
    """
    import copy
    import time

    import torch

    from ...interleaved import benchmark_interleaved
    from ...compiling import compiled_graphs, keep_subnormals
    from ...timing import synchronize

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not callable(make_optimizer):
        raise TypeError("make_optimizer must be a function of the parameters, e.g. "
                        f"lambda p: torch.optim.Adam(p, lr=1e-3), got {make_optimizer!r}")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps must be a positive number of steps to compare, got {steps!r}")
    if mode is not None and mode not in ("default", *_GRAPH_MODES, "max-autotune-no-cudagraphs"):
        raise ValueError(f"mode must be one of torch.compile's modes (None, 'default', 'reduce-overhead', "
                         f"'max-autotune', 'max-autotune-no-cudagraphs'), got {mode!r}")
    if mode is not None and backend != "inductor":
        raise ValueError(f"mode={mode!r} is an Inductor setting: torch.compile takes a backend or a mode, not both; "
                         f"drop backend={backend!r} (or mode)")
    loss_fn = torch.nn.functional.cross_entropy if loss_fn is None else loss_fn
    graphs_here = _records_cuda_graphs(mode, x)

    def step_of(m: Any) -> Any:
        opt = make_optimizer(m.parameters())

        def step(inputs: Any, targets: Any) -> Any:
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(m(inputs), targets)
            loss.backward()
            opt.step()
            return loss.detach()
        return step

    eager_step = step_of(copy.deepcopy(model).train())
    torch._dynamo.reset()
    compiled = torch.compile(step_of(copy.deepcopy(model).train()), backend=backend, mode=mode)

    def compiled_step(inputs: Any, targets: Any) -> Any:
        if graphs_here:         # a new step: the last step's outputs (held in the graphs' memory) may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        return compiled(inputs, targets)

    def timed_first(fn: Any) -> tuple[float, float]:
        synchronize(device)
        t0 = time.perf_counter()
        loss = float(fn(x, y))
        synchronize(device)
        return time.perf_counter() - t0, loss

    first_eager, loss0 = timed_first(eager_step)
    before = compiled_graphs()
    with keep_subnormals():     # some PyTorch builds' C++ turns on flushing them for the whole process
        first_compiled, closs0 = timed_first(compiled_step)
    graphs = compiled_graphs() - before
    eager_losses = [loss0] + [float(eager_step(x, y)) for _ in range(steps - 1)]
    compiled_losses = [closs0] + [float(compiled_step(x, y)) for _ in range(steps - 1)]
    ms = benchmark_interleaved({"eager": lambda: eager_step(x, y), "compiled": lambda: compiled_step(x, y)},
                               min_run_time=min_run_time, device=device)
    return CompiledTraining(label, backend, tuple(eager_losses), tuple(compiled_losses), first_eager, first_compiled,
                            graphs, ms["eager"], ms["compiled"], mode=mode, cuda_graphs=graphs_here)


# --------------------------------------------------------------------------------------------- a newer PyTorch's call
@dataclass(frozen=True, repr=False)
class TorchFeature(PartAnswer):
    """Whether this PyTorch has ``name`` (added in ``since``): true in an ``if``; its one line says the ``part``
    runs, or is skipped and which PyTorch it needs."""

    name: str
    since: str
    part: str
    version: str
    available: bool

    @property
    def line(self) -> str:  # type: ignore[override]
        if self.available:
            return f"PyTorch {self.version} has {self.name}: {self.part} runs."
        return (f"Skipping {self.part}: {self.name} came with PyTorch {self.since}, and this is PyTorch {self.version} "
                f"(pip install -U 'torch>={self.since}' adds it).")


def torch_feature(name: str, since: str, part: str) -> TorchFeature:
    """Whether the installed PyTorch has the dotted ``name`` (e.g. ``"torch._inductor.aoti_compile_and_package"``,
    added in PyTorch ``since``), for a lesson's ``part`` that needs it. Imports only ``torch`` and its submodules
    on the path.

    Example:
        >>> f = torch_feature("torch.no_such_call", "9.9", "section 6")
        >>> bool(f), f.line.startswith("Skipping section 6")
        (False, True)
    """
    import importlib

    for label, v in (("name", name), ("since", since), ("part", part)):
        if not isinstance(v, str) or not v.strip():
            raise TypeError(f"{label} must be a non-empty text, got {v!r}")
    if not name.startswith("torch."):
        raise ValueError(f"name must be a dotted name under torch, e.g. 'torch.export.Dim', got {name!r}")
    import torch

    parts = name.split(".")
    obj: Any = None
    for i in range(len(parts), 0, -1):                  # the longest importable module, then attributes
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr, None)
            if obj is None:
                break
        break
    return TorchFeature(name, since, part, torch.__version__.split("+")[0], obj is not None)
