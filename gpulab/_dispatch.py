"""Entering a ``TorchDispatchMode`` (gpulab's memory watches, work counter and profilers) without costing a
compiled function its compilation.

Dynamo compiles nothing while a dispatch mode is active: a ``torch.compile``-d function called inside one runs eager.
Torch releases whose Dynamo has no ``ConvertFrameReturn`` (2.5, the floor, among them) also mark the function's code
"skip" for good when they meet it under a mode, so it stays eager after the mode has ended: a recipe sized with
``gl.find_max_batch_size`` or counted with ``gl.profile`` would be timed eager. There :func:`dispatch_mode` keeps
Dynamo's frame hook off while the mode is active: the function runs eager inside, exactly as it would, and compiles
at its first call outside.

Example:
    >>> import torch
    >>> from torch.utils._python_dispatch import TorchDispatchMode
    >>> class Count(TorchDispatchMode):
    ...     n = 0
    ...     def __torch_dispatch__(self, func, types, args=(), kwargs=None):
    ...         Count.n += 1
    ...         return func(*args, **(kwargs or {}))
    >>> with dispatch_mode(Count()):
    ...     _ = torch.ones(3) + 1
    >>> Count.n >= 2
    True
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator


def _skips_code_for_good() -> bool:
    """Does the installed Dynamo mark a function's code "skip" for good when it meets it under a dispatch mode?"""
    try:
        import torch._dynamo.convert_frame as convert_frame
        import torch._dynamo.eval_frame as eval_frame
    except Exception:   # no Dynamo (or a torch that cannot import it): nothing is compiled, nothing to keep
        return False
    return not hasattr(convert_frame, "ConvertFrameReturn") and hasattr(eval_frame, "_maybe_set_eval_frame")


@contextlib.contextmanager
def _dynamo_hook_off() -> Iterator[None]:
    """Dynamo's frame hook held off (compiled functions run plain eager) until the block ends, then put back."""
    import torch._dynamo.eval_frame as eval_frame

    real = eval_frame._maybe_set_eval_frame
    prior = real(None)                   # the hook that was active (None, or an enclosing compiled region's)
    eval_frame._maybe_set_eval_frame = lambda callback: real(None)   # compiled wrappers entered inside set none
    try:
        yield
    finally:
        eval_frame._maybe_set_eval_frame = real
        real(prior)


@contextlib.contextmanager
def dispatch_mode(mode: Any) -> Iterator[Any]:
    """``with mode:``, and on a torch whose Dynamo would mark code met under it "skip" for good, with Dynamo's
    frame hook held off for the block (the functions run eager inside, as they would anyway, and compile later)."""
    guard = _dynamo_hook_off() if _skips_code_for_good() else contextlib.nullcontext()
    with guard, mode:
        yield mode
