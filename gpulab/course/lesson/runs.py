"""Train several configurations side by side, fairly, and compare them in one table.

Timing configurations one after another is unfair on a shared or busy machine: whichever ran while
another program was busy looks slow. :func:`train_interleaved` runs them one step at a time in turn
(rotating the order), so background load slows them all alike and their median step times compare.
:func:`compare_runs` puts step time, speedup, peak memory, achieved FLOP/s as a share of the
machine's measured peak, accuracy and the published figure in one table. :func:`pattern_batch` is a
synthetic image task a small CNN learns in a few dozen steps, so accuracy columns mean something.

Example:
    >>> import torch, gpulab as gl
    >>> from gpulab import course
    >>> runs = {p: (m := course.models.small_cnn(), torch.optim.SGD(m.parameters(), lr=0.05), course.TrainConfig(precision=p))
    ...         for p in ("fp32", "bf16")}
    >>> results = course.train_interleaved(runs, lambda step: course.pattern_batch(16, seed=step), steps=3)
    >>> table = course.compare_runs(results, baseline="fp32")
    >>> sorted(results) == ["bf16", "fp32"] and table.speedup("fp32") == 1.0
    True
"""
from __future__ import annotations

import contextlib
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping

from ..._format import TableView, NA, fmt_bytes, fmt_number, fmt_rate, html_table, text_table
from ..._check import checked, per_label, table_rows
from ...limits import ceiling_for
from ...reference import Published, published as _published
from .step_energy import ALONE, StepEnergy
from .loop import TrainConfig, TrainResult

__all__ = ["pattern_batch", "train_interleaved", "RunComparison", "compare_runs"]


@checked(device="device")
def pattern_batch(batch_size: int, seed: int = 0, *, classes: int = 10, channels: int = 3, size: int = 32,
                  signal: float = 0.15, device: Any = "cpu") -> tuple[Any, Any]:
    """A seeded batch ``(images, labels)`` of a learnable synthetic task: each class is one fixed, smooth
    random pattern (the same for every seed), each image its class's pattern times ``signal`` plus unit
    Gaussian noise. Smaller ``signal`` makes the task harder. Shaped for :func:`course.models.small_cnn`
    and ``resnet_small`` (3x32x32); different seeds give different images of the same task.

    Example:
        >>> x, y = pattern_batch(4, seed=1)
        >>> tuple(x.shape), int(y.max()) < 10
        ((4, 3, 32, 32), True)
    """
    for name, value in (("batch_size", batch_size), ("classes", classes), ("channels", channels), ("size", size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    if isinstance(signal, bool) or not isinstance(signal, (int, float)) or not math.isfinite(signal) or signal < 0:
        raise ValueError(f"signal must be a non-negative number, got {signal!r}")
    import torch
    import torch.nn.functional as F

    coarse = torch.randn(classes, channels, 4, 4, generator=torch.Generator().manual_seed(1234))
    templates = F.interpolate(coarse, size=size, mode="bilinear", align_corners=False)
    templates = templates / templates.flatten(1).std(dim=1).clamp_min(1e-6).view(-1, 1, 1, 1)
    g = torch.Generator().manual_seed(int(seed))
    y = torch.randint(0, classes, (batch_size,), generator=g)
    x = signal * templates[y] + torch.randn(batch_size, channels, size, size, generator=g)
    return x.to(device), y.to(device)


def _resident_bytes(model: Any, optimizer: Any, inputs: Iterable[Any]) -> int:
    from ...memory.accounting import _optimizer_state_tensors, _tensor_bytes

    return _tensor_bytes([*model.parameters(), *model.buffers(), *_optimizer_state_tensors(optimizer), *inputs])


@contextlib.contextmanager
def _step_memory(dev: Any) -> Iterator[dict[str, int]]:
    """Measure what the code inside allocates at its peak, above what was allocated when it started:
    the CUDA allocator's peak on a GPU, the tensors created inside (a MemoryTracker) elsewhere.
    The yielded dict gets ``"bytes"`` on exit."""
    import torch

    from ...memory.peak import MemoryTracker
    from ...timing import synchronize

    box: dict[str, int] = {}
    if getattr(dev, "type", None) == "cuda":
        synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        base = int(torch.cuda.memory_allocated(dev))
        yield box
        synchronize(dev)
        box["bytes"] = max(int(torch.cuda.max_memory_allocated(dev)) - base, 0)
    else:
        with MemoryTracker() as tracker:
            yield box
        box["bytes"] = int(tracker.peak_bytes)


def train_interleaved(runs: Mapping[str, tuple[Any, Any, TrainConfig]],
                      batches: Callable[[int], tuple[Any, Any]] | Iterable[tuple[Any, Any]], steps: int, *,
                      warmup_steps: int = 1, loss_fn: Callable[[Any, Any], Any] | None = None,
                      track_memory: bool = True) -> dict[str, TrainResult]:
    """Train every run of ``runs`` (label -> ``(model, optimizer, TrainConfig)``) for ``steps`` steps,
    one step of each in turn, on the same batches; return label -> :class:`course.TrainResult`.

    Each step is timed with the device synchronised. The order rotates every step, so no run always goes
    first. With ``track_memory`` one step per run (right after ``warmup_steps``) is measured for peak
    memory - the CUDA allocator's peak, or on CPU the tensors the step creates - and left out of the
    timing (on CPU, tracking slows a step). Peak memory counts everything the step needs: weights,
    buffers, optimizer state, the batch, and what the step allocates (gradients, activations).

    Example:
        >>> import torch, gpulab as gl
        >>> from gpulab import course
        >>> a, b = course.models.mlp(hidden=32), course.models.mlp(hidden=32)
        >>> runs = {"k=1": (a, torch.optim.SGD(a.parameters(), lr=0.1), course.TrainConfig()),
        ...         "k=2": (b, torch.optim.SGD(b.parameters(), lr=0.1), course.TrainConfig(accumulation_steps=2))}
        >>> res = train_interleaved(runs, lambda step: course.models.example_batch("mlp", 16, seed=step), steps=4)
        >>> sorted(res), len(res["k=2"].step_times_s), res["k=2"].peak_memory_bytes > 0
        (['k=1', 'k=2'], 4, True)
    """
    import torch

    from ...system import device as pick_device
    from ...timing import synchronize
    from .loop import make_scaler, run_energy, train_step

    if not isinstance(runs, Mapping) or not runs:
        raise TypeError("runs must be a non-empty mapping: label -> (model, optimizer, course.TrainConfig)")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive whole number, got {steps!r}")
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ValueError(f"warmup_steps must be a whole number >= 0, got {warmup_steps!r}")
    prepared = {}
    for label, run in runs.items():
        if not isinstance(run, (tuple, list)) or len(run) != 3 or not isinstance(run[2], TrainConfig):
            raise TypeError(f"run {label!r} must be (model, optimizer, course.TrainConfig(...)), got {run!r:.80}")
        model, optimizer, config = run
        dev = pick_device(config.device) if config.device else next(model.parameters()).device
        model.to(dev)
        if config.channels_last:
            model.to(memory_format=torch.channels_last)
        run_model = torch.compile(model) if config.compile else model
        prepared[label] = (model, run_model, optimizer, config, make_scaler(config, dev.type), dev)
    if callable(batches):
        get = batches
    else:
        it = iter(batches)
        get = lambda step: next(it)  # noqa: E731 - an iterable yields one batch per step
    labels = list(prepared)
    memory_step = min(warmup_steps, steps - 1) if track_memory else None
    losses: dict[str, list[Any]] = {k: [] for k in labels}
    times: dict[str, list[float]] = {k: [] for k in labels}
    peaks: dict[str, int | None] = {k: None for k in labels}
    meters = {k: StepEnergy(prepared[k][5]) for k in labels}
    last: dict[str, Any] = {}
    items = 0
    for step in range(steps):
        batch = get(step)
        items = int(batch[0].shape[0])
        order = labels[step % len(labels):] + labels[:step % len(labels)]
        for label in order:
            model, run_model, optimizer, config, scaler, dev = prepared[label]
            x, y = (t.to(dev, non_blocking=True) for t in batch)
            measure = step == memory_step
            if measure:     # the last step's gradients go before the base is read: the step allocates its own
                optimizer.zero_grad(set_to_none=True)
            resident = _resident_bytes(model, optimizer, (x, y)) if measure else 0
            meters[label].start()                 # the last step ended synchronised; reads stay outside the timing
            t0 = time.perf_counter()
            with (_step_memory(dev) if measure else contextlib.nullcontext({})) as grown:
                loss = train_step(run_model, optimizer, (x, y), config, scaler, loss_fn)
                synchronize(dev)
            times[label].append(time.perf_counter() - t0)
            meters[label].stop()
            losses[label].append(loss)
            last[label] = (x, y)
            if measure:
                peaks[label] = int(resident + grown["bytes"])
    warm = min(warmup_steps + (1 if track_memory else 0), steps - 1)
    out = {}
    for label in labels:
        config, dev = prepared[label][3], prepared[label][5]
        vals = tuple(float(v) for v in torch.stack(losses[label]).float().tolist())
        method = None if not track_memory else ("cuda-allocator" if dev.type == "cuda" else "tracked-tensors")
        out[label] = TrainResult(label, vals, tuple(times[label]), items, peaks[label], config, warm,
                                 {"interleaved_with": len(labels), "memory_method": method, "device": str(dev)},
                                 energy=run_energy(meters[label], warm, times[label], prepared[label][0],
                                                   prepared[label][2], config, last[label], loss_fn,
                                                   interleaved=len(labels) > 1))
    return out


# ----------------------------------------------------------------------------------------------
def _given(name: str, value: Any, labels: list[str]) -> dict[str, float]:
    """The labels that have a (non-negative) number: one for all, or a mapping label -> number."""
    return {k: v for k, v in per_label(name, value, labels, allow_zero=True).items() if v is not None}


@dataclass(frozen=True, repr=False)
class RunComparison(TableView):
    """Training runs side by side (immutable): step time, speedup, peak memory, achieved FLOP/s and its
    share of the machine's measured peak, accuracy, the published figure, and where a run carries its energy,
    joules per item and their ratio to the baseline ("not measurable" where the counter could not be read); with
    ``price`` (a :class:`~gpulab.cost.Price`) the cost per million items at each run's measured throughput.
    Build with :func:`compare_runs`."""

    results: tuple[TrainResult, ...]
    baseline: str
    title: str = "Training runs"
    flops_per_step: Mapping[str, float] = field(default_factory=dict)
    peak_flops: Mapping[str, float] = field(default_factory=dict)
    accuracy: Mapping[str, float] = field(default_factory=dict)
    published: Mapping[str, Published] = field(default_factory=dict)
    price: Any = None

    def result(self, label: str) -> TrainResult:
        for r in self.results:
            if r.label == label:
                return r
        raise KeyError(f"no run {label!r}; runs: {[r.label for r in self.results]}")

    def speedup(self, label: str) -> float:
        """Baseline median step time / this run's (>1 is faster)."""
        return self.result(self.baseline).median_step_s / self.result(label).median_step_s

    def memory_ratio(self, label: str) -> float | None:
        """This run's peak memory / the baseline's (<1 uses less); None when not measured."""
        a, b = self.result(label).peak_memory_bytes, self.result(self.baseline).peak_memory_bytes
        return None if a is None or not b else a / b

    def joules_per_item(self, label: str) -> float | None:
        """Joules per item of ``label`` (mean power x median step / items per step); None where not measurable."""
        return self.result(label).joules_per_item

    def energy_ratio(self, label: str) -> float | None:
        """This run's joules per item / the baseline's (<1 uses less energy per item); None without both."""
        a, b = self.joules_per_item(label), self.joules_per_item(self.baseline)
        return None if a is None or not b else a / b

    def cost_per_million(self, label: str) -> float | None:
        """USD per million items at ``price`` and this run's measured throughput (None without a price)."""
        from ...cost import cost_per_million

        return None if self.price is None else cost_per_million(self.price.usd_per_hour, self.result(label).items_per_s)

    def energy_sentence(self, label: str) -> str:
        """What the table says of ``label`` against the baseline: speed, joules per item (and mean power) where both
        were measured, the reason where not, and cost per item where there is a price.

        Example:
            >>> from gpulab import course
            >>> a = course.TrainResult("fp32", (2.0, 1.0), (0.2, 0.2), 64, None, course.TrainConfig(), 0)
            >>> b = course.TrainResult("bf16", (2.0, 1.0), (0.1, 0.1), 64, None, course.TrainConfig(), 0)
            >>> s = compare_runs([a, b], price_per_hour=1.0).energy_sentence("bf16")
            >>> s.split("; ")[:2], "cost 0.50x as much" in s
            (['bf16 ran at 2.00x the speed of fp32', 'energy was not read'], True)
        """
        base = self.baseline
        parts = [f"{label} ran at {self.speedup(label):.2f}x the speed of {base}"]
        ratio, r = self.energy_ratio(label), self.result(label)
        if ratio is not None:
            watts = r.energy.watts / self.result(base).energy.watts
            parts.append(f"per item it used {ratio:.2f}x the joules (at {watts:.2f}x the mean power)")
        else:
            e = next((x.energy for x in (r, self.result(base)) if x.energy is not None and not x.energy.measured), None)
            parts.append("energy was not read" if e is None and r.energy is None
                         else f"energy not measurable here: {e.reason if e is not None else 'no figure'}")
        if self.price is not None:
            parts.append(f"per item it cost {self.cost_per_million(label) / self.cost_per_million(base):.2f}x as much "
                         f"({self.price})")
        return "; ".join(parts)

    def achieved_flops(self, label: str) -> float | None:
        f = self.flops_per_step.get(label)
        return None if f is None else f / self.result(label).median_step_s

    def ceiling(self, label: str) -> float | None:
        """The measured peak this run is divided by, raised to the fastest run with the same peak when one
        ran faster than it (see :meth:`ceiling_notes`): shares never exceed 100%."""
        p = self.peak_flops.get(label)
        if not p:
            return None
        same = [(r.label, self.achieved_flops(r.label)) for r in self.results if self.peak_flops.get(r.label) == p]
        return ceiling_for(p, same)[0]

    @property
    def ceiling_notes(self) -> tuple[str, ...]:
        """One note per measured peak a run beat (the table's ceiling was raised to that run's rate)."""
        notes = []
        for p in sorted(set(self.peak_flops.values())):
            same = [(r.label, self.achieved_flops(r.label)) for r in self.results if self.peak_flops.get(r.label) == p]
            note = ceiling_for(p, same)[1]
            if note:
                notes.append(note)
        return tuple(notes)

    def fraction_of_peak(self, label: str) -> float | None:
        a, p = self.achieved_flops(label), self.ceiling(label)
        return None if a is None or not p else a / p

    def to_dataframe(self) -> Any:
        """The numbers, unformatted (seconds, bytes, ratios, fractions)."""
        import pandas as pd

        rows = []
        for r in self.results:
            times = r.steady_times_s
            q = statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1 else [times[0]] * 3
            rows.append({"run": r.label, "median_step_s": r.median_step_s,
                         "iqr_pct": 100 * (q[2] - q[0]) / r.median_step_s if r.median_step_s else 0.0,
                         "items_per_s": r.items_per_s, "speedup": self.speedup(r.label),
                         "peak_memory_bytes": r.peak_memory_bytes, "memory_ratio": self.memory_ratio(r.label),
                         "flops_per_s": self.achieved_flops(r.label), "fraction_of_peak": self.fraction_of_peak(r.label),
                         "accuracy": self.accuracy.get(r.label), "final_loss": r.losses[-1],
                         "joules_per_item": self.joules_per_item(r.label), "energy_ratio": self.energy_ratio(r.label),
                         "usd_per_million": self.cost_per_million(r.label),
                         "published": str(self.published[r.label]) if r.label in self.published else None})
        return pd.DataFrame(rows).set_index("run")

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        from ...tables import _time_unit

        scale, unit = _time_unit([r.median_step_s for r in self.results])
        df = self.to_dataframe()
        show_flops = bool(self.flops_per_step)
        show_j = any(r.energy is not None for r in self.results)
        joules = [j for r in self.results if (j := r.joules_per_item) is not None]
        j_scale, j_unit = (1e3, "mJ") if joules and max(joules) < 0.1 else (1.0, "J")
        header = ["run", f"step ({unit})", "IQR", "items/s", f"speedup vs {self.baseline}"]   # time, energy, cost
        header += [f"{j_unit} per item", f"energy vs {self.baseline}"] if show_j else []
        header += ["$ per 1M items"] if self.price is not None else []
        header += ["peak memory", "memory vs " + self.baseline]
        header += ["achieved", "% of peak FLOP/s"] if show_flops else []
        header += ["accuracy"] if self.accuracy else []
        header += ["final loss"]
        header += ["published"] if self.published else []
        rows = []
        for label, r in df.iterrows():
            noisy = r["iqr_pct"] > 10 and len(self.result(label).steady_times_s) >= 4
            row = [label + (" *" if noisy else ""), f"{r['median_step_s'] / scale:.4g}", f"{r['iqr_pct']:.0f}%",
                   fmt_number(r["items_per_s"]), f"{r['speedup']:.2f}x"]
            if show_j:
                j, ratio = self.joules_per_item(label), self.energy_ratio(label)
                row += ["not measurable" if j is None else f"{j * j_scale:.3g}",
                        NA if ratio is None else f"{ratio:.2f}x"]
            if self.price is not None:
                c = self.cost_per_million(label)
                row += [NA if c is None else f"${c:.3g}"]
            row += [fmt_bytes(self.result(label).peak_memory_bytes),
                    NA if r["memory_ratio"] is None or r["memory_ratio"] != r["memory_ratio"] else f"{r['memory_ratio']:.2f}x"]
            if show_flops:
                frac = self.fraction_of_peak(label)
                row += [fmt_rate(self.achieved_flops(label), "FLOP/s"), NA if frac is None else f"{frac:.0%}"]
            if self.accuracy:
                acc = self.accuracy.get(label)
                row += [NA if acc is None else f"{acc:.1%}"]
            row += [f"{r['final_loss']:.3g}"]
            if self.published:
                p = self.published.get(label)
                row += [f"{p.figure} ({p.hardware}; {p.source})" if p else ""]
            rows.append(row)
        first = self.results[0]
        notes = [f"median step time after warm-up, runs interleaved step by step; {first.items_per_step} items per step"]
        if self.peak_flops:
            peaks = sorted(set(self.peak_flops.values()))
            notes.append("peak = this machine's measured matmul limit (" + ", ".join(fmt_rate(p, "FLOP/s") for p in peaks)
                         + ")")
            notes += list(self.ceiling_notes)
        if show_j:
            notes.append(_energy_note(self.results))
        if self.price is not None:
            notes.append(f"cost = {self.price} x the measured time per item")
        if any(row[0].endswith(" *") for row in rows):
            notes.append("* noisy: IQR 10% or more of the median - the machine was busy; compare with care")
        return header, rows, "; ".join(notes)

    def plot(self, ax: Any = None) -> Any:
        """Two bar charts: speedup and peak memory relative to the baseline. Returns the Axes pair."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(1, 2, figsize=(9, 0.8 + 0.45 * len(self.results)))
        labels = [r.label for r in self.results]
        colors = ["#888888" if lbl == self.baseline else "#2a7ab9" for lbl in labels]
        for a, values, name in ((ax[0], [self.speedup(lbl) for lbl in labels], f"speedup vs {self.baseline}"),
                                (ax[1], [self.memory_ratio(lbl) or math.nan for lbl in labels],
                                 f"peak memory vs {self.baseline}")):
            a.barh(labels, values, color=colors)
            a.invert_yaxis()
            a.axvline(1.0, color="k", lw=0.8, ls="--")
            finite = [v for v in values if not math.isnan(v)]
            a.set_xlim(0, 1.2 * max(finite + [1.0]))          # room for the labels
            for y, v in enumerate(values):
                if not math.isnan(v):
                    a.annotate(f" {v:.2f}x", (v, y), va="center", fontsize=9)
            a.set_xlabel(name + " (x)")
        ax[0].set_title(self.title, loc="left")
        ax[0].figure.tight_layout()
        return ax


def _energy_note(results: Iterable[TrainResult]) -> str:
    """Where each run's joules came from (each source once), or why there are none."""
    energies = [r.energy for r in results if r.energy is not None]
    sources = list(dict.fromkeys(e.source + ("" if e.counted else ", integrated from sampled power")
                                 for e in energies if e.measured))
    reasons = list(dict.fromkeys(e.reason for e in energies if not e.measured and e.reason))
    alone = any(ALONE in s for s in sources)
    parts = [("joules = " if alone else "joules = the device's counter read around each timed step (warm-up left "
              "out): ") + "; ".join(sources)] if sources else []
    parts += ["energy not measurable here: " + "; ".join(reasons)] if reasons else []
    return "; ".join(parts)


def compare_runs(results: Mapping[str, TrainResult] | Iterable[TrainResult], baseline: str | None = None, *,
                 flops_per_step: float | Mapping[str, float] | None = None,
                 peak_flops: float | Mapping[str, float] | None = None,
                 accuracy: Mapping[str, float] | None = None,
                 published: Mapping[str, str | Published] | None = None,
                 title: str = "Training runs", price_per_hour: Any = None) -> RunComparison:
    """Build a :class:`RunComparison` from :class:`course.TrainResult` objects (e.g. from
    :func:`train_interleaved`). ``baseline`` defaults to the first run.

    ``flops_per_step`` (one number, or one per run; e.g. from :func:`gpulab.count_flops`) and
    ``peak_flops`` (the machine's measured limit, one number or one per run, e.g. each run's dtype)
    give achieved FLOP/s and its share of the peak. ``accuracy`` maps runs to a fraction in [0, 1];
    ``published`` maps runs to a key of :func:`gpulab.published`. ``price_per_hour`` (USD per hour, a key of
    :func:`gpulab.cost.prices`, or a :class:`~gpulab.cost.Price` such as ``course.lesson_price(...)``) adds the
    cost per million items at each run's measured throughput; joules per item show where the runs carry energy.

    Example:
        >>> import gpulab as gl
        >>> from gpulab import course
        >>> a = course.TrainResult("fp32", (2.3, 2.1), (0.2, 0.2), 64, 2000, course.TrainConfig(), warmup_steps=0)
        >>> b = course.TrainResult("bf16", (2.3, 2.1), (0.1, 0.1), 64, 1000, course.TrainConfig(precision="bf16"), warmup_steps=0)
        >>> t = compare_runs([a, b], flops_per_step=1e9, peak_flops=1e11)
        >>> t.speedup("bf16"), t.memory_ratio("bf16"), t.fraction_of_peak("bf16")
        (2.0, 0.5, 0.1)
        >>> priced = compare_runs([a, b], price_per_hour=3.6)        # $3.60 per hour: $0.001 per second
        >>> round(priced.cost_per_million("fp32"), 6), priced.joules_per_item("fp32") is None
        (3.125, True)
    """
    rs = tuple(results.values()) if isinstance(results, Mapping) else tuple(results)
    if baseline is None and rs and isinstance(rs[0], TrainResult):
        baseline = rs[0].label
    labels = table_rows(rs, TrainResult, "course.train or course.train_interleaved", str(baseline), published)
    acc = _given("accuracy", accuracy, labels)
    if any(v > 1 for v in acc.values()):
        raise ValueError(f"accuracy must be a fraction in [0, 1], got {acc}")
    pubs = {}
    for k, v in (published or {}).items():
        pubs[k] = v if isinstance(v, Published) else _published(v)
    price = None
    if price_per_hour is not None:
        from ...cost import hourly_price

        price = hourly_price(price_per_hour)
    return RunComparison(rs, baseline, title, _given("flops_per_step", flops_per_step, labels),
                         _given("peak_flops", peak_flops, labels), acc, pubs, price)
