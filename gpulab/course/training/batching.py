"""Batch size: throughput and memory across batch sizes, and learning rates that follow the batch.

:func:`batch_sweep` times one step at several batch sizes and records each step's peak memory, so you
see where items/s stops growing (the *knee*) and what each doubling costs in memory. :func:`scale_lr`
and :func:`warmup_factor` are the linear scaling rule and gradual warm-up of Goyal et al. (2017);
:func:`train_at_batch_size` trains a fresh model at one batch size and learning rate and reports its
accuracy, so scaling rules are checked, not assumed.

Example:
    >>> import torch, gpulab as gl
    >>> from gpulab import course
    >>> layer = torch.nn.Linear(64, 64)
    >>> xs = {n: torch.randn(n, 64) for n in (1, 16)}
    >>> sweep = course.batch_sweep(lambda n: layer(xs[n]), [1, 16], min_run_time=0.05, memory=False)
    >>> sweep.batch_sizes
    (1, 16)
    >>> course.scale_lr(0.1, base_batch=256, batch=8192)
    3.2
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Callable, Literal, Mapping, Sequence

from ..._format import fmt_bytes, fmt_number, fmt_seconds, html_table, text_table
from ..._check import checked, positive, whole
from ...limits import ceiling_for
from ...timing import Measurement

__all__ = ["batch_sweep", "BatchSweep", "scale_lr", "warmup_factor", "train_at_batch_size", "BatchRun", "curve_knee",
           "Knee"]


@dataclass(frozen=True)
class Knee:
    """The knee of a ``(batch, items/s)`` curve (from :func:`curve_knee`): ``batch`` is the smallest batch within
    ``threshold`` of the best, or ``None`` when the curve never flattened (only the last batch tried, ``last``,
    reaches it: the curve was still rising there, and a larger batch may still be faster).

    Example:
        >>> Knee(None, 256), str(Knee(32, 256))
        (Knee: no knee up to batch 256: still rising, 'batch 32')
    """

    batch: int | None
    last: int
    threshold: float = 0.9

    @property
    def flattened(self) -> bool:
        """False when the curve was still rising at the last batch tried."""
        return self.batch is not None

    @property
    def value(self) -> int | str:
        """The knee's batch, or the sentence saying there is none (to compare with a prediction)."""
        return self.batch if self.batch is not None else str(self)

    def __str__(self) -> str:
        return f"batch {self.batch}" if self.batch is not None else f"no knee up to batch {self.last}: still rising"

    def __repr__(self) -> str:
        return f"Knee: {self}"

    def _repr_html_(self) -> str:
        return html_table(("knee", f"first batch within {self.threshold:.0%} of the best"), [["", str(self)]])


def curve_knee(points: Sequence[tuple[int, float]], threshold: float = 0.9) -> Knee:
    """The knee of a ``(batch, items/s)`` curve, as :class:`BatchSweep` defines it for a measured one: the smallest
    batch reaching ``threshold`` of the best items/s (e.g. a published curve from :func:`published_curve`).
    When only the last (largest) batch reaches it, the curve never flattened: ``batch`` is ``None``.

    Example:
        >>> curve_knee([(1, 79.0), (8, 652.0), (32, 1128.0), (256, 1198.0)]).batch
        32
        >>> curve_knee([(1, 10.0), (8, 70.0), (64, 400.0)])
        Knee: no knee up to batch 64: still rising
    """
    pts = sorted((int(b), float(r)) for b, r in points)
    if not pts:
        raise ValueError("points must hold at least one (batch, items/s) pair, e.g. course.published_curve(key)")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold <= 1:
        raise ValueError(f"threshold must be a share of the best within (0, 1], got {threshold!r}")
    top = max(r for _, r in pts)
    first = next(b for b, r in pts if r >= threshold * top)
    return Knee(first if first != pts[-1][0] else None, pts[-1][0], float(threshold))


# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchSweep:
    """One step timed at several batch sizes (a :class:`~gpulab.Measurement` each, with its peak memory).

    ``knee`` is the smallest batch reaching ``threshold`` (default 90%) of the best items/s: past it,
    bigger batches cost memory and buy little speed. It is ``None`` when the curve never flattened (only the
    largest batch reaches the threshold); ``knee_info`` (a :class:`Knee`) says so in words.
    ``memory_per_item_bytes`` and ``fixed_memory_bytes`` fit peak memory as a straight line in the batch size.
    ``others_cpu_pct`` records how busy the machine was with other programs while timing; above 10% the caption
    says the curve is distorted.

    Example:
        >>> import torch, gpulab as gl
        >>> from gpulab import course
        >>> xs = {n: torch.randn(n, 8) for n in (1, 4)}
        >>> s = course.batch_sweep(lambda n: xs[n] * 2, [1, 4], min_run_time=0.02, memory=False)
        >>> s.knee in (*s.batch_sizes, None) and s.best in s.batch_sizes
        True
    """

    measurements: tuple[Measurement, ...]
    peak_flops: float | None = None
    threshold: float = 0.9
    others_cpu_pct: float | None = None   # CPU share other programs used while timing (see cpu_contention)
    batch_sizes: tuple[int, ...] = field(init=False)
    best: int = field(init=False)
    knee: int | None = field(init=False)   # None: still rising at the largest batch
    flops_ceiling: float | None = field(init=False)     # peak_flops, raised to a batch's rate if one ran faster
    ceiling_note: str | None = field(init=False)

    def __post_init__(self) -> None:
        if not self.measurements:
            raise ValueError("a BatchSweep needs at least one Measurement")
        if any(m.items is None for m in self.measurements):
            raise ValueError("every Measurement needs items= (its batch size)")
        if not 0 < self.threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold!r}")
        if self.peak_flops is not None:
            positive("peak_flops", self.peak_flops)
        ms = tuple(sorted(self.measurements, key=lambda m: m.items))
        object.__setattr__(self, "measurements", ms)
        sizes = tuple(int(m.items) for m in ms)
        if len(set(sizes)) != len(sizes):
            raise ValueError(f"batch sizes must be unique, got {sizes}")
        rates = [m.items_per_s for m in ms]
        top = max(rates)
        object.__setattr__(self, "batch_sizes", sizes)
        object.__setattr__(self, "best", sizes[rates.index(top)])
        object.__setattr__(self, "knee", curve_knee(list(zip(sizes, rates)), self.threshold).batch)
        ceiling, note = ceiling_for(self.peak_flops, [(f"batch {int(m.items)}", m.flops_per_s) for m in ms])
        object.__setattr__(self, "flops_ceiling", ceiling)
        object.__setattr__(self, "ceiling_note", note)

    @property
    def knee_info(self) -> Knee:
        """The knee as a :class:`Knee`: its batch, or that the curve never flattened (``str()`` says which)."""
        return Knee(self.knee, self.batch_sizes[-1], self.threshold)

    def measurement(self, batch_size: int) -> Measurement:
        for m in self.measurements:
            if int(m.items) == batch_size:
                return m
        raise KeyError(f"batch size {batch_size} was not measured; measured: {list(self.batch_sizes)}")

    def items_per_s(self, batch_size: int) -> float:
        return self.measurement(batch_size).items_per_s

    def speedup(self, batch_size: int, over: int | None = None) -> float:
        """items/s at ``batch_size`` divided by items/s at ``over`` (default: the smallest batch)."""
        return self.items_per_s(batch_size) / self.items_per_s(self.batch_sizes[0] if over is None else over)

    def _memory_fit(self) -> tuple[float, float] | None:
        pts = [(int(m.items), m.peak_memory_bytes) for m in self.measurements if m.peak_memory_bytes is not None]
        if len(pts) < 2:
            return None
        n = len(pts)
        mx = sum(b for b, _ in pts) / n
        my = sum(p for _, p in pts) / n
        sxx = sum((b - mx) ** 2 for b, _ in pts)
        slope = sum((b - mx) * (p - my) for b, p in pts) / sxx
        return slope, my - slope * mx

    @property
    def memory_per_item_bytes(self) -> float | None:
        """Slope of peak memory against batch size (mostly activations saved for backward)."""
        fit = self._memory_fit()
        return None if fit is None else fit[0]

    @property
    def fixed_memory_bytes(self) -> float | None:
        """Intercept of the same fit: memory a step needs whatever the batch (e.g. gradients)."""
        fit = self._memory_fit()
        return None if fit is None else fit[1]

    def to_dataframe(self) -> Any:
        """One row per batch size: time per step, items/s, share of the best, FLOP/s and share of peak, memory."""
        import pandas as pd

        top = self.items_per_s(self.best)
        rows = []
        for m in self.measurements:
            rows.append({
                "batch_size": int(m.items), "median_s": m.median_s, "items_per_s": m.items_per_s,
                "pct_of_best": 100 * m.items_per_s / top, "flops_per_s": m.flops_per_s,
                "pct_of_peak_flops": (100 * m.flops_per_s / self.flops_ceiling
                                      if self.flops_ceiling and m.flops_per_s is not None else None),
                "peak_memory_bytes": m.peak_memory_bytes, "noisy": m.noisy})
        return pd.DataFrame(rows).set_index("batch_size")

    def _rows(self) -> list[list[str]]:
        top = self.items_per_s(self.best)
        out = []
        for m in self.measurements:
            share = (f"{m.flops_per_s / self.flops_ceiling:.0%}" if self.flops_ceiling and m.flops_per_s is not None
                     else "N/A")
            out.append([str(int(m.items)) + (" *" if m.noisy else ""), fmt_seconds(m.median_s),
                        fmt_number(m.items_per_s), f"{m.items_per_s / top:.0%}", share,
                        fmt_bytes(m.peak_memory_bytes)])
        return out

    _HEADER = ("batch", "step", "items/s", "% of best", "% of peak FLOP/s", "step memory")

    def _caption(self) -> str:
        from ...interleaved import BUSY_PCT

        busy = (f". BUSY MACHINE: other programs used {self.others_cpu_pct:.0f}% of the CPU while timing; "
                "re-run when it is quiet" if self.others_cpu_pct is not None and self.others_cpu_pct > BUSY_PCT else "")
        knee = (f"knee {self.knee} (first batch within {self.threshold:.0%} of the best)" if self.knee is not None
                else str(self.knee_info))
        return (f"Batch sweep on {self.measurements[0].device}: best {self.best} "
                f"({fmt_number(self.items_per_s(self.best))} items/s), {knee}, "
                f"{self.speedup(self.best):.1f}x batch {self.batch_sizes[0]}{busy}")

    def __repr__(self) -> str:
        rows = self._rows()
        if len(rows) > 7:
            rows = rows[:3] + [["..."] * len(self._HEADER)] + rows[-3:]
        return (self._caption() + "\n" + text_table(self._HEADER, rows)
                + (f"\n{self.ceiling_note}" if self.ceiling_note else ""))

    def _repr_html_(self) -> str:
        foot = "* noisy: IQR 10% or more of the median. Step memory: peak allocated during one step above what " \
               "existed before it (weights and optimizer state excluded)." + (f" {self.ceiling_note}."
                                                                              if self.ceiling_note else "")
        return html_table(self._HEADER, self._rows(), caption=self._caption(), footer=foot)

    def plot(self, ax: Any = None,
             published: Sequence[tuple[int, float]] | Mapping[str, Sequence[tuple[int, float]]] | None = None,
             published_label: str = "published") -> Any:
        """items/s against batch size (log scale) with the knee marked (or a note that the curve never flattened),
        and step memory on a second axis; the legend sits below the axes.

        ``published``: optional ``(batch, items/s)`` points, or several curves as ``{label: points}``, each drawn
        normalised to its own best, on a share-of-best scale, so curves from other hardware or precisions can be
        compared by shape. Returns the Axes.
        """
        from .batch_figures import plot_sweep

        return plot_sweep(self, ax, published, published_label)


@checked(device="device")
def batch_sweep(step: Callable[[int], Any], batch_sizes: Sequence[int], *, flops_per_item: float | None = None,
                peak_flops: float | None = None, memory: bool = True, device: Any = None, min_run_time: float = 2.0,
                warmup: int = 2, threshold: float = 0.9) -> BatchSweep:
    """Time ``step(batch_size)`` at each batch size and record its peak memory.

    ``step`` runs one step (e.g. a training step) on a batch of that size; build the batches before
    the sweep so their creation is not timed. The batch sizes are timed in turn, one block each per
    round (:func:`gpulab.benchmark_interleaved`), for about ``min_run_time`` seconds in total, so a busy
    machine slows every size alike and the curve keeps its shape. ``flops_per_item`` (e.g. from
    :func:`gpulab.count_flops` divided by the batch) and ``peak_flops`` (from :func:`gpulab.machine_limits`)
    add the share of the machine's measured compute limit each batch reaches. ``memory=False`` skips
    the memory pass (one extra step per size, after the timing).

    Example:
        >>> import torch, gpulab as gl
        >>> from gpulab import course
        >>> layer = torch.nn.Linear(256, 256)
        >>> xs = {n: torch.randn(n, 256) for n in (1, 64)}
        >>> with gl.interleaved.threads(1):      # a busy core stalls multi-threaded calls (Appendix A1)
        ...     s = course.batch_sweep(lambda n: layer(xs[n]), [1, 64], min_run_time=0.1)
        >>> s.items_per_s(64) > s.items_per_s(1) and s.measurement(64).peak_memory_bytes >= 64 * 256 * 4
        True
    """
    if not callable(step):
        raise TypeError(f"step must be a callable taking a batch size, got {type(step).__name__}")
    sizes = [whole("batch size", b) for b in batch_sizes]
    if not sizes:
        raise ValueError("batch_sizes is empty: pass e.g. [1, 8, 32, 128]")
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"batch sizes must be unique, got {sizes}")
    if flops_per_item is not None:
        positive("flops_per_item", flops_per_item)
    if peak_flops is not None:
        positive("peak_flops", peak_flops)
    from ...interleaved import benchmark_interleaved, cpu_contention
    from ...memory.peak import peak_memory

    sizes = sorted(sizes)
    label = {bs: f"batch {bs}" for bs in sizes}
    with cpu_contention() as load:
        timed = benchmark_interleaved({label[bs]: partial(step, bs) for bs in sizes}, min_run_time=min_run_time,
                                      warmup=warmup, items={label[bs]: bs for bs in sizes}, device=device,
                                      min_rounds=3, flops=None if flops_per_item is None else
                                      {label[bs]: flops_per_item * bs for bs in sizes})
    ms = []
    for bs in sizes:
        m = timed[label[bs]]
        if memory:
            m = replace(m, peak_memory_bytes=peak_memory(step, bs, device=device or m.device).peak_bytes)
        ms.append(m)
    return BatchSweep(tuple(ms), peak_flops, threshold, load.others_pct)


# ----------------------------------------------------------------------------------------------
def scale_lr(base_lr: float, base_batch: int, batch: int, rule: Literal["linear", "sqrt"] = "linear") -> float:
    """The learning rate for ``batch`` given one that works at ``base_batch``.

    ``"linear"``: multiply by ``batch / base_batch`` (Goyal et al. 2017, for SGD); ``"sqrt"``: by its square
    root (often used with Adam). Large factors need warm-up (:func:`warmup_factor`); far beyond that,
    layer-wise rules such as LARS take over.

    Example:
        >>> scale_lr(0.1, 256, 1024), scale_lr(0.1, 256, 1024, rule="sqrt")
        (0.4, 0.2)
    """
    positive("base_lr", base_lr)
    whole("base_batch", base_batch)
    whole("batch", batch)
    if rule not in ("linear", "sqrt"):
        raise ValueError(f"rule must be 'linear' or 'sqrt', got {rule!r}")
    k = batch / base_batch
    return base_lr * (k if rule == "linear" else math.sqrt(k))


def warmup_factor(step: int, warmup_steps: int, start: float = 0.0) -> float:
    """Multiplier of the target learning rate at optimizer step ``step`` (0-based) of a linear warm-up.

    Rises from ``start`` to 1 over ``warmup_steps`` steps (reaching 1 at step ``warmup_steps - 1``), then
    stays 1. Goyal et al. ramp from the small-batch rate, i.e. ``start = base_batch / batch``.

    Example:
        >>> [round(warmup_factor(s, 4), 2) for s in range(6)]
        [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a whole number >= 0, got {step!r}")
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ValueError(f"warmup_steps must be a whole number >= 0, got {warmup_steps!r}")
    if isinstance(start, bool) or not isinstance(start, (int, float)) or not 0 <= start <= 1:
        raise ValueError(f"start must be within [0, 1], got {start!r}")
    if warmup_steps == 0:
        return 1.0
    return start + (1.0 - start) * min(1.0, (step + 1) / warmup_steps)


def cosine_factor(step: int, total_steps: int, warmup_steps: int = 0) -> float:
    """Multiplier of the peak learning rate at optimizer step ``step`` (0-based) of ``total_steps``: a linear
    warm-up over ``warmup_steps`` (:func:`warmup_factor`), then half a cosine from 1 down to 0 at the last step.
    Steps past ``total_steps`` start the cycle again (a stepper that runs longer than the schedule it was given).

    Larger batches make fewer updates in the same epochs; a rate that decays to zero lets those few updates land
    close to a minimum instead of bouncing around it at the peak rate (Loshchilov & Hutter 2017, SGDR).

    Example:
        >>> [round(cosine_factor(s, 6, warmup_steps=2), 2) for s in range(7)]
        [0.5, 1.0, 0.85, 0.5, 0.15, 0.0, 0.5]
    """
    whole("total_steps", total_steps)
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or not 0 <= warmup_steps < total_steps:
        raise ValueError(f"warmup_steps must be a whole number from 0 to total_steps - 1 ({total_steps - 1}), "
                         f"got {warmup_steps!r}")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a whole number >= 0, got {step!r}")
    step %= total_steps
    if step < warmup_steps:
        return warmup_factor(step, warmup_steps)
    decay = total_steps - warmup_steps - 1
    if decay <= 0:
        return 1.0
    return 0.5 * (1.0 + math.cos(math.pi * (step - warmup_steps + 1) / (decay + 1)))


@dataclass(frozen=True)
class BatchRun:
    """A model trained at one batch size and learning rate: losses per epoch, accuracy, time
    (from :func:`train_at_batch_size`).

    Example:
        >>> BatchRun("b", 32, 0.1, 0, 1, 4, (2.3,), 0.5, 0.1, 128).items_per_s
        1280.0
    """

    label: str
    batch_size: int
    lr: float
    warmup_steps: int
    epochs: int
    steps: int
    epoch_losses: tuple[float, ...]
    accuracy: float
    train_time_s: float
    items: int

    @property
    def items_per_s(self) -> float:
        return self.items / self.train_time_s if self.train_time_s > 0 else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "batch_size": self.batch_size, "lr": self.lr, "warmup_steps": self.warmup_steps,
                "epochs": self.epochs, "optimizer_steps": self.steps, "final_loss": self.epoch_losses[-1],
                "accuracy": self.accuracy, "train_time_s": self.train_time_s, "items_per_s": self.items_per_s}

    def _rows(self) -> list[tuple[str, str]]:
        return [("batch / lr", f"{self.batch_size} / {self.lr:g}" + (f", warm-up {self.warmup_steps} steps"
                                                                     if self.warmup_steps else "")),
                ("optimizer steps", f"{self.steps} ({self.epochs} epochs)"),
                ("loss per epoch", " -> ".join(f"{v:.3g}" for v in self.epoch_losses)),
                ("accuracy", f"{self.accuracy:.1%}"),
                ("time", f"{fmt_seconds(self.train_time_s)} ({fmt_number(self.items_per_s)} items/s)")]

    def __repr__(self) -> str:
        return f"BatchRun {self.label!r}\n" + text_table(("", ""), self._rows())

    def _repr_html_(self) -> str:
        return html_table(("", ""), self._rows(), caption=f"Training run: {self.label}")


def train_at_batch_size(make_model: Callable[[], Any], data: tuple[Any, Any], batch_size: int, lr: float,
                        epochs: int = 1, *, warmup_steps: int = 0, warmup_start: float = 0.0, momentum: float = 0.9,
                        eval_data: tuple[Any, Any] | None = None, seed: int = 0, label: str | None = None) -> BatchRun:
    """Train a fresh ``make_model()`` with SGD (momentum) on ``data = (inputs, targets)`` for ``epochs``
    epochs at ``batch_size`` and learning rate ``lr`` (with optional linear warm-up), then measure accuracy
    on ``eval_data`` (default: the training data).

    The same ``seed`` gives the same initial weights and the same shuffling for every batch size, so runs
    differ only in batch size and learning rate. Losses stay on the device until the end (no host sync
    per step); the last batch of an epoch may be smaller.

    Example:
        >>> import gpulab as gl
        >>> from gpulab import course
        >>> data = course.models.example_batch("mlp", 256)
        >>> run = course.train_at_batch_size(course.models.mlp, data, batch_size=32, lr=0.05, epochs=2)
        >>> run.steps, 0.0 <= run.accuracy <= 1.0
        (16, True)
    """
    if not callable(make_model):
        raise TypeError(f"make_model must be a callable returning a fresh model, got {type(make_model).__name__}")
    if not (isinstance(data, (tuple, list)) and len(data) == 2):
        raise TypeError("data must be a pair (inputs, targets) of tensors")
    whole("batch_size", batch_size)
    positive("lr", lr)
    whole("epochs", epochs)
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ValueError(f"warmup_steps must be a whole number >= 0, got {warmup_steps!r}")
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) or not 0 <= momentum < 1:
        raise ValueError(f"momentum must be within [0, 1), got {momentum!r}")
    import torch

    from ...timing import synchronize
    from ..lesson.loop import evaluate, train_step

    x, y = data
    n = int(x.shape[0])
    if n == 0 or int(y.shape[0]) != n:
        raise ValueError(f"inputs and targets need the same non-zero length, got {n} and {int(y.shape[0])}")
    torch.manual_seed(seed)
    model = make_model().to(x.device)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    order = torch.Generator().manual_seed(seed)
    epoch_losses, step = [], 0
    synchronize(x.device)
    t0 = time.perf_counter()
    for _ in range(epochs):
        perm = torch.randperm(n, generator=order).to(x.device)
        losses = []
        for i in range(0, n, batch_size):
            idx = perm[i:i + batch_size]
            for group in opt.param_groups:
                group["lr"] = lr * warmup_factor(step, warmup_steps, warmup_start)
            losses.append(train_step(model, opt, (x[idx], y[idx])) * idx.numel())
            step += 1
        epoch_losses.append(torch.stack(losses).sum() / n)
    synchronize(x.device)
    elapsed = time.perf_counter() - t0
    acc = evaluate(model, eval_data if eval_data is not None else (x, y))
    name = label or f"batch {batch_size}, lr {lr:g}" + (f", warm-up {warmup_steps}" if warmup_steps else "")
    return BatchRun(name, batch_size, float(lr), warmup_steps, epochs, step,
                    tuple(float(v) for v in torch.stack(epoch_losses).tolist()), float(acc), elapsed, n * epochs)
