"""Training the course's GPT one way: a :class:`GPTRecipe` (precision, fused AdamW, compiled blocks, the whole model
compiled with CUDA graphs, activation checkpointing, micro-batch and accumulation) and :func:`train_gpt` (tokens/s over
timed steps, the loss and next-token accuracy on held-out text after each quarter of the tokens, peak memory, FLOPs
per token). :mod:`.lever_ablation` tries the levers one at a time.

Example:
    >>> from gpulab.transformer import TransformerShape
    >>> shape = TransformerShape(layers=1, d_model=32, heads=2, seq_len=32, vocab=256)
    >>> run = train_gpt(shape, GPTRecipe(micro_batch=4), steps=3, device="cpu")
    >>> run.tokens_per_step, run.samples_per_s > 0, 0 <= run.test_accuracy <= 1
    (128, True, True)
"""
from __future__ import annotations

import contextlib
import math
import numbers
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from ..._check import device_arg, flag, positive, whole
from ...transformer import TransformerShape
from ..capstone.recipe import keep_rng
from .checks import fits_text, run_arg, seed_arg, shape_arg
from .heldout import split_text

__all__ = ["GPTRecipe", "GPTRun", "train_gpt", "gpt_stepper"]

PRECISIONS = ("fp32", "bf16", "fp16")


@dataclass(frozen=True)
class GPTRecipe:
    """How a GPT trains: ``precision`` of the autocast ("fp32": none; "fp16" adds a GradScaler), AdamW's
    ``fused`` kernel, ``compile`` (torch.compile of each block), ``graphs`` (the whole model compiled with
    ``mode="reduce-overhead"``: on a CUDA GPU each step's kernels are replayed as CUDA graphs, one launch for many;
    it replaces ``compile``'s per-block compilation), ``checkpoint`` (each block's activations recomputed
    in backward), ``micro_batch`` sequences per forward/backward and ``accumulation`` micro-batches per optimizer
    step (tokens per step = micro_batch x accumulation x seq_len), at learning rate ``lr``."""

    precision: str = "fp32"
    fused: bool = False
    compile: bool = False
    checkpoint: bool = False
    micro_batch: int = 8
    accumulation: int = 1
    lr: float = 3e-3
    graphs: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.precision, str) or self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        for name in ("fused", "compile", "checkpoint", "graphs"):        # "no" or 1 would switch a lever on unseen
            flag(name, getattr(self, name))
        whole("micro_batch", self.micro_batch)
        whole("accumulation", self.accumulation)
        if isinstance(self.lr, bool) or not isinstance(self.lr, numbers.Real) or not 0 < self.lr < 1:
            raise ValueError(f"lr must be a learning rate in (0, 1), got {self.lr!r}")

    def describe(self) -> str:
        """The recipe in one line, every lever named.

        Example:
            >>> GPTRecipe(precision="bf16", fused=True, micro_batch=4, accumulation=2).describe()
            'bf16, micro-batch 4 x 2 accumulated, fused AdamW, lr 0.003'
        """
        parts = [self.precision, f"micro-batch {self.micro_batch}" + (f" x {self.accumulation} accumulated"
                                                                     if self.accumulation > 1 else "")]
        parts += [name for on, name in ((self.fused, "fused AdamW"),
                                        (self.compile and not self.graphs, "compiled blocks"),
                                        (self.graphs, "whole model compiled, CUDA graphs"),
                                        (self.checkpoint, "checkpointed blocks")) if on]
        return ", ".join(parts + [f"lr {self.lr:g}"])

    def params(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GPTRun:
    """What :func:`train_gpt` measured. ``samples_per_s`` counts tokens (the ablation's "samples"), over the timed
    steps; ``test_accuracy`` is next-token accuracy on held-out windows, ``test_loss`` their cross-entropy;
    ``epoch_times_s`` the wall time of each part of the run (quarters by default; the first holds compilation) and
    ``epoch_accuracies`` the held-out accuracy after each (read outside their clocks)."""

    recipe: GPTRecipe
    device: str
    tokens_per_step: int
    step_times_s: tuple[float, ...]
    losses: tuple[float, ...]
    test_loss: float
    test_accuracy: float
    peak_memory_bytes: int | None
    flops_per_sample: float
    epoch_times_s: tuple[float, ...] = ()
    notes: tuple[str, ...] = field(default=())
    energy: Any = None                 # a gpulab.telemetry.energy.Energy over the timed steps (the first left out)
    epoch_accuracies: tuple[float, ...] = ()   # held-out accuracy after each part of the run (the last: test_accuracy)

    @property
    def joules_per_sample(self) -> float | None:
        """Joules per token: the timed steps' mean power x the median step, over the tokens of a step."""
        w = None if self.energy is None else self.energy.watts
        return None if w is None else w * self.median_step_s / self.tokens_per_step

    @property
    def energy_source(self) -> str:
        return "" if self.energy is None else self.energy.source

    @property
    def energy_reason(self) -> str | None:
        return "not read" if self.energy is None else self.energy.reason

    @property
    def median_step_s(self) -> float:
        timed = sorted(self.step_times_s[1:] or self.step_times_s)
        return timed[len(timed) // 2]

    @property
    def samples_per_s(self) -> float:
        """Tokens per second at the median timed step (the first step, with its one-off costs, left out)."""
        return self.tokens_per_step / self.median_step_s

    @property
    def spread_pct(self) -> float | None:
        timed = sorted(self.step_times_s[1:] or self.step_times_s)
        if len(timed) < 4:
            return None
        q1, q3 = timed[len(timed) // 4], timed[(3 * len(timed)) // 4]
        return 100.0 * (q3 - q1) / self.median_step_s

    def tokens_in(self, seconds: float, *, parts: int = 4) -> int:
        """The tokens this run's recipe trains on in about ``seconds`` at its median step, in ``parts`` equal parts of
        whole steps (at least one step each): a training budget that lasts about as long on a T4 as on an H200, where
        a fixed count of tokens is 30 times longer on one than the other. At 1,000 tokens/s and 100 tokens a step,
        ``tokens_in(10)`` is 10,000 and ``tokens_in(0.1)`` is 400 (one step in each of 4 parts)."""
        positive("seconds", seconds, unit="seconds")
        whole("parts", parts)
        part = parts * self.tokens_per_step
        return part * max(1, int(seconds * self.samples_per_s // part))


def _blocks(shape: TransformerShape, recipe: GPTRecipe, device: Any, seed: int) -> tuple[Any, Any, Any, Any]:
    """The model (compiled or checkpointed blocks, or the whole model compiled for CUDA graphs, as the recipe says), its
    AdamW, for fp16 a GradScaler, and for a compiled recipe the :class:`~gpulab.course.compilers.guard.CompileGuard` its first step goes through (Dynamo reset
    here: every block shares ``Block.forward``, and earlier recipes' entries would count toward its recompile
    limit), else None."""
    import torch
    from ..compilers.guard import CompileGuard
    from .gpt import checkpoint_blocks, gpt

    lever = "CUDA-graphs" if recipe.graphs else "compiled-blocks"
    guard = (CompileGuard(f"GPTRecipe({recipe.describe()}), its {lever} lever") if recipe.compile or recipe.graphs
             else None)
    with keep_rng():                                  # the caller's generators are left as they were
        torch.default_generator.manual_seed(seed)    # the CPU generator alone: the weights are made on the CPU
        model = gpt(shape)
    model = model.to(device)
    if recipe.checkpoint:
        checkpoint_blocks(model)
    if recipe.graphs:              # the whole step's forward and backward: one graph each, replayed on a GPU
        model = torch.compile(model, mode="reduce-overhead")
    elif recipe.compile:
        for i, blk in enumerate(model.blocks):
            model.blocks[i] = torch.compile(blk)
    kwargs = {"fused": True} if recipe.fused else {"foreach": True}
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=0.0, **kwargs)
    scaler = torch.amp.GradScaler(torch.device(device).type) if recipe.precision == "fp16" else None
    return model, opt, scaler, guard


def _first_checked(guard: Any, step: Any, *args: Any) -> Any:
    """``step(*args)``, through the recipe's compile guard until its first step has been checked; a compiled recipe's
    steps keep the process's subnormal floats (torch 2.5's Inductor libraries turn on flushing them when loaded)."""
    if guard is None:
        return step(*args)
    from ...compiling import keep_subnormals

    with keep_subnormals():
        return guard.first_step(step, *args) if not guard.checked else step(*args)


def _autocast(recipe: GPTRecipe, device: Any) -> Any:
    import torch

    if recipe.precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16 if recipe.precision == "bf16" else torch.float16)


def _step(model: Any, opt: Any, scaler: Any, recipe: GPTRecipe, batches: Sequence[tuple[Any, Any]], device: Any) -> Any:
    """One optimizer step over ``batches`` (the recipe's micro-batches), its phases marked for ``gl.profile``;
    returns the mean loss (a tensor)."""
    from ...profiling.events import phase

    opt.zero_grad(set_to_none=True)
    total = 0.0
    for x, y in batches:
        if recipe.graphs:       # a new iteration for CUDA graph trees: the last replay's loss has been read
            import torch

            torch.compiler.cudagraph_mark_step_begin()
        with phase("forward"), _autocast(recipe, device):
            _, loss = model(x, y)
        part = loss / len(batches)              # equal micro-batches: each is 1/k of the step's mean
        with phase("backward"):
            (scaler.scale(part) if scaler is not None else part).backward()
        total = total + part.detach()
    with phase("optimizer"):
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
    return total


def _recipe_arg(name: str, value: Any) -> GPTRecipe:
    if not isinstance(value, GPTRecipe):
        raise TypeError(f"{name} must be a course.GPTRecipe (e.g. course.GPTRecipe(precision='bf16')), got "
                        f"{type(value).__name__} {value!r:.60}")
    return value


def _args(shape: Any, recipe: Any, device: Any, seed: Any = 0, *, held_out: bool = False,
          recipe_name: str = "recipe") -> Any:
    """``shape``, ``recipe``, ``device`` and ``seed`` checked before any work, and the windows of ``shape`` checked
    against the course's text (the held-out tenth too, with ``held_out``); returns the torch device to run on."""
    from ...system import device as pick_device
    from .gpt import text_tokens

    shape_arg("shape", shape)
    if recipe is not None:
        _recipe_arg(recipe_name, recipe)
    device_arg("device", device)
    seed_arg("seed", seed)
    train, held = split_text(text_tokens())
    fits_text(shape, "course's training text", len(train))
    if held_out:
        fits_text(shape, "course's held-out text (the last tenth, never trained on)", len(held))
    return pick_device(None if device is None else str(device))


def gpt_stepper(shape: TransformerShape, recipe: GPTRecipe, *, device: Any = None, seed: int = 0) -> Any:
    """A callable running one training step of ``recipe`` on fresh weights (random windows of the course's text),
    for timing recipes against each other (:func:`gpulab.benchmark_interleaved`)."""
    import torch

    from .gpt import text_tokens, token_batch

    dev = _args(shape, recipe, device, seed)
    model, opt, scaler, guard = _blocks(shape, recipe, dev, seed)
    train, _ = split_text(text_tokens())
    gen = torch.Generator().manual_seed(seed)
    batches = [token_batch(train, recipe.micro_batch, shape.seq_len, gen, device=dev) for _ in range(recipe.accumulation)]
    return lambda: _first_checked(guard, _step, model, opt, scaler, recipe, batches, dev)


def train_gpt(shape: TransformerShape, recipe: GPTRecipe, *, steps: int = 20, device: Any = None, seed: int = 0,
              eval_windows: int = 32, run: Any = None, parts: int | None = None) -> GPTRun:
    """Train a fresh GPT of ``shape`` with ``recipe`` for ``steps`` optimizer steps on the course's text (random
    windows, the same ones for every recipe with the same tokens per step and ``seed``), timing every step with the
    device synchronised; its loss and next-token accuracy on ``eval_windows`` held-out windows are read after each of
    ``parts`` equal parts of the run (default 4, or one per step for fewer steps; outside the clock; the last is
    ``test_accuracy``). The caller's random
    generators (torch's, Python's, NumPy's) are left as they were."""
    steps, eval_windows = whole("steps", steps), whole("eval_windows", eval_windows)
    parts = min(4, steps) if parts is None else whole("parts", parts)
    if parts > steps:
        raise ValueError(f"parts={parts} is more than steps={steps}: each part of the run is at least one step")
    dev = _args(shape, recipe, device, seed, held_out=True)
    run_arg(run)
    from ...compiling import keep_subnormals

    with keep_rng(dev), keep_subnormals():     # the held-out pass of a compiled recipe compiles (and loads) too
        return _train_gpt(shape, recipe, steps, dev, seed, eval_windows, run, parts)


def _train_gpt(shape: TransformerShape, recipe: GPTRecipe, steps: int, dev: Any, seed: int, eval_windows: int,
               run: Any, parts: int = 4) -> GPTRun:
    import torch

    from ...timing import synchronize
    from .gpt import text_tokens, token_batch

    model, opt, scaler, guard = _blocks(shape, recipe, dev, seed)
    train, held = split_text(text_tokens())
    gen = torch.Generator().manual_seed(seed)
    from ...telemetry.energy import EnergyMeter
    from ..lesson.runs import _resident_bytes, _step_memory

    meter = EnergyMeter(str(dev))
    times, losses, t_epoch, epochs, accuracies = [], [], time.perf_counter(), [], []
    ends = {max(1, round(steps * q / parts)) for q in range(1, parts + 1)}   # the run's parts: the first holds compiling
    model.train()
    for i in range(steps):
        batches = [token_batch(train, recipe.micro_batch, shape.seq_len, gen, device=dev)
                   for _ in range(recipe.accumulation)]
        synchronize(dev)
        if i == 1:                          # energy over the timed steps: the first, with its one-off costs, left out
            meter.start()
        t0 = time.perf_counter()
        loss = _first_checked(guard, _step, model, opt, scaler, recipe, batches, dev)
        synchronize(dev)
        times.append(time.perf_counter() - t0)
        losses.append(loss)
        if i + 1 in ends:
            epochs.append(time.perf_counter() - t_epoch)
            accuracies.append(_held_out(model, held, shape, recipe, dev, eval_windows, seed))   # not timed
            t_epoch = time.perf_counter()
        if run is not None:
            run.log_metrics({"loss": float(loss)}, step=i)
    energy = meter.stop() if steps > 1 else None
    test_loss, test_acc = accuracies[-1]          # after the last step, before the untimed one below
    opt.zero_grad(set_to_none=True)         # the last step's gradients go: the step below allocates its own
    resident = _resident_bytes(model, opt, [t for b in batches for t in b])
    with _step_memory(dev) as grown:        # one more step, untimed: the peak above what stays resident
        _step(model, opt, scaler, recipe, batches, dev)
    peak = resident + grown["bytes"]
    values = [float(v) for v in torch.stack(losses).float().tolist()]
    if not all(math.isfinite(v) for v in values):
        raise FloatingPointError(f"the loss went non-finite at step {next(i for i, v in enumerate(values) if not math.isfinite(v))} "
                                 f"with {recipe.describe()}: lower lr (now {recipe.lr}) or use bf16 instead of fp16")
    return GPTRun(recipe, str(dev), recipe.micro_batch * recipe.accumulation * shape.seq_len, tuple(times),
                  tuple(values), test_loss, test_acc, peak, shape.flops_per_token(), tuple(epochs), energy=energy,
                  epoch_accuracies=tuple(a for _, a in accuracies))


def _held_out(model: Any, held: Any, shape: TransformerShape, recipe: GPTRecipe, dev: Any, windows: int,
              seed: int) -> tuple[float, float]:
    """Cross-entropy and next-token accuracy on ``windows`` held-out windows (the same ones for every recipe). The whole
    model compiled for CUDA graphs is read through its eager module (the same weights): an inference graph recorded
    between training steps would be one more graph tree to keep."""
    import torch

    from .gpt import token_batch

    model = getattr(model, "_orig_mod", model)

    x, y = token_batch(held, windows, shape.seq_len, torch.Generator().manual_seed(10_000 + seed), device=dev)
    model.eval()
    with torch.no_grad(), _autocast(recipe, dev):
        logits, loss = model(x, y)
    model.train()
    return float(loss), float((logits.argmax(-1) == y).float().mean())
