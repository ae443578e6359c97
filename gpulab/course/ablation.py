"""An ablation: start from a baseline recipe, try one change at a time, keep it only if it helps, and put
every attempt in one table (throughput, speedup over the baseline, share of the measured ceiling, peak
memory, test accuracy, the decision and why).

"Helps" means faster by more than the measurement's own noise, and still accurate after the same number of
epochs: at least the *accuracy floor*, the lowest test accuracy the baseline itself reached over its seeds (its
own run plus ``accuracy_seeds`` reruns: its run-to-run spread) less ``accuracy_tolerance``. Every change is held
to that one floor, so losses cannot add up from change to change, and a baseline that drew a lucky seed does not
fail a recipe that is as good as it. Each row shows its accuracy against the baseline's (in points), so the
distance from the seed, not from the change before, is what the table tells. A change a device cannot make (TF32 on
a CPU) is listed with the reason. A change with a one-off cost (``one_off=True``: compilation, graph capture) is
also judged over the whole run: the table shows each row's total wall time (every epoch, the first included) and,
for such a change, its one-off seconds and the epochs it takes to pay them back at its steady-state gain. A *branch* is measured from the final recipe but not kept into it (e.g. "if the data must stay on
disk"). :func:`ablate` drives any framework: it needs a ``train(recipe, run)`` returning an object with
``samples_per_s``, ``spread_pct``, ``test_accuracy``, ``peak_memory_bytes`` and ``flops_per_sample`` (and,
when it has them, ``epoch_times_s``: each epoch's wall time, the first included).

Example:
    >>> from types import SimpleNamespace as NS
    >>> fake = lambda r, run: NS(samples_per_s=100.0 * r["b"], spread_pct=1.0, test_accuracy=0.9,
    ...                          peak_memory_bytes=None, flops_per_sample=1e6)
    >>> table = ablate(fake, {"b": 1}, [Change("batch 4", {"b": 4})], apply=lambda r, f: {**r, **f})
    >>> [s.decision for s in table.steps], table.speedup("batch 4")
    (['baseline', 'kept'], 4.0)
"""
from __future__ import annotations

import contextlib
import math
import numbers
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from .._format import NA, TableView, fmt_bytes, fmt_number, fmt_rate, fmt_seconds
from .._check import flag, mapping, positive, text, whole
from ..limits import ceiling_for

__all__ = ["Change", "AblationStep", "Ablation", "ablate", "accuracy_floor"]


@dataclass(frozen=True)
class Change:
    """One change to try. ``fields``: the recipe fields it sets, or a function ``recipe -> fields`` (e.g. a
    learning rate scaled from the current one). The function may instead return alternatives, a list of
    ``(label, fields)`` tried in order until one is kept (e.g. the batch sizes that fit, fastest first).
    ``available=False`` lists it with ``why_not`` instead of running it; ``branch=True`` measures it from the
    final recipe without keeping it; ``one_off=True`` says it pays a one-off cost in its first epoch (compiling,
    recording graphs), which the table sets against its gain per epoch. ``retry_of``: the label of an earlier change
    this one tries again (a second pass), only if that one was dropped and a change kept since has changed the
    recipe (a 16-bit format dropped at a small batch may pay at the batch reached later)."""

    label: str
    fields: Mapping[str, Any] | Callable[[Any], Mapping[str, Any]]
    why: str = ""
    available: bool = True
    why_not: str = ""
    branch: bool = False
    one_off: bool = False
    retry_of: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not self.label.strip():
            raise ValueError(f"label must be a non-empty text, got {self.label!r}")
        if not (callable(self.fields) or isinstance(self.fields, Mapping)):
            raise TypeError(f"fields of {self.label!r} must be a mapping or a function recipe -> mapping, "
                            f"got {self.fields!r}")
        text("why", self.why)
        text("why_not", self.why_not)
        flag("available", self.available)
        flag("branch", self.branch)
        flag("one_off", self.one_off)
        text("retry_of", self.retry_of)


def _fraction(name: str, value: Any) -> float:
    """A fraction in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a fraction in [0, 1), got {value!r}")
    if not 0 <= value < 1:
        raise ValueError(f"{name} must be a fraction in [0, 1), got {value!r}")
    return float(value)


def _tolerance(tolerance: float) -> None:
    _fraction("tolerance", tolerance)


def accuracy_floor(accuracies: Sequence[float], tolerance: float) -> float:
    """The lowest accuracy that counts as kept: the lowest of a baseline's accuracies over its seeds, less
    ``tolerance`` (what :func:`ablate` and :func:`course.recipe_challenge` both hold a recipe to).

    Example:
        >>> round(accuracy_floor([0.985, 0.981, 0.988], 0.01), 3)
        0.971
    """
    _tolerance(tolerance)
    if isinstance(accuracies, (str, bytes)) or not isinstance(accuracies, Sequence):
        raise TypeError(f"accuracies must be a list of test accuracies (fractions in [0, 1]), got {accuracies!r}")
    if not accuracies:
        raise ValueError("accuracies is empty: pass the baseline's test accuracy over at least one seed")
    for a in accuracies:
        if isinstance(a, bool) or not isinstance(a, numbers.Real):
            raise TypeError(f"accuracies must be numbers (fractions in [0, 1]), got {a!r}")
        if not 0 <= a <= 1:           # NaN fails too: a diverged seed has no accuracy to hold others to
            raise ValueError(f"accuracies must be fractions in [0, 1] (a diverged seed's NaN left out), got {a!r}")
    return min(accuracies) - tolerance


@dataclass(frozen=True)
class AblationStep:
    """One row: what was tried, what it measured and what was decided ("baseline", "kept", "dropped",
    "not available", "not tried", "branch")."""

    label: str
    recipe: str
    params: Mapping[str, Any]
    decision: str
    reason: str = ""
    samples_per_s: float | None = None
    spread_pct: float | None = None
    test_accuracy: float | None = None
    peak_memory_bytes: int | None = None
    flops_per_sample: float | None = None
    ceiling_dtype: str | None = None
    ceiling_flops: float | None = None
    run_id: str | None = None
    gain: float | None = None        # samples/s over the recipe the change was applied to
    accuracies: tuple[float, ...] = ()   # the baseline's test accuracy over its seeds (its run-to-run spread)
    epoch_times_s: tuple[float, ...] = ()   # every epoch's wall time, the first (start-up, compiling) included
    one_off_s: float | None = None       # a one-off change: its first epoch's extra over the recipe it changed
    break_even_epochs: float | None = None   # epochs of its steady-state gain that pay the one-off back (inf: never)

    @property
    def wall_s(self) -> float | None:
        """The run's total training time: every epoch, the first (start-up, compiling) included."""
        return sum(self.epoch_times_s) if self.epoch_times_s else None

    @property
    def startup_s(self) -> float | None:
        """How much longer the first epoch took than a steady one (the median of the others); None with one epoch."""
        if len(self.epoch_times_s) < 2:
            return None
        rest = sorted(self.epoch_times_s[1:])
        mid = len(rest) // 2
        steady = rest[mid] if len(rest) % 2 else (rest[mid - 1] + rest[mid]) / 2
        return max(0.0, self.epoch_times_s[0] - steady)

    def accuracy_floor(self, tolerance: float = 0.01) -> float | None:
        """The lowest test accuracy a recipe may reach and count as accurate as this one: the lowest over its
        seeds (``accuracies``, else its one ``test_accuracy``) less ``tolerance``; None without an accuracy.

        Example:
            >>> s = AblationStep("seed", "", {}, "baseline", test_accuracy=0.985, accuracies=(0.985, 0.981, 0.988))
            >>> round(s.accuracy_floor(0.01), 3)
            0.971
        """
        _tolerance(tolerance)
        accs = self.accuracies or (() if self.test_accuracy is None else (self.test_accuracy,))
        return accuracy_floor(accs, tolerance) if accs else None

    @property
    def measured(self) -> bool:
        return self.samples_per_s is not None

    @property
    def achieved_flops(self) -> float | None:
        return None if not self.measured or not self.flops_per_sample else self.flops_per_sample * self.samples_per_s


@dataclass(frozen=True, repr=False)
class Ablation(TableView):
    """Every change tried, in order (immutable). Build with :func:`ablate`."""

    title: str
    steps: tuple[AblationStep, ...]
    device: str = ""
    epochs: int | None = None
    accuracy_tolerance: float = 0.01
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def accuracy_floor(self) -> float | None:
        """What every change must reach to be kept (see :meth:`AblationStep.accuracy_floor`)."""
        return self.baseline.accuracy_floor(self.accuracy_tolerance)

    def step(self, label: str) -> AblationStep:
        for s in self.steps:
            if s.label == label:
                return s
        raise KeyError(f"no step {label!r}; steps: {[s.label for s in self.steps]}")

    @property
    def baseline(self) -> AblationStep:
        return self.steps[0]

    @property
    def final(self) -> AblationStep:
        """The last step kept into the recipe (the baseline if nothing helped)."""
        return [s for s in self.steps if s.decision in ("baseline", "kept")][-1]

    @property
    def kept(self) -> tuple[str, ...]:
        return tuple(s.label for s in self.steps if s.decision == "kept")

    def accuracy_vs_baseline(self, label: str) -> float | None:
        """``label``'s test accuracy less the baseline's (a fraction: -0.004 is 0.4 points lower); None unmeasured."""
        s, b = self.step(label), self.baseline
        return None if s.test_accuracy is None or b.test_accuracy is None else s.test_accuracy - b.test_accuracy

    def speedup(self, label: str) -> float | None:
        """Samples/s of ``label`` over the baseline's (the same samples per epoch, so also the time ratio)."""
        s, b = self.step(label), self.baseline
        return None if not s.measured or not b.measured else s.samples_per_s / b.samples_per_s

    @property
    def ratio_over_baseline(self) -> float:
        """The final recipe's throughput over the baseline's, measured in the same run."""
        return self.speedup(self.final.label) or 1.0

    def ceiling(self, label: str) -> float | None:
        """The measured ceiling ``label`` is divided by, raised to the fastest row with the same ceiling when one
        beat it (see :func:`gpulab.limits.ceiling_for`): shares never exceed 100%."""
        s = self.step(label)
        if not s.ceiling_flops:
            return None
        same = [(o.label, o.achieved_flops) for o in self.steps if o.ceiling_flops == s.ceiling_flops]
        return ceiling_for(s.ceiling_flops, same)[0]

    def share_of_ceiling(self, label: str) -> float | None:
        """Achieved FLOP/s (counted FLOPs per sample x samples/s) over the ceiling of the step's precision: MFU."""
        a, c = self.step(label).achieved_flops, self.ceiling(label)
        return None if a is None or not c else a / c

    @property
    def ceiling_notes(self) -> tuple[str, ...]:
        out = []
        for c in sorted({s.ceiling_flops for s in self.steps if s.ceiling_flops}):
            note = ceiling_for(c, [(o.label, o.achieved_flops) for o in self.steps if o.ceiling_flops == c])[1]
            if note:
                out.append(note)
        return tuple(out)

    def to_dataframe(self) -> Any:
        """The numbers, unformatted (samples/s, ratios, fractions, bytes)."""
        import pandas as pd

        rows = [{"step": s.label, "recipe": s.recipe, "decision": s.decision, "reason": s.reason,
                 "samples_per_s": s.samples_per_s, "spread_pct": s.spread_pct, "speedup": self.speedup(s.label),
                 "achieved_flops": s.achieved_flops, "ceiling_dtype": s.ceiling_dtype,
                 "share_of_ceiling": self.share_of_ceiling(s.label), "gain": s.gain, "peak_memory_bytes": s.peak_memory_bytes,
                 "test_accuracy": s.test_accuracy, "accuracy_vs_baseline": self.accuracy_vs_baseline(s.label),
                 "wall_s": s.wall_s, "one_off_s": s.one_off_s, "break_even_epochs": s.break_even_epochs,
                 "run_id": s.run_id} for s in self.steps]
        return pd.DataFrame(rows).set_index("step")

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        one_off = any(s.one_off_s is not None for s in self.steps)
        header = ["step", "samples/s", "spread", f"vs {self.baseline.label}", "achieved", "% of ceiling",
                  "peak memory", "test accuracy", f"accuracy vs {self.baseline.label}", "wall, all epochs",
                  *(["one-off", "pays back after"] if one_off else []), "decision"]
        rows = []
        for s in self.steps:
            decision = f"{s.decision}: {s.reason}" if s.reason else s.decision
            if not s.measured:
                rows.append([s.label] + [NA] * (len(header) - 2) + [decision])
                continue
            share, sp, dacc = self.share_of_ceiling(s.label), self.speedup(s.label), self.accuracy_vs_baseline(s.label)
            noisy = s.spread_pct is not None and s.spread_pct > 10
            row = [s.label + (" *" if noisy else ""), fmt_number(s.samples_per_s),
                   f"{s.spread_pct:.0f}%" if s.spread_pct is not None else NA,
                   f"{sp:.2f}x" if sp else NA, fmt_rate(s.achieved_flops, "FLOP/s") if s.achieved_flops else NA,
                   f"{share:.0%} {_short(s.ceiling_dtype)}" if share is not None else NA,
                   fmt_bytes(s.peak_memory_bytes), NA if s.test_accuracy is None else f"{s.test_accuracy:.1%}",
                   NA if dacc is None else ("0.0 pt" if s is self.baseline else f"{100 * dacc:+.1f} pt"),
                   fmt_seconds(s.wall_s)]
            if one_off:
                row += [fmt_seconds(s.one_off_s) if s.one_off_s is not None else "",
                        "" if s.break_even_epochs is None else _epochs(s.break_even_epochs)]
            rows.append(row + [decision])
        notes = [f"{self.epochs} epochs per step; samples/s from the epochs after the first; wall: every epoch, "
                 f"the first (start-up, compiling) included" if self.epochs else "",
                 f"kept = faster beyond the noise (and by at least 5%; 'interleaved': the two recipes' steps timed "
                 f"in turn) and at least {self._floor_text()} accurate; % of ceiling = counted FLOPs x samples/s over this "
                 f"machine's measured matmul peak in the step's precision",
                 "one-off = the first epoch's extra time over the recipe it changed (compiling, recording graphs); "
                 "pays back after = one-off / time saved per epoch at the steady gain" if one_off else "",
                 f"final: {self.final.label} = {self.ratio_over_baseline:.1f}x the {self.baseline.label}"]
        if any(r[0].endswith(" *") for r in rows):
            notes.append("* spread above 10%: the machine was busy; a change is kept only if it gained more than "
                         "the spread")
        return header, rows, "; ".join(n for n in (*notes, *self.ceiling_notes, *self.notes) if n)

    def _floor_text(self) -> str:
        floor, accs = self.accuracy_floor, self.baseline.accuracies
        if floor is None:
            return f"within {100 * self.accuracy_tolerance:.1f} points of the {self.baseline.label}'s accuracy"
        if len(accs) > 1:
            return (f"{floor:.1%} ({100 * self.accuracy_tolerance:.1f} points below the lowest of the "
                    f"{self.baseline.label}'s {len(accs)} seeds, {min(accs):.1%}-{max(accs):.1%})")
        return f"{floor:.1%} ({100 * self.accuracy_tolerance:.1f} points below the {self.baseline.label})"

    def plot(self, ax: Any = None) -> Any:
        """Speedup over the baseline per step (kept in blue, dropped in grey, branches hatched) and test accuracy.
        Returns the Axes pair."""
        import matplotlib.pyplot as plt

        shown = [s for s in self.steps if s.measured]
        if ax is None:
            _, ax = plt.subplots(1, 2, figsize=(10, 0.9 + 0.42 * len(shown)), gridspec_kw={"width_ratios": [3, 1.4]})
        labels = [s.label for s in shown]
        speed = [self.speedup(s.label) or math.nan for s in shown]
        colors = ["#2a7ab9" if s.decision in ("kept", "baseline") else "#bbbbbb" for s in shown]
        bars = ax[0].barh(labels, speed, color=colors)
        for bar, s in zip(bars, shown):
            if s.decision == "branch":
                bar.set_hatch("//")
        ax[0].set_xscale("log")
        ax[0].axvline(1.0, color="k", lw=0.8, ls="--")
        for y, v in enumerate(speed):
            if not math.isnan(v):
                ax[0].annotate(f" {v:.1f}x", (v, y), va="center", fontsize=9)
        ax[0].set_xlim(right=max([v for v in speed if not math.isnan(v)] + [1.0]) * 3)
        ax[0].invert_yaxis()
        ax[0].set_xlabel(f"samples/s over the {self.baseline.label} (log scale; blue = kept)")
        ax[0].set_title(self.title, loc="left")
        acc = [100 * (s.test_accuracy if s.test_accuracy is not None else math.nan) for s in shown]
        # dots, not bars: the axis does not start at 0, and a bar's length would exaggerate a small drop
        ax[1].scatter(acc, range(len(shown)), color=colors, s=40, zorder=3)
        for y, a in enumerate(acc):
            if not math.isnan(a):
                ax[1].annotate(f"{a:.1f}% ", (a, y), va="center", ha="right", fontsize=9)
        ax[1].set_ylim(ax[0].get_ylim())
        ax[1].set_yticks(range(len(shown)), [""] * len(shown))
        ax[1].grid(True, axis="x", alpha=0.3)
        finite = [a for a in acc if not math.isnan(a)]
        ax[1].set_xlim(max(0.0, min(finite + [100.0]) - 5), 100)
        ax[1].set_xlabel("test accuracy (%, axis from {:.0f})".format(ax[1].get_xlim()[0]))
        ax[0].figure.tight_layout()
        return ax


def _epochs(n: float) -> str:
    return "never" if math.isinf(n) else f"{n:.2g} epochs" if n < 10 else f"{n:,.0f} epochs"


def _short(dtype: str | None) -> str:
    return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(dtype or "", dtype or "")


def _decide(current: AblationStep, got: AblationStep, floor: float | None, min_gain: float,
            paired: tuple[float, float] | None = None) -> tuple[bool, float, str]:
    """Keep or drop, the gain it is based on, and why. ``floor``: the accuracy a kept change must reach (the
    baseline's, never the current recipe's, so losses cannot add up). ``paired``: (gain, spread %) from an
    interleaved comparison of the two recipes, used instead of the two runs' own rates when given."""
    if paired is not None:
        gain, noise, how = paired[0], max(min_gain, paired[1] / 100), " (interleaved)"
    else:
        gain = got.samples_per_s / current.samples_per_s
        noise, how = max(min_gain, (current.spread_pct or 0) / 100, (got.spread_pct or 0) / 100), ""
    if not math.isfinite(gain) or (got.test_accuracy is not None and not math.isfinite(got.test_accuracy)):
        # NaN compares false with everything: without this, a diverged change would pass every test below
        what = "samples/s" if not math.isfinite(gain) else "test accuracy"
        return False, gain, f"diverged: its {what} is {gain if what == 'samples/s' else got.test_accuracy}"
    if floor is not None and got.test_accuracy is not None and got.test_accuracy < floor:
        return False, gain, f"{gain:.2f}x{how}, but {got.test_accuracy:.1%} accurate, below the {floor:.1%} floor"
    if gain < 1 + noise:
        return False, gain, (f"{gain:.2f}x{how}: slower" if gain < 1 - noise
                             else f"{gain:.2f}x{how}: within the noise ({noise:.0%})")
    return True, gain, f"{gain:.2f}x{how}"


def _one_off(current: AblationStep, got: AblationStep, gain: float) -> AblationStep:
    """``got`` with its one-off cost (its first epoch's extra over a steady one, less the extra the recipe it changed
    already paid) and the epochs its steady gain takes to pay that back: one-off / (the changed recipe's steady
    epoch x (1 - 1/gain)); infinite when it gains nothing per epoch."""
    if got.startup_s is None or current.startup_s is None or not math.isfinite(gain):
        return got
    one_off = max(0.0, got.startup_s - current.startup_s)
    steady = current.epoch_times_s[0] - current.startup_s
    saved = steady * (1 - 1 / gain) if gain > 0 else 0.0
    return replace(got, one_off_s=one_off, break_even_epochs=one_off / saved if saved > 0 else math.inf)


def ablate(train: Callable[[Any, Any], Any], baseline: Any, changes: Sequence[Change], *,
           apply: Callable[[Any, Mapping[str, Any]], Any], describe: Callable[[Any], str] = str,
           params: Callable[[Any], Mapping[str, Any]] = lambda r: dict(r) if isinstance(r, Mapping) else {},
           ceiling: Callable[[Any], tuple[str, float] | None] = lambda r: None,
           baseline_label: str = "seed loop", title: str = "Ablation", accuracy_tolerance: float = 0.01,
           min_gain: float = 0.05, track: Mapping[str, Any] | None = None, monitor_interval: float = 0.2,
           device: str = "", epochs: int | None = None,
           compare: Callable[[Any, Any], tuple[float, float]] | None = None,
           rerun: Callable[[Any, int], float | None] | None = None, accuracy_seeds: int = 2) -> Ablation:
    """Train ``baseline``, then each change applied to the best recipe so far; keep it if it helps.

    ``apply(recipe, fields)`` returns the changed recipe; ``ceiling(recipe)`` the measured ceiling of its
    precision as ``(dtype, FLOP/s)``. With ``track`` (keyword arguments of :func:`gpulab.tracking.track`,
    e.g. ``{"experiment": "capstone", "root": "runs"}``) every step is a tracked run: its recipe as parameters,
    what ``train`` logs, and the :class:`gpulab.Monitor` telemetry recorded around it. ``compare(current,
    candidate)`` returns ``(gain, spread %)`` from timing the two recipes interleaved (the same machine state
    for both); when given, the decision uses it instead of the two runs' own throughputs, which drift apart on a
    shared machine. ``rerun(baseline, seed)`` returns the baseline's test accuracy when trained with another
    seed; it is called for seeds 1..``accuracy_seeds`` to measure the baseline's run-to-run spread, which sets the
    accuracy floor every change must reach.
    """
    if not callable(train):
        raise TypeError(f"train must be a function (recipe, run) -> result, got {train!r}")
    for name, fn in (("apply", apply), ("describe", describe), ("params", params), ("ceiling", ceiling)):
        if not callable(fn):
            raise TypeError(f"{name} must be a function, got {fn!r}")
    for name, fn in (("compare", compare), ("rerun", rerun)):
        if fn is not None and not callable(fn):
            raise TypeError(f"{name} must be a function or None, got {fn!r}")
    if baseline is None:
        raise ValueError("baseline is None: pass the recipe every change starts from")
    accuracy_tolerance = _fraction("accuracy_tolerance", accuracy_tolerance)
    min_gain = _fraction("min_gain", min_gain)
    accuracy_seeds = whole("accuracy_seeds", accuracy_seeds, low=0)
    text("baseline_label", baseline_label, empty=False)
    text("title", title)
    text("device", device)
    if epochs is not None:
        epochs = whole("epochs", epochs)
    if monitor_interval:                       # 0 or None: no Monitor around a tracked run
        positive("monitor_interval", monitor_interval, unit="s")
    if track is not None:
        mapping("track", track, example="{'root': 'runs', 'experiment': 'capstone'}")
    if isinstance(changes, (str, bytes)) or not isinstance(changes, Sequence):
        raise TypeError(f"changes must be a list of course.Change, got {changes!r}")
    for c in changes:
        if not isinstance(c, Change):
            raise TypeError(f"changes must be course.Change objects, got {c!r}")

    def measure(label: str, recipe: Any, decision: str) -> AblationStep:
        run_id = None
        with contextlib.ExitStack() as stack:
            run = None
            if track is not None:
                from ..tracking import track as open_run

                run = stack.enter_context(open_run(label, params={**params(recipe), "step": label}, **track))
            if run is not None and monitor_interval:
                from ..telemetry import Monitor

                with Monitor(interval=monitor_interval) as mon:
                    result = train(recipe, run)
                run.log_trace(mon.trace)
            else:
                result = train(recipe, run)
        missing = [a for a in ("samples_per_s", "spread_pct", "test_accuracy", "peak_memory_bytes", "flops_per_sample")
                   if not hasattr(result, a)]
        if missing:
            raise TypeError(f"train returned {type(result).__name__} {result!r:.60}, which has no {', '.join(missing)}: "
                            "train must return a result like course.train_recipe's RecipeRun")
        run_id = run.record.run_id if run is not None else None
        c = ceiling(recipe)
        return AblationStep(label, describe(recipe), dict(params(recipe)), decision, "",
                            float(result.samples_per_s),
                            None if result.spread_pct is None else float(result.spread_pct), result.test_accuracy,
                            result.peak_memory_bytes, result.flops_per_sample, c[0] if c else None,
                            c[1] if c else None, run_id,
                            epoch_times_s=tuple(float(t) for t in getattr(result, "epoch_times_s", ()) or ()))

    current = measure(baseline_label, baseline, "baseline")
    if rerun is not None and accuracy_seeds and current.test_accuracy is not None:
        again = [rerun(baseline, seed) for seed in range(1, accuracy_seeds + 1)]
        # a rerun that diverged (NaN) says nothing about the spread of the baseline's accuracy: left out
        current = replace(current, accuracies=(current.test_accuracy, *(float(a) for a in again
                                                                         if a is not None and math.isfinite(a))))
    floor = current.accuracy_floor(accuracy_tolerance)
    recipe = baseline
    steps = [current]
    branches = []
    tried: dict[str, tuple[bool, int]] = {}     # label -> (kept, how many changes were kept when it was decided)
    for change in changes:
        if not change.available:
            steps.append(AblationStep(change.label, "", {}, "not available", change.why_not))
            continue
        if change.branch:
            branches.append(change)
            continue
        n_kept = sum(s.decision == "kept" for s in steps)
        if change.retry_of:
            first = tried.get(change.retry_of)
            why_not = (f"{change.retry_of!r} was not tried" if first is None else
                       f"{change.retry_of!r} was kept in the first pass" if first[0] else
                       f"nothing was kept since {change.retry_of!r} was dropped: the same recipe" if first[1] == n_kept
                       else "")
            if why_not:
                steps.append(AblationStep(change.label, "", {}, "not tried", why_not))
                continue
        fields = change.fields(recipe) if callable(change.fields) else change.fields
        options = [(change.label, fields)] if isinstance(fields, Mapping) else \
            [(f"{change.label}: {name}", f) for name, f in fields]
        start = len(steps)
        if not options:
            steps.append(AblationStep(change.label, "", {}, "not tried", change.why_not or "nothing to try"))
        for label, f in options:
            candidate = apply(recipe, f)
            got = measure(label, candidate, "dropped")
            paired = compare(recipe, candidate) if compare is not None else None
            keep, gain, why = _decide(current, got, floor, min_gain, paired)
            if change.one_off:
                got = _one_off(current, got, gain)
                if got.one_off_s is not None:
                    why += f"; one-off {got.one_off_s:.3g} s, " + (
                        "never paid back" if math.isinf(got.break_even_epochs) else
                        f"paid back after {_epochs(got.break_even_epochs)}")
            steps.append(replace(got, decision="kept" if keep else "dropped", reason=why, gain=gain))
            if keep:
                current, recipe = steps[-1], candidate
                break
        tried[change.label] = (any(s.decision == "kept" for s in steps[start:]), sum(s.decision == "kept" for s in steps))
    for change in branches:
        fields = change.fields(recipe) if callable(change.fields) else change.fields
        got = measure(change.label, apply(recipe, fields), "branch")
        gain = got.samples_per_s / current.samples_per_s
        steps.append(replace(got, gain=gain, reason=f"{gain:.2f}x the final recipe" + (f"; {change.why}" if change.why else "")))
    return Ablation(title, tuple(steps), device, epochs, accuracy_tolerance)
