"""The optimizer-state lever: how many bytes an optimizer keeps per parameter, and what its step costs.

Adam keeps two fp32 moments per parameter: 8 bytes beside each 4-byte weight. **Adafactor** (Shazeer & Stern 2018,
``torch.optim.Adafactor`` from torch 2.5) keeps no first moment and, for a matrix, only its row and column sums of
squared gradients: n + m numbers for an n x m weight instead of 2nm. **8-bit optimizers** (bitsandbytes, Dettmers
et al. 2021) keep Adam's two moments in 8 bits each. Neither accumulation nor checkpointing touches this part of
memory. :func:`compare_optimizers` builds the same model once per optimizer, takes a step so the state exists,
counts the state's bytes (:func:`optimizer_state_bytes`) and times the steps side by side.

Example:
    >>> import torch
    >>> from gpulab import course
    >>> model = torch.nn.Linear(100, 10)
    >>> opt = torch.optim.Adam(model.parameters())
    >>> model(torch.randn(4, 100)).sum().backward(); opt.step()
    >>> course.optimizer_state_bytes(opt)     # two fp32 moments of 1,010 numbers, plus two step counters
    8088
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..._format import TableView, fmt_bytes

__all__ = ["optimizer_state_bytes", "adafactor_available", "compare_optimizers", "OptimizerStates",
           "OptimizerRow", "OPTIMIZER_NAMES"]

#: The optimizers :func:`compare_optimizers` knows, as ``name -> (torch.optim class name, keyword arguments)``.
OPTIMIZER_NAMES: dict[str, tuple[str, dict[str, Any]]] = {
    "SGD": ("SGD", {"lr": 0.01}),
    "SGD + momentum": ("SGD", {"lr": 0.01, "momentum": 0.9}),
    "Adam": ("Adam", {"lr": 1e-3}),
    "AdamW": ("AdamW", {"lr": 1e-3}),
    "Adafactor": ("Adafactor", {"lr": 1e-2}),
}


def optimizer_state_bytes(optimizer: Any) -> int:
    """The bytes of every tensor in ``optimizer.state`` (moments, step counters, factored statistics): what the
    optimizer keeps between steps, beside the weights and gradients. 0 before its first step.

    Example:
        >>> import torch
        >>> optimizer_state_bytes(torch.optim.SGD(torch.nn.Linear(3, 1).parameters(), lr=0.1))
        0
    """
    import torch

    state = getattr(optimizer, "state", None)
    if state is None or not hasattr(optimizer, "step"):
        raise TypeError(f"optimizer must be a torch.optim optimizer, got {type(optimizer).__name__}")
    total = 0
    for per_param in state.values():
        for value in per_param.values():
            if isinstance(value, torch.Tensor):
                total += value.numel() * value.element_size()
    return int(total)


def adafactor_available() -> bool:
    """Whether the installed torch has ``torch.optim.Adafactor`` (added in torch 2.5).

    Example:
        >>> isinstance(adafactor_available(), bool)
        True
    """
    import torch

    return hasattr(torch.optim, "Adafactor")


@dataclass(frozen=True)
class OptimizerRow:
    """One optimizer on the model: its state's bytes, the model's parameter bytes, and the median time of a whole
    training step (forward, backward, ``optimizer.step()``) and of ``optimizer.step()`` alone."""

    name: str
    state_bytes: int
    param_bytes: int
    step_s: float
    optimizer_step_s: float
    noisy: bool = False          # either timing's IQR 10% or more of its median: a busy machine

    @property
    def state_per_param_bytes(self) -> float:
        """State bytes per 4-byte fp32 parameter (Adam: 8)."""
        return 4 * self.state_bytes / self.param_bytes


@dataclass(frozen=True, repr=False)
class OptimizerStates(TableView):
    """Optimizers side by side on one model; ``baseline`` (Adam by default) is the row the ratios divide by.
    ``missing`` names optimizers the installed torch lacks."""

    title: str
    rows: tuple[OptimizerRow, ...]
    baseline: str
    missing: tuple[str, ...] = ()

    def row(self, name: str) -> OptimizerRow:
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(f"no optimizer {name!r} here; rows: {[r.name for r in self.rows]}")

    def state_ratio(self, name: str) -> float:
        """State bytes of ``name`` over the baseline's."""
        base = self.row(self.baseline).state_bytes
        return self.row(name).state_bytes / base if base else float("nan")

    @property
    def noisy(self) -> bool:
        """Whether any timing was noisy (then no conclusion should be drawn from the step times)."""
        return any(r.noisy for r in self.rows)

    def step_ratio(self, name: str) -> float:
        """Median training-step time of ``name`` over the baseline's (above 1: slower)."""
        return self.row(name).step_s / self.row(self.baseline).step_s

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        header = ["optimizer", "state", f"state vs {self.baseline}", "state per 4-byte param (B)", "step (ms)",
                  "optimizer.step() (ms)", f"step vs {self.baseline}"]
        rows = [[r.name + (" *" if r.noisy else ""), fmt_bytes(r.state_bytes), f"{self.state_ratio(r.name):.3g}x", f"{r.state_per_param_bytes:.2f}",
                 f"{1e3 * r.step_s:.2f}", f"{1e3 * r.optimizer_step_s:.2f}", f"{self.step_ratio(r.name):.2f}x"]
                for r in self.rows]
        params = fmt_bytes(self.rows[0].param_bytes) if self.rows else "0 B"
        footer = f"parameters: {params} (fp32); step: median of interleaved runs"
        if any(r.noisy for r in self.rows):
            footer += "; * noisy: the machine was busy, compare step times with care"
        if self.missing:
            footer += f"; not in this torch: {', '.join(self.missing)} (torch 2.5+ has Adafactor)"
        return header, rows, footer


def compare_optimizers(make_model: Callable[[], Any], batch: tuple[Any, Any], *,
                       optimizers: Sequence[str] = ("Adam", "Adafactor"), baseline: str = "Adam",
                       min_run_time: float = 0.5, seed: int = 0) -> OptimizerStates:
    """Each optimizer of :data:`OPTIMIZER_NAMES` on its own copy of ``make_model()`` (same seed, same initial
    weights) on ``batch``'s device: one step so its state exists, then its state's bytes, and the median time of a
    training step and of ``optimizer.step()`` alone, all timed in turn (:func:`gpulab.benchmark_interleaved`).
    An optimizer the installed torch lacks is listed in ``missing`` instead of failing.

    Example:
        >>> from gpulab import course
        >>> t = compare_optimizers(lambda: course.models.mlp(hidden=32), course.models.example_batch("mlp", 8),
        ...                        optimizers=("Adam", "SGD"), min_run_time=0.02)
        >>> t.state_ratio("SGD"), t.row("Adam").state_per_param_bytes > 8
        (0.0, True)
    """
    import torch

    from ...interleaved import benchmark_interleaved
    from ..lesson.loop import train_step

    if not callable(make_model):
        raise TypeError(f"make_model must be a callable returning a fresh model, got {make_model!r}")
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
        raise TypeError(f"batch must be a pair (inputs, targets), got {type(batch).__name__}")
    if isinstance(optimizers, str) or not optimizers:
        raise TypeError(f"optimizers must be a list of names from {list(OPTIMIZER_NAMES)}, got {optimizers!r}")
    for name in optimizers:
        if name not in OPTIMIZER_NAMES:
            raise ValueError(f"unknown optimizer {name!r}: pick from {list(OPTIMIZER_NAMES)}")
    if baseline not in optimizers:
        raise ValueError(f"baseline {baseline!r} must be one of optimizers {list(optimizers)}")
    if isinstance(min_run_time, bool) or not isinstance(min_run_time, (int, float)) or not min_run_time > 0:
        raise ValueError(f"min_run_time must be a positive number of seconds, got {min_run_time!r}")
    device = batch[0].device
    built, missing = {}, []
    for name in optimizers:
        cls_name, kwargs = OPTIMIZER_NAMES[name]
        cls = getattr(torch.optim, cls_name, None)
        if cls is None:
            missing.append(name)
            continue
        torch.manual_seed(seed)
        model = make_model().to(device)
        opt = cls(model.parameters(), **kwargs)
        train_step(model, opt, batch)                  # the state exists after the first step
        built[name] = (model, opt)
    if baseline not in built:
        raise ValueError(f"baseline {baseline!r} is not in this torch: pick another baseline")
    fns: dict[str, Callable[[], Any]] = {}
    for name, (model, opt) in built.items():
        fns[f"{name}: step"] = lambda model=model, opt=opt: train_step(model, opt, batch)
        fns[f"{name}: optimizer.step()"] = opt.step     # the gradients of the last step are still there
    times = benchmark_interleaved(fns, min_run_time=float(min_run_time), device=device)
    rows = tuple(OptimizerRow(name, optimizer_state_bytes(opt),
                              sum(p.numel() * p.element_size() for p in model.parameters()),
                              times[f"{name}: step"].median_s, times[f"{name}: optimizer.step()"].median_s,
                              times[f"{name}: step"].noisy or times[f"{name}: optimizer.step()"].noisy)
                 for name, (model, opt) in built.items())
    return OptimizerStates(f"Optimizer state and step time on {device.type}", rows, baseline, tuple(missing))
