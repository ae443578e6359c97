"""Lesson 07's exercises and measurements around data parallelism: the worker counts a scaling sweep launches, the
noise of a timing on this machine (which sets a challenge's margin), the gradient-accumulation challenge on a DDP
model, and the checks of the exercises that need a computed answer.

Example:
    >>> from gpulab import course
    >>> course.worker_counts(8), course.worker_counts(6), course.worker_counts(1)
    ((1, 2, 4, 8), (1, 2, 4, 6), (1,))
    >>> course.check_allreduce_crossover(4.8)
    [ok] buffer where the latency term equals the bandwidth term (MB): 4.8 is right
"""
from __future__ import annotations

import contextlib
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from ..._check import whole
from ..lesson.checks import Check, NotAnswered, check

__all__ = ["worker_counts", "NoiseMargin", "noise_margin", "AccumulationBench", "accumulation_bench",
           "check_allreduce_crossover", "check_strong_scaling", "CROSSOVER_CASE", "fsdp_runs_on_cpu",
           "model_state_table", "STATE_BYTES", "ZERO_COMMUNICATION"]

# Bytes per parameter of fp32 training with Adam, as each data-parallel rank holds them: weights, gradients, Adam's two
# moments, and DDP's gradient buckets (the flat buffers it all-reduces: a second copy of every gradient, unless
# DistributedDataParallel(..., gradient_as_bucket_view=True) makes the gradients views into them)
STATE_BYTES = {"weights": 4, "gradients": 4, "adam": 8, "ddp_buckets": 4}
# Communication per step per GPU, in volumes of the model's parameters (Psi), as Rajbhandari et al. count them (ZeRO,
# SC20, section 7): DDP's all-reduce is a reduce-scatter and an all-gather, 2 Psi; ZeRO-1 and ZeRO-2 send the same 2 Psi
# (a reduce-scatter of the gradients, an all-gather of the updated weights); ZeRO-3 also all-gathers the weights again
# for backward: 3 Psi, 1.5x DDP's. Each is exactly (N-1)/N of that on N GPUs (a ring).
ZERO_COMMUNICATION = {"DDP": 2, "ZeRO-1": 2, "ZeRO-2": 2, "ZeRO-3": 3}

# Exercise 1's case: 8 GPUs, a latency of 2 us per ring step, 300 GB/s per direction (NVLink 3 between A100s: the
# theoretical figure; nccl-tests' all-reduce bus bandwidth reaches about 230 GB/s, gl.published("nccl-allreduce-a100"))
CROSSOVER_CASE = {"workers": 8, "alpha_s": 2e-6, "link_bytes_per_s": 300e9}


def worker_counts(gpus: int) -> tuple[int, ...]:
    """The worker counts a scaling sweep runs on ``gpus`` GPUs: 1 and the powers of two up to ``gpus``, and
    ``gpus`` itself.

    Example:
        >>> worker_counts(3)
        (1, 2, 3)
    """
    whole("gpus", gpus)
    counts = {1, gpus}
    n = 2
    while n <= gpus:
        counts.add(n)
        n *= 2
    return tuple(sorted(counts))


@dataclass(frozen=True)
class NoiseMargin:
    """How much two identical runs of one function disagree on this machine, timed in turn (an A/A test), and the
    speedup a change must beat to count as faster.

    ``noise`` is the larger of the two identical runs' own median ratio's distance from 1 and the standard error of a
    median ratio (about 0.93 x interquartile range / sqrt(rounds)); the target is ``1 + max(floor, factor x noise)``.

    Example:
        >>> NoiseMargin(rounds=16, spread=0.2, aa_ratio=1.01, factor=3.0, floor=0.03).target_speedup
        1.14
    """

    rounds: int
    spread: float            # interquartile range of the per-round time ratios of the two identical runs
    aa_ratio: float          # median time of one copy over the other's: 1.0 on a quiet machine
    factor: float
    floor: float
    min_run_time: float = 1.0   # the timing that gave it: time the comparison as long (as many rounds)
    tries: int = 1              # how many times it was measured, each twice as long, until the noise allowed a target

    @property
    def noise(self) -> float:
        return max(abs(self.aa_ratio - 1.0), 0.93 * self.spread / max(1, self.rounds) ** 0.5)

    @property
    def target_speedup(self) -> float:
        return round(1.0 + max(self.floor, self.factor * self.noise), 2)

    def __repr__(self) -> str:
        longer = (f"; measured {self.tries} times, each twice as long, until the noise allowed a target "
                  f"({self.min_run_time:g} s)" if self.tries > 1 else "")
        return (f"NoiseMargin(the same function timed twice, in turn, {self.rounds} rounds: median ratio "
                f"{self.aa_ratio:.3f}, per-round ratios spread over {self.spread:.1%}; noise of a median ratio "
                f"{self.noise:.1%}, so a change must be {self.target_speedup:.2f}x faster to count{longer})")


def noise_margin(fn: Callable[[], Any], *, min_run_time: float = 1.0, factor: float = 3.0, floor: float = 0.03,
                 device: Any = None, max_target: float = 1.25, max_tries: int = 3) -> NoiseMargin:
    """Time ``fn`` against itself, interleaved (:func:`gpulab.benchmark_interleaved`), and measure how far the two
    identical copies disagree: the noise any comparison of two medians on this machine carries.

    On a busy machine a few rounds give a noise no real change could beat: while the target is above ``max_target``
    it is measured again, twice as long each time (more rounds), up to ``max_tries`` times; ``min_run_time`` of the
    result is the timing to compare with (the same number of rounds).

    Example:
        >>> m = noise_margin(lambda: sum(range(2000)), min_run_time=0.1)
        >>> m.target_speedup >= 1.03
        True
    """
    if not callable(fn):
        raise TypeError(f"fn must be a function without arguments, got {fn!r}")
    for name, v in (("factor", factor), ("floor", floor)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
            raise ValueError(f"{name} must be a number >= 0, got {v!r}")
    from ...interleaved import benchmark_interleaved

    if isinstance(max_target, bool) or not isinstance(max_target, (int, float)) or not max_target > 1:
        raise ValueError(f"max_target must be a speedup > 1 (e.g. 1.25), got {max_target!r}")
    if isinstance(max_tries, bool) or not isinstance(max_tries, int) or max_tries < 1:
        raise ValueError(f"max_tries must be a whole number >= 1, got {max_tries!r}")
    run_time = float(min_run_time)
    for tries in range(1, max_tries + 1):
        runs = benchmark_interleaved({"a": fn, "b": fn}, min_run_time=run_time, device=device)
        ratios = sorted(a / b for a, b in zip(runs["a"].times_s, runs["b"].times_s) if b > 0)
        if len(ratios) < 2:
            spread = 0.0
        else:
            q = statistics.quantiles(ratios, n=4)
            spread = (q[2] - q[0]) / statistics.median(ratios)
        margin = NoiseMargin(len(ratios), float(spread), runs["a"].median_s / runs["b"].median_s, float(factor),
                             float(floor), run_time, tries)
        if margin.target_speedup <= max_target or tries == max_tries:
            return margin
        run_time *= 2
    return margin  # pragma: no cover - the loop returns


@dataclass(frozen=True)
class AccumulationBench:
    """A DDP model in a one-process gloo group, its micro-batches, and the baseline loop (an all-reduce after every
    micro-batch). :meth:`yours` wraps an accumulation loop for :func:`course.challenge`; :meth:`same` compares
    gradients."""

    model: Any
    micro_batches: tuple[Any, ...]
    full_batch_grads: tuple[Any, ...]
    tolerance: float

    def _grads(self) -> tuple[Any, ...]:
        return tuple(p.grad.detach().clone() if p.grad is not None else None for p in self.model.module.parameters())

    def baseline(self) -> tuple[Any, ...]:
        """Accumulate every micro-batch's gradients with DDP's all-reduce after each backward."""
        from .no_sync import no_sync_loss

        self.model.zero_grad(set_to_none=True)
        k = len(self.micro_batches)
        for x, y in self.micro_batches:
            no_sync_loss(self.model, x, y, k).backward()
        return self._grads()

    def yours(self, accumulate: Callable[[Any, list], Any] | None) -> Callable[[], tuple[Any, ...]] | None:
        """``accumulate(model, micro_batches)`` as a function without arguments returning the gradients it left
        (None while there is no loop)."""
        if accumulate is None:
            return None
        if not callable(accumulate):
            raise TypeError(f"accumulate must be a function (model, micro_batches) -> None, got {accumulate!r}")

        def run() -> tuple[Any, ...]:
            self.model.zero_grad(set_to_none=True)
            accumulate(self.model, list(self.micro_batches))
            return self._grads()
        return run

    def same(self, a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
        """Both gradient sets equal the full batch's (within ``tolerance``)."""
        return all(_close_grads(g, self.full_batch_grads, self.tolerance) for g in (a, b))


def _close_grads(got: tuple[Any, ...], full: tuple[Any, ...], tolerance: float) -> bool:
    return len(got) == len(full) and all(g is not None and float((g - f).abs().max()) <= tolerance
                                         for g, f in zip(got, full))


@contextlib.contextmanager
def accumulation_bench(micro_batches: int = 8, batch: int = 64, *, bucket_cap_mb: float = 0.25, hidden: int = 256,
                       seed: int = 0, tolerance: float = 1e-5) -> Iterator[AccumulationBench]:
    """An :class:`AccumulationBench` on the CPU: a DDP-wrapped MLP (no BatchNorm) in a one-process gloo group, with
    buckets of ``bucket_cap_mb``, and ``batch`` items split into ``micro_batches``. With one process the all-reduce
    moves no bytes, yet DDP still copies every bucket's gradients in and out and calls the backend for each, which is
    what accumulation under ``no_sync()`` saves.

    Example:
        >>> from gpulab import course
        >>> with course.accumulation_bench(micro_batches=2, batch=8, hidden=32) as bench:
        ...     bench.same(bench.baseline(), bench.baseline())
        True
    """
    k, b = whole("micro_batches", micro_batches), whole("batch", batch)
    whole("hidden", hidden)
    if b % k:
        raise ValueError(f"batch ({b}) must split into {k} equal micro-batches: pick a batch that {k} divides")
    import copy

    import torch
    from torch.nn.parallel import DistributedDataParallel

    from ..lesson.models import mlp
    from .no_sync import local_process_group, no_sync_loss
    from ..lesson.runs import pattern_batch

    torch.manual_seed(seed)
    plain = torch.nn.Sequential(torch.nn.Flatten(), mlp(in_features=3 * 32 * 32, hidden=hidden, layers=2))
    x, y = pattern_batch(b, seed=seed)
    no_sync_loss(plain, x, y, 1).backward()
    full = tuple(p.grad.detach().clone() for p in plain.parameters())
    with local_process_group() as group:
        ddp = DistributedDataParallel(copy.deepcopy(plain), bucket_cap_mb=bucket_cap_mb, process_group=group)
        yield AccumulationBench(ddp, tuple(zip(x.chunk(k), y.chunk(k))), full, tolerance)


def fsdp_runs_on_cpu(version: str | None = None) -> bool:
    """Whether this torch (or ``version``) runs ``fully_shard`` on CPU tensors: from torch 2.7, whose CPU stream
    stubs FSDP2's CPU path uses; earlier versions need CUDA.

    Example:
        >>> fsdp_runs_on_cpu("2.5.1+cu124"), fsdp_runs_on_cpu("2.14.1")
        (False, True)
    """
    import re

    if version is None:
        import torch

        version = torch.__version__
    found = re.match(r"(\d+)\.(\d+)", str(version))
    if not found:
        raise ValueError(f"version must look like '2.7.0', got {version!r}")
    return (int(found.group(1)), int(found.group(2))) >= (2, 7)


def check_allreduce_crossover(buffer_mb: float | None) -> Check | NotAnswered:
    """Exercise 1: the buffer size (MB) at which a ring all-reduce's latency term equals its bandwidth term, for
    :data:`CROSSOVER_CASE`. Raises ``AssertionError`` on a wrong answer.

    Example:
        >>> check_allreduce_crossover(None)
        [ ] buffer where the latency term equals the bandwidth term (MB): not answered yet - write your answer in the exercise cell above, then run this cell again
    """
    c = CROSSOVER_CASE
    expected = c["workers"] * c["alpha_s"] * c["link_bytes_per_s"] / 1e6     # 2(N-1) a = 2(N-1)/N x B / bw
    return check("buffer where the latency term equals the bandwidth term (MB)", buffer_mb, expected, rtol=0.02,
                 hint="write both terms of the alpha-beta model for the same N and set them equal; solve for the bytes")


def check_strong_scaling(run: Any, efficiency: float | None, one_process_items_per_s: float,
                         global_batch: int) -> Check | NotAnswered:
    """Exercise 2: ``run`` is the learner's launch of ``ddp_train`` keeping the global batch at ``global_batch``;
    ``efficiency`` their strong-scaling efficiency against one process training ``global_batch`` items per step
    at ``one_process_items_per_s``. Checks the launch's shape, then the figure. Raises ``AssertionError`` when wrong."""
    name = "strong-scaling efficiency of your launch"
    if run is None or efficiency is None:
        return NotAnswered(name)
    results = getattr(run, "results", None)
    if not results or "ddp_items_per_s" not in results[0]:
        raise AssertionError(f"{name}: pass the LaunchResult of gl.launch('gpulab.course.scripts.ddp_train', ...) "
                             "with timed steps (--steps > 0)")
    r, world = results[0], run.world_size
    if world < 2 or r["batch"] * world != global_batch:
        raise AssertionError(f"{name}: your launch ran {world} process(es) x {r['batch']} items = "
                             f"{world * r['batch']} items per step; strong scaling keeps the global batch at "
                             f"{global_batch}: split it over the processes")
    expected = r["ddp_items_per_s"] / one_process_items_per_s / world
    return check(name, efficiency, expected, rtol=0.02,
                 hint="the speedup over one process doing the same global batch, divided by the growth in workers")


def model_state_table(params: Mapping[str, float], *, gpus: int = 8, gpu: str = "A100 80GB SXM") -> Any:
    """Per GPU, for models of ``params`` parameters (name -> count) trained in fp32 with Adam on ``gpus`` GPUs: the
    model state each GPU holds (GiB) with DDP, counting its gradient buckets (:data:`STATE_BYTES`), with DDP and
    ``gradient_as_bucket_view=True``, and with ZeRO stages 1-3; whether DDP fits one ``gpu`` and ZeRO-3 over ``gpus``
    does (in the memory a program sees); and what each GPU sends per step with fp32 gradients and weights (GB:
    :data:`ZERO_COMMUNICATION` times the parameters, times (N-1)/N). Activations come on top of every column.

    Example:
        >>> t = model_state_table({"1 B": 1e9}, gpus=8)
        >>> round(float(t.loc["1 B", "DDP: each GPU holds (GiB)"]), 1), round(float(t.loc["1 B", "ZeRO-3 over 8 (GiB)"]), 2)
        (18.6, 1.86)
        >>> float(t.loc["1 B", "ZeRO-3: sent per GPU per step (GB)"] / t.loc["1 B", "DDP: sent per GPU per step (GB)"])
        1.5
    """
    import pandas as pd

    from ...reference import gpu_spec

    whole("gpus", gpus)
    if gpus < 2:
        raise ValueError(f"gpus must be 2 or more: data parallelism needs more than one, got {gpus}")
    if not isinstance(params, Mapping) or not params:
        raise TypeError(f"params must map a model's name to its parameter count, got {params!r}")
    card, b, gib = gpu_spec(gpu), STATE_BYTES, 2**30
    rows = {}
    for name, n in params.items():
        if isinstance(n, bool) or not isinstance(n, (int, float)) or not n > 0:
            raise ValueError(f"params[{name!r}] must be a parameter count > 0, got {n!r}")
        view = n * (b["weights"] + b["gradients"] + b["adam"])
        zero = {1: n * (b["weights"] + b["gradients"] + b["adam"] / gpus),
                2: n * (b["weights"] + (b["gradients"] + b["adam"]) / gpus), 3: view / gpus}
        sent = {k: v * n * 4 * (gpus - 1) / gpus / 1e9 for k, v in ZERO_COMMUNICATION.items()}
        rows[name] = {"DDP: each GPU holds (GiB)": (view + n * b["ddp_buckets"]) / gib,
                      "DDP, gradient_as_bucket_view=True (GiB)": view / gib,
                      **{f"ZeRO-{s} over {gpus} (GiB)": v / gib for s, v in zero.items()},
                      f"DDP fits one {card.name}": view + n * b["ddp_buckets"] < card.program_memory_bytes,
                      f"ZeRO-3 / FSDP over {gpus} fits": zero[3] < card.program_memory_bytes,
                      "DDP: sent per GPU per step (GB)": sent["DDP"],
                      "ZeRO-1/2: sent per GPU per step (GB)": sent["ZeRO-1"],
                      "ZeRO-3: sent per GPU per step (GB)": sent["ZeRO-3"]}
    return pd.DataFrame.from_dict(rows, orient="index")
