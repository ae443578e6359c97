"""Lesson 10's compile time: what a model's first compiled call costs, and the two ways to cut it.

``torch.compile`` pays its cost on the first call: TorchDynamo traces the Python into graphs, AOTAutograd derives the
backward, Inductor generates code (C++ on a CPU, Triton on a GPU) and a compiler builds it. Two levers cut it:

- **Regional compilation** (PyTorch's "regional compilation" recipe): compile the repeated block (``block.compile()``
  for each of a transformer's layers) instead of the whole model. Every instance of a block class runs the same
  ``forward`` code object, and Dynamo (``inline_inbuilt_nn_modules``, on by default from PyTorch 2.5) makes their
  parameters inputs of the graph instead of constants, so one compiled graph serves every layer (two when the first
  block's input needs no gradient and the others' do: a guard on ``requires_grad``): the cost is one block's,
  whatever the depth. The price: no fusion across block boundaries.
- **The compile cache**: Inductor keeps what it built on disk (``TORCHINDUCTOR_CACHE_DIR``: the FX graph cache, the
  AOTAutograd cache, the built kernels). A restarted process compiling the same model finds it there; Dynamo still
  traces, but code generation and the C++/Triton builds are skipped. ``torch.compiler.save_cache_artifacts()`` and
  ``load_cache_artifacts()`` carry the same cache to another machine.

:func:`compile_time` measures all four first calls, each cold in a fresh, empty cache (PyTorch's own
``fresh_cache``), then warm from the cache the cold call filled, with Dynamo reset and Inductor's in-memory caches
cleared in between (what a restarted kernel sees).

Example:
    >>> import torch
    >>> from gpulab.course.lesson.models import residual_mlp
    >>> t = compile_time(lambda: residual_mlp(in_features=8, width=8, blocks=3), torch.randn(4, 8), backend="eager",
    ...                  steady_calls=1)
    >>> t.blocks, 1 <= t.regional.graphs < t.blocks      # one graph or two serve the three blocks
    (3, True)
"""
from __future__ import annotations

import html
import os
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..._format import fmt_seconds

__all__ = ["FirstCall", "CompileTimes", "compile_time"]

_CACHE_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


@dataclass(frozen=True)
class FirstCall:
    """One way of compiling: the first call cold (an empty cache), the first call warm (the cache the cold one
    filled, Dynamo reset), a steady call, and the graphs Dynamo compiled on the cold call."""

    label: str
    cold_s: float
    warm_s: float
    steady_s: float
    graphs: int

    @property
    def compile_s(self) -> float:
        """The cold first call's one-off cost: the first call minus a steady one."""
        return max(0.0, self.cold_s - self.steady_s)

    @property
    def warm_compile_s(self) -> float:
        return max(0.0, self.warm_s - self.steady_s)


@dataclass(frozen=True, repr=False)
class CompileTimes:
    """:func:`compile_time`'s result: the whole model compiled, and its ``blocks`` compiled one by one (regional),
    each cold and warm; ``eager_s`` is a steady eager call, ``backend`` the compiler's."""

    label: str
    backend: str
    blocks: int
    eager_s: float
    whole: FirstCall
    regional: FirstCall

    @property
    def regional_saving(self) -> float:
        """How many times cheaper the cold compile is when only the block is compiled."""
        return self.whole.compile_s / max(self.regional.compile_s, 1e-9)

    @property
    def cache_saving(self) -> float:
        """How many times cheaper the whole model's compile is warm from the cache than cold."""
        return self.whole.compile_s / max(self.whole.warm_compile_s, 1e-9)

    def rows(self) -> list[tuple[str, str, str, str, str, int]]:
        return [(c.label, fmt_seconds(c.compile_s), fmt_seconds(c.warm_compile_s), fmt_seconds(c.steady_s),
                 f"{self.eager_s / c.steady_s:.2f}x", c.graphs) for c in (self.whole, self.regional)]

    _HEAD = ("compiled", "first call's cost, cold cache", "warm cache", "steady call", "vs eager", "graphs")

    def __repr__(self) -> str:
        rows = [self._HEAD] + [tuple(str(v) for v in r) for r in self.rows()]
        widths = [max(len(r[i]) for r in rows) for i in range(len(self._HEAD))]
        lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
        return (f"Compile time of {self.label} ({self.blocks} blocks, backend {self.backend!r}; "
                f"eager call {fmt_seconds(self.eager_s)})\n" + "\n".join(lines))

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self._HEAD)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r) + "</tr>" for r in self.rows())
        return (f"<div><b>Compile time of {html.escape(self.label)}</b> ({self.blocks} blocks, backend "
                f"{html.escape(self.backend)}; eager call {fmt_seconds(self.eager_s)})<table><tr>{head}</tr>{body}"
                "</table></div>")


def _fresh_cache() -> Any:
    import torch._inductor.utils as iu

    fresh = getattr(iu, "fresh_cache", None) or iu.fresh_inductor_cache     # renamed in newer PyTorch
    return fresh()


def _clear_in_memory() -> None:
    import torch
    import torch._inductor.utils as iu

    torch._dynamo.reset()
    clear = getattr(iu, "clear_inductor_caches", None)
    if clear is not None:
        clear()


def compile_time(make_model: Callable[[], Any], example: Any, *, blocks: str = "blocks", backward: bool = True,
                 backend: str = "inductor", steady_calls: int = 3, warm_up: bool = True, device: Any = None,
                 label: str = "the model") -> CompileTimes:
    """Measure the first compiled call of ``make_model()`` (a function that builds the model afresh) on ``example``: the
    whole model under ``torch.compile``, and its repeated blocks (the ``nn.ModuleList`` at the attribute ``blocks``,
    dotted for a nested one: ``"encoder.layers"``) compiled one by one with ``block.compile()``; each cold (a fresh,
    empty compile cache) and warm (the cache the cold call filled, Dynamo reset and in-memory caches cleared, as
    after a restart). ``backward`` times forward and backward (a training step's compile). ``steady_calls`` calls
    after the first give the steady time. The process's one-off costs (loading the compiler) are paid before, on a
    throwaway compile (``warm_up=False`` skips it where the process has compiled with the same backend already). The
    caller's environment and Dynamo's state are restored: the caches used are deleted, Dynamo is reset.

    Example:
        >>> import torch
        >>> from gpulab.course.lesson.models import residual_mlp
        >>> one = compile_time(lambda: residual_mlp(in_features=4, width=4, blocks=1), torch.randn(2, 4),
        ...                    backend="eager", steady_calls=1)
        >>> one.whole.graphs, one.regional.graphs
        (1, 1)
    """
    import torch

    from ...compiling import compiled_graphs
    from ...timing import synchronize

    if not callable(make_model) or isinstance(make_model, torch.nn.Module):
        raise TypeError(f"make_model must be a function that builds the model afresh (e.g. lambda: MyModel(), or "
                        f"the class), not a model: each measurement compiles a new one; got "
                        f"{type(make_model).__name__} {make_model!r:.60}")
    if not isinstance(blocks, str) or not all(part.isidentifier() for part in blocks.split(".")):
        raise ValueError(f"blocks must be the (dotted) name of the model's attribute holding its repeated blocks, "
                         f"e.g. 'blocks' or 'encoder.layers', got {blocks!r}")

    def held_by(model: Any) -> Any:
        held = model
        for part in blocks.split("."):
            held = getattr(held, part, None)
        return held
    if not isinstance(steady_calls, int) or isinstance(steady_calls, bool) or steady_calls < 1:
        raise ValueError(f"steady_calls must be a positive number of calls, got {steady_calls!r}")
    if not isinstance(warm_up, bool):
        raise TypeError(f"warm_up must be True or False, got {warm_up!r}")
    if not isinstance(backend, str) or not backend:
        raise ValueError(f"backend must be a torch.compile backend's name, e.g. 'inductor', got {backend!r}")

    def build() -> Any:
        model = make_model()
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"make_model() must return a torch.nn.Module, got {type(model).__name__}")
        held = held_by(model)
        if not isinstance(held, torch.nn.ModuleList) or len(held) == 0:
            raise ValueError(f"the model has no non-empty nn.ModuleList at .{blocks} (it has "
                             f"{type(held).__name__}); name the attribute holding its repeated blocks with blocks=")
        return model.train(backward)

    def call(model: Any) -> float:
        synchronize(device)
        t0 = time.perf_counter()
        if backward:
            out = model(example)
            out.float().sum().backward()
        else:
            with torch.no_grad():
                model(example)
        synchronize(device)
        return time.perf_counter() - t0

    def whole(model: Any) -> Any:
        return torch.compile(model, backend=backend)

    def regional(model: Any) -> Any:
        for block in held_by(model):
            block.compile(backend=backend)
        return model

    def steady(model: Any) -> float:
        return sorted(call(model) for _ in range(steady_calls))[steady_calls // 2]

    def first_calls(name: str, compile_: Callable[[Any], Any]) -> FirstCall:
        with _fresh_cache():
            _clear_in_memory()
            model = compile_(build())
            before = compiled_graphs()
            cold = call(model)
            graphs = compiled_graphs() - before
            steady_s = steady(model)
            _clear_in_memory()
            warm = call(compile_(build()))
        if graphs == 0:
            raise ValueError(f"the {name} compiled no graph: this PyTorch ({torch.__version__}) runs a torch.nn built-in "
                             f"(Sequential, Linear) compiled on its own as it was; make the repeated block a module "
                             f"class of your own (as course.models.residual_mlp does)")
        return FirstCall(name, cold, warm, steady_s, graphs)

    from ...compiling import keep_subnormals

    n_blocks = len(held_by(build()))
    cache_env = {k: os.environ.get(k) for k in _CACHE_ENV}
    try:
        if warm_up:
            with _fresh_cache(), keep_subnormals():            # the process's one-off costs, on a throwaway compile
                _clear_in_memory()
                call(torch.compile(build(), backend=backend))
        eager_model = build()
        call(eager_model)
        eager_s = steady(eager_model)
        with keep_subnormals():         # some PyTorch builds' C++ turns on flushing them for the whole process
            whole_call = first_calls("whole model", whole)
            regional_call = first_calls(f"each of the {n_blocks} blocks (regional)", regional)
    finally:
        _clear_in_memory()
        for k, v in cache_env.items():      # Inductor writes its default cache directory into the environment
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return CompileTimes(label, backend, n_blocks, eager_s, whole_call, regional_call)
