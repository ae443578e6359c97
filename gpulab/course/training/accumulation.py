"""Gradient accumulation you can trust, and gradient checkpointing, the other memory lever.

- :func:`micro_batch_gradients` - the gradients after accumulating a batch in micro-batches, weighted
  correctly (``"by_size"``) or with the two classic bugs: not dividing at all (``"none"``), or dividing
  every micro-batch by their count (``"equal"``), which is wrong when the last micro-batch is smaller.
  Optionally under autocast (bf16, or fp16 with loss scaling).
- :func:`compare_gradients` -> :class:`GradientCheck` - do two sets of gradients agree within a tolerance?
- :func:`checkpointed` - a ``nn.Sequential`` that keeps only the activations at segment boundaries and
  recomputes the rest during backward (``torch.utils.checkpoint``), sharing the original's layers; with
  ``save="matmuls"`` selectively: matmul and convolution outputs kept, the cheap operators recomputed.

Example:
    >>> import torch, gpulab as gl
    >>> from gpulab import course
    >>> torch.manual_seed(0) and None
    >>> model, batch = course.models.mlp(), course.models.example_batch("mlp", 50)
    >>> full = course.micro_batch_gradients(model, batch, steps=1)
    >>> course.compare_gradients(full, course.micro_batch_gradients(model, batch, micro_batch_size=16)).ok
    True
    >>> course.compare_gradients(full, course.micro_batch_gradients(model, batch, micro_batch_size=16, weighting="none")).ok
    False
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence

from ..._format import html_table, text_table

__all__ = ["micro_batch_gradients", "GradientCheck", "compare_gradients", "checkpointed", "matmul_ops"]

Weighting = Literal["by_size", "equal", "none"]
_PRECISIONS = ("fp32", "bf16", "fp16")


def micro_batch_gradients(model: Any, batch: tuple[Any, Any], *, steps: int | None = None,
                          micro_batch_size: int | None = None, weighting: Weighting = "by_size",
                          precision: Literal["fp32", "bf16", "fp16"] = "fp32", loss_scale: float = 2.0**16,
                          loss_fn: Callable[[Any, Any], Any] | None = None) -> list[Any]:
    """Accumulate the gradients of ``batch = (inputs, targets)`` over micro-batches; return copies of the
    parameters' gradients (the model's own ``.grad`` are cleared).

    Give either ``steps`` (that many near-equal micro-batches, as ``TrainConfig(accumulation_steps=...)``
    cuts them) or ``micro_batch_size`` (micro-batches of that size and a smaller last one, as a data
    loader without ``drop_last`` yields them). ``weighting`` says how each micro-batch's mean loss is
    scaled before ``backward()``:

    - ``"by_size"`` (correct): by its share of the batch, ``n_i / N``;
    - ``"equal"``: by ``1 / number of micro-batches`` - right only when all micro-batches are equal;
    - ``"none"``: not at all - the gradient comes out about ``number of micro-batches`` times too large.

    ``precision`` runs the forward pass under ``torch.autocast`` (bf16 or fp16); for fp16 each loss is
    multiplied by ``loss_scale`` before backward and the gradients divided by it afterwards, as
    ``GradScaler`` does. Models with BatchNorm normalise each micro-batch by its own statistics, so their
    accumulated gradients differ from the full batch's even when weighted correctly (and the running
    statistics are updated once per micro-batch).

    Example:
        >>> import gpulab as gl
        >>> from gpulab import course
        >>> model, batch = course.models.mlp(hidden=32), course.models.example_batch("mlp", 10)
        >>> grads = micro_batch_gradients(model, batch, micro_batch_size=4)     # 4 + 4 + 2 items
        >>> len(grads) == len(list(model.parameters()))
        True
    """
    import torch
    import torch.nn.functional as F

    if weighting not in ("by_size", "equal", "none"):
        raise ValueError(f"weighting must be 'by_size', 'equal' or 'none', got {weighting!r}")
    if precision not in _PRECISIONS:
        raise ValueError(f"precision must be one of {_PRECISIONS}, got {precision!r}")
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise TypeError("batch must be (inputs, targets)")
    x, y = batch
    total = int(x.shape[0])
    if (steps is None) == (micro_batch_size is None):
        raise ValueError("give exactly one of steps=... or micro_batch_size=...")
    for name, value in (("steps", steps), ("micro_batch_size", micro_batch_size)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    if steps is not None and steps > total:
        raise ValueError(f"steps={steps} is more than the batch's {total} items")
    if isinstance(loss_scale, bool) or not isinstance(loss_scale, (int, float)) or not loss_scale > 0:
        raise ValueError(f"loss_scale must be a positive number, got {loss_scale!r}")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("micro_batch_gradients needs a model with trainable parameters")
    loss_fn = loss_fn or F.cross_entropy
    xs = x.tensor_split(steps) if steps is not None else x.split(micro_batch_size)
    ys = y.tensor_split(steps) if steps is not None else y.split(micro_batch_size)
    pieces = [(a, b) for a, b in zip(xs, ys) if a.shape[0] > 0]
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    scale = float(loss_scale) if precision == "fp16" else 1.0
    device_type = params[0].device.type
    model.zero_grad(set_to_none=True)
    for a, b in pieces:
        ctx = torch.autocast(device_type, dtype=dtype) if dtype is not None else contextlib.nullcontext()
        with ctx:
            out = model(a)
        loss = loss_fn(out.float(), b)
        weight = {"by_size": a.shape[0] / total, "equal": 1.0 / len(pieces), "none": 1.0}[weighting]
        (loss * (weight * scale)).backward()
    grads = [(p.grad.detach().float() / scale if p.grad is not None else torch.zeros_like(p, dtype=torch.float32))
             for p in params]
    model.zero_grad(set_to_none=True)
    return grads


@dataclass(frozen=True)
class GradientCheck:
    """How a candidate set of gradients compares with a reference.

    ``relative_error`` = ``||candidate - reference|| / ||reference||`` over all parameters at once;
    ``norm_ratio`` = ``||candidate|| / ||reference||`` (about k for the undivided k-micro-batch bug);
    ``cosine`` = cosine similarity of the two (1: same direction). ``ok`` when ``relative_error <= rtol``.
    """

    label: str
    relative_error: float
    max_abs_diff: float
    norm_ratio: float
    cosine: float
    rtol: float

    @property
    def ok(self) -> bool:
        return self.relative_error <= self.rtol

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.label, "agrees": self.ok, "relative error": self.relative_error,
                "tolerance": self.rtol, "norm ratio": self.norm_ratio, "cosine": self.cosine,
                "max abs diff": self.max_abs_diff}

    def _rows(self) -> list[tuple[str, str]]:
        return [("agrees", f"{'yes' if self.ok else 'NO'} (relative error {self.relative_error:.2g}, tolerance "
                           f"{self.rtol:.2g})"),
                ("norm ratio", f"{self.norm_ratio:.4g}"), ("cosine similarity", f"{self.cosine:.6f}"),
                ("max abs difference", f"{self.max_abs_diff:.3g}")]

    def __repr__(self) -> str:
        return f"GradientCheck {self.label!r}\n" + text_table(("", ""), self._rows())

    def _repr_html_(self) -> str:
        color = "#1b7a2b" if self.ok else "#b00020"
        return (f'<div style="border-left:4px solid {color};padding:2px 6px">'
                + html_table(("", ""), self._rows(), caption=f"Gradient check: {self.label}") + "</div>")


def compare_gradients(reference: Sequence[Any], candidate: Sequence[Any], *, rtol: float = 1e-4,
                      label: str = "gradients") -> GradientCheck:
    """Compare two lists of gradient tensors (same shapes, same order) as one long vector.

    ``rtol`` is the tolerated relative error: ~1e-4 suits fp32 (sums in a different order differ in the
    last digits), ~1e-2 bf16 autocast (3 significant digits).

    Example:
        >>> import torch
        >>> g = [torch.ones(3), torch.ones(2, 2)]
        >>> compare_gradients(g, [2 * t for t in g]).norm_ratio
        2.0
    """
    import torch

    if isinstance(rtol, bool) or not isinstance(rtol, (int, float)) or not rtol >= 0:
        raise ValueError(f"rtol must be a non-negative number, got {rtol!r}")
    ref, cand = list(reference), list(candidate)
    if not ref:
        raise ValueError("compare_gradients needs at least one tensor")
    if len(ref) != len(cand):
        raise ValueError(f"different numbers of gradient tensors: {len(ref)} vs {len(cand)} (same model?)")
    for i, (a, b) in enumerate(zip(ref, cand)):
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
            raise TypeError(f"gradient {i} is not a tensor: {type(a).__name__}, {type(b).__name__}")
        if a.shape != b.shape:
            raise ValueError(f"gradient {i} has shape {tuple(a.shape)} vs {tuple(b.shape)}")
    r = torch.cat([t.detach().double().flatten().cpu() for t in ref])
    c = torch.cat([t.detach().double().flatten().cpu() for t in cand])
    rn, cn = float(r.norm()), float(c.norm())
    diff = float((c - r).norm())
    rel = diff / rn if rn > 0 else (0.0 if diff == 0 else math.inf)
    cos = float(torch.dot(r, c) / (rn * cn)) if rn > 0 and cn > 0 else (1.0 if rn == cn else 0.0)
    return GradientCheck(label, rel, float((c - r).abs().max()), cn / rn if rn > 0 else math.inf, cos, float(rtol))


# ----------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _keep_batchnorm_statistics(module: Any) -> Any:
    """During checkpoint's recomputation, restore BatchNorm running statistics afterwards, so that
    recomputing a segment does not update them a second time."""
    from torch.nn.modules.batchnorm import _BatchNorm

    import torch

    saved = [(m, [b.detach().clone() for b in (m.running_mean, m.running_var, m.num_batches_tracked)
                  if b is not None]) for m in module.modules() if isinstance(m, _BatchNorm) and m.track_running_stats]
    try:
        yield
    finally:
        with torch.no_grad():
            for m, values in saved:
                for buf, value in zip([b for b in (m.running_mean, m.running_var, m.num_batches_tracked)
                                       if b is not None], values):
                    buf.copy_(value)


@contextlib.contextmanager
def _both(first: Any, second: Any) -> Any:
    with first, second:
        yield


def matmul_ops() -> tuple[Any, ...]:
    """The operators selective checkpointing keeps (``save="matmuls"``): matrix multiplications and
    convolutions, the expensive ones to recompute; everything else (normalisation, activations, pooling,
    additions) is recomputed during backward.

    Example:
        >>> len(matmul_ops()) >= 4
        True
    """
    import torch

    aten = torch.ops.aten
    return (aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default, aten.convolution.default)


def _save_policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
    from torch.utils.checkpoint import CheckpointPolicy

    return CheckpointPolicy.MUST_SAVE if op in matmul_ops() else CheckpointPolicy.PREFER_RECOMPUTE


_BLOCK_CLASS: Any = None


def _block_class() -> Any:
    global _BLOCK_CLASS
    if _BLOCK_CLASS is None:
        import torch
        from torch import nn
        from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

        class CheckpointedSegment(nn.Module):
            """Runs ``segment`` under ``torch.utils.checkpoint`` while training with gradients: only its
            input is kept; its inner activations are recomputed during backward."""

            def __init__(self, segment: Any, save: str | None = None) -> None:
                super().__init__()
                self.segment = segment
                self.save = save

            def _contexts(self) -> tuple[Any, Any]:
                keep = _keep_batchnorm_statistics(self.segment)
                if self.save is None:
                    return contextlib.nullcontext(), keep
                forward_ctx, recompute_ctx = create_selective_checkpoint_contexts(_save_policy)
                return forward_ctx, _both(keep, recompute_ctx)   # statistics saved and restored outside the mode

            def forward(self, x: Any) -> Any:
                if not (self.training and torch.is_grad_enabled()):
                    return self.segment(x)
                # use_reentrant=False: the saved-tensor-hooks implementation (autograd graph recorded in forward,
                # recomputation stopped once the needed tensors exist, context_fn supported). Without the argument
                # torch warns and falls back to the older reentrant one.
                return checkpoint(self.segment, x, use_reentrant=False, context_fn=self._contexts)

        _BLOCK_CLASS = CheckpointedSegment
    return _BLOCK_CLASS


def checkpointed(model: Any, segments: int | None = None, *, save: str | None = None) -> Any:
    """Gradient checkpointing for an ``nn.Sequential``: cut it into ``segments`` runs of consecutive
    layers (default ``round(sqrt(len(model)))``, the O(sqrt n) memory plan of Chen et al. 2016) and run
    each but the last under ``torch.utils.checkpoint``. Forward keeps only each segment's input; backward
    recomputes one segment at a time - less activation memory for about one extra forward pass.
    ``segments=1`` checkpoints nothing. Every segment runs ``torch.utils.checkpoint.checkpoint`` with
    ``use_reentrant=False``.

    ``save="matmuls"`` makes it *selective* (``torch.utils.checkpoint.create_selective_checkpoint_contexts``,
    torch 2.4+): each segment keeps the outputs of its matmuls and convolutions (:func:`matmul_ops`) and
    recomputes only the cheap operators between them, so backward repeats little work for a smaller saving.

    Returns a new ``nn.Sequential`` that shares the original's layers (and so its parameters: an optimizer
    built on either trains both). In eval mode or under ``torch.no_grad()`` it runs as the plain model.

    Example:
        >>> import torch, gpulab as gl
        >>> from gpulab import course
        >>> model = course.models.mlp(layers=4)
        >>> ckpt = course.checkpointed(model, segments=3)
        >>> x = torch.randn(2, 1, 28, 28)
        >>> torch.allclose(ckpt(x), model(x)) and len(ckpt) == 3
        True
        >>> torch.allclose(course.checkpointed(model, 3, save="matmuls")(x), model(x))
        True
    """
    from torch import nn

    if not isinstance(model, nn.Sequential):
        raise TypeError(f"checkpointed needs an nn.Sequential (e.g. course.models.mlp() or small_cnn()), "
                        f"got {type(model).__name__}; for other models call torch.utils.checkpoint.checkpoint "
                        "inside their forward")
    layers = list(model.children())
    if not layers:
        raise ValueError("checkpointed needs a Sequential with at least one layer")
    if segments is None:
        segments = max(1, round(math.sqrt(len(layers))))
    if isinstance(segments, bool) or not isinstance(segments, int) or not 1 <= segments <= len(layers):
        raise ValueError(f"segments must be a whole number from 1 to {len(layers)} (the number of layers), "
                         f"got {segments!r}")
    if save not in (None, "matmuls"):
        raise ValueError(f"save must be None (full checkpointing) or 'matmuls' (keep matmul and convolution "
                         f"outputs, recompute the rest), got {save!r}")
    block = _block_class()
    bounds = [round(i * len(layers) / segments) for i in range(segments + 1)]
    chunks = [nn.Sequential(*layers[a:b]) for a, b in zip(bounds, bounds[1:])]
    # The last segment runs plainly (as in torch.utils.checkpoint.checkpoint_sequential): backward needs
    # its activations at once, so checkpointing it would only recompute it.
    out = nn.Sequential(*[block(c, save) for c in chunks[:-1]], chunks[-1])
    out.train(model.training)
    return out
