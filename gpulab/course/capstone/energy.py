"""Time, energy and cost side by side for the capstone: the same recipe trained in fp32 and in the device's 16-bit
type (:func:`precision_cost`, :func:`compare_precisions`), and the lines a results card carries for an ablation's
first loop and final recipe (:func:`energy_headline`).

Every joule comes from the device's energy counter around the timed epochs (:class:`gpulab.telemetry.energy.Energy`);
where there is none the table says "not measurable" and shows no number. Every cost is a given or published hourly
price times the measured time: a run without a measurement has no cost, never an estimate.

Example:
    >>> from gpulab import course
    >>> from gpulab.course.capstone.recipe_run import RecipeRun
    >>> run = lambda p, s: RecipeRun(course.Recipe(precision=p), "cpu", 2, 1000, (s, s), (), 0.9, None, 1e6,
    ...                              epoch_joules=(None, None), energy_reason="no RAPL counter")
    >>> t = course.precision_cost(run("fp32", 2.0), run("bf16", 1.0), price_per_hour=3.6)
    >>> t.time_ratio, t.cost_per_epoch("bf16"), t.joules_per_epoch("bf16")
    (0.5, 0.001, None)
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..._check import checked, whole
from ..._format import NA, TableView, fmt_seconds
from ...cost import Price, hourly_price
from .ablation_table import Ablation
from .recipe_run import RecipeRun

__all__ = ["PrecisionCost", "precision_cost", "compare_precisions", "energy_headline"]

NOT_MEASURABLE = "not measurable"


def _joules(j: float) -> str:
    return f"{j * 1e3:.3g} mJ" if j < 0.1 else f"{j:.3g} J"


def _usd(x: float) -> str:
    return f"${x:.3g}"


@dataclass(frozen=True, repr=False)
class PrecisionCost(TableView):
    """One recipe trained in fp32 and in a 16-bit type (immutable): seconds, joules and cost per timed epoch, per
    sample, the test accuracy, and the 16-bit run over the fp32 one. Build with :func:`precision_cost`."""

    fp32: RecipeRun
    low: RecipeRun
    price: Price | None = None
    title: str = "fp32 vs 16-bit: time, energy and cost per epoch"

    @property
    def runs(self) -> tuple[RecipeRun, RecipeRun]:
        return self.fp32, self.low

    def run(self, precision: str) -> RecipeRun:
        for r in self.runs:
            if r.recipe.precision == precision:
                return r
        raise KeyError(f"no run in {precision!r}; runs: {[r.recipe.precision for r in self.runs]}")

    def seconds_per_epoch(self, precision: str) -> float:
        """The timed epochs' samples over their samples/s: the median timed epoch's seconds."""
        r = self.run(precision)
        return r.samples_per_epoch / r.samples_per_s

    def joules_per_epoch(self, precision: str) -> float | None:
        """Mean joules of a timed epoch from the device's counter; None where it could not be read."""
        return self.run(precision).joules_per_epoch

    def cost_per_epoch(self, precision: str) -> float | None:
        """USD for one timed epoch at :attr:`price` (None without a price)."""
        return None if self.price is None else self.price.usd_per_hour / 3600.0 * self.seconds_per_epoch(precision)

    @property
    def time_ratio(self) -> float:
        """The 16-bit run's seconds per epoch over the fp32 run's (below 1: faster); also the cost ratio."""
        return self.seconds_per_epoch(self.low.recipe.precision) / self.seconds_per_epoch("fp32")

    @property
    def energy_ratio(self) -> float | None:
        """The 16-bit run's joules per epoch over the fp32 run's; None unless both were measured."""
        a, b = self.joules_per_epoch(self.low.recipe.precision), self.joules_per_epoch("fp32")
        return None if a is None or b is None or b <= 0 else a / b

    def sentence(self) -> str:
        """What was measured, in one sentence: the 16-bit epoch's time (and so cost) and joules against fp32's, or
        why the joules are not measurable here."""
        low = self.low.recipe.precision
        t = (f"In {low} an epoch took {fmt_seconds(self.seconds_per_epoch(low))} against "
             f"{fmt_seconds(self.seconds_per_epoch('fp32'))} in fp32 ({self.time_ratio:.2f}x the time"
             + (", so the same ratio of the cost at one hourly price" if self.price is not None else "") + ")")
        er = self.energy_ratio
        if er is not None:
            return (t + f", and {_joules(self.joules_per_epoch(low))} against {_joules(self.joules_per_epoch('fp32'))}"
                    f" ({er:.2f}x the energy).")
        why = self.low.energy_reason or self.fp32.energy_reason or "no energy counter was read"
        return t + f"; its energy is not measurable here ({why})."

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        low = self.low.recipe.precision
        header = ["precision", "time per epoch", "J per epoch", "J per sample",
                  *(["$ per epoch"] if self.price is not None else []), "test accuracy"]
        rows = []
        for r in self.runs:
            p = r.recipe.precision
            j, js = self.joules_per_epoch(p), r.joules_per_sample
            cost = self.cost_per_epoch(p)
            rows.append([p, fmt_seconds(self.seconds_per_epoch(p)), NOT_MEASURABLE if j is None else _joules(j),
                         NOT_MEASURABLE if js is None else _joules(js),
                         *([_usd(cost)] if cost is not None else []),
                         NA if r.test_accuracy is None else f"{r.test_accuracy:.1%}"])
        er = self.energy_ratio
        rows.append([f"{low} / fp32", f"{self.time_ratio:.2f}x", NOT_MEASURABLE if er is None else f"{er:.2f}x",
                     NOT_MEASURABLE if er is None else f"{er:.2f}x",
                     *([f"{self.time_ratio:.2f}x"] if self.price is not None else []), ""])
        notes = [f"{self.fp32.recipe.describe()} and the same recipe in {low}; per epoch = the median of the "
                 f"epochs after the first, {self.fp32.samples_per_epoch:,} samples each, on {self.fp32.device}"]
        sources = {r.energy_source for r in self.runs if r.joules_per_sample is not None}
        reasons = {r.energy_reason for r in self.runs if r.joules_per_sample is None and r.energy_reason}
        if sources:
            notes.append("joules from " + "; ".join(sorted(sources)))
        if reasons or not sources:
            notes.append("energy not measurable here" + (": " + "; ".join(sorted(reasons)) if reasons else ""))
        notes.append(f"cost = {self.price} x the measured time" if self.price is not None else
                     "no hourly price: no cost column (pass price_per_hour)")
        return header, rows, "; ".join(notes)


def precision_cost(fp32_run: RecipeRun, low_run: RecipeRun, price_per_hour: Any = None) -> PrecisionCost:
    """The table of one recipe trained in fp32 (``fp32_run``) and in a 16-bit type (``low_run``, bf16 or fp16), both
    :func:`course.train_recipe` results on the same data: time, joules and cost per epoch side by side and their
    ratios. ``price_per_hour``: USD per hour, a key of :func:`gpulab.cost.prices` or a :class:`gpulab.cost.Price`
    (None: no cost column)."""
    for name, r in (("fp32_run", fp32_run), ("low_run", low_run)):
        if not isinstance(r, RecipeRun):
            raise TypeError(f"{name} must be a course.train_recipe(...) result (a RecipeRun), got {type(r).__name__}")
        if r.diverged or not r.epoch_times_s:
            raise ValueError(f"{name} diverged or finished no epoch: it has no time per epoch to compare")
    if fp32_run.recipe.precision != "fp32":
        raise ValueError(f"fp32_run must be trained with Recipe(precision='fp32'), got {fp32_run.recipe.precision!r}")
    if low_run.recipe.precision == "fp32":
        raise ValueError("low_run must be trained in a 16-bit type (Recipe(precision='bf16' or 'fp16')), got 'fp32'")
    if fp32_run.samples_per_epoch != low_run.samples_per_epoch or fp32_run.device != low_run.device:
        raise ValueError(f"the two runs must train the same data on the same device: {fp32_run.samples_per_epoch:,} "
                         f"samples on {fp32_run.device} vs {low_run.samples_per_epoch:,} on {low_run.device}")
    return PrecisionCost(fp32_run, low_run, None if price_per_hour is None else hourly_price(price_per_hour))


@checked(device="device")
def compare_precisions(recipe: Any, data: Any, *, epochs: int = 2, device: Any = None,
                       price_per_hour: Any = None) -> PrecisionCost:
    """Train ``recipe`` in fp32 and in the 16-bit type :func:`gpulab.choose_precision` picks for the device (bf16 on
    a CPU and on Ampere or newer GPUs, fp16 with a GradScaler on older ones), TF32 off in both, for ``epochs`` epochs
    each (the first is not timed), and return :func:`precision_cost` of the two.

    Example:
        >>> from gpulab import course
        >>> d = course.digits(256, 64, download=False)
        >>> t = course.compare_precisions(course.Recipe(batch_size=64, data="host"), d, device="cpu")
        >>> [r.recipe.precision for r in t.runs]
        ['fp32', 'bf16']
    """
    from ...precision import choose_precision
    from ...system import device as pick_device
    from .recipe import Recipe, train_recipe

    if not isinstance(recipe, Recipe):
        raise TypeError(f"recipe must be a course.Recipe, got {type(recipe).__name__}")
    epochs = whole("epochs", epochs)
    price = None if price_per_hour is None else hourly_price(price_per_hour)
    dev = pick_device(None if device is None else str(device))
    low = "bf16" if dev.type == "cpu" else choose_precision().precision
    low = "bf16" if low == "fp32" else low
    runs = [train_recipe(replace(recipe, precision=p, tf32=False), data, epochs=epochs, device=dev)
            for p in ("fp32", low)]
    return precision_cost(*runs, price_per_hour=price)


def energy_headline(table: Ablation) -> list[tuple[str, str]]:
    """Two (what, figure) lines for :func:`course.results_card`: the joules per sample and the cost per million
    samples of ``table``'s first loop and final recipe, each "not measurable here" (with why) or "no price" where so,
    and where the energy and the price came from.

    Example:
        >>> from gpulab.course.capstone.ablation_table import Ablation, AblationStep
        >>> s = AblationStep("seed loop", "", {}, "baseline", samples_per_s=100.0, energy_note="no RAPL counter")
        >>> energy_headline(Ablation("t", (s,), price=0.36))[0][1]
        'not measurable here: no RAPL counter'
    """
    if not isinstance(table, Ablation):
        raise TypeError(f"table must be a course ablation table (course.torch_ablation(...)), got {type(table).__name__}")
    first, final = table.baseline, table.final
    what = f"{first.label} / {final.label}" if final is not first else first.label
    js = [first.joules_per_sample, final.joules_per_sample]
    if any(j is None for j in js):
        why = "; ".join(dict.fromkeys(s.energy_note for s in (first, final) if s.joules_per_sample is None
                                      and s.energy_note)) or "no energy counter was read"
        energy = f"not measurable here: {why}"
    else:
        energy = " / ".join(_joules(j) for j in js[:1 + (final is not first)]) + \
            f" ({'; '.join(dict.fromkeys(s.energy_note or '' for s in (first, final)))})"
    if table.price is None:
        cost = "no hourly price: set PRICE_PER_HOUR (USD per hour of your machine) to see it"
    else:
        cs = [table.cost_per_million(s.label) for s in (first, final)][:1 + (final is not first)]
        cost = " / ".join(NA if c is None else _usd(c) for c in cs) + f" at {table.price}"
    return [(f"energy per sample: {what}", energy), (f"cost per 1M samples: {what}", cost)]
