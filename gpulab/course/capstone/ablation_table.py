"""The ablation's table: each :class:`AblationStep` (what was tried, what it measured, what was decided) and the
:class:`Ablation` that shows them side by side: throughput, speedup, share of the measured ceiling, memory,
accuracy, wall time and, where the device's counter was read, joules per sample, and with an hourly price the cost
per million samples at each step's measured throughput. Built by :func:`course.ablate`.

Example:
    >>> s = AblationStep("seed loop", "batch 32", {}, "baseline", samples_per_s=1000.0, joules_per_sample=0.002)
    >>> t = Ablation("demo", (s,), price=hourly_price(3.6))
    >>> t.cost_per_million("seed loop"), "mJ per sample" in repr(t), "$ per 1M samples" in repr(t)
    (1.0, True, True)
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..._format import NA, TableView, fmt_bytes, fmt_number, fmt_rate, fmt_seconds
from ...cost import Price, cost_per_million, hourly_price
from ...limits import ceiling_for

__all__ = ["AblationStep", "Ablation", "accuracy_floor"]

NOT_MEASURABLE = "not measurable"
JUDGES = ("throughput", "time to accuracy")


def _fraction(name: str, value: Any) -> float:
    """A fraction in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a fraction in [0, 1), got {value!r}")
    if not 0 <= value < 1:
        raise ValueError(f"{name} must be a fraction in [0, 1), got {value!r}")
    return float(value)


def judge_arg(judge: Any) -> str:
    """``judge`` checked: one of :data:`JUDGES` (how an ablation keeps or drops a change)."""
    if judge not in JUDGES:
        raise ValueError(f"judge must be one of {JUDGES}, got {judge!r}")
    return judge


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
    time_gain: float | None = None   # judged by time: that recipe's time to the target over this one's
    target_epochs: int | None = None     # judged by time: the epochs its updates take to the target (see ablate)
    same_updates: bool = False           # a change that left the updates alone: target_epochs are its recipe's
    accuracies: tuple[float, ...] = ()   # the baseline's test accuracy over its seeds (its run-to-run spread)
    epoch_times_s: tuple[float, ...] = ()   # every epoch's wall time, the first (start-up, compiling) included
    one_off_s: float | None = None       # a one-off change: its first epoch's extra over the recipe it changed
    break_even_epochs: float | None = None   # epochs of its steady-state gain that pay the one-off back (inf: never)
    joules_per_sample: float | None = None   # the device's energy counter over the timed epochs, per sample
    energy_note: str | None = None       # where those joules came from, or why there are none
    epoch_accuracies: tuple[float, ...] = ()   # the test accuracy after each epoch (time to accuracy is read from it)

    def epochs_to(self, target: float) -> int | None:
        """How many epochs this run took to reach test accuracy ``target`` (read after each epoch); None if it never
        did or no epoch's accuracy was read.

        Example:
            >>> AblationStep("b", "", {}, "kept", epoch_accuracies=(0.95, 0.975, 0.98)).epochs_to(0.97)
            2
        """
        return next((i for i, a in enumerate(self.epoch_accuracies, 1) if a >= target), None)

    @property
    def steady_epoch_s(self) -> float | None:
        """A steady epoch's wall time: the median of the epochs after the first (the one-off excluded), as
        ``samples_per_s`` is measured; the only epoch's with one."""
        rest = sorted(self.epoch_times_s[1:] or self.epoch_times_s)
        if not rest:
            return None
        mid = len(rest) // 2
        return rest[mid] if len(rest) % 2 else (rest[mid - 1] + rest[mid]) / 2

    def time_to(self, target: float) -> float | None:
        """Steady-state seconds of training to reach test accuracy ``target``: the epochs it took x a steady epoch
        (a one-off, compiling or recording graphs, is shown apart); None if it never reached it."""
        k, epoch = self.epochs_to(target), self.steady_epoch_s
        return None if k is None or epoch is None else k * epoch

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
    price: Price | None = None        # the hourly price the cost column uses (None: no cost column)
    device_name: str = ""             # what the runs were measured on, by name (a GPU's price on it is a what-if)
    judge: str = "throughput"         # or "time to accuracy": kept = less training time to the baseline's accuracy

    def __post_init__(self) -> None:
        if self.price is not None:
            object.__setattr__(self, "price", hourly_price(self.price))
        judge_arg(self.judge)

    @property
    def target_accuracy(self) -> float | None:
        """Judged by time, the accuracy a recipe's time is measured to: the lowest the baseline reached over its seeds
        (no tolerance: every run of the baseline got there); by throughput, the :attr:`accuracy_floor`."""
        return self.baseline.accuracy_floor(0.0) if self.by_time else self.accuracy_floor

    @property
    def by_time(self) -> bool:
        """Whether changes were judged by their time to the baseline's accuracy (else by samples/s at a floor)."""
        return self.judge == "time to accuracy"

    def epochs_to_target(self, label: str) -> int | None:
        """The epochs ``label``'s updates take to the :attr:`target_accuracy`: measured for the baseline and a change
        to the updates, the recipe's it changed for one that left them alone (``same_updates``); None if never."""
        s, target = self.step(label), self.target_accuracy
        if s.target_epochs is not None or s.same_updates:
            return s.target_epochs
        return None if target is None else s.epochs_to(target)

    def time_to_target(self, label: str) -> float | None:
        """Steady-state seconds ``label`` takes to the :attr:`target_accuracy`: :meth:`epochs_to_target` x a steady
        epoch (:attr:`AblationStep.steady_epoch_s`); None if it never reached it or read no accuracy per epoch."""
        k, epoch = self.epochs_to_target(label), self.step(label).steady_epoch_s
        return None if k is None or epoch is None or not self.step(label).epoch_accuracies else k * epoch

    def time_speedup(self, label: str) -> float | None:
        """The baseline's time to the target over ``label``'s: what a user waits for the same accuracy."""
        b, s = self.time_to_target(self.baseline.label), self.time_to_target(label)
        return None if b is None or not s else b / s

    @property
    def time_ratio_over_baseline(self) -> float | None:
        """The final recipe's :meth:`time_speedup`: the headline of an ablation judged by time to accuracy."""
        return self.time_speedup(self.final.label)

    def cost_per_million(self, label: str) -> float | None:
        """USD per million samples of ``label`` at :attr:`price` and its measured samples/s; None without a price
        or a measurement (never an estimate)."""
        s = self.step(label)
        return None if self.price is None or not s.measured else cost_per_million(self.price.usd_per_hour,
                                                                                   s.samples_per_s)

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
                 "share_of_ceiling": self.share_of_ceiling(s.label), "gain": s.gain, "time_gain": s.time_gain,
                 "peak_memory_bytes": s.peak_memory_bytes,
                 "test_accuracy": s.test_accuracy, "accuracy_vs_baseline": self.accuracy_vs_baseline(s.label),
                 "wall_s": s.wall_s, "one_off_s": s.one_off_s, "break_even_epochs": s.break_even_epochs,
                 "epochs_to_target": self.epochs_to_target(s.label),
                 "time_to_target_s": self.time_to_target(s.label), "time_speedup": self.time_speedup(s.label),
                 "joules_per_sample": s.joules_per_sample, "usd_per_million": self.cost_per_million(s.label),
                 "run_id": s.run_id} for s in self.steps]
        return pd.DataFrame(rows).set_index("step")

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        one_off = any(s.one_off_s is not None for s in self.steps)
        joules = [s.joules_per_sample for s in self.steps if s.joules_per_sample is not None]
        j_scale, j_unit = (1e3, "mJ") if joules and max(joules) < 0.1 else (1.0, "J")
        header = ["step", "samples/s", "spread", f"vs {self.baseline.label}", "achieved", "% of ceiling",
                  "peak memory", "test accuracy", f"accuracy vs {self.baseline.label}", "wall, all epochs",
                  *([f"time to {self.target_accuracy:.1%}", "time vs " + self.baseline.label] if self.by_time else []),
                  *(["one-off", "pays back after"] if one_off else []), f"{j_unit} per sample",
                  *(["$ per 1M samples"] if self.price is not None else []), "decision"]
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
            if self.by_time:
                row += self._time_cells(s)
            if one_off:
                row += [fmt_seconds(s.one_off_s) if s.one_off_s is not None else "",
                        "" if s.break_even_epochs is None else _epochs(s.break_even_epochs)]
            row.append(NOT_MEASURABLE if s.joules_per_sample is None else f"{s.joules_per_sample * j_scale:.3g}")
            if self.price is not None:
                c = self.cost_per_million(s.label)
                row.append(NA if c is None else f"{c:.3g}")
            rows.append(row + [decision])
        notes = [f"{self.epochs} epochs per step; samples/s from the epochs after the first; wall: every epoch, "
                 f"the first (start-up, compiling) included" if self.epochs else "",
                 self._rule_text() + "; % of ceiling = counted FLOPs x samples/s over this machine's measured matmul "
                 "peak in the step's precision",
                 "one-off = the first epoch's extra time over the recipe it changed (compiling, recording graphs); "
                 "pays back after = one-off / time saved per epoch at the steady gain" if one_off else "",
                 f"final: {self.final.label} = {self.ratio_over_baseline:.1f}x the {self.baseline.label}'s samples/s"
                 + (f", {self.time_ratio_over_baseline:.1f}x its time to {self.target_accuracy:.1%}"
                    if self.by_time and self.time_ratio_over_baseline else ""),
                 self._energy_text(),
                 self._price_text()]
        if any(r[0].endswith(" *") for r in rows):
            notes.append("* spread above 10%: the machine was busy; a change is kept only if it gained more than "
                         "the spread")
        return header, rows, "; ".join(n for n in (*notes, *self.ceiling_notes, *self.notes) if n)

    def _time_cells(self, s: AblationStep) -> list[str]:
        t, k, ratio = self.time_to_target(s.label), self.epochs_to_target(s.label), self.time_speedup(s.label)
        if not s.epoch_accuracies or s.test_accuracy is None:
            return [NA, NA]
        if t is None:
            return [f"not in {len(s.epoch_accuracies)} epochs", NA]
        how = ", same updates" if s.same_updates else ""
        return [f"{fmt_seconds(t)} ({k} epoch{'s' if k != 1 else ''}{how})", NA if ratio is None else f"{ratio:.2f}x"]

    def _rule_text(self) -> str:
        if not self.by_time:
            return (f"kept = faster beyond the noise (and by at least 5%; 'interleaved': the two recipes' steps timed "
                    f"in turn) and at least {self._floor_text()} accurate")
        accs = self.baseline.accuracies or (self.baseline.test_accuracy,)
        seeds = f"the lowest of the {self.baseline.label}'s {len(accs)} seeds" if len(accs) > 1 else \
            f"the {self.baseline.label}'s"
        return (f"judged by time to accuracy: the target is {self.target_accuracy:.1%} ({seeds}), read after each "
                "epoch; time to it = the epochs to it x a steady epoch (a one-off such as compiling is shown apart); "
                "a change to the updates (batch size, learning rate) is kept when it reaches the target in less time "
                "than the recipe it changed, beyond the noise (and by at least 5%): its samples/s gain ('interleaved': "
                "the two recipes' steps timed in turn) x the ratio of their epochs to the target, and one short of it "
                "trains again with the epochs its gain could pay for; a change that leaves the updates alone (same "
                "updates) keeps the epochs of the recipe it changed and is kept when faster beyond the noise and at "
                f"least {self._floor_text()} accurate at the end")

    def _price_text(self) -> str:
        if self.price is None:
            return ""
        from ...cost import price_mismatch

        whatif = price_mismatch(self.price, self.device_name) if self.device_name else None
        return f"$ per 1M samples = {self.price} / the measured samples/s" + (f" ({whatif})" if whatif else "")

    def _energy_text(self) -> str:
        """Where the joules per sample came from (each source once), or why there are none."""
        measured = [s for s in self.steps if s.measured]
        sources = list(dict.fromkeys(s.energy_note for s in measured if s.joules_per_sample is not None and s.energy_note))
        reasons = list(dict.fromkeys(s.energy_note for s in measured if s.joules_per_sample is None and s.energy_note))
        text = ("J per sample = the device's energy over the timed epochs / their samples, from "
                + "; ".join(sources)) if sources else ""
        if reasons or not sources:
            text += ("; " if text else "") + "energy not measurable here" + (": " + "; ".join(reasons) if reasons else
                                                                             " (no energy counter was read)")
        return text

    def _floor_text(self) -> str:
        floor, accs = self.accuracy_floor, self.baseline.accuracies
        if floor is None:
            return f"within {100 * self.accuracy_tolerance:.1f} points of the {self.baseline.label}'s accuracy"
        below = f"{100 * self.accuracy_tolerance:.1f} points below " if self.accuracy_tolerance else ""
        if len(accs) > 1:
            return (f"{floor:.1%} ({below}the lowest of the {self.baseline.label}'s {len(accs)} seeds, "
                    f"{min(accs):.1%}-{max(accs):.1%})")
        return f"{floor:.1%} ({below or 'that of '}the {self.baseline.label})"

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
        if self.by_time:                # time to the target over the baseline's, beside the samples/s bars
            times = [self.time_speedup(s.label) or math.nan for s in shown]
            ax[0].scatter(times, range(len(shown)), marker="D", color="k", s=22, zorder=3,
                          label=f"less time to {self.target_accuracy:.1%} (x)")
            ax[0].legend(loc="lower right", fontsize=8)
        for y, v in enumerate(speed):
            if not math.isnan(v):
                ax[0].annotate(f" {v:.1f}x", (v, y), va="center", fontsize=9)
        top = [v for v in speed if not math.isnan(v)] + [1.0]
        if self.by_time:
            top += [t for t in (self.time_speedup(s.label) for s in shown) if t]
        ax[0].set_xlim(right=max(top) * 3)
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


