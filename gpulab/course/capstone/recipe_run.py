"""What one training run of a capstone recipe measured (:class:`RecipeRun`, made by :func:`course.train_recipe`):
per-epoch wall times and, where the device has an energy counter, per-epoch joules; the throughput and the energy
per sample of the steady-state epochs; accuracy, memory and the work per sample.

Example:
    >>> r = RecipeRun(None, "cpu", 3, 1000, (2.0, 1.0, 1.0), (), 0.9, None, 1e6,
    ...               epoch_joules=(None, None, None), energy_reason="no RAPL counter")
    >>> r.samples_per_s, r.joules_per_sample
    (1000.0, None)
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from ..._format import fmt_bytes, fmt_number, fmt_seconds, html_table, text_table

__all__ = ["RecipeRun"]


@dataclass(frozen=True, repr=False)
class RecipeRun:
    """What :func:`train_recipe` did: per-epoch wall times (device synchronised at each epoch's end), the
    losses read every ``log_every`` steps, test accuracy, peak memory and the work per sample.

    ``epoch_joules``: each epoch's energy from the device's counter (read after the synchronise that starts the
    epoch and after the one that ends it; ``energy_source`` says which counter), None where it could not be read
    (``energy_reason`` says why: a missing counter is never a zero). On a GPU whose epochs are too short for NVML's
    counter, each epoch is charged the mean power of a block of the same steps run alone (``energy_source`` says so)."""

    recipe: Any                                  # the course.Recipe trained
    device: str
    epochs: int
    samples_per_epoch: int
    epoch_times_s: tuple[float, ...]
    losses: tuple[tuple[int, float], ...]         # (step, loss) as read with .item()
    test_accuracy: float | None                 # None: not measured (e.g. a timing-only run)
    peak_memory_bytes: int | None
    flops_per_sample: float
    memory_method: str = ""
    chunk_rates: tuple[tuple[float, ...], ...] = ()   # per timed epoch: samples/s of each quarter of it
    notes: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    diverged_at_step: int | None = None        # the step whose loss read non-finite; training stopped there
    epoch_joules: tuple[float | None, ...] = ()   # each epoch's joules from the device's counter; None: unread
    energy_reason: str | None = None           # why there are no joules (None when there are)
    energy_source: str = ""                    # the counter the joules came from
    epoch_accuracies: tuple[float, ...] = ()   # the test accuracy after each finished epoch (read outside its clock)

    def epochs_to(self, target: float) -> int | None:
        """How many epochs this run took to reach test accuracy ``target`` (read after each epoch); None if it never
        did. See :meth:`course.AblationStep.epochs_to`."""
        return next((i for i, a in enumerate(self.epoch_accuracies, 1) if a >= target), None)

    @property
    def timed_epoch_joules(self) -> tuple[float | None, ...]:
        """The joules of the epochs timing uses (all but the first, if any remain)."""
        return self.epoch_joules[1:] or self.epoch_joules

    @property
    def joules_per_epoch(self) -> float | None:
        """Mean joules of a timed epoch; None where any of them was not measured."""
        js = self.timed_epoch_joules
        return None if not js or any(j is None for j in js) else sum(js) / len(js)

    @property
    def joules_per_sample(self) -> float | None:
        """Joules per sample over the timed epochs (their energy over their samples, as ``samples_per_s`` uses
        them); None where energy was not measurable (``energy_reason``)."""
        j = self.joules_per_epoch
        return None if j is None or not self.samples_per_epoch else j / self.samples_per_epoch

    @property
    def diverged(self) -> bool:
        """Whether the loss became NaN or infinite (test accuracy is then NaN, and ``notes`` say what to change)."""
        return self.diverged_at_step is not None

    @property
    def timed_epochs_s(self) -> tuple[float, ...]:
        """The epochs timing uses: all but the first (lazy start-up, compilation, worker start), if any remain."""
        return self.epoch_times_s[1:] or self.epoch_times_s

    @property
    def samples_per_s(self) -> float:
        """Samples per second over the timed epochs (median epoch); NaN when no epoch finished (a diverged run)."""
        if not self.timed_epochs_s:
            return math.nan
        return self.samples_per_epoch / statistics.median(self.timed_epochs_s)

    @property
    def spread_pct(self) -> float | None:
        """How much the timed epochs disagreed, in % (see :func:`_quarter_spread`); None with fewer than two
        timed epochs. Above 10%: the machine was busy, compare with care."""
        return _quarter_spread(self.chunk_rates)

    @property
    def achieved_flops(self) -> float:
        return self.flops_per_sample * self.samples_per_s

    def _rows(self) -> list[tuple[str, str]]:
        rows = [("recipe", self.recipe.describe()), ("device", self.device),
                ("epochs", (f"{len(self.epoch_times_s)} of {self.epochs} finished" if self.diverged else
                            f"{self.epochs}") + f" x {self.samples_per_epoch:,} samples"
                           + "".join(f"{'; ' if i == 0 else ', '}{fmt_seconds(t)}" for i, t in enumerate(self.epoch_times_s))),
                ("throughput", f"{fmt_number(self.samples_per_s)} samples/s"
                               + (f" (spread {self.spread_pct:.0f}%)" if self.spread_pct is not None else "")),
                ("test accuracy", "not measured" if self.test_accuracy is None else
                 f"diverged at step {self.diverged_at_step}" if self.diverged else f"{self.test_accuracy:.1%}"),
                ("peak memory", fmt_bytes(self.peak_memory_bytes)),
                ("energy", self._energy_text())]
        return rows + [("note", n) for n in self.notes]

    def _energy_text(self) -> str:
        j = self.joules_per_sample
        if j is None:
            return f"not measurable here: {self.energy_reason or 'no energy counter was read'}"
        per = f"{j * 1e3:.3g} mJ" if j < 0.1 else f"{j:.3g} J"
        return f"{per} per sample ({fmt_number(self.joules_per_epoch)} J per timed epoch; {self.energy_source})"

    def __repr__(self) -> str:
        return "RecipeRun\n" + text_table(("", ""), self._rows())

    def _repr_html_(self) -> str:
        return html_table(("", ""), self._rows(), caption="Training run")


def _quarter_spread(per_epoch: Any) -> float | None:
    """Each quarter of a timed epoch compared with the same quarter of the other timed epochs (the same work,
    so start-of-epoch costs cancel out): the median of those relative ranges, in %. None with fewer than two
    timed epochs.

    Example:
        >>> round(_quarter_spread([(100.0, 200.0, 200.0, 200.0), (110.0, 200.0, 200.0, 180.0)]), 1)
        4.8
    """
    epochs = [tuple(e) for e in per_epoch if len(e)]
    if len(epochs) < 2:
        return None
    k = min(len(e) for e in epochs)
    ranges = [(max(col) - min(col)) / statistics.median(col) for col in zip(*(e[:k] for e in epochs))]
    return 100.0 * statistics.median(ranges)

