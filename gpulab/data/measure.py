"""Time a loader with a training step, split into data wait and compute per batch."""
from __future__ import annotations

import contextlib
import inspect
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal, Sequence

from .._check import checked, flag, whole
from .._format import fmt_number, fmt_seconds, html_table
from .batches import (_block, _check_limits, _count, _endless, _machine_busy_s, _one_shot, _to_device, _tree_cpu_s,
                      _wait_for_batch)

__all__ = ['LoaderRun', 'measure_loader', 'measure_loaders']

# Default limits of one measure_loader call: far above what a lesson or a test runs, low enough that an endless
# loader (a tf.data dataset with .repeat(), itertools.repeat(batch), a generator with `while True`) returns in a
# few minutes at most, with a bounded record (three floats per batch).
MAX_BATCHES = 100_000
MAX_S = 300.0
_LIMITS = ("max_batches", "max_s")


# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True, repr=False)
class LoaderRun:
    """One timed run of a loader (frozen). Times are seconds over the timed batches (the first
    ``warmup`` batches, which include starting workers or building a pipeline, are excluded and
    reported as ``first_batch_s``).

    ``waits_s`` / ``computes_s``: per batch, the time ``next()`` blocked and the time the step took;
    ``starts_s``: when each batch was asked for, in seconds since ``started_at`` (``time.time()`` at the
    start of the timed part, which places the run on a :class:`gpulab.Monitor` trace). ``cpu_s``: CPU
    seconds of this process and its child processes (loader workers) while timed;
    ``epoch_overhead_s``: starting each later epoch (``iter()``: e.g. starting DataLoader workers again)
    and the ``next()`` calls that ended epochs (e.g. stopping workers) - loader time outside any batch,
    counted in ``data_wait_s``. ``cores``: logical CPUs of the machine; ``others_cpu_pct``: share of the
    machine's CPU that other
    programs used meanwhile (a busy machine makes every figure slower and noisier).

    ``epochs``: the epochs that delivered batches (a last epoch cut short by a limit counts).
    ``stopped_by``: ``"max_batches"`` or ``"max_s"`` when that limit of :func:`measure_loader` ended the run
    before the epochs asked for were done (every figure covers the batches that did run), ``None`` when every
    epoch asked for ran to its end.
    """

    label: str
    items: int
    batches: int
    epochs: int
    waits_s: tuple[float, ...]
    computes_s: tuple[float, ...]
    starts_s: tuple[float, ...]
    started_at: float
    wall_s: float
    first_batch_s: float
    cpu_s: float
    cores: int
    epoch_overhead_s: float = 0.0
    others_cpu_pct: float | None = None
    description: str = ""
    stopped_by: Literal["max_batches", "max_s"] | None = None
    data_wait_s: float = field(init=False)
    compute_s: float = field(init=False)

    def __post_init__(self) -> None:
        if self.batches < 1 or not len(self.waits_s) == len(self.computes_s) == len(self.starts_s) == self.batches:
            raise ValueError("a LoaderRun needs at least one timed batch, with one wait and one compute time each")
        if self.stopped_by not in (None, *_LIMITS):
            raise ValueError(f"stopped_by must be None, 'max_batches' or 'max_s', got {self.stopped_by!r}")
        whole("epochs", self.epochs)
        object.__setattr__(self, "data_wait_s", float(sum(self.waits_s)) + self.epoch_overhead_s)
        object.__setattr__(self, "compute_s", float(sum(self.computes_s)))

    @property
    def items_per_s(self) -> float:
        return self.items / self.wall_s if self.wall_s > 0 else math.inf

    @property
    def data_wait_share(self) -> float:
        """Share of the timed wall time spent waiting for the next batch (0: never waited)."""
        return min(1.0, self.data_wait_s / self.wall_s) if self.wall_s > 0 else 0.0

    @property
    def cpu_util_pct(self) -> float:
        """CPU time of this process and its loader workers as a percentage of all cores over the run
        (capped at 100: CPU time is counted in clock ticks, which can push a short run slightly over)."""
        return min(100.0, 100.0 * self.cpu_s / (self.wall_s * self.cores)) if self.wall_s > 0 else 0.0

    @property
    def truncated(self) -> bool:
        """True when a limit (``stopped_by``) ended the run before the epochs asked for were done."""
        return self.stopped_by is not None

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "items_per_s": self.items_per_s, "data_wait_share": self.data_wait_share,
                "cpu_util_pct": self.cpu_util_pct, "wall_s": self.wall_s, "data_wait_s": self.data_wait_s,
                "compute_s": self.compute_s, "first_batch_s": self.first_batch_s, "items": self.items,
                "batches": self.batches, "epochs": self.epochs, "others_cpu_pct": self.others_cpu_pct,
                "stopped_by": self.stopped_by}

    def plot(self, trace: Any = None, ax: Any = None) -> Any:
        """A timeline of the run: per batch, the step computing (blue) or waiting for data (orange); with
        ``trace`` (a :class:`gpulab.Trace` recorded around the run) the host CPU utilisation below it, on
        the same time axis. Returns the matplotlib Figure."""
        import matplotlib.pyplot as plt

        host = None
        if trace is not None and "host" in getattr(trace, "devices", []):
            f = trace.frame[trace.frame["device"] == "host"]
            if len(f) and "cpu_util_pct" in f:   # samples carry time.time(): place them on the run's axis
                host = (f["wall_time"] - self.started_at).to_numpy(), f["cpu_util_pct"].to_numpy()
        if ax is None:
            fig, axes = plt.subplots(2 if host is not None else 1, 1, sharex=True, squeeze=False,
                                     figsize=(9, 3.6 if host is not None else 1.8))
            axes = axes[:, 0]
        else:
            fig, axes = ax.figure, [ax]
        lane = axes[0]
        waits = [(s, w) for s, w in zip(self.starts_s, self.waits_s)]
        comps = [(s + w, c) for s, w, c in zip(self.starts_s, self.waits_s, self.computes_s)]
        lane.broken_barh(comps, (0, 1), color="#2a7ab9", label=f"compute {fmt_seconds(self.compute_s)}")
        lane.broken_barh(waits, (0, 1), color="#e08a2c", label=f"waiting for data {fmt_seconds(self.data_wait_s)} "
                                                                 f"({self.data_wait_share:.0%})")
        lane.set_yticks([])
        lane.set_xlim(0, self.wall_s)
        lane.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.25 if host is None else -0.05), ncol=2,
                    frameon=False)
        lane.set_title(f"{self.label}: {fmt_number(round(self.items_per_s))} items/s, "
                       f"{self.data_wait_share:.0%} of the time waiting for data")
        if host is not None and len(axes) > 1:
            t, cpu = host
            keep = (t >= 0) & (t <= self.wall_s)
            axes[1].plot(t[keep], cpu[keep], color="#555555")
            axes[1].set_ylim(0, 105)
            axes[1].set_ylabel("host CPU %")
            axes[1].grid(alpha=0.3)
        axes[-1].set_xlabel("seconds since the first timed batch")
        fig.tight_layout()
        return fig

    def _rows(self) -> list[tuple[str, str]]:
        rows = [("throughput", f"{fmt_number(self.items_per_s)} items/s ({self.items} items, {self.batches} batches, "
                               f"{self.epochs} epoch{'s' if self.epochs > 1 else ''}, {fmt_seconds(self.wall_s)})"),
                ("data wait", f"{fmt_seconds(self.data_wait_s)} = {self.data_wait_share:.0%} of the time"),
                ("compute", fmt_seconds(self.compute_s)),
                ("CPU", f"{self.cpu_util_pct:.0f}% of {self.cores} cores (this process and its workers)"),
                ("first batch", f"{fmt_seconds(self.first_batch_s)} (start-up, not counted above)")]
        if self.stopped_by is not None:
            rows.append(("stopped", f"by {self.stopped_by} before the epochs asked for were done (figures cover "
                                    "the batches run)"))
        if self.others_cpu_pct is not None and self.others_cpu_pct > 10:
            rows.append(("busy", f"other programs used {self.others_cpu_pct:.0f}% of the CPU meanwhile"))
        return rows

    def __repr__(self) -> str:
        return f"LoaderRun {self.label!r}\n" + "\n".join(f"  {k:<11} {v}" for k, v in self._rows())

    def _repr_html_(self) -> str:
        return html_table(("", ""), self._rows(), caption=f"Loader run: {self.label}")


@checked(device="device")
def measure_loader(loader: Iterable[Any], step: Callable[[Any], Any] | None = None, *, label: str = "loader",
                   epochs: int = 1, warmup_batches: int = 1, max_batches: int | None = MAX_BATCHES,
                   max_s: float | None = MAX_S, device: Any = None, non_blocking: bool = False,
                   monitor: Any = None, description: str = "") -> LoaderRun:
    """Iterate ``epochs`` full epochs of ``loader``, calling ``step(batch)`` on each batch, and time every
    ``next()`` (data wait) and every step (compute) separately.

    Args:
        step: the training step (``None``: measure the loader alone, every second is data wait).
        epochs: passes over ``loader``; more than one needs a loader that starts again when iterated again
            (a ``DataLoader``, a list, a ``tf.data.Dataset``): a generator or iterator is refused, and an
            epoch after the first that delivers no batch raises ``ValueError``.
        warmup_batches: batches at the start of the first epoch left out of the figures (worker start-up,
            pipeline build, first-call costs); their time is ``first_batch_s``.
        max_batches, max_s: stop after this many timed batches, or at the first batch ending ``max_s`` seconds
            into the timed part (defaults :data:`MAX_BATCHES` = 100,000, :data:`MAX_S` = 300 s: far above a
            lesson's runs), so an endless loader (``tf.data`` with ``.repeat()``, ``itertools.repeat(batch)``)
            returns; the run says so (``stopped_by``) and its figures cover the batches that ran. One more batch
            is drawn, untimed, to tell a cut from an epoch that had just ended. ``None`` turns a limit off: with
            both off an endless loader never returns (one known to be endless is refused); no limit can
            interrupt a single ``next()`` that blocks forever.
        device: move each batch there before the step (``tensor.to(device, non_blocking=...)``) and
            synchronise it after the step, so compute includes the copy and the queued GPU work.
            A loader that already delivers CUDA tensors (DALI on a GPU) is waited for before its data
            wait ends, so the GPU work it queued counts as data time, not compute.
        monitor: a running :class:`gpulab.Monitor`: each wait and step is marked as a "data" or "compute"
            phase, which ``trace.diagnose()`` reads.

    Example:
        >>> import itertools
        >>> batch = ([0.0] * 8, [0] * 8)
        >>> run = measure_loader(itertools.repeat(batch), label="endless", max_batches=20)
        >>> run.batches, run.items, run.stopped_by
        (20, 160, 'max_batches')
        >>> run = measure_loader(range(5), label="range", warmup_batches=0)   # ints count as one item
        Traceback (most recent call last):
        ...
        TypeError: batches must be tensors, arrays or sequences with a length; got int
    """
    if not (hasattr(loader, "__iter__") or hasattr(loader, "__getitem__")) or isinstance(loader, (str, bytes)):
        raise TypeError(f"loader must be an iterable of batches (a DataLoader, a list, a tf.data.Dataset), "
                        f"got {type(loader).__name__} {loader!r:.60}")
    if not isinstance(label, str):
        raise TypeError(f"label must be a text naming the run, got {label!r}")
    whole("epochs", epochs)
    whole("warmup_batches", warmup_batches, low=0)
    max_batches, max_s = _check_limits(max_batches, max_s)
    flag("non_blocking", non_blocking)
    if step is not None and not callable(step):
        raise TypeError(f"step must be a callable taking one batch, got {type(step).__name__}")
    if monitor is not None and not callable(getattr(monitor, "phase", None)):
        raise TypeError(f"monitor must be a running gl.Monitor (with gl.Monitor() as mon: ... monitor=mon) or None, "
                        f"got {type(monitor).__name__} {monitor!r:.40}")
    if not isinstance(description, str):
        raise TypeError(f"description must be a text, got {description!r:.60}")
    endless = _endless(loader)
    if max_batches is None and max_s is None and endless:
        raise ValueError(f"{label}: max_batches=None and max_s=None set no limit, but the loader never ends "
                         f"({endless}): pass max_batches (e.g. 1000) or max_s (e.g. 60.0)")
    if epochs > 1 and _one_shot(loader):
        raise ValueError(f"{label}: epochs={epochs} needs a loader that can be iterated again, but this one is a "
                         f"one-shot {type(loader).__name__} (a generator or iterator: its second pass is empty). "
                         "Pass a loader that restarts, such as a DataLoader, a list or a tf.data.Dataset, or epochs=1")
    phase = getattr(monitor, "phase", None) if monitor is not None else None
    waits: list[float] = []
    computes: list[float] = []
    starts: list[float] = []
    items = 0
    first_batch_s = 0.0
    overhead = 0.0
    seen = 0
    delivered = 0           # epochs that delivered at least one batch
    stopped_by: Literal["max_batches", "max_s"] | None = None
    it: Any = None
    cpu0 = busy0 = t_start = None
    started_at = time.time()
    t_begin = time.perf_counter()
    if warmup_batches == 0:
        cpu0, busy0, t_start = _tree_cpu_s(), _machine_busy_s(), t_begin
    for epoch in range(epochs):
        t0 = time.perf_counter()
        with phase("data") if phase is not None and seen >= warmup_batches else contextlib.nullcontext():
            it = iter(loader)
        if t_start is not None and seen >= warmup_batches:
            overhead += time.perf_counter() - t0
        got = 0
        while True:
            t0 = time.perf_counter()
            try:
                with phase("data") if phase is not None and seen >= warmup_batches else contextlib.nullcontext():
                    batch = next(it)
                    _wait_for_batch(batch)   # GPU batches (DALI "mixed"/"gpu"): the data clock runs until ready
            except StopIteration:
                if t_start is not None:
                    overhead += time.perf_counter() - t0
                break
            t1 = time.perf_counter()
            got += 1
            try:
                n = _count(batch)
            except TypeError:
                raise TypeError(f"batches must be tensors, arrays or sequences with a length; got "
                                f"{type(batch).__name__}") from None
            if phase is not None and seen >= warmup_batches:
                with phase("compute"):
                    out = step(_to_device(batch, device, non_blocking)) if step is not None else None
                    _block(out, device)
            else:
                out = step(_to_device(batch, device, non_blocking)) if step is not None else None
                _block(out, device)
            t2 = time.perf_counter()
            seen += 1
            if seen <= warmup_batches:
                if seen == 1:
                    first_batch_s = t2 - t_begin
                if seen == warmup_batches:
                    cpu0, busy0, started_at, t_start = (_tree_cpu_s(), _machine_busy_s(), time.time(),
                                                        time.perf_counter())
                continue
            starts.append(t0 - t_start)
            waits.append(t1 - t0)
            computes.append(t2 - t1)
            items += n
            if max_batches is not None and len(waits) >= max_batches:
                stopped_by = "max_batches"
            elif max_s is not None and t2 - t_start >= max_s:
                stopped_by = "max_s"
            if stopped_by is not None:
                break
        if got:
            delivered += 1
        elif epoch > 0:
            raise ValueError(f"{label}: epoch {epoch + 1} of {epochs} delivered no batch, though the first "
                             f"delivered some: this {type(loader).__name__} cannot be iterated again (it is used "
                             "up after one pass). Pass a loader that restarts, such as a DataLoader or a list, "
                             "or epochs=1")
        if stopped_by is not None:
            break
    if not waits:
        raise ValueError(f"{label}: no batch left to time after {warmup_batches} warm-up batch(es): "
                         "use more data, more epochs or warmup_batches=0")
    wall = time.perf_counter() - t_start
    cpu1, busy1 = _tree_cpu_s(), _machine_busy_s()
    if stopped_by is not None and epoch == epochs - 1:   # the limit fell in the last epoch: had it just ended?
        try:
            next(it)
        except StopIteration:
            stopped_by = None
    if stopped_by is not None and it is not loader and inspect.isgenerator(it):
        it.close()   # a loader's own generator left mid-epoch: run its cleanup now, not at garbage collection
    cores = os.cpu_count() or 1
    cpu_s = (cpu1 - cpu0) if cpu0 is not None and cpu1 is not None else 0.0
    others = None
    if busy0 is not None and busy1 is not None and wall > 0:
        others = max(0.0, min(100.0, 100.0 * ((busy1 - busy0) - cpu_s) / (wall * cores)))
    return LoaderRun(label=label, items=items, batches=len(waits), epochs=delivered, waits_s=tuple(waits),
                     computes_s=tuple(computes), starts_s=tuple(starts), started_at=started_at, wall_s=wall,
                     first_batch_s=first_batch_s, cpu_s=max(0.0, cpu_s), cores=cores, epoch_overhead_s=overhead,
                     others_cpu_pct=others, description=description, stopped_by=stopped_by)


def _merge(runs: Sequence[LoaderRun]) -> LoaderRun:
    """Several rounds of one loader as one run: totals add up, the timeline is laid end to end."""
    first = runs[0]
    starts: list[float] = []
    offset = 0.0
    for r in runs:
        starts += [offset + s for s in r.starts_s]
        offset += r.wall_s
    wall = sum(r.wall_s for r in runs)
    others = [r.others_cpu_pct for r in runs]
    return LoaderRun(label=first.label, items=sum(r.items for r in runs), batches=sum(r.batches for r in runs),
                     epochs=sum(r.epochs for r in runs), waits_s=sum((r.waits_s for r in runs), ()),
                     computes_s=sum((r.computes_s for r in runs), ()), starts_s=tuple(starts),
                     started_at=first.started_at, wall_s=wall, first_batch_s=first.first_batch_s,
                     cpu_s=sum(r.cpu_s for r in runs), cores=first.cores,
                     epoch_overhead_s=sum(r.epoch_overhead_s for r in runs),
                     others_cpu_pct=None if None in others else sum(o * r.wall_s for o, r in zip(others, runs)) / wall,
                     description=first.description, stopped_by=next((r.stopped_by for r in runs if r.stopped_by), None))


@checked(device="device")
def measure_loaders(loaders: Mapping[str, Iterable[Any]], step: Callable[[Any], Any] | None = None, *,
                    rounds: int = 2, epochs: int = 1, warmup_batches: int = 1, max_batches: int | None = MAX_BATCHES,
                    max_s: float | None = MAX_S, device: Any = None,
                    non_blocking: bool | Mapping[str, bool] = False) -> list[LoaderRun]:
    """Measure several loaders fairly on a busy machine: ``rounds`` rounds, each running ``epochs`` epochs
    of every loader in turn (the order rotates every round), so background load slows them all alike.

    Only the first round leaves out ``warmup_batches`` (cold start: importing, building, first workers);
    later rounds count everything, including starting workers again for every new epoch - which is what
    ``persistent_workers=True`` saves. Returns one :class:`LoaderRun` per loader (its rounds merged), in
    the order given. ``max_batches`` / ``max_s`` limit every single run (one loader, one round), as in
    :func:`measure_loader`; every loader is iterated ``rounds x epochs`` times, so generators and iterators
    are refused unless that is 1.

    Example:
        >>> runs = measure_loaders({"a": [([0] * 4, [0] * 4)] * 3, "b": [([0] * 8, [0] * 8)] * 3}, rounds=2)
        >>> [(r.label, r.items) for r in runs]
        [('a', 20), ('b', 40)]
    """
    if not isinstance(loaders, Mapping) or not loaders:
        raise TypeError("loaders must be a non-empty mapping label -> loader, e.g. {'0 workers': loader}")
    whole("rounds", rounds)
    whole("epochs", epochs)
    _check_limits(max_batches, max_s)
    passes = rounds * epochs
    for label, loader in loaders.items():
        if not (hasattr(loader, "__iter__") or hasattr(loader, "__getitem__")) or isinstance(loader, (str, bytes)):
            raise TypeError(f"loaders[{label!r}] must be an iterable of batches (a DataLoader, a list, a "
                            f"tf.data.Dataset), got {type(loader).__name__} {loader!r:.60}")
        if passes > 1 and _one_shot(loader):
            raise ValueError(f"loader {label!r} is a one-shot {type(loader).__name__} (a generator or iterator: "
                             f"its second pass is empty), but rounds={rounds} x epochs={epochs} iterate it {passes} "
                             "times. Pass a loader that restarts, such as a DataLoader or a list, or rounds=1 and "
                             "epochs=1")
    labels = list(loaders)
    if isinstance(non_blocking, Mapping):
        unknown = [k for k in non_blocking if k not in labels]
        if unknown:
            raise ValueError(f"non_blocking given for unknown loader(s) {unknown}; loaders are {labels}")
    blocking = {k: (non_blocking.get(k, False) if isinstance(non_blocking, Mapping) else non_blocking) for k in labels}
    done: dict[str, list[LoaderRun]] = {k: [] for k in labels}
    for i in range(rounds):
        order = labels[i % len(labels):] + labels[:i % len(labels)]
        for label in order:
            done[label].append(measure_loader(loaders[label], step, label=label, epochs=epochs,
                                              warmup_batches=warmup_batches if i == 0 else 0, max_batches=max_batches,
                                              max_s=max_s, device=device, non_blocking=blocking[label]))
    return [_merge(done[k]) for k in labels]
