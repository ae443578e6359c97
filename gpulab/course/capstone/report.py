"""What the capstone reports: the final recipe against its own matmuls, the measured challenge, and the
results card a learner can share after a workshop.

:func:`recipe_ceiling` times the matmuls one training step of a recipe performs, alone (the ceiling for this
model at this batch and precision); :func:`recipe_challenge` trains the learner's recipe and grades it against
the seed loop measured in the same session; :func:`results_card` writes the tables as Markdown and HTML into a
git-ignored ``results/`` folder.

Example:
    >>> from gpulab import course
    >>> d = course.digits(n_train=256, n_test=64, download=False)
    >>> seed = course.train_recipe(course.Recipe(data="host"), d, epochs=2)
    >>> course.recipe_challenge("faster recipe", None, d, baseline=seed).name      # not answered yet
    'faster recipe'
    >>> course.recipe_challenge("same recipe", course.Recipe(data="host"), d, baseline=seed, speedup=0.1).passed
    True
"""
from __future__ import annotations

import datetime as _dt
import html
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ..._check import checked, device_arg, flag, path_arg, positive, text, texts, whole
from ..._format import fmt_number, fmt_rate
from .ablation import Ablation, AblationStep, accuracy_floor
from .ablation_table import _fraction
from .recipe import Recipe, RecipeRun, _tf32, keep_rng, seed_model, train_recipe
from .torch_ablation import interleaved_gain
from ..lesson.checks import Check, NotAnswered, _esc
from .digits import Digits, to_features

__all__ = ["check_tracked", "recipe_ceiling", "RecipeChallenge", "recipe_challenge", "ResultsCard", "results_card", "results_dir",
           "runs_dir", "ChallengeTarget", "challenge_target"]


@checked(device="device")
def recipe_ceiling(recipe: Recipe, *, device: Any = None, min_run_time: float = 0.3) -> Any:
    """The matmuls of one training step of ``recipe`` (its batch size and precision), recorded and timed alone
    with :func:`gpulab.limits.step_matmul_ceiling`: what this machine can do for this model's matmuls. With
    ``recipe.tf32`` its fp32 matmuls are recorded and timed with TF32 on, as the recipe trains (an Ampere or newer
    GPU; elsewhere ``ValueError``), so the ceiling is the TF32 one.

    Example:
        >>> from gpulab import course
        >>> c = course.recipe_ceiling(course.Recipe(batch_size=64), min_run_time=0.05)
        >>> c.ops[0]
        'addmm fp32 64x784 @ 784x500'
    """
    import torch
    import torch.nn.functional as F

    from ...limits import step_matmul_ceiling
    from ...system import device as pick_device

    if not isinstance(recipe, Recipe):
        raise TypeError(f"recipe must be a course.Recipe, got {type(recipe).__name__}")
    positive("min_run_time", min_run_time, unit="seconds")
    dev = pick_device(None if device_arg("device", device) is None else str(device))
    with keep_rng(dev):                      # the caller's random generators are left as they were
        model = seed_model().to(dev)
        x = torch.rand(recipe.batch_size, 784, device=dev)
        y = torch.randint(0, 10, (recipe.batch_size,), device=dev)
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[recipe.precision]

    def step() -> None:
        with torch.autocast(dev.type, dtype=dtype, enabled=dtype is not None):
            loss = F.cross_entropy(model(x), y)
        loss.backward()

    with _tf32(recipe, dev):
        return step_matmul_ceiling(step, min_run_time=min_run_time)


# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecipeChallenge:
    """The learner's recipe against the seed loop: throughput ratio and accuracy after the same epochs."""

    name: str
    device: str
    baseline_samples_per_s: float
    yours_samples_per_s: float
    baseline_accuracy: float
    yours_accuracy: float
    speedup_target: float
    accuracy_tolerance: float
    noisy: bool
    baseline_accuracies: tuple[float, ...] = ()    # the seed loop over its seeds: its run-to-run spread
    interleaved_speedup: float | None = None       # the two recipes' steps timed in turn, now

    @property
    def accuracy_floor(self) -> float:
        """The lowest accuracy that counts as kept: the seed loop's lowest over its seeds less the tolerance."""
        return accuracy_floor(self.baseline_accuracies or (self.baseline_accuracy,), self.accuracy_tolerance)

    @property
    def speedup(self) -> float:
        """The interleaved speedup when measured (a busy moment slows both recipes alike), else the ratio of the two
        runs' throughputs."""
        if self.interleaved_speedup is not None:
            return self.interleaved_speedup
        return self.yours_samples_per_s / self.baseline_samples_per_s

    @property
    def accuracy_kept(self) -> bool:
        return self.yours_accuracy >= self.accuracy_floor

    @property
    def passed(self) -> bool:
        return self.speedup >= self.speedup_target and self.accuracy_kept

    def __repr__(self) -> str:
        mark = "[ok]" if self.passed else "[x]"
        noisy = " (noisy: the machine was busy, run it again)" if self.noisy else ""
        accs = self.baseline_accuracies
        seed = (f"{min(accs):.1%}-{max(accs):.1%} over {len(accs)} seeds" if len(accs) > 1
                else f"{self.baseline_accuracy:.1%}")
        how = " (steps timed in turn)" if self.interleaved_speedup is not None else ""
        return (f"{mark} {self.name}: {self.speedup:.1f}x the seed loop{how} (target {self.speedup_target:g}x) on "
                f"{self.device}{noisy}; accuracy {self.yours_accuracy:.1%} vs the seed loop's {seed} "
                f"({'at or above' if self.accuracy_kept else 'below'} the {self.accuracy_floor:.1%} floor: "
                f"{100 * self.accuracy_tolerance:.1f} points below its lowest)")

    def _repr_html_(self) -> str:
        colour = "#1b7a2b" if self.passed else "#b00020"
        return f'<div style="color:{colour}">{_esc(repr(self))}</div>'


@dataclass(frozen=True)
class ChallengeTarget:
    """The capstone challenge's speedup, set from the learner's own ablation: the final recipe's speedup over the
    first loop raised to ``share`` (0.5: its square root, half of its gain on a log scale, the scale on which the
    changes add up, since each multiplies the speed). ``final_speedup`` is the one the challenge compares with: the
    two recipes' steps timed in turn now, as the learner's recipe is timed (``interleaved``), or else the
    ablation's epoch throughputs (``ratio_over_baseline``, shown as ``epochs_speedup``). Every device gets a target
    its own best recipe reached, with a margin.

    Example:
        >>> ChallengeTarget(17.1).speedup, ChallengeTarget(0.8).speedup
        (4.14, 1.0)
    """

    final_speedup: float
    share: float = 0.5
    interleaved: bool = False
    epochs_speedup: float | None = None

    @property
    def speedup(self) -> float:
        return round(max(1.0, self.final_speedup ** self.share), 2)

    def __repr__(self) -> str:
        how = ("its steps timed in turn with the first loop's now, as yours will be" if self.interleaved
               else "the ablation's epoch throughputs")
        epochs = (f"; {self.epochs_speedup:.1f}x by the ablation's epoch throughputs"
                  if self.interleaved and self.epochs_speedup is not None else "")
        part = "the square root" if self.share == 0.5 else f"the power {self.share:g}"
        return (f"Target: {self.speedup:.2f}x the first loop's speed: {part} of the {self.final_speedup:.1f}x your "
                f"ablation's final recipe reached on this machine ({how}{epochs}), a margin for a recipe of your own")

    def _repr_html_(self) -> str:
        return f"<div>{html.escape(repr(self))}</div>"


def challenge_target(table: Ablation, data: Digits | None = None, *, share: float = 0.5, device: Any = None,
                     compare_s: float = 0.6) -> ChallengeTarget:
    """The :class:`ChallengeTarget` for the ablation ``table`` (``course.torch_ablation(...)``): its final recipe's
    speedup over the first loop to the power ``share``. With ``data`` the two recipes' steps are timed in turn for
    ``compare_s`` seconds each (:func:`course.interleaved_gain`), as :func:`recipe_challenge` times the learner's
    recipe, so a busy moment in the ablation's epochs cannot set the bar; without it, ``table.ratio_over_baseline``."""
    if not isinstance(table, Ablation):
        raise TypeError(f"table must be the ablation table (course.torch_ablation(...)), got {table!r:.60}")
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        raise ValueError(f"share must be the power of the final speedup to ask for, in (0, 1], got {share!r}")
    if data is not None and not isinstance(data, Digits):
        raise TypeError(f"data must be the digits (course.digits(...)) or None, got {type(data).__name__}")
    positive("compare_s", compare_s)
    epochs = float(table.ratio_over_baseline)
    if data is None or table.final.label == table.baseline.label:
        return ChallengeTarget(epochs, float(share))
    gain = interleaved_gain(Recipe(**table.baseline.params), Recipe(**table.final.params), data, device=device,
                            min_run_time=compare_s)[0]
    return ChallengeTarget(float(gain), float(share), True, epochs)


@checked(device="device")
def recipe_challenge(name: str, recipe: Recipe | None, data: Digits, *, baseline: RecipeRun | AblationStep,
                     speedup: float = 5.0, accuracy_tolerance: float = 0.01, epochs: int | None = None,
                     device: Any = None, compare_s: float = 0.6,
                     not_from: Ablation | None = None) -> RecipeChallenge | NotAnswered:
    """Train ``recipe`` on ``data`` for as many epochs as ``baseline`` (the seed loop measured in this session:
    a :class:`course.RecipeRun` or the ablation's first step) and pass when it is ``speedup`` times faster and at
    most ``accuracy_tolerance`` less accurate than the lowest accuracy the seed loop reached over its seeds (the
    ablation's first step carries them; a lone run counts as one). The speedup comes from the two recipes' training
    steps timed in turn for ``compare_s`` seconds each (:func:`course.interleaved_gain`), so the machine being busier
    now than when the seed loop was measured cannot pass or fail a recipe; ``compare_s=0`` divides the two runs'
    throughputs instead. A miss raises ``AssertionError`` saying by how much;
    ``recipe=None`` shows "not answered yet". ``not_from``: the ablation the learner has seen; a recipe equal to
    one of its kept rows (its final recipe, or a step on the way to it) is refused before any training, with
    ``AssertionError``: the exercise asks for a recipe built, not copied."""
    text("name", name, empty=False)
    if not isinstance(data, Digits):
        raise TypeError(f"data must be the digits (course.digits(...)), got {type(data).__name__} {data!r:.60}")
    if not isinstance(baseline, RecipeRun) and not (isinstance(baseline, AblationStep) and baseline.measured):
        raise TypeError(f"baseline must be the seed loop's course.RecipeRun or the ablation's first step "
                        f"(table.baseline), got {baseline!r:.80}")
    positive("speedup", speedup)
    accuracy_tolerance = _fraction("accuracy_tolerance", accuracy_tolerance)
    if epochs is not None:
        whole("epochs", epochs)
    device_arg("device", device)
    positive("compare_s", compare_s, allow_zero=True, unit="seconds (0: no interleaved timing)")
    if not_from is not None and not isinstance(not_from, Ablation):
        raise TypeError(f"not_from must be the ablation table (course.torch_ablation(...)) or None, got {not_from!r:.60}")
    if recipe is None:
        return NotAnswered(name)
    if not isinstance(recipe, Recipe):
        raise TypeError(f"recipe must be a course.Recipe(...), got {recipe!r}")
    if not_from is not None:
        copied = [s.label for s in not_from.steps if s.decision == "kept" and s.params == recipe.params()]
        if copied:
            raise AssertionError(f"{name}: this recipe is the table's row {copied[-1]!r}, copied: build your own from "
                                 "the lessons (a different batch, data path, precision or schedule), and say why "
                                 "each change should help")
    accs: tuple[float, ...] = ()
    if isinstance(baseline, RecipeRun):
        base_rate, base_acc, base_epochs = baseline.samples_per_s, baseline.test_accuracy, baseline.epochs
        seed_recipe = baseline.recipe
    elif isinstance(baseline, AblationStep) and baseline.measured:
        base_rate, base_acc, base_epochs = baseline.samples_per_s, baseline.test_accuracy, None
        accs = tuple(float(a) for a in baseline.accuracies)
        seed_recipe = Recipe(**baseline.params)
    else:
        raise TypeError(f"baseline must be the seed loop's course.RecipeRun or the ablation's first step "
                        f"(table.baseline), got {baseline!r:.80}")
    if base_acc is None:
        raise ValueError("baseline has no test accuracy to compare with: use a run that measured it")
    epochs = epochs or base_epochs
    if epochs is None:
        raise ValueError("pass epochs=... (the number of epochs the baseline trained)")
    epochs = whole("epochs", epochs)
    run = train_recipe(recipe, data, epochs=epochs, device=device)
    if run.diverged:
        raise AssertionError(f"{name}: the recipe {run.notes[0]}")
    if run.test_accuracy is None:
        raise ValueError("the recipe's run measured no test accuracy")
    result = RecipeChallenge(name, run.device, float(base_rate), run.samples_per_s, float(base_acc),
                             float(run.test_accuracy), float(speedup), float(accuracy_tolerance),
                             (run.spread_pct or 0) > 10, accs,
                             interleaved_gain(seed_recipe, recipe, data, device=device, min_run_time=compare_s)[0]
                             if compare_s else None)
    if not result.passed:
        raise AssertionError(repr(result))
    return result


# ----------------------------------------------------------------------------------------------
def check_tracked(name: str, run: Any, *, metrics: Iterable[str] = ("loss",), trace: bool = True,
                  root: str | Path | None = None) -> Check | NotAnswered:
    """Exercise check: read ``run`` (a :class:`gpulab.tracking.TrackedRun`, e.g. ``run.record``) back from the
    MLflow store under ``root`` and pass when it finished, has every metric in ``metrics`` and, with ``trace``,
    telemetry that :func:`gpulab.tracking.load_trace` rebuilds. A miss raises ``AssertionError`` saying what is
    missing; ``run=None`` shows "not answered yet"."""
    from ... import tracking

    text("name", name, empty=False)
    metrics = texts("metrics", metrics)
    flag("trace", trace)
    if root is not None:
        path_arg("root", root)
    if run is None:
        return NotAnswered(name)
    if not isinstance(run, tracking.TrackedRun):
        raise TypeError(f"run must be the record of a tracked run (run.record after the with block), got {run!r:.80}")
    stored = {r.run_id: r for r in tracking.runs(run.experiment, root=root).rows}.get(run.run_id)
    if stored is None:
        raise AssertionError(f"{name}: run {run.run_id} is not in experiment {run.experiment!r} of the store under "
                             f"{root}: log it with gl.tracking.track(..., root=...) at the same root")
    if stored.status != "FINISHED":
        raise AssertionError(f"{name}: the run's status is {stored.status}, not FINISHED: did the block raise?")
    missing = [m for m in metrics if m not in stored.metrics]
    if missing:
        raise AssertionError(f"{name}: no {missing} metric in the run (it has {sorted(stored.metrics)}): log them "
                             "with run.log_metrics({...}, step=...) or pass run=run to course.train_recipe")
    samples = 0
    if trace:
        if not stored.trace_logged:
            raise AssertionError(f"{name}: the run has no telemetry: record it with gl.Monitor and call "
                                 "run.log_trace(mon.trace) inside the with block")
        samples = len(tracking.load_trace(stored, root=root, experiment=run.experiment).frame)
    return Check(name, f"run {stored.name!r} finished with {', '.join(metrics)}"
                 + (f" and {samples} telemetry rows" if trace else ""))


def results_dir() -> Path:
    """Where results cards go: ``$GPULAB_RESULTS`` if set, else ``results/`` beside the course's ``data/``
    folder (git-ignored), else ``./results``.

    Example:
        >>> results_dir().name
        'results'
    """
    env = os.environ.get("GPULAB_RESULTS")
    if env:
        return Path(env).expanduser()
    from ..data.images import data_dir

    return data_dir().resolve().parent / "results"


def runs_dir() -> Path:
    """Where the course's tracked runs go (an MLflow SQLite store and TensorBoard logs): ``$GPULAB_RUNS`` if
    set, else ``runs/`` beside the course's ``data/`` folder (git-ignored; ``make runs`` opens both UIs on it).

    Example:
        >>> runs_dir().name
        'runs'
    """
    env = os.environ.get("GPULAB_RUNS")
    if env:
        return Path(env).expanduser()
    from ..data.images import data_dir

    return data_dir().resolve().parent / "runs"


def _markdown_table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    cell = lambda v: str(v).replace("|", "\\|").replace("\n", " ")   # noqa: E731
    header = [cell(h) for h in header]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows])


@dataclass(frozen=True)
class ResultsCard:
    """A results card written to disk: its Markdown and HTML files and the Markdown text."""

    markdown_path: Path
    html_path: Path
    markdown: str

    def __repr__(self) -> str:
        return f"Results card: {self.markdown_path} (Markdown), {self.html_path} (HTML)"

    def _repr_markdown_(self) -> str:
        return (f"**Results card** written to `{self.markdown_path}` and `{self.html_path}` "
                f"(git-ignored: share the files, not the repository).")


def results_card(title: str, tables: Iterable[Any], *, headline: Iterable[tuple[str, str]] = (),
                 folder: str | Path | None = None, name: str | None = None) -> ResultsCard:
    """Write ``tables`` (gpulab tables: an :class:`course.Ablation`, :func:`course.your_numbers`, ...) with a
    ``headline`` of (what, figure) pairs and the machine they ran on, as ``<name>.md`` and ``<name>.html`` in
    ``folder`` (default :func:`results_dir`). Returns the :class:`ResultsCard`.

    Example:
        >>> import tempfile
        >>> from gpulab import course
        >>> t = course.your_numbers([course.measured("speedup", 2.0, "x", vs="amp-pytorch")])
        >>> card = course.results_card("demo", [t], headline=[("speedup", "2.0x")], folder=tempfile.mkdtemp())
        >>> card.markdown_path.suffix, "| speedup | 2.0x |" in card.markdown
        ('.md', True)
    """
    from ...system import system_info

    if not isinstance(title, str) or not title.strip():
        raise ValueError(f"title must be a non-empty text, got {title!r}")
    if isinstance(tables, (str, bytes)) or not isinstance(tables, Iterable):
        raise TypeError(f"tables must be a list of gpulab tables, got {type(tables).__name__} {tables!r:.60}")
    headline = list(headline) if isinstance(headline, (list, tuple)) else headline
    if not isinstance(headline, list) or not all(isinstance(h, tuple) and len(h) == 2 and all(
            isinstance(x, str) for x in h) for h in headline):
        raise TypeError(f"headline must be a list of (what, figure) text pairs, e.g. [('speedup', '2.0x')], got "
                        f"{headline!r:.80}")
    if folder is not None:
        path_arg("folder", folder)
    if name is not None and (not isinstance(name, str) or not name.strip() or name != Path(name).name
                             or name in (".", "..")):
        raise ValueError(f"name must be a file name without folders (e.g. 'capstone'), or None, got {name!r}")
    tables = list(tables)
    for t in tables:
        if not hasattr(t, "_columns"):
            raise TypeError(f"tables must be gpulab tables (with _columns()), got {type(t).__name__}")
    info = system_info()
    gpu = ", ".join(g.name for g in info.gpus) if info.gpus else "no GPU"
    torch_fw = info.framework("torch")
    machine = (f"{gpu}; CPU {info.cpu_model} ({info.logical_cpus} logical CPUs); Python {info.python}"
               + (f"; torch {torch_fw.version}" if torch_fw and torch_fw.version else ""))
    when = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    md = [f"# {title}", "", f"Measured {when} on: {machine}", ""]
    if headline:
        md += [_markdown_table(("", ""), [(k, v) for k, v in headline]), ""]
    parts = [f"<h1>{html.escape(title)}</h1><p>Measured {when} on: {html.escape(machine)}</p>"]
    if headline:
        parts.append("<table>" + "".join(f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{html.escape(v)}"
                                          "</td></tr>" for k, v in headline) + "</table>")
    for t in tables:
        header, rows, footer = t._columns()
        md += [f"## {t.title}", "", _markdown_table(header, rows), "", footer, ""]
        parts.append(t._repr_html_())
    folder = Path(folder) if folder is not None else results_dir()
    folder.mkdir(parents=True, exist_ok=True)
    stem = name or "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in title.lower()).strip("-")
    md_path, html_path = folder / f"{stem}.md", folder / f"{stem}.html"
    text = "\n".join(md).rstrip() + "\n"
    md_path.write_text(text, encoding="utf-8")
    html_path.write_text("<!doctype html><meta charset='utf-8'><title>" + html.escape(title) + "</title>"
                         "<body style='font-family:sans-serif;max-width:1100px;margin:auto'>" + "".join(parts)
                         + "</body>\n", encoding="utf-8")
    return ResultsCard(md_path, html_path, text)
