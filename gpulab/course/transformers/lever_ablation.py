"""Lesson 13's levers, one at a time: :func:`gpt_changes` lists them for a device (16-bit autocast, fused AdamW,
compiled blocks, the largest micro-batch that fits, the whole model compiled for CUDA graphs, and two memory branches),
:func:`micro_batches_that_fit` times the micro-batches a device holds, and :func:`gpt_ablation` drives
:func:`gpulab.course.ablate` over them with :func:`train_gpt`: by default a lever is kept when it reaches the baseline's
held-out next-token accuracy in less training time (accuracy read after each quarter of the tokens).

Example:
    >>> from gpulab.transformer import TransformerShape
    >>> shape = TransformerShape(layers=1, d_model=32, heads=2, seq_len=32, vocab=256)
    >>> [c.label for c in gpt_changes(shape, device="cpu")][-2:]
    ['accumulation x4 (memory)', 'activation checkpointing (memory)']
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping

from ..._check import flag, mapping, positive, whole
from ...transformer import TransformerShape
from ..capstone.ablation import Ablation, Change, ablate
from ..capstone.ablation_table import _fraction
from .heldout import split_text, unigram_baseline
from .train import GPTRecipe, GPTRun, _args, _blocks, _first_checked, _step, gpt_stepper, train_gpt

__all__ = ["gpt_changes", "gpt_ablation", "micro_batches_that_fit"]


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
        Change("largest micro-batch", bigger, updates=True, why="more tokens per kernel: the fixed costs of a step are shared; "
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
                 track: Mapping[str, Any] | None = None, judge: str = "time to accuracy",
                 max_epochs: int | None = None) -> Ablation:
    """Train ``baseline`` (default :class:`GPTRecipe`) on ``tokens``, then each of :func:`gpt_changes` in turn. The
    baseline's held-out next-token accuracy, over its own seed and ``accuracy_seeds`` more: the lowest is the
    *target*, that less ``accuracy_tolerance`` the *floor*.

    ``judge="time to accuracy"`` (the default): the accuracy is read after each quarter of the tokens. The larger
    micro-batch (fewer updates) is kept when it reaches the target in less training time than the current recipe
    (its steps timed against the current recipe's, interleaved, for ``compare_s`` seconds, x the ratio of their
    quarters to the target), trained on more quarters if its gain can pay for them (at most ``max_epochs``, default
    12: three times the tokens); a lever that leaves the updates alone (16-bit autocast, fused AdamW, compiling,
    CUDA graphs) is kept when faster beyond the noise and at the floor. Where the baseline learned nothing beyond byte
    frequencies, the levers are judged by throughput, and the notes say so. ``judge="throughput"``: every recipe
    trains on ``tokens`` and a lever is kept when faster beyond the noise and at the floor."""
    from ..capstone.ablation_table import judge_arg
    from ..capstone.torch_ablation import _ceiling

    dev = _args(shape, baseline, device, held_out=True, recipe_name="baseline")
    base = GPTRecipe() if baseline is None else baseline
    whole("tokens", tokens)
    judge_arg(judge)
    _judging(accuracy_tolerance, compile_on_cpu, accuracy_seeds, compare_s, price_per_hour, track)
    if max_epochs is not None:
        whole("max_epochs", max_epochs, low=4)
        if judge != "time to accuracy":
            raise ValueError(f"max_epochs={max_epochs!r} applies to judge='time to accuracy' only (judge={judge!r})")

    def quarter(r: GPTRecipe) -> int:          # the steps of a quarter of the tokens (at least one)
        return max(1, tokens // (4 * r.micro_batch * r.accumulation * shape.seq_len))

    first: list[GPTRun] = []                   # the baseline's untracked run, trained once to choose the judging

    def train(r: GPTRecipe, run: Any, epochs: int = 4) -> GPTRun:
        if first and run is None and epochs == 4 and r == base:
            return first.pop()
        return train_gpt(shape, r, steps=quarter(r) * epochs, parts=epochs, device=dev, run=run)

    unlearned = False
    if judge == "time to accuracy":            # time to an accuracy training never moved would judge by its noise
        first.append(train(base, None))
        unlearned = not unigram_baseline().beaten_by(first[0].test_accuracy)
        if unlearned:
            judge, max_epochs = "throughput", None

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
        return train_gpt(shape, r, steps=quarter(r) * 4, device=dev, seed=seed).test_accuracy

    ceiling = _ceiling(dev)
    table = ablate(train, base, gpt_changes(shape, device=dev, compile_on_cpu=compile_on_cpu),
                   apply=lambda r, f: replace(r, **f), describe=GPTRecipe.describe, params=GPTRecipe.params,
                   ceiling=lambda r: ceiling(_AsRecipe(r.precision)), compare=compare if compare_s else None,
                   baseline_label="baseline", title=f"GPT ({shape.layers} x {shape.d_model}, T={shape.seq_len}): "
                   f"one lever at a time ({dev.type})", accuracy_tolerance=accuracy_tolerance, track=track,
                   device=str(dev), rerun=rerun if accuracy_seeds else None, accuracy_seeds=accuracy_seeds, epochs=4,
                   judge=judge, max_epochs=max_epochs,
                   price_per_hour=price_per_hour)
    return replace(table, notes=_ablation_notes(tokens, table.baseline.test_accuracy, unlearned))


def _ablation_notes(tokens: int, baseline_accuracy: float | None, fell_back: bool = False) -> tuple[str, ...]:
    """The GPT ablation's notes: what it trained on, and whether its baseline learned more than byte frequencies
    (if not, the accuracy floor cannot tell a working lever from a broken one; ``fell_back``: judging by time was
    asked for, and the levers were judged by throughput instead)."""
    floor = unigram_baseline()
    notes = [f"every recipe trained on {tokens:,} tokens of the course's text in 4 epochs of a quarter each (judged by "
             f"time, more of them for a lever short of the target); accuracy = next-token accuracy on held-out windows, "
             f"read after each (byte frequencies alone: {floor.accuracy:.1%}); samples = tokens"]
    if baseline_accuracy is not None and not floor.beaten_by(baseline_accuracy):
        notes.append(f"the baseline reached {baseline_accuracy:.1%}, within 2 points of guessing by byte frequencies "
                     f"({floor.accuracy:.1%}): after {tokens:,} tokens the accuracy floor cannot tell a working lever "
                     "from a broken one; train on more tokens" + (
                         ". Time to that accuracy would be read from noise, so the levers were judged by throughput "
                         "at the floor instead" if fell_back else ""))
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
