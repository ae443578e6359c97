"""Compile and report in one object: compile time, graph breaks with their reasons, recompilations, the
steady-state speedup (eager and compiled timed interleaved) and the break-even step count.

A compiler pays once (tracing, code generation, autotuning) to save a little on every later call, so the
question is never only "is it faster?" but "after how many calls has it paid for itself?":
``break_even_steps = compile_s / (eager_s - compiled_s)``.

Example:
    >>> import torch, gpulab as gl
    >>> f = lambda x: (x * 2).sin() + 1
    >>> r = gl.compiling.compile_report(f, torch.ones(64), backend="eager", min_run_time=0.05)
    >>> r.compiles, r.breaks.breaks, r.recompiles        # one graph, no break, no recompile
    (1, 0, 0)
"""
from __future__ import annotations

import contextlib
import functools
import logging
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ._check import checked, install_hint, path_arg, texts
from ._format import fmt_number, fmt_seconds, html_table, text_table
from .profiling.run import refuse_lazy_fn, refuse_lazy_result
from .timing import Measurement

__all__ = ["CompileReport", "Exported", "GraphBreaks", "OnnxModel", "compile_report", "compiled_graphs", "cuda_graph",
           "export", "graph_breaks", "onnx_runtime"]


@dataclass(frozen=True)
class GraphBreaks:
    """What ``torch._dynamo.explain`` found: graphs, breaks, and why each break happened (with where)."""

    graphs: int
    breaks: int
    reasons: tuple[str, ...]
    ops: int

    def __repr__(self) -> str:
        head = f"{self.graphs} graph(s), {self.breaks} graph break(s), {self.ops} operators traced"
        return head + "".join(f"\n  break {i + 1}: {r}" for i, r in enumerate(self.reasons))

    def _repr_html_(self) -> str:
        rows = [(str(i + 1), r) for i, r in enumerate(self.reasons)] or [("-", "no graph break")]
        return html_table(("break", "reason (where)"), rows, caption=f"{self.graphs} graph(s), {self.breaks} "
                          f"graph break(s), {self.ops} operators traced")


@contextlib.contextmanager
def _quiet(*names: str) -> Iterator[None]:
    """Silence torch's own warning logs (graph-break and guard messages) while gpulab reports them itself."""
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


_TORCH_LOGS = ("torch._dynamo", "torch.fx.experimental.symbolic_shapes", "torch._export", "torch.export")


def _reason(r: Any) -> str:
    where = ""
    stack = getattr(r, "user_stack", None) or []
    if stack:
        frame = stack[-1]
        where = f" ({getattr(frame, 'filename', '?').rsplit('/', 1)[-1]}, line {getattr(frame, 'lineno', '?')})"
    text = " ".join(str(getattr(r, "reason", r)).split()).split(" Hint:")[0]
    return ((text[:180] + "...") if len(text) > 180 else text) + where


def graph_breaks(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> GraphBreaks:
    """Trace ``fn(*args)`` with TorchDynamo (no code generation: fast) and report its graph breaks.

    Example:
        >>> import torch, gpulab as gl
        >>> def f(x):
        ...     y = x * 2
        ...     print("side effect")          # Python the graph cannot hold: a break
        ...     return y + 1
        >>> gl.compiling.graph_breaks(f, torch.ones(3)).breaks
        side effect
        1
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable (a function or a model) for graph_breaks, got {type(fn).__name__}")
    refuse_lazy_fn(fn, "graph_breaks")
    import torch

    with _quiet(*_TORCH_LOGS):
        out = torch._dynamo.explain(fn)(*args, **kwargs)
    torch._dynamo.reset()
    graphs = max(0, int(out.graph_count))
    # explain counts breaks as graphs - 1 where it traced none: a break count is never negative
    return GraphBreaks(graphs, max(0, int(out.graph_break_count)), tuple(_reason(r) for r in out.break_reasons),
                       int(getattr(out, "op_count", 0) or 0))


def compiled_graphs() -> int:
    """Graphs TorchDynamo has compiled in this process so far (``torch._dynamo.utils.counters``): the
    difference across a call counts its compilations and recompilations.

    Example:
        >>> import torch
        >>> before = compiled_graphs()
        >>> f = torch.compile(lambda x: x - 1, backend="eager")
        >>> _ = f(torch.ones(2)); _ = f(torch.ones(2))
        >>> compiled_graphs() - before                   # the second call reuses the graph
        1
    """
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


@dataclass(frozen=True)
class Exported:
    """The result of :func:`export`: the ``ExportedProgram`` (None when export failed), the first line of the
    error that stopped it, and the seconds it took."""

    program: Any
    error: str | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.program is not None

    def __repr__(self) -> str:
        if self.ok:
            n = sum(1 for node in self.program.graph.nodes if node.op == "call_function")
            return f"exported in {fmt_seconds(self.seconds)}: one graph of {n} ATen operators"
        return f"export failed after {fmt_seconds(self.seconds)}: {self.error}"


def export(model: Any, *args: Any, dynamic_shapes: Any = None) -> Exported:
    """``torch.export.export(model, args, dynamic_shapes=...)`` with torch's own logs quieted; a failure (a
    data-dependent branch, an untraceable call, a dimension declared dynamic that the code fixes) is returned as
    its first line, not raised. ``dynamic_shapes``: one entry per argument, e.g. ``({0: torch.export.Dim("batch")},)``.

    Example:
        >>> import torch, gpulab as gl
        >>> gl.compiling.export(torch.nn.Linear(3, 2), torch.ones(1, 3)).ok
        True
        >>> batch = torch.export.Dim("batch", min=2)
        >>> e = gl.compiling.export(torch.nn.Linear(3, 2), torch.ones(4, 3), dynamic_shapes=({0: batch},))
        >>> e.program.module()(torch.ones(9, 3)).shape
        torch.Size([9, 2])
    """
    import torch

    import io

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (torch.export exports modules), got "
                        f"{type(model).__name__} {model!r:.40}")
    t0 = time.perf_counter()
    sink = io.StringIO()                      # a failing export prints the partial graph: the error says enough
    with _quiet(*_TORCH_LOGS), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        try:
            program, error = torch.export.export(model, tuple(args), dynamic_shapes=dynamic_shapes), None
        except Exception as e:              # torch raises several types (UserError, GuardOnDataDependentSymNode...)
            program = None
            lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
            error = f"{type(e).__name__}: {(lines[0] if lines else '')[:200]}"
    return Exported(program, error, time.perf_counter() - t0)


@dataclass(frozen=True)
class CompileReport:
    """Eager vs compiled, one function: what compiling cost and what it bought (see :func:`compile_report`)."""

    label: str
    backend: str
    mode: str | None
    first_call_s: float           # the first compiled call: tracing + code generation + one run
    eager: Measurement
    compiled: Measurement
    compiles: int                 # graphs compiled by the first call (1 without breaks)
    recompiles: int               # graphs compiled again during the timed calls (guards that failed)
    breaks: GraphBreaks | None
    code: tuple[str, ...] = ()    # generated source (Inductor), when it was generated in this call
    one_off_calls: int = 1        # calls in first_call_s: 2 where CUDA graph trees warm up, then record

    @property
    def compile_s(self) -> float:
        """The one-off cost: the first compiled call(s) minus as many steady compiled calls."""
        return max(0.0, self.first_call_s - self.one_off_calls * self.compiled.median_s)

    @property
    def speedup(self) -> float:
        return self.eager.median_s / self.compiled.median_s

    @property
    def saved_per_call_s(self) -> float:
        return self.eager.median_s - self.compiled.median_s

    @property
    def break_even_steps(self) -> float | None:
        """Calls after which the compile time is paid back; None when compiled is not faster (never)."""
        return self.compile_s / self.saved_per_call_s if self.saved_per_call_s > 0 else None

    @property
    def noisy(self) -> bool:
        return self.eager.noisy or self.compiled.noisy

    def _rows(self) -> list[tuple[str, str]]:
        be = self.break_even_steps
        first = ("first call" if self.one_off_calls == 1 else
                 f"first {self.one_off_calls} calls: warm-up, CUDA graph recording")
        rows = [(f"compile ({first})", fmt_seconds(self.compile_s)),
                ("eager per call", fmt_seconds(self.eager.median_s)),
                ("compiled per call", fmt_seconds(self.compiled.median_s)),
                ("speedup", f"{self.speedup:.2f}x" + (" (noisy)" if self.noisy else "")),
                ("break-even", "never (not faster)" if be is None else f"{fmt_number(math.ceil(be))} calls"),
                ("graphs / recompiles", f"{self.compiles} / {self.recompiles}")]
        if self.breaks is not None:
            rows.append(("graph breaks", str(self.breaks.breaks)))
        return rows

    def _caption(self) -> str:
        mode = f", mode={self.mode!r}" if self.mode else ""
        return f"torch.compile {self.label!r} (backend={self.backend!r}{mode}) on {self.eager.env}"

    def __repr__(self) -> str:
        return self._caption() + "\n" + text_table(("", ""), self._rows())

    def _repr_html_(self) -> str:
        return html_table(("", ""), self._rows(), caption=self._caption(),
                          footer="eager and compiled timed interleaved; median per call" +
                                 ("; noisy: re-run before trusting small differences" if self.noisy else ""))


def _cudagraph_record_calls(backend: str, mode: str | None) -> int:
    """Compiled calls after the first that are still one-off work where Inductor uses CUDA graphs (mode
    "reduce-overhead" or "max-autotune", or ``torch._inductor.config.triton.cudagraphs``): with CUDA graph trees
    (Inductor's default) the first call compiles and warms up eagerly, the second records the graph and the
    third is the first replay, so one more call is one-off; without trees, or with their warm-up skipped, the
    first call records. 0 where no CUDA graphs are used."""
    if backend != "inductor":
        return 0
    from torch._inductor import config, list_mode_options

    triton_cfg = config.triton
    uses = list_mode_options(mode).get("triton.cudagraphs", triton_cfg.cudagraphs) if mode else triton_cfg.cudagraphs
    if not uses or not triton_cfg.cudagraph_trees or triton_cfg.skip_cudagraph_warmup:
        return 0
    return 1


def _runs_on_cuda(fn: Any, args: Sequence[Any], device: Any) -> bool:
    """Whether the compiled graph will hold CUDA tensors (Inductor records CUDA graphs only for those)."""
    import torch

    if device is not None:
        return str(getattr(device, "type", device)).startswith("cuda")
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if isinstance(fn, torch.nn.Module):
        tensors += list(fn.parameters())[:1]
    return any(t.is_cuda for t in tensors)


@contextlib.contextmanager
def keep_subnormals() -> Iterator[None]:
    """Subnormal floats left as the caller had them. On torch versions that build TorchInductor's C++ code for a
    CPU with ``-ffast-math`` (2.5), loading the compiled library turns on flushing subnormals to zero for the
    whole process; this turns it off again afterwards when it was off before (``torch.set_flush_denormal``).

    Example:
        >>> import sys
        >>> with keep_subnormals():
        ...     pass
        >>> float(sys.float_info.min) / 2 > 0
        True
    """
    tiny = float(sys.float_info.min)
    flushed = tiny / 2 == 0.0
    try:
        yield
    finally:
        if not flushed and tiny / 2 == 0.0:
            import torch

            torch.set_flush_denormal(False)


def _keeping_subnormals(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        with keep_subnormals():
            return fn(*args, **kwargs)
    return call


@checked(label="name", dynamic="flag?", fullgraph="flag", explain="flag", min_run_time="pos")
@_keeping_subnormals
def compile_report(fn: Callable[..., Any], *args: Any, label: str = "fn", backend: str = "inductor",
                   mode: str | None = None, dynamic: bool | None = None, fullgraph: bool = False,
                   explain: bool = True, min_run_time: float = 1.0, device: Any = None,
                   capture_code: bool = False, inputs: Sequence[tuple[Any, ...]] | None = None) -> CompileReport:
    """``torch.compile(fn)``, measured: the first call (compile time), graph breaks (``explain``), then eager
    and compiled timed interleaved on ``args`` (:func:`gpulab.benchmark_interleaved`), counting the
    recompilations that happen while timing. ``inputs`` adds more argument tuples to call the compiled
    function with once each before timing (e.g. other shapes: they show as recompiles).
    ``capture_code=True`` keeps Inductor's generated source (forces a fresh compile).

    With CUDA graphs on a CUDA device (``mode="reduce-overhead"`` or ``"max-autotune"``) the graph is recorded on
    the second compiled call, after an eager warm-up on the first: both count as the one-off cost
    (``one_off_calls``), so compile time and break-even include the recording.
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable, got {type(fn).__name__}")
    if not isinstance(backend, str) or not backend:
        raise TypeError(f"backend must be a torch.compile backend name such as 'inductor', got {backend!r}")
    if mode is not None and mode not in ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"):
        raise ValueError(f"unknown mode {mode!r}: default, reduce-overhead, max-autotune or "
                         "max-autotune-no-cudagraphs")
    if mode is not None and backend != "inductor":
        raise ValueError(f"mode={mode!r} is an Inductor setting: use backend='inductor' or leave mode out")
    refuse_lazy_fn(fn, "compile_report")
    import torch

    from .interleaved import benchmark_interleaved
    from .timing import synchronize

    refuse_lazy_result(fn(*args), "compile_report")   # eager warm-up (lazy init), outside the first compiled call
    breaks = graph_breaks(fn, *args) if explain else None
    torch._dynamo.reset()
    try:
        compiled = torch.compile(fn, backend=backend, mode=mode, dynamic=dynamic, fullgraph=fullgraph)
    except Exception as e:                          # torch._dynamo's InvalidBackend names no argument
        if type(e).__name__ == "InvalidBackend":
            raise ValueError(f"backend={backend!r} is not a torch.compile backend: 'inductor' (the default), "
                             f"'eager' or 'aot_eager' (torch._dynamo.list_backends() lists the rest)") from None
        raise
    record_calls = _cudagraph_record_calls(backend, mode) if _runs_on_cuda(fn, args, device) else 0
    synchronize(device)
    code: list[str] = []
    start = compiled_graphs()
    t0 = time.perf_counter()
    if capture_code and backend == "inductor":
        from torch._inductor.utils import run_and_get_code

        _, code = run_and_get_code(compiled, *args)
    else:
        compiled(*args)
    for _ in range(record_calls):
        compiled(*args)                         # CUDA graph trees: warmed up on the first call, recorded now
    synchronize(device)
    first = time.perf_counter() - t0
    first_compiles = compiled_graphs() - start
    for extra in inputs or ():
        compiled(*extra)
    ms = benchmark_interleaved({f"{label}, eager": lambda: fn(*args), f"{label}, compiled": lambda: compiled(*args)},
                               min_run_time=min_run_time, device=device)
    return CompileReport(label, backend, mode, first, ms[f"{label}, eager"], ms[f"{label}, compiled"],
                         first_compiles, compiled_graphs() - start - first_compiles, breaks, tuple(code),
                         1 + record_calls)


@checked(warmup="count0")
def cuda_graph(fn: Callable[..., Any], *static_inputs: Any, warmup: int = 3) -> Callable[..., Any]:
    """Capture ``fn(*static_inputs)`` into a ``torch.cuda.CUDAGraph`` and return ``replay(*inputs)``: it copies
    ``inputs`` into the static input tensors, replays every captured kernel with one launch, and returns the
    static output (overwritten by the next replay: clone it to keep it). CUDA only.

    As PyTorch's CUDA Graphs notes require: ``warmup`` calls run first on a side stream (lazy initialisation,
    cuBLAS workspaces, allocator growth happen outside the capture); shapes, dtypes and devices stay those of
    ``static_inputs``; no host sync (``.item()``, printing, ``.cpu()``) may happen inside ``fn``. Use it for
    inference (``torch.inference_mode()``) or a whole static training step.
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable, got {type(fn).__name__}")
    refuse_lazy_fn(fn, "cuda_graph")
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("CUDA graphs need an NVIDIA GPU (torch.cuda.is_available() is False); on a CPU the "
                           "overhead they remove can be measured per operator instead (gl.profile(step).verdict)")
    if not static_inputs or not all(isinstance(t, torch.Tensor) and t.is_cuda for t in static_inputs):
        raise ValueError("static_inputs must be CUDA tensors (the graph reads its inputs from their memory)")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            refuse_lazy_result(fn(*static_inputs), "cuda_graph")
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_output = fn(*static_inputs)
    refuse_lazy_result(static_output, "cuda_graph")     # warmup=0: the capture is the first call

    def replay(*inputs: Any) -> Any:
        if len(inputs) != len(static_inputs):
            raise ValueError(f"replay takes {len(static_inputs)} input(s), like the capture, got {len(inputs)}")
        for dst, src in zip(static_inputs, inputs):
            if src is not dst:
                dst.copy_(src)
        graph.replay()
        return static_output

    replay.graph = graph                      # type: ignore[attr-defined]
    return replay


@dataclass(frozen=True)
class OnnxModel:
    """A model exported to ONNX and loaded in an ONNX Runtime session: call it with tensors, get tensors back."""

    path: str
    export_s: float
    load_s: float
    providers: tuple[str, ...]
    session: Any

    def __call__(self, *inputs: Any) -> Any:
        import numpy as np
        import torch

        names = [i.name for i in self.session.get_inputs()]
        feed = {n: (x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x))
                for n, x in zip(names, inputs)}
        out = [torch.from_numpy(o) for o in self.session.run(None, feed)]
        return out[0] if len(out) == 1 else tuple(out)

    def __repr__(self) -> str:
        return (f"ONNX model {self.path}: exported in {fmt_seconds(self.export_s)}, loaded in "
                f"{fmt_seconds(self.load_s)}; ONNX Runtime providers {', '.join(self.providers)}")


def _onnx_packages() -> Any:
    """Import what :func:`onnx_runtime` needs (``torch.onnx.export(dynamo=True)`` imports onnx and onnxscript,
    the session needs onnxruntime) and return onnxruntime; one ``ImportError`` naming every missing one."""
    import importlib

    found: dict[str, Any] = {}
    missing = []
    for name in ("onnx", "onnxscript", "onnxruntime"):
        try:
            found[name] = importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ImportError(f"onnx_runtime needs {' and '.join(missing)} (exporting with torch.onnx.export(dynamo=True) "
                          f"needs onnx and onnxscript, running needs onnxruntime): {install_hint('onnx')}; "
                          "onnxruntime-gpu for CUDA on an NVIDIA machine")
    return found["onnxruntime"]


def onnx_runtime(model: Any, *example_inputs: Any, path: str = "model.onnx",
                 providers: Sequence[str] | None = None) -> OnnxModel:
    """Export ``model`` with ``torch.onnx.export(..., dynamo=True)`` (the torch.export-based exporter) and load it
    in ONNX Runtime. ``providers`` default: CUDA then CPU where onnxruntime-gpu offers CUDA, else CPU.
    Outputs come back as CPU tensors (ONNX Runtime works on NumPy arrays here: on a GPU each call includes the
    copies to and from the device).

    Example:
        >>> import torch, gpulab as gl
        >>> m = torch.nn.Linear(4, 2).eval()
        >>> onnx = gl.compiling.onnx_runtime(m, torch.ones(1, 4), path="/tmp/gpulab-doc.onnx")  # doctest: +SKIP
        >>> torch.allclose(onnx(torch.ones(1, 4)), m(torch.ones(1, 4)), atol=1e-6)               # doctest: +SKIP
        True
    """
    import os

    path = os.fspath(path_arg("path", path))
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"path {path!r}: its folder {folder} does not exist: create it, or choose another path")
    if os.path.isdir(path):
        raise ValueError(f"path {path!r} is a folder: name the .onnx file to write, like {path!r}/model.onnx")
    if providers is not None:
        providers = texts("providers", providers)
    ort = _onnx_packages()
    import torch

    available = ort.get_available_providers()
    wanted = list(providers) if providers else [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider")
                                                 if p in available]
    missing = [p for p in wanted if p not in available]
    if missing:
        raise ValueError(f"providers: ONNX Runtime here offers {available}, not {missing}: install "
                         "onnxruntime-gpu for CUDA")
    t0 = time.perf_counter()
    with torch.no_grad():
        torch.onnx.export(model, tuple(example_inputs), path, dynamo=True, verbose=False)
    export_s = time.perf_counter() - t0
    options = ort.SessionOptions()
    # ONNX Runtime's worker threads spin after each run by default, taking cores from whatever runs next (the
    # eager model it is timed against): let them sleep
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    t0 = time.perf_counter()
    session = ort.InferenceSession(path, sess_options=options, providers=wanted)
    return OnnxModel(path, export_s, time.perf_counter() - t0, tuple(session.get_providers()), session)
