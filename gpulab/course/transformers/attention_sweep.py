"""Attention written out (softmax(QK^T / sqrt(d)) V with the T x T scores in memory) against
``scaled_dot_product_attention`` over sequence lengths: time and peak memory of each, the backend SDPA ran, and how
each one's memory grows with T, fitted from the measurements (about T^2 for the written-out scores, about T for a
fused kernel that never holds them).

Example:
    >>> from gpulab import course
    >>> sweep = course.attention_sweep([64, 128], batch=1, heads=2, head_dim=16, min_run_time=0.02)
    >>> [p.seq_len for p in sweep.points], sweep.points[0].backend in ("flash", "math", "memory-efficient", "cudnn")
    ([64, 128], True)
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Sequence

from ..._check import device_arg, flag, positive, whole
from ..._format import TableView, fmt_bytes, fmt_seconds

__all__ = ["AttentionPoint", "AttentionSweep", "attention_sweep", "manual_attention"]


def manual_attention(q: Any, k: Any, v: Any, causal: bool = True) -> Any:
    """softmax(QK^T / sqrt(d)) V, the causal mask applied to the full T x T scores, as the attention paper writes
    it: every score is held in memory at once."""
    import torch

    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    if causal:
        t = q.shape[-2]
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return scores.softmax(-1) @ v


@dataclass(frozen=True)
class AttentionPoint:
    """One sequence length: median seconds and peak bytes of the written-out attention and of SDPA (a forward
    pass), and the backend SDPA ran."""

    seq_len: int
    manual_s: float
    sdpa_s: float
    manual_peak_bytes: int | None
    sdpa_peak_bytes: int | None
    backend: str


@dataclass(frozen=True, repr=False)
class AttentionSweep(TableView):
    """Attention over sequence lengths (immutable): the table, :meth:`growth` (the fitted exponent of memory or time
    against T) and :meth:`plot`."""

    points: tuple[AttentionPoint, ...]
    batch: int
    heads: int
    head_dim: int
    dtype: str
    device: str
    title: str = "Attention: written out vs scaled_dot_product_attention"
    backward: bool = False

    def growth(self, which: str = "manual", metric: str = "memory") -> float | None:
        """The exponent k in ``metric ~ T^k`` fitted over the sweep (least squares on logs): about 2 for memory
        that holds the T x T scores, about 1 for memory linear in T. ``which``: "manual" or "sdpa"; ``metric``:
        "memory" or "time". None with fewer than two positive points."""
        if which not in ("manual", "sdpa") or metric not in ("memory", "time"):
            raise ValueError(f"which must be 'manual' or 'sdpa' and metric 'memory' or 'time', got {which!r}, {metric!r}")
        field = f"{which}_peak_bytes" if metric == "memory" else f"{which}_s"
        xy = [(math.log(p.seq_len), math.log(v)) for p in self.points if (v := getattr(p, field)) and v > 0]
        if len(xy) < 2:
            return None
        mx, my = sum(x for x, _ in xy) / len(xy), sum(y for _, y in xy) / len(xy)
        sxx = sum((x - mx) ** 2 for x, _ in xy)
        return sum((x - mx) * (y - my) for x, y in xy) / sxx if sxx else None

    def to_dataframe(self) -> Any:
        import pandas as pd

        return pd.DataFrame([vars(p) for p in self.points]).set_index("seq_len")

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        header = ["T", "written out", "SDPA", "SDPA speedup", "written-out memory", "SDPA memory", "SDPA backend"]
        rows = [[str(p.seq_len), fmt_seconds(p.manual_s), fmt_seconds(p.sdpa_s), f"{p.manual_s / p.sdpa_s:.2f}x",
                 fmt_bytes(p.manual_peak_bytes), fmt_bytes(p.sdpa_peak_bytes), p.backend] for p in self.points]
        gm, gs = self.growth("manual"), self.growth("sdpa")
        fit = ("memory grows as T^{:.2f} written out and T^{:.2f} with SDPA (fitted over the sweep)".format(gm, gs)
               if gm is not None and gs is not None else "")
        what = ("forward and backward (the written-out version keeps its T x T probabilities for the backward; SDPA's "
                "fused kernels keep O(T) statistics and recompute the scores)" if self.backward else
                "one forward pass without autograd (nothing kept for a backward: in training the written-out version "
                "also keeps its T x T probabilities until the backward; attention_sweep(..., backward=True) measures it)")
        note = (f"batch {self.batch} x {self.heads} heads of {self.head_dim}, {self.dtype} on {self.device}, causal, "
                f"{what}; memory = the peak of what the call allocated")
        return header, rows, "; ".join(n for n in (note, fit) if n)

    def plot(self, ax: Any = None) -> Any:
        """Time and peak memory against T on log-log axes, one panel each; returns the Figure."""
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(9, 3.4)) if ax is None else (ax[0].figure, ax)
        t = [p.seq_len for p in self.points]
        for a, (metric, unit, scale) in zip(axes, (("s", "time per call (ms)", 1e3),
                                                   ("peak_bytes", "peak memory (MiB)", 2.0**-20))):
            for which, style in (("manual", "o-"), ("sdpa", "s-")):
                ys = [getattr(p, f"{which}_{metric}") for p in self.points]
                if all(y is not None for y in ys):
                    a.plot(t, [y * scale for y in ys], style, label="written out" if which == "manual" else "SDPA")
            a.set_xscale("log", base=2)
            a.set_yscale("log")
            a.set_xlabel("sequence length T")
            a.set_ylabel(unit)
            a.grid(alpha=0.3, which="both")
            a.legend(frameon=False, fontsize=8)
        fig.suptitle(self.title, fontsize=10)
        fig.tight_layout()
        return fig


def _training(fn: Any, q: Any, k: Any, v: Any, **kw: Any) -> Any:
    """A call of ``fn`` forward and backward, as training runs it: fresh leaves, the output summed, gradients made."""
    def call() -> None:
        qq, kk, vv = (x.detach().requires_grad_() for x in (q, k, v))
        fn(qq, kk, vv, **kw).sum().backward()
    return call


def attention_sweep(seq_lens: Sequence[int], *, batch: int = 4, heads: int = 8, head_dim: int = 64,
                    dtype: Any = None, device: Any = None, min_run_time: float = 0.2,
                    backward: bool = False) -> AttentionSweep:
    """Time (:func:`gpulab.benchmark`) and peak memory (:func:`gpulab.peak_memory`) of one causal attention forward
    pass (with ``backward``: forward and backward, what training pays, and keeps), written out and through SDPA, at
    each of ``seq_lens``; ``dtype`` defaults to float32 on a CPU and the device's 16-bit type on a GPU
    (:func:`gpulab.choose_precision`)."""
    import torch

    from ...attention import sdpa_backend
    from ...memory import peak_memory
    from ...precision import choose_precision
    from ...system import device as pick_device
    from ...timing import benchmark

    if isinstance(seq_lens, (str, bytes)) or not isinstance(seq_lens, Sequence):
        raise TypeError(f"seq_lens must be a list of sequence lengths, e.g. [128, 256, 512], got {seq_lens!r}")
    if not seq_lens:
        raise ValueError("seq_lens is empty: pass the sequence lengths to time, e.g. [128, 256, 512]")
    lens = [whole("seq_lens", t) for t in seq_lens]
    batch, heads, head_dim = whole("batch", batch), whole("heads", heads), whole("head_dim", head_dim)
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating torch dtype (torch.float32, torch.bfloat16, torch.float16) or None, "
                        f"got {dtype!r}")
    positive("min_run_time", min_run_time, unit="seconds")
    backward = flag("backward", backward)
    dev = pick_device(None if device_arg("device", device) is None else str(device))
    if dtype is None:
        dtype = torch.float32 if dev.type == "cpu" else choose_precision().autocast_dtype
    import torch.nn.functional as F

    gen = torch.Generator(device=dev).manual_seed(0)      # inputs drawn apart from the caller's global generator
    points = []
    for t in lens:
        q, k, v = (torch.randn(batch, heads, t, head_dim, device=dev, dtype=dtype, generator=gen) for _ in range(3))
        if backward:
            calls = (_training(manual_attention, q, k, v), _training(F.scaled_dot_product_attention, q, k, v,
                                                                     is_causal=True))
        else:
            calls = (lambda: manual_attention(q, k, v),
                     lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        with (contextlib.nullcontext() if backward else torch.no_grad()):
            manual = benchmark(calls[0], label=f"written out, T={t}", device=dev, min_run_time=min_run_time,
                               warn_noisy=False, energy=False)
            fused = benchmark(calls[1], label=f"SDPA, T={t}", device=dev, min_run_time=min_run_time,
                              warn_noisy=False, energy=False)
            pm = peak_memory(calls[0], device=dev)
            ps = peak_memory(calls[1], device=dev)
            backend = sdpa_backend(q, k, v, is_causal=True)
        points.append(AttentionPoint(t, manual.median_s, fused.median_s, pm.peak_bytes, ps.peak_bytes, backend))
    return AttentionSweep(tuple(points), batch, heads, head_dim, str(dtype).replace("torch.", ""), str(dev),
                          backward=backward)
