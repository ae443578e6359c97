"""The argument checks of the course's GPT (:mod:`gpulab.course.transformers.gpt`, :mod:`gpulab.course.transformers.train`,
:mod:`gpulab.course.transformers.generation`): token tensors, models, shapes, seeds and runs, each refused before any work with a
``TypeError``/``ValueError`` naming the argument and what to pass, never a raw error from inside torch.

Token ids are checked against the vocabulary where that costs no device sync: always for a tensor on the CPU, and
once per call for a prompt on any device (``ids(..., any_device=True)``). Inside a training step on a GPU a check
would wait for the device before every forward, and change the very timings the lesson measures.

Example:
    >>> import torch
    >>> ids("idx", torch.tensor([[1, 2, 3]]), vocab=256)
    >>> ids("idx", torch.tensor([[1, 2, 300]]), vocab=256)
    Traceback (most recent call last):
    ...
    ValueError: idx holds token ids from 1 to 300, outside the model's vocabulary of 256 (ids 0 to 255): ...
"""
from __future__ import annotations

from typing import Any

from ..._check import whole
from ...transformer import TransformerShape

__all__ = ["shape_arg", "seed_arg", "run_arg", "token_text", "ids", "model_arg", "same_device", "fits_text"]

TEXT_VOCAB = 256          # the course's text is bytes: ids 0-255


def shape_arg(name: str, value: Any) -> TransformerShape:
    """``value`` as a :class:`~gpulab.transformer.TransformerShape`."""
    if not isinstance(value, TransformerShape):
        raise TypeError(f"{name} must be a gpulab.transformer.TransformerShape (e.g. TransformerShape(layers=2, "
                        f"d_model=64, heads=4, seq_len=64, vocab=256)), got {type(value).__name__} {value!r:.60}")
    return value


def seed_arg(name: str, value: Any) -> int:
    """``value`` as a seed: a whole number >= 0."""
    return whole(name, value, low=0)


def run_arg(value: Any) -> Any:
    """``value`` as an open tracked run (something with ``log_metrics``) or None."""
    if value is not None and not callable(getattr(value, "log_metrics", None)):
        raise TypeError(f"run must be an open gl.tracking.track(...) run (or None), got {type(value).__name__} "
                        f"{value!r:.60}")
    return value


def _tensor(name: str, value: Any, what: str) -> Any:
    import torch

    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch tensor of {what}, got {type(value).__name__} {value!r:.60}")
    if value.dtype == torch.bool or value.is_floating_point() or value.is_complex():
        raise TypeError(f"{name} must hold integer token ids ({what}), got dtype {value.dtype}: pass "
                        f"{name}.long()" + (" if they are whole numbers" if value.is_floating_point() else ""))
    return value


def token_text(name: str, value: Any) -> Any:
    """``value`` as a text of token ids: a 1-D integer tensor (e.g. :func:`~gpulab.course.text_tokens`)."""
    _tensor(name, value, "token ids, 1-D (e.g. course.text_tokens())")
    if value.ndim != 1:
        raise ValueError(f"{name} must be a 1-D tensor of token ids (one long text), got shape {tuple(value.shape)}")
    return value


def ids(name: str, value: Any, vocab: int, *, any_device: bool = False) -> None:
    """``value`` checked as a ``(batch, tokens)`` integer tensor of ids in ``[0, vocab)`` with at least one token; the
    range is read for a tensor on the CPU (no device sync), and on any device with ``any_device``."""
    import torch

    _tensor(name, value, "shape (batch, tokens)")
    if value.ndim != 2:
        raise ValueError(f"{name} must be a 2-D tensor of token ids, shape (batch, tokens), got shape "
                         f"{tuple(value.shape)}" + (f": pass {name}[None] for one sequence" if value.ndim == 1 else ""))
    if value.shape[0] < 1 or value.shape[1] < 1:
        raise ValueError(f"{name} is empty (shape {tuple(value.shape)}): pass at least one sequence of one token")
    if type(value) is not torch.Tensor or value.is_meta or (value.device.type != "cpu" and not any_device):
        return                     # a fake or traced tensor, or one on a GPU inside a step: no reading it here
    if _compiling(torch):          # traced by torch.compile: reading values would break the graph (checked eager)
        return
    lo, hi = (int(v) for v in torch.aminmax(value))
    if lo < 0 or hi >= vocab:
        raise ValueError(f"{name} holds token ids from {lo} to {hi}, outside the model's vocabulary of {vocab} "
                         f"(ids 0 to {vocab - 1}): pass ids the model knows, or a TransformerShape with a larger vocab")


def _compiling(torch: Any) -> bool:
    """Is Dynamo tracing this call (``torch.compiler.is_compiling``; ``torch._dynamo.is_compiling`` before it)?"""
    probe = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if probe is None:
        import torch._dynamo

        probe = torch._dynamo.is_compiling
    return bool(probe())


def model_arg(name: str, value: Any) -> Any:
    """``value`` as the course's GPT (:func:`~gpulab.course.transformers.gpt`): a model with a ``shape`` and its ``blocks``."""
    if not isinstance(getattr(value, "shape", None), TransformerShape) or not hasattr(value, "blocks") \
            or not callable(getattr(value, "parameters", None)):
        raise TypeError(f"{name} must be the course's GPT (course.gpt(shape)), got {type(value).__name__} "
                        f"{value!r:.60}")
    return value


def same_device(name: str, value: Any, model: Any) -> None:
    """``value`` (a tensor) on the device of ``model``'s weights."""
    where = next(model.parameters()).device
    if value.device != where:
        raise ValueError(f"{name} is on {value.device} but the model is on {where}: pass {name}.to('{where}')")


def fits_text(shape: TransformerShape, text_name: str, length: int, seq_len_name: str = "shape.seq_len") -> None:
    """Windows of ``shape.seq_len`` tokens (and their next tokens) fit in a text of ``length`` tokens, and the text's
    byte ids fit the shape's vocabulary."""
    if shape.vocab < TEXT_VOCAB:
        raise ValueError(f"shape.vocab={shape.vocab} is smaller than the course's text needs: its tokens are bytes, "
                         f"ids 0 to {TEXT_VOCAB - 1}; pass a TransformerShape with vocab={TEXT_VOCAB} or more")
    if shape.seq_len > length - 2:
        raise ValueError(f"{seq_len_name}={shape.seq_len} is longer than the {text_name} allows: it has {length:,} "
                         f"tokens, and a window needs seq_len + 1 of them with room to start, so seq_len can be at "
                         f"most {length - 2:,}")
