"""Compiled recipes, each as in a fresh process, and a compile lever that ran eager stopped loudly.

TorchDynamo keeps its compiled code per code object (a model class's ``forward``, shared by every instance of the
class), up to ``torch._dynamo.config.recompile_limit`` entries (``cache_size_limit`` in older torch; 8 by default).
Recipes trained one after another in one process add entries to the same code objects: a new batch size, precision
or grad mode each guards differently. Past the limit Dynamo logs one warning and runs the frame eager from then on,
for every later recipe whose guards match no entry: the compile and CUDA-graph levers would be timed as eager.

:class:`CompileGuard` resets Dynamo when a compiled recipe is built (``torch._dynamo.reset()``: earlier recipes'
entries no longer count) and checks the recipe's first step: if it hit the recompile limit, had a frame fall back to
eager, or ran with no graph compiled since the last reset, it raises ``RuntimeError`` naming the recipe and lever.
A step run under a ``TorchDispatchMode`` (the memory watches of ``gl.find_max_batch_size`` and ``gl.peak_memory``)
runs eager by Dynamo's design and is not the one checked: the first step outside one is.

Example:
    >>> import torch
    >>> guard = CompileGuard("x + 1, compiled")
    >>> f = torch.compile(lambda x: x + 1, backend="eager")
    >>> guard.first_step(f, torch.ones(2))
    tensor([2., 2.])
    >>> guard.first_step(lambda: "the first step only is checked")
    'the first step only is checked'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["CompileGuard", "DynamoCounts", "dynamo_counts", "recompile_limit"]

# the counter Dynamo keeps per reason a frame could not compile: the recompile limit's reason, by torch's version
_LIMIT_MARKS = ("recompile limit", "recompile_limit", "cache_size_limit", "cache size limit")
_graphs_at_reset = [0]          # graphs compiled in this process when a guard last reset Dynamo


@dataclass(frozen=True)
class DynamoCounts:
    """Dynamo's process-wide counters (``torch._dynamo.utils.counters``) at one moment: graphs compiled, frames
    it tried to convert and converted, times a frame hit the recompile limit, and every reason a frame fell back."""

    graphs: int
    frames: int
    frames_ok: int
    limit_hits: int
    fallbacks: tuple[tuple[str, int], ...]


def dynamo_counts() -> DynamoCounts:
    """Dynamo's counters now.

    Example:
        >>> dynamo_counts().graphs >= 0
        True
    """
    from torch._dynamo.utils import counters

    fallbacks = tuple((str(k), int(v)) for k, v in counters["unimplemented"].items())
    hits = sum(v for k, v in fallbacks if any(m in k.lower() for m in _LIMIT_MARKS))
    return DynamoCounts(int(counters["stats"]["unique_graphs"]), int(counters["frames"]["total"]),
                        int(counters["frames"]["ok"]), hits, fallbacks)


def _under_dispatch_mode() -> bool:
    """Is a ``TorchDispatchMode`` active (gpulab's memory watches are)? Dynamo runs frames eager under one."""
    from torch.utils._python_dispatch import is_in_torch_dispatch_mode

    return bool(is_in_torch_dispatch_mode())


def recompile_limit() -> tuple[str, int]:
    """The name of Dynamo's recompile limit in the installed torch and its value.

    Example:
        >>> recompile_limit()[0] in ("recompile_limit", "cache_size_limit")
        True
    """
    import torch._dynamo

    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    return name, int(getattr(config, name))


class CompileGuard:
    """One compiled recipe (``what`` names it and its lever in errors): Dynamo is reset when the guard is made, and
    :meth:`first_step` runs the recipe's first step and checks that it ran compiled."""

    def __init__(self, what: str) -> None:
        import torch._dynamo

        if not isinstance(what, str) or not what:
            raise TypeError(f"what must name the recipe and its lever (a non-empty str), got {what!r}")
        self.what = what
        self.checked = False
        torch._dynamo.reset()
        _graphs_at_reset[0] = dynamo_counts().graphs

    def first_step(self, step: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``step(*args, **kwargs)``; the first time, with Dynamo's counters read around it and checked."""
        if self.checked or _under_dispatch_mode():   # under a memory watch Dynamo compiles nothing, by design:
            return step(*args, **kwargs)               # the first step outside one is the one checked
        before = dynamo_counts()
        out = step(*args, **kwargs)
        self.check(before, dynamo_counts())
        self.checked = True
        return out

    def check(self, before: DynamoCounts, after: DynamoCounts) -> None:
        """Raise ``RuntimeError`` if the step between the counts ``before`` and ``after`` ran eager."""
        name, value = recompile_limit()
        eager = f"{self.what}: torch.compile was asked for, but the step ran eager"
        if after.limit_hits > before.limit_hits:
            raise RuntimeError(f"{eager}: Dynamo hit torch._dynamo.config.{name} ({value}) and fell back to eager; "
                               f"its compile lever would be timed as eager. Call torch._dynamo.reset() before "
                               f"compiling another recipe, or raise torch._dynamo.config.{name}")
        failed = (after.frames - after.frames_ok) - (before.frames - before.frames_ok)
        if failed > 0:
            old = dict(before.fallbacks)
            why = [k.splitlines()[0] for k, v in after.fallbacks if v > old.get(k, 0)]
            raise RuntimeError(f"{eager}: {failed} frame(s) fell back to eager"
                               + (f" ({'; '.join(why[:3])})" if why else ""))
        if after.graphs <= _graphs_at_reset[0]:
            raise RuntimeError(f"{eager}: no graph was compiled since Dynamo was reset (is torch.compile disabled, "
                               "e.g. by TORCHDYNAMO_DISABLE=1 or torch._dynamo.config.disable?)")
