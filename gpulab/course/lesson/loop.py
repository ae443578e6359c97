"""One configurable training step, and a short loop around it that records what it did.

The step is plain PyTorch you can read top to bottom: autocast (bf16, or fp16 with a GradScaler),
gradient accumulation over micro-batches, channels_last, and torch.compile are switches on one
:class:`TrainConfig`, so lessons compare configurations without copying loops.

Example:
    >>> import torch, gpulab as gl
    >>> from gpulab import course
    >>> model = course.models.mlp()
    >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> batch = course.models.example_batch("mlp", 64)
    >>> result = course.train(model, opt, lambda step: batch, steps=3, config=course.TrainConfig(progress=False))
    >>> len(result.losses)
    3
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal

from ..._format import fmt_bytes, fmt_number, fmt_seconds, html_table, text_table
from ...telemetry.energy import GPU_INTERLEAVED_WINDOW_S, Energy, too_short_for_the_gpu_counter
from .step_energy import BLOCK_S, StepEnergy, block_energy, needs_a_block

__all__ = ["TrainConfig", "train_step", "train", "TrainResult", "accumulated_gradients", "evaluate", "copied_step", "run_energy"]

Precision = Literal["fp32", "bf16", "fp16"]


@dataclass(frozen=True)
class TrainConfig:
    """How to run a training step.

    precision: "fp32", "bf16" (autocast to bfloat16; no scaler needed: same exponent range as fp32) or
        "fp16" (autocast to float16 with a GradScaler, because small fp16 gradients underflow to zero).
    accumulation_steps: split each batch into this many micro-batches and step once (same gradients,
        less activation memory, more time).
    channels_last: NHWC memory layout for 4-D inputs and the model (faster convolutions on tensor cores).
    compile: wrap the model in torch.compile on first use (slow first step; see lesson 04).
    progress: show a tqdm progress bar for loops of 20 steps or more (quiet under tests).
    ddp_no_sync: with DistributedDataParallel and accumulation, all-reduce the gradients once, after the last
        micro-batch (``model.no_sync()`` around the others): same result, 1/k of the communication.
        False all-reduces after every micro-batch (the slow way, kept to compare).
    """

    device: str | None = None
    precision: Precision = "fp32"
    accumulation_steps: int = 1
    channels_last: bool = False
    compile: bool = False
    progress: bool = True
    ddp_no_sync: bool = True

    def __post_init__(self) -> None:
        if self.precision not in ("fp32", "bf16", "fp16"):
            raise ValueError(f"precision must be 'fp32', 'bf16' or 'fp16', got {self.precision!r}")
        if not isinstance(self.accumulation_steps, int) or self.accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be a whole number >= 1, got {self.accumulation_steps!r}")

    @property
    def autocast_dtype(self) -> Any:
        import torch

        return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[self.precision]


def _autocast(device_type: str, config: TrainConfig) -> Any:
    import torch

    dtype = config.autocast_dtype
    return torch.autocast(device_type, dtype=dtype) if dtype is not None else contextlib.nullcontext()


def make_scaler(config: TrainConfig, device_type: str) -> Any:
    """A GradScaler for fp16 (None otherwise): it multiplies the loss so small gradients survive fp16,
    then unscales them before the optimizer step and skips steps whose gradients overflowed."""
    if config.precision != "fp16":
        return None
    import torch

    return torch.amp.GradScaler(device_type)


def train_step(model: Any, optimizer: Any, batch: tuple[Any, Any], config: TrainConfig = TrainConfig(),
               scaler: Any = None, loss_fn: Callable[[Any, Any], Any] | None = None) -> Any:
    """One optimizer step on ``batch = (inputs, targets)``; returns the loss as a detached tensor
    (no ``.item()``: reading it would make the host wait for the device every step).

    With ``accumulation_steps = k`` the batch is cut into k micro-batches; each micro-batch's mean loss
    is weighted by its share of the batch, so the accumulated gradient equals the full batch's even
    when the last micro-batch is smaller.
    """
    import torch
    import torch.nn.functional as F

    loss_fn = loss_fn or F.cross_entropy
    x, y = batch
    device_type = x.device.type
    if config.channels_last and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    optimizer.zero_grad(set_to_none=True)
    total = x.shape[0]
    losses = []
    parts = [(xs, ys) for xs, ys in zip(x.tensor_split(config.accumulation_steps),
                                         y.tensor_split(config.accumulation_steps)) if xs.shape[0] > 0]
    for i, (xs, ys) in enumerate(parts):
        # DDP all-reduces inside every backward(); under no_sync() it only accumulates locally (see TrainConfig)
        skip_sync = config.ddp_no_sync and i < len(parts) - 1 and hasattr(model, "no_sync")
        with model.no_sync() if skip_sync else contextlib.nullcontext():
            with _autocast(device_type, config):
                loss = loss_fn(model(xs), ys) * (xs.shape[0] / total)
            (scaler.scale(loss) if scaler is not None else loss).backward()
        losses.append(loss.detach())
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    return torch.stack(losses).sum()


def accumulated_gradients(model: Any, batch: tuple[Any, Any], steps: int, loss_fn: Callable[[Any, Any], Any] | None = None,
                          divide: bool = True) -> list[Any]:
    """The parameters' gradients after accumulating ``steps`` micro-batches of ``batch`` (copies).

    ``divide=False`` reproduces the classic bug: summing micro-batch mean losses without weighting
    them, which multiplies the gradient by about ``steps``.
    """
    import torch.nn.functional as F

    loss_fn = loss_fn or F.cross_entropy
    model.zero_grad(set_to_none=True)
    x, y = batch
    for xs, ys in zip(x.tensor_split(steps), y.tensor_split(steps)):
        loss = loss_fn(model(xs), ys)
        (loss * (xs.shape[0] / x.shape[0]) if divide else loss).backward()
    grads = [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    return grads


@dataclass(frozen=True)
class TrainResult:
    """What :func:`train` did: per-step losses and wall times, throughput, peak memory, and ``energy``: the device's
    :class:`~gpulab.telemetry.energy.Energy` over the steady steps (read around each timed step, outside its timing;
    ``energy.joules`` is None, with the reason, where the counter cannot be read; ``energy`` None: not read)."""

    label: str
    losses: tuple[float, ...]
    step_times_s: tuple[float, ...]
    items_per_step: int
    peak_memory_bytes: int | None
    config: TrainConfig
    warmup_steps: int = 1
    extra: dict[str, Any] = field(default_factory=dict)
    energy: Any = None

    @property
    def joules_per_item(self) -> float | None:
        """Joules per item: the steady steps' mean power x the median step, over the items of a step (None without
        a figure).

        Example:
            >>> from gpulab.telemetry.energy import Energy
            >>> r = TrainResult("fp32", (2.0, 1.9), (0.2, 0.2), 50, None, TrainConfig(), 0, energy=Energy("cpu", 0.4, 20.0, "RAPL"))
            >>> r.joules_per_item
            0.2
        """
        e = self.energy
        j = None if e is None else e.per_call(self.median_step_s)
        return None if j is None else j / self.items_per_step

    @property
    def steady_times_s(self) -> tuple[float, ...]:
        """Step times after the warm-up steps (first steps pay for lazy init and compilation)."""
        return self.step_times_s[self.warmup_steps:] or self.step_times_s

    @property
    def median_step_s(self) -> float:
        import statistics

        return statistics.median(self.steady_times_s)

    @property
    def items_per_s(self) -> float:
        return self.items_per_step / self.median_step_s

    def _rows(self) -> list[tuple[str, str]]:
        return [("steps", f"{len(self.losses)} ({self.warmup_steps} warm-up)"),
                ("median step", fmt_seconds(self.median_step_s)),
                ("throughput", f"{fmt_number(self.items_per_s)} items/s"),
                ("loss", f"{self.losses[0]:.4g} -> {self.losses[-1]:.4g}"),
                ("peak memory", fmt_bytes(self.peak_memory_bytes)),
                ("config", f"{self.config.precision}, accumulation {self.config.accumulation_steps}, "
                           f"channels_last={self.config.channels_last}, compile={self.config.compile}")] + (
                [("energy", str(self.energy))] if self.energy is not None else [])

    def __repr__(self) -> str:
        return f"TrainResult {self.label!r}\n" + text_table(("", ""), self._rows())

    def _repr_html_(self) -> str:
        return html_table(("", ""), self._rows(), caption=f"Training run: {self.label}")


def _next_from(it: Any, steps: int) -> Callable[[int], Any]:
    """``step -> next batch`` from an iterator, with a clear error when it runs out early."""
    def get(step: int) -> Any:
        try:
            return next(it)
        except StopIteration:
            raise ValueError(f"batches ran out after {step} of {steps} steps: pass more batches, a callable "
                             "step -> (x, y), or fewer steps") from None
    return get


def train(model: Any, optimizer: Any, batches: Callable[[int], tuple[Any, Any]] | Iterable[tuple[Any, Any]],
          steps: int, config: TrainConfig = TrainConfig(), label: str = "train", warmup_steps: int = 1,
          loss_fn: Callable[[Any, Any], Any] | None = None, track_memory: bool = True) -> TrainResult:
    """Run ``steps`` training steps and record losses, per-step times (device synchronised) and peak memory.

    ``batches`` is a function ``step -> (inputs, targets)`` or an iterable of batches. The loop itself
    is six lines below: read it.
    """
    import torch

    from ...memory.peak import MemoryTracker
    from ...system import device as pick_device
    from ...timing import synchronize

    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive whole number, got {steps!r}")
    dev = pick_device(config.device) if config.device else next(model.parameters()).device
    model.to(dev)
    if config.channels_last:
        model.to(memory_format=torch.channels_last)
    run_model = torch.compile(model) if config.compile else model
    scaler = make_scaler(config, dev.type)
    get = batches if callable(batches) else _next_from(iter(batches), steps)
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    tracker = MemoryTracker() if (track_memory and not cuda) else contextlib.nullcontext()
    losses, times = [], []
    meter = StepEnergy(dev)
    bar = _progress(steps, label, config.progress)
    with tracker:
        for step in range(steps):
            x, y = (t.to(dev, non_blocking=True) for t in get(step))
            meter.start()                         # the last step ended synchronised
            t0 = time.perf_counter()
            loss = train_step(run_model, optimizer, (x, y), config, scaler, loss_fn)
            synchronize(dev)
            times.append(time.perf_counter() - t0)
            meter.stop()
            losses.append(loss)
            bar.update(1) if bar is not None else None
    if bar is not None:
        bar.close()
    resident = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    peak = (int(torch.cuda.max_memory_allocated(dev)) if cuda   # everything on the device, weights included
            else (resident + tracker.peak_bytes if track_memory else None))
    warm = min(warmup_steps, steps - 1)
    energy = run_energy(meter, warm, times, model, optimizer, config, (x, y), loss_fn)   # after the peak's read
    return TrainResult(label, tuple(float(v) for v in torch.stack(losses).tolist()), tuple(times), int(x.shape[0]),
                       peak, config, warm, energy=energy)


def _progress(steps: int, label: str, enabled: bool) -> Any:
    import os

    if not enabled or steps < 20 or "PYTEST_CURRENT_TEST" in os.environ:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=steps, desc=label, leave=False)


def evaluate(model: Any, batch: tuple[Any, Any]) -> float:
    """Accuracy of ``model`` on one ``(inputs, targets)`` batch, in eval mode without gradients."""
    import torch

    was_training = model.training
    model.eval()
    with torch.no_grad():
        acc = (model(batch[0]).argmax(dim=1) == batch[1]).float().mean().item()
    model.train(was_training)
    return acc


def copied_step(model: Any, optimizer: Any, config: Any, batch: Any, loss_fn: Any = None) -> Any:
    """A training step of ``config`` on a deep copy of ``model`` with an optimizer of ``optimizer``'s kind at
    learning rate 0 (the same work per step; the original model and its optimizer are left as they were)."""
    import copy

    import torch

    twin = copy.deepcopy(model)
    try:
        opt = type(optimizer)(twin.parameters(), **{**optimizer.defaults, "lr": 0.0})
    except (TypeError, ValueError):        # an optimizer that will not take lr=0: plain SGD does the same update work
        opt = torch.optim.SGD(twin.parameters(), lr=0.0)
    dev = next(twin.parameters()).device
    runner = torch.compile(twin) if getattr(config, "compile", False) else twin
    scaler = make_scaler(config, dev.type)
    return lambda: train_step(runner, opt, batch, config, scaler, loss_fn)


def run_energy(meter: StepEnergy, skip: int, times: Any, model: Any, optimizer: Any, config: Any, batch: Any,
               loss_fn: Any = None, *, interleaved: bool = False) -> Energy:
    """A run's energy: its timed steps' counter windows (after ``skip``), or, on a GPU whose steps are too short for
    the counter (under ten of its ~100 ms periods; under a second when ``interleaved`` with other runs' steps, whose
    joules a short window mixes in), :data:`BLOCK_S` seconds of the same step run alone on a copy
    (:func:`copied_step`)."""
    e = meter.total(skip=skip)
    kept = sorted(times[skip:] or times)
    if not kept or not e.device.startswith("cuda"):
        return e
    step = kept[len(kept) // 2]
    mixed = interleaved and e.measured and step < GPU_INTERLEAVED_WINDOW_S
    if not (mixed or needs_a_block(e)):
        return e
    try:
        return block_energy(copied_step(model, optimizer, config, batch, loss_fn), e.device, BLOCK_S)
    except Exception as ex:      # e.g. a model deepcopy refuses: no figure, and both reasons
        why = e.reason or too_short_for_the_gpu_counter("steps", interleaved=True)
        return Energy(e.device, e.seconds, None, "", f"{why}; a block of the step alone could not run "
                                                     f"({type(ex).__name__}: {ex})")
