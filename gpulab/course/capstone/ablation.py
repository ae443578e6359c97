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
disk"). With ``judge="time to accuracy"`` the headline is what a user waits for: each recipe's time to the
baseline's accuracy, read after every epoch (see :func:`ablate`). :func:`ablate` drives any framework: it needs a ``train(recipe, run)`` returning an object with
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
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from ..._check import flag, mapping, positive, text, whole
from .ablation_table import Ablation, AblationStep, _epochs, _fraction, accuracy_floor, judge_arg

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
    recipe (a 16-bit format dropped at a small batch may pay at the batch reached later). ``updates=True``: the change
    alters the training updates (batch size, learning rate, schedule), so the accuracy curve: judged by time to
    accuracy, it is timed to the target itself; a change that leaves them alone keeps its recipe's epochs to it."""

    label: str
    fields: Mapping[str, Any] | Callable[[Any], Mapping[str, Any]]
    why: str = ""
    available: bool = True
    why_not: str = ""
    branch: bool = False
    one_off: bool = False
    retry_of: str = ""
    updates: bool = False

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
        flag("updates", self.updates)
        if isinstance(self.fields, Mapping) and (self.fields or self.available):
            _fields(f"fields of {self.label!r}", self.fields)
        elif callable(self.fields):
            _takes(f"fields of {self.label!r}", self.fields, 1, "the current recipe")



def _takes(name: str, fn: Any, n: int, what: str) -> None:
    """``fn`` can be called with ``n`` positional arguments (``what``), where Python can tell before calling it."""
    import inspect

    try:
        inspect.signature(fn).bind(*[None] * n)
    except TypeError:
        raise TypeError(f"{name} must be a function of {n} argument{'s' if n > 1 else ''} ({what}), got {fn!r:.60}") \
            from None
    except ValueError:                 # a builtin without a signature: its call will tell
        pass


def _fields(name: str, value: Any) -> Mapping[str, Any]:
    """``value`` as the fields a change sets: a non-empty mapping from field names (texts)."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a mapping of recipe fields such as {{'batch_size': 256}}, got "
                        f"{type(value).__name__} {value!r:.60}")
    if not value:
        raise ValueError(f"{name} is empty: a change sets at least one recipe field, e.g. {{'batch_size': 256}}")
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise TypeError(f"{name} must name recipe fields by text, got keys {bad!r}")
    return value


def _options(change: Change, recipe: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """The ``(label, fields)`` a change tries on ``recipe``: its fields, or what its function returns (fields, or
    alternatives as ``(label, fields)`` pairs), checked."""
    if not callable(change.fields):
        return [(change.label, change.fields)]
    got, name = change.fields(recipe), f"the fields function of {change.label!r}"
    if isinstance(got, Mapping):
        return [(change.label, _fields(f"what {name} returned", got))]
    if isinstance(got, (str, bytes)) or not isinstance(got, (list, tuple)) or not all(
            isinstance(o, tuple) and len(o) == 2 and isinstance(o[0], str) and o[0].strip() for o in got):
        raise TypeError(f"{name} must return the fields (a mapping) or alternatives, a list of (label, fields) pairs, "
                        f"got {got!r:.80}")
    return [(f"{change.label}: {label}", _fields(f"the fields of {label!r} from {name}", f)) for label, f in got]


def _returned(name: str, value: Any, label: str, kind: Any, what: str) -> Any:
    """What a function given to :func:`ablate` returned for step ``label``, checked as ``kind``."""
    if not isinstance(value, kind):
        raise TypeError(f"{name} returned {type(value).__name__} {value!r:.60} for {label!r}: it must return {what}")
    return value


def _paired(got: Any, label: str) -> tuple[float, float]:
    """``compare``'s ``(gain, spread %)``: a positive finite gain and a finite spread >= 0."""
    ok = isinstance(got, tuple) and len(got) == 2 and all(
        isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x) for x in got)
    if not ok or got[0] <= 0 or got[1] < 0:
        raise ValueError(f"compare(current, candidate) returned {got!r:.60} for {label!r}: it must return (gain, "
                         "spread %), a finite gain > 0 (candidate over current) and a finite spread >= 0")
    return float(got[0]), float(got[1])


def _decide(current: AblationStep, got: AblationStep, floor: float | None, min_gain: float,
            paired: tuple[float, float] | None = None) -> tuple[bool, float, str]:
    """Keep or drop, the gain it is based on, and why. ``floor``: the accuracy a kept change must reach (the
    baseline's, never the current recipe's, so losses cannot add up). ``paired``: (gain, spread %) from an
    interleaved comparison of the two recipes, used instead of the two runs' own rates when given."""
    gain, noise, how = _rate(current, got, min_gain, paired)
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


def _rate(current: AblationStep, got: AblationStep, min_gain: float,
          paired: tuple[float, float] | None) -> tuple[float, float, str]:
    """The samples/s gain of ``got`` over ``current``, the noise it must beat and how it was timed: from ``paired``
    (an interleaved comparison) when given, else from the two runs' own rates and spreads."""
    if paired is not None:
        return paired[0], max(min_gain, paired[1] / 100), " (interleaved)"
    return (got.samples_per_s / current.samples_per_s,
            max(min_gain, (current.spread_pct or 0) / 100, (got.spread_pct or 0) / 100), "")


def _decide_time(current: AblationStep, got: AblationStep, target: float, min_gain: float,
                 paired: tuple[float, float] | None, budget: int, k_cur: int) -> tuple[bool, float, str, int]:
    """Keep or drop by time to accuracy: the samples/s gain (``paired`` when given, as :func:`_decide`) x the
    ratio of the epochs the two recipes took to reach ``target`` (``k_cur``: the current recipe's). Returns (keep,
    time gain, why, epochs to train it again with): a change still short of the target after its epochs, fast enough
    that more of them could still save time, is trained again with as many as its gain pays for (at most
    ``budget``); 0 when decided."""
    _, rate, why = _decide(current, got, None, min_gain, paired)
    if why.startswith("diverged"):
        return False, rate, why, 0
    rate, noise, how = _rate(current, got, min_gain, paired)
    k, n = got.epochs_to(target), len(got.epoch_accuracies)
    if k is None:
        affordable = math.ceil(rate * k_cur / (1 + noise)) - 1     # the most epochs at which it still saves time
        if min(budget, affordable) > n:
            return False, rate, "", min(budget, affordable)
        return False, rate, (f"{rate:.2f}x samples/s{how}, but below {target:.1%} after {n} epochs" +
                             (" (the most it was given)" if affordable > n else
                              f", and at that rate only under {affordable + 1} would save time")), 0
    gain = rate * k_cur / k
    why = f"{rate:.2f}x samples/s{how} x {k_cur}/{k} epochs to {target:.1%} = {gain:.2f}x time"
    if gain < 1 + noise:
        return False, gain, why + (": slower" if gain < 1 - noise else f": within the noise ({noise:.0%})"), 0
    return True, gain, why, 0


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
           compare: Callable[[Any, Any], tuple[float, float] | None] | None = None,
           rerun: Callable[[Any, int], float | None] | None = None, accuracy_seeds: int = 2,
           price_per_hour: Any = None, judge: str = "throughput", max_epochs: int | None = None) -> Ablation:
    """Train ``baseline``, then each change applied to the best recipe so far; keep it if it helps.

    ``apply(recipe, fields)`` returns the changed recipe; ``ceiling(recipe)`` the measured ceiling of its
    precision as ``(dtype, FLOP/s)``. With ``track`` (keyword arguments of :func:`gpulab.tracking.track`,
    e.g. ``{"experiment": "capstone", "root": "runs"}``) every step is a tracked run: its recipe as parameters,
    what ``train`` logs, and the :class:`gpulab.Monitor` telemetry recorded around it. ``compare(current,
    candidate)`` returns ``(gain, spread %)`` from timing the two recipes interleaved (the same machine state
    for both); when given, the decision uses it instead of the two runs' own throughputs, which drift apart on a
    shared machine, unless it returns None (the two could not run side by side, e.g. out of memory). ``rerun(baseline, seed)`` returns the baseline's test accuracy when trained with another
    seed; it is called for seeds 1..``accuracy_seeds`` to measure the baseline's run-to-run spread, which sets the
    accuracy floor every change must reach. ``price_per_hour`` (USD per hour of the machine, a key of
    :func:`gpulab.cost.prices` or a :class:`gpulab.cost.Price`) adds each step's cost per million samples at its
    measured throughput. Where ``train``'s result has ``joules_per_sample`` (and ``energy_source`` or
    ``energy_reason``), the table shows it, or "not measurable" with the reason.

    ``judge="time to accuracy"`` (airbench's rule: what a user waits for the same accuracy) sets the target at the
    lowest accuracy of the baseline's seeds; ``train``'s result then needs ``epoch_accuracies`` (the test accuracy
    after each epoch) and ``train`` an ``epochs`` keyword. A change to the updates (``Change(updates=True)``: batch
    size, learning rate) is kept when it reaches the target in less training time than the recipe it changed; one
    faster per sample that has not reached it trains again with the epochs its gain can pay for, at most
    ``max_epochs`` (default 3 x ``epochs``), so a larger batch that needs more epochs is judged by its time. A change
    that leaves the updates alone trains the same curve: it keeps the epochs of the recipe it changed and is judged
    by samples/s at the accuracy floor (a noisy accuracy curve cannot make it look faster or slower).
    """
    if not callable(train):
        raise TypeError(f"train must be a function (recipe, run) -> result, got {train!r}")
    for name, fn in (("apply", apply), ("describe", describe), ("params", params), ("ceiling", ceiling)):
        if not callable(fn):
            raise TypeError(f"{name} must be a function, got {fn!r}")
    for name, fn in (("compare", compare), ("rerun", rerun)):
        if fn is not None and not callable(fn):
            raise TypeError(f"{name} must be a function or None, got {fn!r}")
    for name, fn, n, what in (("train", train, 2, "recipe, run"), ("apply", apply, 2, "recipe, fields"),
                              ("describe", describe, 1, "recipe"), ("params", params, 1, "recipe"),
                              ("ceiling", ceiling, 1, "recipe"), ("compare", compare, 2, "current, candidate"),
                              ("rerun", rerun, 2, "recipe, seed")):
        if fn is not None:
            _takes(name, fn, n, what)
    if baseline is None:
        raise ValueError("baseline is None: pass the recipe every change starts from")
    price = None
    if price_per_hour is not None:
        from ...cost import hourly_price

        price = hourly_price(price_per_hour)
    accuracy_tolerance = _fraction("accuracy_tolerance", accuracy_tolerance)
    min_gain = _fraction("min_gain", min_gain)
    accuracy_seeds = whole("accuracy_seeds", accuracy_seeds, low=0)
    text("baseline_label", baseline_label, empty=False)
    text("title", title)
    text("device", device)
    if epochs is not None:
        epochs = whole("epochs", epochs)
    by_time = judge_arg(judge) == "time to accuracy"
    if by_time:
        if epochs is None:
            raise ValueError("judge='time to accuracy' needs epochs=... (the epochs train trains by default)")
        max_epochs = 3 * epochs if max_epochs is None else whole("max_epochs", max_epochs, low=epochs)
        _takes_epochs(train)
    elif max_epochs is not None:
        raise ValueError(f"max_epochs={max_epochs!r} applies to judge='time to accuracy' only (judge={judge!r})")
    if monitor_interval:                       # 0 or None: no Monitor around a tracked run
        positive("monitor_interval", monitor_interval, unit="s")
    if track is not None:
        mapping("track", track, example="{'root': 'runs', 'experiment': 'capstone'}")
    if isinstance(changes, (str, bytes)) or not isinstance(changes, Sequence):
        raise TypeError(f"changes must be a list of course.Change, got {changes!r}")
    for c in changes:
        if not isinstance(c, Change):
            raise TypeError(f"changes must be course.Change objects, got {c!r}")
    labels = [baseline_label, *(c.label for c in changes)]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise ValueError(f"changes must have labels of their own, each apart from baseline_label={baseline_label!r}: "
                         f"{twice} repeated (each is a row of the table)")
    for i, c in enumerate(changes):
        if c.retry_of and c.retry_of not in [e.label for e in changes[:i]]:
            raise ValueError(f"retry_of={c.retry_of!r} of change {c.label!r} is not the label of an earlier change: "
                             f"pass one of {[e.label for e in changes[:i]]}")

    def measure(label: str, recipe: Any, decision: str, n_epochs: int | None = None) -> AblationStep:
        run_id = None
        fit = train if n_epochs in (None, epochs) else (lambda r, run: train(r, run, epochs=n_epochs))
        with contextlib.ExitStack() as stack:
            run = None
            if track is not None:
                from ...tracking import track as open_run

                run = stack.enter_context(open_run(label, params={**params(recipe), "step": label}, **track))
            if run is not None and monitor_interval:
                from ...telemetry import Monitor

                with Monitor(interval=monitor_interval) as mon:
                    result = fit(recipe, run)
                run.log_trace(mon.trace)
            else:
                result = fit(recipe, run)
        missing = [a for a in ("samples_per_s", "spread_pct", "test_accuracy", "peak_memory_bytes", "flops_per_sample")
                   if not hasattr(result, a)]
        if missing:
            raise TypeError(f"train returned {type(result).__name__} {result!r:.60}, which has no {', '.join(missing)}: "
                            "train must return a result like course.train_recipe's RecipeRun")
        _check_result(label, result, decision == "baseline")
        accs = _epoch_accuracies(label, result, by_time and decision != "branch" and result.test_accuracy is not None)
        run_id = run.record.run_id if run is not None else None
        c = ceiling(recipe)
        if c is not None and not (isinstance(c, tuple) and len(c) == 2 and isinstance(c[0], str)):
            raise TypeError(f"ceiling returned {c!r:.60} for {label!r}: it must return (dtype, FLOP/s), e.g. "
                            "('float32', 1.2e12), or None")
        jps = getattr(result, "joules_per_sample", None)
        jps = float(jps) if jps is not None and math.isfinite(jps) else None
        note = getattr(result, "energy_source", None) if jps is not None else getattr(result, "energy_reason", None)
        return AblationStep(label, _returned("describe", describe(recipe), label, str, "a text"),
                            dict(_returned("params", params(recipe), label, Mapping, "a mapping of the recipe's fields")),
                            decision, "",
                            float(result.samples_per_s),
                            None if result.spread_pct is None else float(result.spread_pct), result.test_accuracy,
                            result.peak_memory_bytes, result.flops_per_sample, c[0] if c else None,
                            c[1] if c else None, run_id,
                            epoch_times_s=tuple(float(t) for t in getattr(result, "epoch_times_s", ()) or ()),
                            joules_per_sample=jps, energy_note=note or None, epoch_accuracies=accs)

    current = measure(baseline_label, baseline, "baseline")
    if rerun is not None and accuracy_seeds and current.test_accuracy is not None:
        again = [rerun(baseline, seed) for seed in range(1, accuracy_seeds + 1)]
        for seed, a in enumerate(again, 1):
            if a is not None and (isinstance(a, bool) or not isinstance(a, (int, float))
                                  or (math.isfinite(a) and not 0.0 <= a <= 1.0)):
                raise ValueError(f"rerun(baseline, {seed}) gave test accuracy {a!r}: a fraction from 0 to 1, NaN for "
                                 f"a run that diverged, or None")
        # a rerun that diverged (NaN) says nothing about the spread of the baseline's accuracy: left out
        current = replace(current, accuracies=(current.test_accuracy, *(float(a) for a in again
                                                                         if a is not None and math.isfinite(a))))
    floor = current.accuracy_floor(accuracy_tolerance)
    target = current.accuracy_floor(0.0)          # judged by time: the lowest accuracy of the baseline's seeds
    if by_time:
        k_base = None if target is None else current.epochs_to(target)
        if k_base is None:
            raise ValueError(f"the baseline {baseline_label!r} never reached its own accuracy ({target}) in its epoch "
                             f"accuracies {current.epoch_accuracies}: train's test_accuracy must be its last epoch's")
        current = replace(current, target_epochs=k_base)
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
        options = _options(change, recipe)
        start = len(steps)
        if not options:
            steps.append(AblationStep(change.label, "", {}, "not tried", change.why_not or "nothing to try"))
        for label, f in options:
            candidate = _applied(apply, recipe, f, label)
            k_cur = current.target_epochs
            trained = max(epochs, k_cur) if by_time else None      # at least the epochs the current recipe takes
            got = measure(label, candidate, "dropped", trained)
            side = compare(recipe, candidate) if compare is not None else None
            paired = _paired(side, label) if side is not None else None     # None: not comparable side by side
            timing: dict[str, Any] = {}
            if by_time and change.updates:     # a new accuracy curve: timed to the target
                keep, gain, why, more = _decide_time(current, got, target, min_gain, paired, max_epochs, k_cur)
                if more:                       # short of the target, but fast enough that more epochs could pay
                    got = measure(label, candidate, "dropped", more)
                    keep, gain, why, _ = _decide_time(current, got, target, min_gain, paired, more, k_cur)
                    why = f"trained again for {more} epochs: {why}"
                reached = got.epochs_to(target)
                timing = {"target_epochs": reached, "time_gain": gain if reached and math.isfinite(gain) else None}
            else:                              # the same updates (or judged by throughput): samples/s at the floor
                keep, gain, why = _decide(current, got, floor, min_gain, paired)
                if by_time:
                    timing = {"target_epochs": k_cur, "same_updates": True, "time_gain": gain}
            gain = paired[0] if paired is not None else got.samples_per_s / current.samples_per_s   # samples/s
            if change.one_off:
                got = _one_off(current, got, gain)
                if got.one_off_s is not None:
                    why += f"; one-off {got.one_off_s:.3g} s, " + (
                        "never paid back" if math.isinf(got.break_even_epochs) else
                        f"paid back after {_epochs(got.break_even_epochs)}")
            steps.append(replace(got, decision="kept" if keep else "dropped", reason=why, gain=gain, **timing))
            if keep:
                current, recipe = steps[-1], candidate
                break
        tried[change.label] = (any(s.decision == "kept" for s in steps[start:]), sum(s.decision == "kept" for s in steps))
    for change in branches:
        options = _options(change, recipe)
        if not options:
            steps.append(AblationStep(change.label, "", {}, "not tried", change.why_not or "nothing to try"))
            continue
        got = measure(change.label, _applied(apply, recipe, options[0][1], change.label), "branch")
        gain = got.samples_per_s / current.samples_per_s
        steps.append(replace(got, gain=gain, reason=f"{gain:.2f}x the final recipe" + (f"; {change.why}" if change.why else "")))
    return Ablation(title, tuple(steps), device, epochs, accuracy_tolerance, price=price,
                    device_name=_device_name(device) if price is not None else "", judge=judge)


def _takes_epochs(train: Callable[..., Any]) -> None:
    """``train`` accepts ``epochs=`` (how judging by time trains a change longer), where Python can tell."""
    import inspect

    try:
        inspect.signature(train).bind(None, None, epochs=1)
    except TypeError:
        raise TypeError(f"judge='time to accuracy' trains a change longer with train(recipe, run, epochs=n): train "
                        f"{train!r:.60} takes no epochs keyword; add one, e.g. def train(recipe, run, epochs=3)") \
            from None
    except ValueError:
        pass


def _epoch_accuracies(label: str, result: Any, needed: bool) -> tuple[float, ...]:
    """``result.epoch_accuracies`` checked: fractions from 0 to 1 (NaN for a diverged epoch), one per epoch."""
    accs = getattr(result, "epoch_accuracies", None) or ()
    if isinstance(accs, (str, bytes)) or not all(
            isinstance(a, numbers.Real) and not isinstance(a, bool) and (math.isnan(a) or 0 <= a <= 1) for a in accs):
        raise ValueError(f"train's result for {label!r} has epoch_accuracies={accs!r:.60}: the test accuracy after "
                         "each epoch, fractions from 0 to 1")
    if needed and not accs:
        raise TypeError(f"train's result for {label!r} has no epoch_accuracies: judge='time to accuracy' reads the "
                        "test accuracy after each epoch (course.train_recipe records them)")
    return tuple(float(a) for a in accs)


def _applied(apply: Callable[[Any, Mapping[str, Any]], Any], recipe: Any, fields: Mapping[str, Any], label: str) -> Any:
    candidate = apply(recipe, fields)
    if candidate is None:
        raise TypeError(f"apply(recipe, fields) returned None for {label!r}: it must return the changed recipe (e.g. "
                        "dataclasses.replace(recipe, **fields)), not change it in place")
    return candidate


def _check_result(label: str, result: Any, baseline: bool) -> None:
    """A throughput that is no positive number, or an accuracy outside 0-1, is a broken ``train``: said before any
    decision rests on it. NaN marks a change that diverged (it is dropped); a baseline that diverged leaves nothing to
    judge changes against."""
    sps, acc = result.samples_per_s, result.test_accuracy
    if isinstance(sps, bool) or not isinstance(sps, (int, float)) or math.isinf(sps) or sps <= 0 \
            or (baseline and math.isnan(sps)):
        raise ValueError(f"train's result for {label!r} has samples_per_s={sps!r}: a throughput is a positive finite "
                         f"number of samples per second (NaN only for a change that diverged, never the baseline)")
    if acc is not None and (isinstance(acc, bool) or not isinstance(acc, (int, float))):
        raise TypeError(f"train's result for {label!r} has test_accuracy={acc!r}: a fraction from 0 to 1, or None")
    if acc is not None and math.isfinite(acc) and not 0.0 <= acc <= 1.0:
        raise ValueError(f"train's result for {label!r} has test_accuracy={acc!r}: a fraction from 0 to 1 "
                         f"(0.9 for 90%), or None")
    for name, low, kinds in (("spread_pct", "a finite number >= 0", (numbers.Real,)),
                             ("peak_memory_bytes", "a whole number of bytes >= 0", (numbers.Integral,)),
                             ("flops_per_sample", "a finite number > 0", (numbers.Real,)),
                             ("joules_per_sample", "a finite number > 0 (None where energy is not measurable)",
                              (numbers.Real,))):
        x = getattr(result, name, None)
        if x is not None and (isinstance(x, bool) or not isinstance(x, kinds) or not math.isfinite(x) or x < 0
                              or (x == 0 and name in ("flops_per_sample", "joules_per_sample"))):
            if not (name == "joules_per_sample" and isinstance(x, numbers.Real) and math.isnan(x)):
                raise ValueError(f"train's result for {label!r} has {name}={x!r}: it must be {low}, or None")
    times = getattr(result, "epoch_times_s", None)
    if times and (isinstance(times, (str, bytes)) or not all(
            isinstance(t, numbers.Real) and not isinstance(t, bool) and math.isfinite(t) and t > 0 for t in times)):
        raise ValueError(f"train's result for {label!r} has epoch_times_s={times!r:.60}: each epoch's wall time, "
                         "finite seconds > 0")
    if baseline and acc is not None and not math.isfinite(acc):
        raise ValueError(f"the baseline {label!r} diverged (test accuracy {acc!r}): no change can be judged against "
                         f"it; fix the baseline first (a smaller learning rate, fp32)")


def _device_name(device: str) -> str:
    """The device the runs were measured on, by name (a GPU's, a CPU's model): what a price is set against."""
    try:
        if device.startswith("cuda"):
            import torch

            return torch.cuda.get_device_name(torch.device(device)) if torch.cuda.is_available() else device
        from ...system import _cpu_model_and_flags, device_kind

        if device in ("", "cpu") and (device == "cpu" or device_kind() == "cpu"):
            return _cpu_model_and_flags()[0]
    except Exception:                     # a name is a courtesy: the what-if note then names the device as given
        pass
    return device
