"""Entering a ``TorchDispatchMode`` (gpulab's memory watches, work and FLOP counters and profilers) so that it sees
the same operators on every torch, without costing a compiled function its compilation.

Under ``torch.inference_mode()`` a module's composite operators reach a mode whole (``aten.linear``, not the matrix
product it is made of), and torch 2.5's FLOP counter charges such an operator nothing (2.14's decomposes it): a
Linear layer counted under inference mode was 0 FLOPs. Inside :func:`dispatch_mode` inference mode is set aside for
``no_grad`` (the same arithmetic, no autograd graph either), so the operators arrive as they do in training.

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
def _inference_mode_set_aside() -> Iterator[None]:
    """Inside ``torch.inference_mode()``: ``inference_mode(False)`` and ``no_grad()`` until the block ends (composite
    operators then reach a dispatch mode decomposed, as in training); elsewhere nothing."""
    import torch

    if not torch.is_inference_mode_enabled():
        yield
        return
    with torch.inference_mode(False), torch.no_grad():
        yield


@contextlib.contextmanager
def dispatch_mode(mode: Any) -> Iterator[Any]:
    """``with mode:``, with inference mode set aside for ``no_grad`` (composite operators decomposed, as in training),
    and on a torch whose Dynamo would mark code met under a mode "skip" for good, with Dynamo's frame hook held off
    for the block (the functions run eager inside, as they would anyway, and compile later)."""
    guard = _dynamo_hook_off() if _skips_code_for_good() else contextlib.nullcontext()
    with guard, _inference_mode_set_aside(), mode:
        yield mode
