"""Activation memory, predicted and then measured (lesson 13): what a GPT's forward pass keeps for its backward,
against Korthikanti et al. (2022), 'Reducing Activation Recomputation in Large Transformer Models', section 4.1.

Per layer, their count in 16-bit with dropout is ``s b h (34 + 5 a s / h)`` bytes (``s`` tokens, ``b`` sequences,
``h`` = d_model, ``a`` heads): ``34 s b h`` for the inputs the matmuls, LayerNorms and GELU keep, and the dropout
masks; ``5 a s^2 b`` for the attention scores' softmax, its dropout mask and output. The course's GPT has no dropout,
so the same reading of its block gives ``32 s b h + 2 a s^2 b`` per 16-bit value (twice that in fp32), and through a
fused attention kernel (SDPA) no ``s^2`` term at all: it keeps its output and a statistic per row instead.
:func:`activation_memory` measures the bytes a forward pass leaves alive at several (micro-batch, tokens) points and
fits ``alpha s b h + beta a s^2 b`` per layer by least squares, to set beside the count.

Example:
    >>> from gpulab import course
    >>> from gpulab.transformer import TransformerShape
    >>> shape = TransformerShape(layers=2, d_model=32, heads=2, seq_len=64, vocab=256)
    >>> am = course.activation_memory(shape, points=[(1, 16), (2, 16), (1, 32), (2, 64)], manual_attention=True)
    >>> abs(am.alpha - 64) < 2, round(am.beta)                   # fp32 on a CPU: 2 x (32, 2), LayerNorms' statistics
    (True, 4)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..._check import device_arg, flag
from ..._format import TableView, fmt_bytes
from ...transformer import TransformerShape
from .checks import shape_arg

__all__ = ["ActivationPoint", "ActivationMemory", "activation_memory"]

KORTHIKANTI = (34, 5)      # bytes per s b h and per a s^2 b, per layer, 16-bit with dropout (their section 4.1)
NO_DROPOUT = (32, 2)       # the same count for a block without dropout, per 16-bit value: the course's GPT


@dataclass(frozen=True)
class ActivationPoint:
    """One measured (micro-batch, tokens) point: the bytes the forward left alive, and the fit's value there."""

    batch: int
    tokens: int
    kept_bytes: int
    fitted_bytes: float
    korthikanti_bytes: int


@dataclass(frozen=True, repr=False)
class ActivationMemory(TableView):
    """The measured points and the fit ``alpha s b h + beta a s^2 b`` bytes per layer (one layer: the model's bytes
    less those of a copy with one layer, over the layers between); ``gamma`` the bytes outside the blocks (embeddings,
    final LayerNorm, the logits and the loss's log-probabilities) per ``s b V``; ``value_bytes`` the bytes of one
    activation value (4 in fp32, 2 in 16-bit)."""

    points: tuple[ActivationPoint, ...]
    alpha: float
    beta: float
    gamma: float
    value_bytes: int
    manual_attention: bool
    device: str
    d_model: int = 0
    heads: int = 0
    title: str = "Activation memory: measured, fitted and counted"

    @property
    def expected(self) -> tuple[float, float]:
        """``(alpha, beta)`` the block's own count gives at this value size: no dropout, and no s^2 term through a
        fused attention kernel."""
        a, b = NO_DROPOUT
        scale = self.value_bytes / 2
        return a * scale, (b * scale if self.manual_attention else 0.0)

    def score_share(self, tokens: int) -> float:
        """The share of one layer's bytes that the s^2 term holds at ``tokens`` tokens, by the fit."""
        s_term = self.beta * self.heads * tokens
        return s_term / (self.alpha * self.d_model + s_term) if self.alpha * self.d_model + s_term > 0 else 0.0

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        header = ["micro-batch", "tokens", "kept by the forward", "fit", "Korthikanti (16-bit, dropout)"]
        rows = [[str(p.batch), str(p.tokens), fmt_bytes(p.kept_bytes), fmt_bytes(p.fitted_bytes),
                 fmt_bytes(p.korthikanti_bytes)] for p in self.points]
        ea, eb = self.expected
        note = (f"fit per layer: {self.alpha:.1f} s b h + {self.beta:.1f} a s^2 b bytes (outside the blocks: "
                f"{self.gamma:.1f} s b V, the logits and the loss's log-probabilities); the block's own count at {self.value_bytes} bytes per value: {ea:g} s b h + {eb:g} a s^2 b "
                f"({'attention written out' if self.manual_attention else 'fused attention: no s^2 term'}); "
                f"Korthikanti et al.: {KORTHIKANTI[0]} s b h + {KORTHIKANTI[1]} a s^2 b in 16-bit with dropout; "
                f"on {self.device}")
        return header, rows, note


def _kept_by_forward(model: Any, x: Any, y: Any, dev: Any) -> int:
    """Bytes of the tensors a forward pass made that are still alive when it returns (what the graph keeps)."""
    import torch

    from ...memory.peak import MemoryTracker
    from ...timing import synchronize

    if dev.type == "cuda":
        synchronize(dev)
        base = torch.cuda.memory_allocated(dev)
        _, loss = model(x, y)
        synchronize(dev)
        kept = int(torch.cuda.memory_allocated(dev) - base)
    else:
        with MemoryTracker() as tracker:
            _, loss = model(x, y)
        kept = int(tracker.current_bytes)
    del loss
    return kept


def activation_memory(shape: TransformerShape, points: Sequence[tuple[int, int]] = ((1, 64), (2, 64), (1, 128),
                                                                                       (2, 128), (4, 128)),
                      *, manual_attention: bool = False, device: Any = None) -> ActivationMemory:
    """Measure what a training forward pass of the course's GPT of ``shape`` keeps for its backward at each
    ``(micro-batch, tokens)`` of ``points`` (tokens within ``shape.seq_len``), and fit the per-layer bytes."""
    import numpy as np
    import torch

    from ...system import device as pick_device
    from .gpt import gpt, text_tokens, token_batch

    shape_arg("shape", shape)
    manual_attention = flag("manual_attention", manual_attention)
    if isinstance(points, (str, bytes)) or not isinstance(points, Sequence) or len(points) < 3 or not all(
            isinstance(p, tuple) and len(p) == 2 and all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                                                         for v in p) for p in points):
        raise TypeError(f"points must be 3 or more (micro-batch, tokens) pairs of whole numbers > 0, e.g. [(1, 64), "
                        f"(2, 64), (1, 128)], got {points!r:.80}")
    if max(t for _, t in points) > shape.seq_len:
        raise ValueError(f"points ask for {max(t for _, t in points)} tokens, past the shape's context of "
                         f"{shape.seq_len}")
    if len({t for _, t in points}) < 2 or len({b * t for b, t in points}) < 2:
        raise ValueError("points need two token counts or more (the s^2 term is told from the s term by them)")
    dev = pick_device(None if device_arg("device", device) is None else str(device))
    if shape.layers < 2:
        raise ValueError(f"shape.layers must be 2 or more, got {shape.layers}: one layer's bytes are the difference "
                         "between the model and a copy of it with one layer")
    one = TransformerShape(1, shape.d_model, shape.heads, shape.seq_len, shape.vocab, shape.mlp_ratio, shape.kv_heads)
    with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):   # the caller's generators untouched
        torch.manual_seed(0)
        models = [gpt(s, manual_attention=manual_attention).to(dev).train() for s in (shape, one)]
    tokens, gen = text_tokens(), torch.Generator().manual_seed(0)
    measured, per_layer = [], []
    for b, t in points:
        x, y = token_batch(tokens, b, t, gen, device=dev)
        full, single = (_kept_by_forward(m, x, y, dev) for m in models)
        measured.append(full)
        per_layer.append((full - single) / (shape.layers - 1))   # what one more block keeps
    value = next(models[0].parameters()).element_size()
    L, h, a = shape.layers, shape.d_model, shape.heads
    feats = np.array([[t * b * h, a * t * t * b] for b, t in points], dtype=float)
    coef, *_ = np.linalg.lstsq(feats, np.array(per_layer, dtype=float), rcond=None)
    alpha, beta = (float(c) for c in coef)
    outside = [m - L * float(f @ coef) for m, f in zip(measured, feats)]      # embeddings, final LayerNorm, logits
    rows = tuple(ActivationPoint(b, t, m, L * float(f @ coef) + o, L * (KORTHIKANTI[0] * t * b * h
                                                                         + KORTHIKANTI[1] * a * t * t * b))
                 for (b, t), m, f, o in zip(points, measured, feats, outside))
    gamma = float(np.mean([o / (t * b * shape.vocab) for o, (b, t) in zip(outside, points)]))
    return ActivationMemory(rows, alpha, beta, gamma, value, manual_attention, str(dev), shape.d_model, shape.heads)
