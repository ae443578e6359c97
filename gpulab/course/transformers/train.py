"""Training the course's GPT with one lever at a time: a :class:`GPTRecipe` (precision, fused AdamW, compiled blocks,
the whole model compiled with CUDA graphs, activation checkpointing, micro-batch and accumulation), :func:`train_gpt` (tokens/s over timed steps, the loss and
next-token accuracy on held-out text after the same tokens, peak memory, FLOPs per token) and :func:`gpt_ablation`,
which drives :func:`gpulab.course.ablate`: a lever is kept when it is faster beyond the noise and its held-out
accuracy stays at the baseline's floor. Accumulation and checkpointing are memory levers: they are measured as
branches (memory saved against time lost), never kept for speed.

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
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping, Sequence

from ..._check import device_arg, flag, mapping, positive, text, whole
from ...transformer import TransformerShape
from ..capstone.ablation import Ablation, Change, ablate
from ..capstone.ablation_table import _fraction
from ..capstone.recipe import keep_rng
from .checks import fits_text, run_arg, seed_arg, shape_arg
from .heldout import split_text, unigram_baseline

__all__ = ["GPTRecipe", "GPTRun", "train_gpt", "gpt_stepper", "gpt_changes", "gpt_ablation", "micro_batches_that_fit"]

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
    ``epoch_times_s`` the wall time of each quarter of the run (the first holds compilation)."""

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
              eval_windows: int = 32, run: Any = None) -> GPTRun:
    """Train a fresh GPT of ``shape`` with ``recipe`` for ``steps`` optimizer steps on the course's text (random
    windows, the same ones for every recipe with the same tokens per step and ``seed``), timing every step with the
    device synchronised; then its loss and next-token accuracy on ``eval_windows`` held-out windows. The caller's
    random generators (torch's, Python's, NumPy's) are left as they were."""
    steps, eval_windows = whole("steps", steps), whole("eval_windows", eval_windows)
    dev = _args(shape, recipe, device, seed, held_out=True)
    run_arg(run)
    from ...compiling import keep_subnormals

    with keep_rng(dev), keep_subnormals():     # the held-out pass of a compiled recipe compiles (and loads) too
        return _train_gpt(shape, recipe, steps, dev, seed, eval_windows, run)


def _train_gpt(shape: TransformerShape, recipe: GPTRecipe, steps: int, dev: Any, seed: int, eval_windows: int,
               run: Any) -> GPTRun:
    import torch

    from ...timing import synchronize
    from .gpt import text_tokens, token_batch

    model, opt, scaler, guard = _blocks(shape, recipe, dev, seed)
    train, held = split_text(text_tokens())
    gen = torch.Generator().manual_seed(seed)
    from ...telemetry.energy import EnergyMeter
    from ..lesson.runs import _resident_bytes, _step_memory

    meter = EnergyMeter(str(dev))
    times, losses, t_epoch, epochs = [], [], time.perf_counter(), []
    ends = {max(1, round(steps * q / 4)) for q in range(1, 5)}      # quarters of the run: the first holds compiling
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
            now = time.perf_counter()
            epochs.append(now - t_epoch)
            t_epoch = now
        if run is not None:
            run.log_metrics({"loss": float(loss)}, step=i)
    energy = meter.stop() if steps > 1 else None
    opt.zero_grad(set_to_none=True)         # the last step's gradients go: the step below allocates its own
    resident = _resident_bytes(model, opt, [t for b in batches for t in b])
    with _step_memory(dev) as grown:        # one more step, untimed: the peak above what stays resident
        _step(model, opt, scaler, recipe, batches, dev)
    peak = resident + grown["bytes"]
    values = [float(v) for v in torch.stack(losses).float().tolist()]
    if not all(math.isfinite(v) for v in values):
        raise FloatingPointError(f"the loss went non-finite at step {next(i for i, v in enumerate(values) if not math.isfinite(v))} "
                                 f"with {recipe.describe()}: lower lr (now {recipe.lr}) or use bf16 instead of fp16")
    test_loss, test_acc = _held_out(model, held, shape, recipe, dev, eval_windows, seed)
    return GPTRun(recipe, str(dev), recipe.micro_batch * recipe.accumulation * shape.seq_len, tuple(times),
                  tuple(values), test_loss, test_acc, peak, shape.flops_per_token(), tuple(epochs), energy=energy)


def _held_out(model: Any, held: Any, shape: TransformerShape, recipe: GPTRecipe, dev: Any, windows: int,
              seed: int) -> tuple[float, float]:
    """Cross-entropy and next-token accuracy on ``windows`` held-out windows (the same ones for every recipe)."""
    import torch

    from .gpt import token_batch

    x, y = token_batch(held, windows, shape.seq_len, torch.Generator().manual_seed(10_000 + seed), device=dev)
    model.eval()
    with torch.no_grad(), _autocast(recipe, dev):
        logits, loss = model(x, y)
    model.train()
    return float(loss), float((logits.argmax(-1) == y).float().mean())


def gpt_changes(shape: TransformerShape, *, device: Any = None, compile_on_cpu: bool = False) -> list[Change]:
    """The levers lesson 13 tries on ``device``, in order: the device's 16-bit autocast (bf16, or fp16 with a
    GradScaler on a GPU without bf16), fused AdamW, compiled blocks, the largest micro-batch (fewer steps for the same
    tokens, the learning rate scaled by the square root of the batch ratio, Adam's rule), on a CUDA GPU the whole
    model compiled for CUDA graphs (after the micro-batch: the search for it runs without graphs, each of whose
    shapes would be captured and kept); then two memory branches, measured but not kept: accumulation (a quarter of
    the micro-batch, 4 per step: the same tokens per step) and activation checkpointing per block."""
    import torch

    from ...precision import choose_precision

    dev = _args(shape, None, device)
    flag("compile_on_cpu", compile_on_cpu)
    cuda = dev.type == "cuda"
    low = choose_precision().precision if dev.type in ("cuda", "cpu") else "fp32"
    fused_ok = cuda or tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 4)

    def bigger(r: GPTRecipe) -> list[tuple[str, dict[str, Any]]]:
        # the micro-batches up to 4x that fit (a GPU's real memory; find_max_batch_size recovers from each OOM), timed;
        # those faster than the current one by 5% are tried fastest first, and the first that keeps accuracy is kept
        timed = micro_batches_that_fit(shape, r, device=dev)
        now = timed.get(r.micro_batch)
        faster = sorted((b for b in timed if b > r.micro_batch and (now is None or timed[b] > 1.05 * now)),
                        key=lambda b: -timed[b])[:2]
        # the same tokens in fewer steps: Adam's learning rate grows with the square root of the batch ratio
        # (Malladi et al. 2022; the linear rule is SGD's), so the larger micro-batch is judged at its own rate
        return [(f"micro-batch {b}, lr x{math.sqrt(b / r.micro_batch):.2g} (square-root rule)",
                 {"micro_batch": b, "lr": r.lr * math.sqrt(b / r.micro_batch)}) for b in faster]

    def accumulate(r: GPTRecipe) -> dict[str, Any]:
        return {"micro_batch": max(1, r.micro_batch // 4), "accumulation": r.accumulation * 4}

    return [
        Change(f"{low} autocast" + (" + GradScaler" if low == "fp16" else ""), {"precision": low},
               why="16-bit matmuls on tensor cores / AMX, half the activation bytes",
               available=low != "fp32", why_not="this device has no 16-bit matrix units (choose_precision says fp32)"),
        Change("fused AdamW", {"fused": True}, why="one kernel for the whole update instead of several per tensor",
               available=fused_ok, why_not=f"torch {torch.__version__} has no fused AdamW for {dev.type}"),
        Change("torch.compile each block", {"compile": True}, one_off=True,
               why="Inductor fuses each block's elementwise work (LayerNorm, GELU, residual adds)",
               available=cuda or compile_on_cpu,
               why_not="compiling on a CPU costs tens of seconds per graph here: pass compile_on_cpu=True"),
        Change("largest micro-batch", bigger, why="more tokens per kernel: the fixed costs of a step are shared; "
               "find_max_batch_size times the micro-batches that fit (up to 4x), the faster ones are tried fastest first"),
        Change("whole model compiled + CUDA graphs", {"graphs": True}, one_off=True,
               why="mode='reduce-overhead': forward and backward each one graph, their kernels replayed as a CUDA "
                   "graph, one launch instead of hundreds",
               available=cuda, why_not="CUDA graphs replay kernels captured on a CUDA GPU; this device has none"),
        Change("accumulation x4 (memory)", accumulate, branch=True,
               why="a quarter of the activations for the same tokens per step, paid in time"),
        Change("activation checkpointing (memory)", {"checkpoint": True}, branch=True,
               why="each block's activations recomputed in backward: memory for about one more forward"),
    ]


def micro_batches_that_fit(shape: TransformerShape, recipe: GPTRecipe, *, device: Any = None,
                           up_to: int = 4) -> dict[int, float]:
    """Micro-batch -> sequences per second of ``recipe``'s training step, for the micro-batches from the recipe's up to
    ``up_to`` times it that fit in the device's memory (:func:`gpulab.find_max_batch_size`: on a GPU each out-of-memory
    error is recovered from and ends the search; off-GPU the tensors are held to a T4's memory, as the capstone does),
    leaving room for a second model and its optimizer state: the ablation times a kept micro-batch beside the current
    recipe's."""
    import torch

    from ...memory import find_max_batch_size
    from ...reference import gpu_spec
    from ..lesson.runs import _resident_bytes
    from .gpt import text_tokens, token_batch

    dev = _args(shape, recipe, device)
    whole("up_to", up_to)
    model, opt, scaler, guard = _blocks(shape, recipe, dev, 0)
    train, _ = split_text(text_tokens())
    gen = torch.Generator().manual_seed(0)

    def step(n: int) -> None:
        batches = [token_batch(train, n, shape.seq_len, gen, device=dev) for _ in range(recipe.accumulation)]
        _first_checked(guard, _step, model, opt, scaler, recipe, batches, dev)

    budget = None if dev.type == "cuda" else gpu_spec("T4").memory_bytes     # off-GPU: the tensors a T4 could hold
    search = find_max_batch_size(step, start=recipe.micro_batch, limit=up_to * recipe.micro_batch, device=str(dev),
                                 budget=budget, min_run_time=0.15)
    # a kept micro-batch is timed beside the current recipe (its own model and optimizer state resident too), so
    # only the micro-batches whose peak leaves room for that second copy count as fitting
    beside = _copies_beside(dev) * _resident_bytes(model, opt, [])
    return {t.batch_size: t.items_per_s for t in search.trials if t.fits and t.items_per_s
            and (t.peak_bytes is None or t.peak_bytes + beside <= search.margin * search.capacity_bytes)}


def _copies_beside(dev: Any) -> int:
    """Model-and-optimizer copies a micro-batch's peak must leave room for, beyond the search's capacity: on a GPU the
    capacity was read with this one resident, so one more (the recipe it is timed against); off-GPU the simulated card
    holds neither, so two."""
    return 1 if dev.type == "cuda" else 2


def gpt_ablation(shape: TransformerShape, *, tokens: int = 65_536, baseline: GPTRecipe | None = None,
                 device: Any = None, compile_on_cpu: bool = False, accuracy_tolerance: float = 0.02,
                 accuracy_seeds: int = 1, compare_s: float = 0.5, price_per_hour: Any = None,
                 track: Mapping[str, Any] | None = None) -> Ablation:
    """Train ``baseline`` (default :class:`GPTRecipe`), then each of :func:`gpt_changes` in turn, every recipe for
    the same ``tokens``; keep a lever when it is faster beyond the noise (its steps timed against the current recipe's,
    interleaved, for ``compare_s`` seconds) and its held-out next-token accuracy reaches the floor: the lowest the
    baseline reached over its own seed and ``accuracy_seeds`` more, less ``accuracy_tolerance``."""
    from ..capstone.torch_ablation import _ceiling

    dev = _args(shape, baseline, device, held_out=True, recipe_name="baseline")
    base = GPTRecipe() if baseline is None else baseline
    whole("tokens", tokens)
    _judging(accuracy_tolerance, compile_on_cpu, accuracy_seeds, compare_s, price_per_hour, track)

    def steps_for(r: GPTRecipe) -> int:
        return max(4, tokens // (r.micro_batch * r.accumulation * shape.seq_len))

    def train(r: GPTRecipe, run: Any) -> GPTRun:
        return train_gpt(shape, r, steps=steps_for(r), device=dev, run=run)

    def compare(current: GPTRecipe, candidate: GPTRecipe) -> tuple[float, float] | None:
        from ...interleaved import benchmark_interleaved
        from ...memory.peak import free_memory, is_oom

        per = {k: r.micro_batch * r.accumulation * shape.seq_len for k, r in (("current", current), ("candidate", candidate))}
        try:
            fns = {"current": gpt_stepper(shape, current, device=dev),
                   "candidate": gpt_stepper(shape, candidate, device=dev)}
            ms = benchmark_interleaved(fns, min_run_time=compare_s, warmup=2, device=dev, items=per, energy=False)
        except Exception as e:                  # two models side by side may not fit where each alone did
            if not is_oom(e):
                raise
            ms = None
        if ms is None:                          # out of the except block: the traceback and its tensors are gone
            fns = {}
            free_memory(str(dev))
            return None                         # the two runs' own throughputs decide
        return (ms["candidate"].items_per_s / ms["current"].items_per_s,
                100.0 * max(ms["current"].relative_iqr, ms["candidate"].relative_iqr))

    def rerun(r: GPTRecipe, seed: int) -> float | None:
        return train_gpt(shape, r, steps=steps_for(r), device=dev, seed=seed).test_accuracy

    ceiling = _ceiling(dev)
    table = ablate(train, base, gpt_changes(shape, device=dev, compile_on_cpu=compile_on_cpu),
                   apply=lambda r, f: replace(r, **f), describe=GPTRecipe.describe, params=GPTRecipe.params,
                   ceiling=lambda r: ceiling(_AsRecipe(r.precision)), compare=compare if compare_s else None,
                   baseline_label="baseline", title=f"GPT ({shape.layers} x {shape.d_model}, T={shape.seq_len}): "
                   f"one lever at a time ({dev.type})", accuracy_tolerance=accuracy_tolerance, track=track,
                   device=str(dev), rerun=rerun if accuracy_seeds else None, accuracy_seeds=accuracy_seeds,
                   price_per_hour=price_per_hour)
    return replace(table, notes=_ablation_notes(tokens, table.baseline.test_accuracy))


def _ablation_notes(tokens: int, baseline_accuracy: float | None) -> tuple[str, ...]:
    """The GPT ablation's notes: what it trained on, and whether its baseline learned more than byte frequencies
    (if not, the accuracy floor cannot tell a working lever from a broken one)."""
    floor = unigram_baseline()
    notes = [f"every recipe trained on {tokens:,} tokens of the course's text; accuracy = next-token accuracy on "
             f"held-out windows (byte frequencies alone: {floor.accuracy:.1%}); samples = tokens"]
    if baseline_accuracy is not None and not floor.beaten_by(baseline_accuracy):
        notes.append(f"the baseline reached {baseline_accuracy:.1%}, within 2 points of guessing by byte frequencies "
                     f"({floor.accuracy:.1%}): after {tokens:,} tokens the accuracy floor cannot tell a working lever "
                     "from a broken one; train on more tokens")
    return tuple(notes)


def _judging(accuracy_tolerance: Any, compile_on_cpu: Any, accuracy_seeds: Any, compare_s: Any, price_per_hour: Any,
             track: Any) -> None:
    """:func:`gpt_ablation`'s judging arguments, checked before anything is trained or measured."""
    _fraction("accuracy_tolerance", accuracy_tolerance)
    flag("compile_on_cpu", compile_on_cpu)
    whole("accuracy_seeds", accuracy_seeds, low=0)
    positive("compare_s", compare_s, allow_zero=True, unit="seconds (0: no interleaved comparison)")
    if price_per_hour is not None:
        from ...cost import hourly_price

        hourly_price(price_per_hour)
    if track is not None:
        mapping("track", track, example="{'root': 'runs', 'experiment': 'gpt'}")


@dataclass(frozen=True)
class _AsRecipe:
    """What the capstone's ceiling reads of a recipe: its precision, and TF32 off (the GPT recipes leave it off)."""

    precision: str
    tf32: bool = False
