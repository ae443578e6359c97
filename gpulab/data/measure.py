"""Time a loader with a training step, split into data wait and compute per batch."""
from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from .._check import flag, whole
from .._format import fmt_number, fmt_seconds, html_table

__all__ = ['LoaderRun', 'measure_loader', 'measure_loaders']


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
    data_wait_s: float = field(init=False)
    compute_s: float = field(init=False)

    def __post_init__(self) -> None:
        if self.batches < 1 or not len(self.waits_s) == len(self.computes_s) == len(self.starts_s) == self.batches:
            raise ValueError("a LoaderRun needs at least one timed batch, with one wait and one compute time each")
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

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "items_per_s": self.items_per_s, "data_wait_share": self.data_wait_share,
                "cpu_util_pct": self.cpu_util_pct, "wall_s": self.wall_s, "data_wait_s": self.data_wait_s,
                "compute_s": self.compute_s, "first_batch_s": self.first_batch_s, "items": self.items,
                "batches": self.batches, "epochs": self.epochs, "others_cpu_pct": self.others_cpu_pct}

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
        if self.others_cpu_pct is not None and self.others_cpu_pct > 10:
            rows.append(("busy", f"other programs used {self.others_cpu_pct:.0f}% of the CPU meanwhile"))
        return rows

    def __repr__(self) -> str:
        return f"LoaderRun {self.label!r}\n" + "\n".join(f"  {k:<11} {v}" for k, v in self._rows())

    def _repr_html_(self) -> str:
        return html_table(("", ""), self._rows(), caption=f"Loader run: {self.label}")


def _tree_cpu_s() -> float | None:
    """CPU seconds of this process, its finished (reaped) children and its live children."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a core dependency
        return None
    me = psutil.Process()
    t = me.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in me.children(recursive=True):
        try:
            c = child.cpu_times()
            total += c.user + c.system
        except psutil.Error:   # exited between listing and reading: counted once reaped
            pass
    return total


def _machine_busy_s() -> float | None:
    try:
        import psutil
    except ImportError:  # pragma: no cover
        return None
    t = psutil.cpu_times()
    return sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq", "steal"))


def _count(batch: Any) -> int:
    if isinstance(batch, list) and batch and all(isinstance(b, Mapping) for b in batch):
        # DALIGenericIterator's own output: one {output name: tensor} dict per pipeline (GPU)
        return sum(_count(next(iter(b.values()))) for b in batch if b)
    if isinstance(batch, Mapping):
        batch = next(iter(batch.values()))
    first = batch[0] if isinstance(batch, (tuple, list)) else batch
    shape = getattr(first, "shape", None)
    if shape is not None and len(shape):
        return int(shape[0])
    return len(first)


def _cuda_devices(batch: Any) -> list[Any]:
    """The CUDA devices holding tensors of ``batch`` (a tensor, or tuples / lists / dicts of them, as
    DataLoader, :class:`~gpulab.pipelines.DaliLoader` and ``DALIGenericIterator`` yield), in order of
    appearance. Plain attribute reads: no torch import, nearly free for CPU batches."""
    found: list[Any] = []
    todo = [batch]
    while todo:
        x = todo.pop()
        if isinstance(x, (tuple, list)):
            todo.extend(reversed(x))
        elif isinstance(x, Mapping):
            todo.extend(reversed(list(x.values())))
        elif getattr(x, "is_cuda", False) is True:
            dev = x.device
            if all(str(dev) != str(d) for d in found):
                found.append(dev)
    return found


def _wait_for_batch(batch: Any) -> None:
    """Block until a batch on a CUDA device is really there. A DALI GPU pipeline (and any loader that
    copies with ``non_blocking=True``) hands out tensors whose data is still being produced: DALI copies its
    outputs into the torch tensors on torch's current stream, ordered after its own GPU work, and returns
    at once (``nvidia.dali.plugin.pytorch``: ``feed_ndarray(..., cuda_stream=torch.cuda.current_stream())``;
    ``copy_to_external`` orders the copy after the buffer's producer). Without this wait the data clock
    stops early and DALI's decoding and augmentation are charged to the training step. The whole device is
    synchronised, through :func:`gpulab.timing.synchronize` (the one place that knows how): the batches
    DALI has already scheduled ahead count as data work too, not as the step's. CPU batches cost nothing."""
    devices = _cuda_devices(batch)
    if devices:
        from ..timing import synchronize

        for dev in devices:
            synchronize(dev)


def _to_device(batch: Any, device: Any, non_blocking: bool) -> Any:
    if device is None:
        return batch
    if isinstance(batch, (tuple, list)):
        return type(batch)(_to_device(b, device, non_blocking) for b in batch)
    to = getattr(batch, "to", None)
    return to(device, non_blocking=non_blocking) if callable(to) else batch


def _block(out: Any, device: Any) -> None:
    """Wait until the step's work is done: synchronise a torch device; read back a TensorFlow result."""
    if device is not None:
        from ..timing import synchronize

        synchronize(device)
    numpy = getattr(out, "numpy", None)
    if callable(numpy) and type(out).__module__.startswith("tensorflow"):
        numpy()


def measure_loader(loader: Iterable[Any], step: Callable[[Any], Any] | None = None, *, label: str = "loader",
                   epochs: int = 1, warmup_batches: int = 1, device: Any = None, non_blocking: bool = False,
                   monitor: Any = None, description: str = "") -> LoaderRun:
    """Iterate ``epochs`` full epochs of ``loader``, calling ``step(batch)`` on each batch, and time every
    ``next()`` (data wait) and every step (compute) separately.

    Args:
        step: the training step (``None``: measure the loader alone, every second is data wait).
        warmup_batches: batches at the start of the first epoch left out of the figures (worker start-up,
            pipeline build, first-call costs); their time is ``first_batch_s``.
        device: move each batch there before the step (``tensor.to(device, non_blocking=...)``) and
            synchronise it after the step, so compute includes the copy and the queued GPU work.
            A loader that already delivers CUDA tensors (DALI on a GPU) is waited for before its data
            wait ends, so the GPU work it queued counts as data time, not compute.
        monitor: a running :class:`gpulab.Monitor`: each wait and step is marked as a "data" or "compute"
            phase, which ``trace.diagnose()`` reads.

    Example:
        >>> run = measure_loader(range(5), label="range", warmup_batches=0)   # ints count as one item
        Traceback (most recent call last):
        ...
        TypeError: batches must be tensors, arrays or sequences with a length; got int
    """
    whole("epochs", epochs)
    whole("warmup_batches", warmup_batches, low=0)
    flag("non_blocking", non_blocking)
    if step is not None and not callable(step):
        raise TypeError(f"step must be a callable taking one batch, got {type(step).__name__}")
    phase = getattr(monitor, "phase", None) if monitor is not None else None
    waits: list[float] = []
    computes: list[float] = []
    starts: list[float] = []
    items = 0
    first_batch_s = 0.0
    overhead = 0.0
    seen = 0
    cpu0 = busy0 = t_start = None
    started_at = time.time()
    t_begin = time.perf_counter()
    if warmup_batches == 0:
        cpu0, busy0, t_start = _tree_cpu_s(), _machine_busy_s(), t_begin
    for _ in range(epochs):
        t0 = time.perf_counter()
        with phase("data") if phase is not None and seen >= warmup_batches else contextlib.nullcontext():
            it = iter(loader)
        if t_start is not None and seen >= warmup_batches:
            overhead += time.perf_counter() - t0
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
    if not waits:
        raise ValueError(f"{label}: no batch left to time after {warmup_batches} warm-up batch(es): "
                         "use more data, more epochs or warmup_batches=0")
    wall = time.perf_counter() - t_start
    cpu1, busy1 = _tree_cpu_s(), _machine_busy_s()
    import os

    cores = os.cpu_count() or 1
    cpu_s = (cpu1 - cpu0) if cpu0 is not None and cpu1 is not None else 0.0
    others = None
    if busy0 is not None and busy1 is not None and wall > 0:
        others = max(0.0, min(100.0, 100.0 * ((busy1 - busy0) - cpu_s) / (wall * cores)))
    return LoaderRun(label=label, items=items, batches=len(waits), epochs=epochs, waits_s=tuple(waits),
                     computes_s=tuple(computes), starts_s=tuple(starts), started_at=started_at, wall_s=wall,
                     first_batch_s=first_batch_s, cpu_s=max(0.0, cpu_s), cores=cores, epoch_overhead_s=overhead,
                     others_cpu_pct=others, description=description)


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
                     description=first.description)


def measure_loaders(loaders: Mapping[str, Iterable[Any]], step: Callable[[Any], Any] | None = None, *,
                    rounds: int = 2, epochs: int = 1, warmup_batches: int = 1, device: Any = None,
                    non_blocking: bool | Mapping[str, bool] = False) -> list[LoaderRun]:
    """Measure several loaders fairly on a busy machine: ``rounds`` rounds, each running ``epochs`` epochs
    of every loader in turn (the order rotates every round), so background load slows them all alike.

    Only the first round leaves out ``warmup_batches`` (cold start: importing, building, first workers);
    later rounds count everything, including starting workers again for every new epoch - which is what
    ``persistent_workers=True`` saves. Returns one :class:`LoaderRun` per loader (its rounds merged), in
    the order given.

    Example:
        >>> runs = measure_loaders({"a": [([0] * 4, [0] * 4)] * 3, "b": [([0] * 8, [0] * 8)] * 3}, rounds=2)
        >>> [(r.label, r.items) for r in runs]
        [('a', 20), ('b', 40)]
    """
    if not isinstance(loaders, Mapping) or not loaders:
        raise TypeError("loaders must be a non-empty mapping label -> loader, e.g. {'0 workers': loader}")
    whole("rounds", rounds)
    labels = list(loaders)
    blocking = {k: (non_blocking.get(k, False) if isinstance(non_blocking, Mapping) else non_blocking) for k in labels}
    done: dict[str, list[LoaderRun]] = {k: [] for k in labels}
    for i in range(rounds):
        order = labels[i % len(labels):] + labels[:i % len(labels)]
        for label in order:
            done[label].append(measure_loader(loaders[label], step, label=label, epochs=epochs,
                                              warmup_batches=warmup_batches if i == 0 else 0, device=device,
                                              non_blocking=blocking[label]))
    return [_merge(done[k]) for k in labels]
