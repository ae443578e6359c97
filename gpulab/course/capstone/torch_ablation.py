"""The capstone's PyTorch ablation: the seed loop, then each change the course taught, kept if it helps.

:func:`torch_changes` lists the changes for the device lessons run on (a change the device cannot make is
listed with the reason); :func:`torch_ablation` runs them with :func:`course.ablate` and returns the table.

Example:
    >>> from gpulab import course
    >>> [c.label for c in course.torch_changes(course.digits(64, 16, download=False), device="cpu")][:3]
    ['batch 256, lr x8 with warm-up and cosine decay', 'whole tensors, no per-sample transform', 'pinned memory, non_blocking copies']
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import replace
from typing import Any, Mapping

from ..._check import checked, device_arg, flag, mapping, nbytes, positive, whole
from ...interleaved import threads
from .ablation import Ablation, Change, ablate
from .ablation_table import _fraction, judge_arg
from .recipe import Recipe, _tf32, keep_rng, train_recipe
from .data import features
from .digits import Digits

__all__ = ["torch_changes", "torch_ablation", "largest_batch", "interleaved_gain"]


@checked(device="device")
def largest_batch(recipe: Recipe, data: Digits, *, device: Any = None, budget: int | None = None,
                  limit: int | None = None) -> Any:
    """:func:`gpulab.find_max_batch_size` for ``recipe``'s training step (data on the device): the sizes that
    fit, each timed. ``budget`` simulates a card's memory off-GPU (default a T4's 15 GiB, as nvidia-smi shows
    it); ``limit`` defaults to an eighth of the training set, so an epoch still has 8 steps."""
    import torch
    import torch.nn.functional as F

    from ...memory import find_max_batch_size
    from ...reference import gpu_spec
    from ...system import device as pick_device
    from .recipe import _optimizer, _seeded_model
    from ..lesson.loop import TrainConfig, make_scaler

    dev = pick_device(None if device is None else str(device))
    model = _seeded_model(0, dev)
    opt = _optimizer(recipe, model.parameters())
    scaler = make_scaler(TrainConfig(precision=recipe.precision), dev.type)
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[recipe.precision]
    x_all, y_all = features(data.train_x, "data.train_x").to(dev), data.train_y.to(dev)
    n = data.n_train

    def step(bs: int) -> None:
        idx = torch.randint(0, n, (bs,), device=dev)
        with torch.autocast(dev.type, dtype=dtype, enabled=dtype is not None):
            loss = F.cross_entropy(model(x_all[idx]), y_all[idx])
        opt.zero_grad()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()

    limit = limit or max(recipe.batch_size, n // 8)
    cuda = dev.type == "cuda"
    with keep_rng(dev):               # the random batches and the model's weights leave the caller's generators alone
        return find_max_batch_size(step, start=min(recipe.batch_size, limit), limit=limit,
                                   budget=None if cuda else (budget or gpu_spec("T4").memory_bytes), device=str(dev),
                                   min_run_time=0.15)


@checked(device="device")
def interleaved_gain(current: Recipe, candidate: Recipe, data: Digits, *, device: Any = None,
                     min_run_time: float = 0.6) -> tuple[float, float]:
    """Samples/s of ``candidate`` over ``current``, their training steps timed in turn by
    :func:`gpulab.benchmark_interleaved` (so a busy moment slows both alike), and the larger relative IQR of the
    two, in %.

    Example:
        >>> from gpulab import course
        >>> d = course.digits(256, 8, download=False)
        >>> gain, spread = interleaved_gain(course.Recipe(data="host"), course.Recipe(batch_size=128, data="host"), d,
        ...                                 min_run_time=0.1)
        >>> gain > 1
        True
    """
    from ...interleaved import benchmark_interleaved
    from ...system import device as pick_device
    from .recipe import recipe_stepper

    dev = pick_device(None if device is None else str(device))
    fns = {"current": recipe_stepper(current, data, device=dev), "candidate": recipe_stepper(candidate, data, device=dev)}
    ms = benchmark_interleaved(fns, min_run_time=min_run_time, warmup=3, device=dev,
                               items={"current": current.batch_size, "candidate": candidate.batch_size})
    gain = ms["candidate"].items_per_s / ms["current"].items_per_s
    return gain, 100.0 * max(ms["current"].relative_iqr, ms["candidate"].relative_iqr)


@checked(device="device")
def torch_changes(data: Digits, *, device: Any = None, batch_size: int = 256, compile_on_cpu: bool = False,
                  budget: int | None = None) -> list[Change]:
    """The changes lesson 12 tries, in order, for ``device`` (default: the lessons' device)."""
    import torch

    from ...precision import choose_precision
    from ...system import device as pick_device
    from ..training.batching import scale_lr
    from ..machine.tf32 import tf32_supported

    dev = pick_device(None if device is None else str(device))
    cuda = dev.type == "cuda"
    prec = choose_precision() if cuda or dev.type == "cpu" else None
    low = prec.precision if prec is not None and prec.precision != "fp32" else None
    fused_ok = _fused_adam_works(dev)

    def bigger(recipe: Recipe) -> list[tuple[str, Mapping[str, Any]]]:
        # the sizes that fit, timed; the ones faster than the current batch are tried fastest first, and the
        # first that keeps accuracy is kept (a larger batch makes fewer updates in the same epochs)
        search = largest_batch(recipe, data, device=dev, budget=budget)
        timed = {t.batch_size: t.items_per_s for t in search.trials if t.fits and t.items_per_s}
        now = timed.get(recipe.batch_size)
        faster = sorted((b for b in timed if b > recipe.batch_size and (now is None or timed[b] > 1.05 * now)),
                        key=lambda b: -timed[b])[:3]
        return [(f"batch {b}", {"batch_size": b, "lr": scale_lr(recipe.lr, recipe.batch_size, b, rule="sqrt")})
                for b in faster]

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return [
        Change(f"batch {batch_size}, lr x{batch_size / 32:g} with warm-up and cosine decay",
               lambda r: {"batch_size": batch_size, "lr": scale_lr(r.lr, r.batch_size, batch_size, rule="linear"),
                          "schedule": "cosine"},
               why="fewer, larger steps; the learning rate scaled with the batch (Goyal et al. 2017), reached by a "
                   "warm-up and decayed to zero, so the fewer updates still reach the seed's accuracy", updates=True),
        Change("whole tensors, no per-sample transform", {"data": "host"},
               why="convert the data set once instead of one PIL image and ToTensor per sample"),
        Change("pinned memory, non_blocking copies", {"pin_memory": True}, available=cuda,
               why_not="needs a CUDA GPU: on a CPU there is no host-to-device copy to overlap"),
        Change("data on the device", {"data": "device"}, available=cuda,
               why_not="on a CPU the host's memory is the device's: the data is already there"),
        Change(f"{low or '16-bit'} autocast" + (" + GradScaler" if low == "fp16" else ""), {"precision": low or "fp32"},
               available=low is not None, why_not="this device has no fast 16-bit format"),
        Change("TF32 matmuls", {"tf32": True}, available=tf32_supported(dev),
               why_not="TF32 needs an Ampere or newer GPU"),
        Change("fused Adam", {"optimizer": "fused"}, available=fused_ok,
               why_not=f"torch {torch.__version__} has no fused Adam for {dev.type}"),
        Change("torch.compile", {"compile": True}, available=cuda or compile_on_cpu, one_off=True,
               why_not="skipped on a CPU: the first compiled step builds C++ for ~30 s (lesson 10), more than this "
                       "lesson's time; torch_ablation(compile_on_cpu=True) measures it"),
        Change("CUDA graphs (torch.compile, mode='reduce-overhead')", {"compile": True, "cuda_graphs": True},
               available=cuda, one_off=True,
               why="each step's kernels recorded once and replayed with one launch (lesson 10)",
               why_not="CUDA graphs record GPU kernel launches: a CUDA GPU only"),
        Change("larger batch that fits", bigger, updates=True,
               why="find_max_batch_size times the sizes that fit; the faster ones are tried, fastest first",
               why_not="no batch that fits ran faster than the current one in the search"),
        *_second_pass(low, tf32_supported(dev)),
        Change("data on disk: DataLoader with workers" + (", pinned" if cuda else ""),
               lambda r: {"data": "disk", "workers": max(1, min(4, cores)), "pin_memory": cuda}, branch=True,
               why="what the final recipe keeps when the data set cannot be held in memory"),
    ]


def _second_pass(low: str | None, tf32_ok: bool) -> list[Change]:
    """The precision changes tried again once a later change (a larger batch above all) has changed the recipe: a
    16-bit or TF32 matmul gains more on large matrices than on small ones, so a change dropped at batch 256 may pay
    at the batch reached. Each runs only if its first try was dropped and something was kept since."""
    why = "its gain depends on the size of the matmuls, which the later changes (the batch) have changed"
    out = []
    if low is not None:
        first = f"{low} autocast" + (" + GradScaler" if low == "fp16" else "")
        out.append(Change(f"{first}, again on the recipe reached", {"precision": low}, why=why, retry_of=first))
    if tf32_ok:
        out.append(Change("TF32 matmuls, again on the recipe reached",
                          lambda r: [] if r.precision != "fp32" else {"tf32": True}, why=why,
                          why_not="the recipe's matmuls run in 16 bits now: TF32 changes only fp32 ones",
                          retry_of="TF32 matmuls"))
    return out


def _fused_adam_works(dev: Any) -> bool:
    import torch

    try:
        p = torch.nn.Parameter(torch.zeros(2, device=dev))
        opt = torch.optim.Adam([p], fused=True)
        p.grad = torch.ones_like(p)
        opt.step()
        return True
    except (RuntimeError, ValueError, TypeError, NotImplementedError):
        return False


def _ceiling(dev: Any) -> Any:
    from ...limits import machine_limits

    machine_limits(dev)                           # the device's default dtypes, measured once per process
    names = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}

    def ceiling(recipe: Recipe) -> tuple[str, float] | None:
        # a precision the defaults leave out (bf16 on a CPU without bf16 instructions) is measured when used;
        # an fp32 recipe with TF32 on is held to the fp32 ceiling measured with TF32 on, as it trains
        name = names[recipe.precision]
        with _tf32(recipe, dev) if name == "float32" else contextlib.nullcontext():
            return ("tf32" if name == "float32" and recipe.tf32 else name,
                    machine_limits(dev, dtypes=[name]).peak_flops(name))
    return ceiling


@checked(device="device", accuracy_seeds="count0")
def torch_ablation(data: Digits, *, epochs: int = 3, device: Any = None, batch_size: int = 256,
                   compile_on_cpu: bool = False, track: Mapping[str, Any] | None = None,
                   accuracy_tolerance: float = 0.01, budget: int | None = None,
                   disk_images: int | None = 6000, compare_s: float = 0.6, accuracy_seeds: int = 2,
                   price_per_hour: Any = None, judge: str = "time to accuracy",
                   max_epochs: int | None = None) -> Ablation:
    """Train the seed loop, then each of :func:`torch_changes` in turn on ``data``. Its accuracy after ``epochs``
    epochs is measured over its own seed and ``accuracy_seeds`` more (trained with whole tensors: the same math,
    seconds each): the lowest is the *target*, that less ``accuracy_tolerance`` the *floor*.

    ``judge="time to accuracy"`` (the default, :func:`course.ablate`): a change to the updates (the batch size with
    its learning rate) is kept when it reaches the target in less training time than the recipe it changed, and one
    that needs more epochs trains again with those its gain can pay for (at most ``max_epochs``, default 3 x
    ``epochs``); a change that leaves the updates alone is kept when faster beyond the noise and at the floor.
    ``judge="throughput"`` trains every change for ``epochs`` and keeps it when faster beyond the noise and at the
    floor.

    ``compare_s``: seconds of interleaved steps behind each keep-or-drop decision (:func:`interleaved_gain`;
    0 compares the epochs' own throughputs instead). ``disk_images``: how many training images the "data on disk" branch reads as files (timed over 2 epochs).
    ``track``: keyword arguments of :func:`gpulab.tracking.track` (e.g. ``{"experiment": "capstone-torch",
    "root": "runs"}``): every step is logged with its telemetry. ``price_per_hour`` (USD per hour, a key of
    :func:`gpulab.cost.prices` or a :class:`gpulab.cost.Price`, e.g. ``course.lesson_price(...)``) adds each step's
    cost per million samples at its measured throughput. Each step's joules per sample come from the device's energy
    counter around its timed epochs ("not measurable" with the reason where there is none).
    """
    from ...cost import hourly_price
    from ...system import device as pick_device

    if not isinstance(data, Digits):              # every argument fails here, before minutes of training
        raise TypeError(f"data must be course.digits(...), got {type(data).__name__} {data!r:.60}")
    whole("epochs", epochs), whole("batch_size", batch_size), flag("compile_on_cpu", compile_on_cpu)
    judge_arg(judge)
    _fraction("accuracy_tolerance", accuracy_tolerance), whole("accuracy_seeds", accuracy_seeds, low=0)
    if max_epochs is not None:
        whole("max_epochs", max_epochs, low=epochs)
    positive("compare_s", compare_s, allow_zero=True, unit="seconds (0: no interleaved timing)")
    if budget is not None:
        nbytes("budget", budget, low=1)
    if disk_images is not None:
        whole("disk_images", disk_images)
    if track is not None:
        mapping("track", track, example="{'root': 'runs', 'experiment': 'capstone-torch'}")
    if price_per_hour is not None:
        hourly_price(price_per_hour)
    dev = pick_device(None if device_arg("device", device) is None else str(device))
    changes = torch_changes(data, device=dev, batch_size=batch_size, compile_on_cpu=compile_on_cpu, budget=budget)
    disk = data.take(disk_images) if disk_images and disk_images < data.n_train else data

    def train(recipe: Recipe, run: Any, epochs: int = epochs) -> Any:
        if recipe.data != "disk":
            return train_recipe(recipe, data, epochs=epochs, device=dev, run=run)
        # reading image files is slow: time two epochs of a subset; its accuracy is not comparable, so not shown
        return replace(train_recipe(recipe, disk, epochs=2, device=dev, run=run), test_accuracy=None)

    def compare(current: Recipe, candidate: Recipe) -> tuple[float, float]:
        return interleaved_gain(current, candidate, data, device=dev, min_run_time=compare_s)

    def rerun(recipe: Recipe, seed: int) -> float | None:
        # the seed loop's math with another seed: whole tensors give the same batches' values as the per-sample
        # path at a fraction of its time, so its run-to-run spread costs seconds. Only its accuracy is used, so it
        # runs on one CPU thread: batch-32 matmuls gain little from a second one, and on a shared CPU a busy core
        # would stall every parallel region of its thousands of steps
        fast = replace(recipe, data="host") if recipe.data == "per-sample" else recipe
        with threads(1 if dev.type == "cpu" else None):
            return train_recipe(fast, data, epochs=epochs, device=dev, seed=seed).test_accuracy

    table = ablate(train, Recipe(), changes, apply=lambda r, f: replace(r, **f), describe=Recipe.describe,
                   params=Recipe.params, ceiling=_ceiling(dev), compare=compare if compare_s else None,
                   title=f"PyTorch: the seed loop, one change at a time ({dev.type})",
                   accuracy_tolerance=accuracy_tolerance, track=track, device=str(dev), epochs=epochs,
                   rerun=rerun if accuracy_seeds else None, accuracy_seeds=accuracy_seeds, price_per_hour=price_per_hour,
                   judge=judge, max_epochs=max_epochs)
    notes = [f"{data.n_train:,} training images ({data.source}), test accuracy on {data.n_test:,}"]
    if disk is not data:
        notes.append(f"the disk branch is timed on {disk.n_train:,} image files over 2 epochs")
    return replace(table, notes=tuple(notes))

