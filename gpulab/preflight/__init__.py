"""The preflight a teacher runs on the GPU runtime the learners will use, the day before a class:
``python -m gpulab check`` (``make gpu-check`` in a clone; ``!python -m gpulab check`` in a Colab cell).

It reports the machine and the stack (what is missing and which sections that skips), measures the ceilings a
learner will compare against (beside the datasheet), runs the GPU conformance tests (``tests/gpu``: the real GPU
paths, skipped without CUDA) and every notebook top to bottom in a learner's order, each under a time limit, and
writes ``report.md`` and ``report.json`` under ``build/gpu-check/``. Without a GPU it says so, runs the CPU
parts and writes its report.

Example:
    >>> from gpulab.preflight import check
    >>> report = check(out=None, tests=False, notebooks=(), limits=False)
    >>> report.ok
    True
"""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from .._check import checked
from .stack import Environment, environment
from .report import CheckReport, Figure
from .run import Outcome, read_figures, run_notebook, run_tests

__all__ = ["check", "environment", "find_course", "CheckReport", "Environment", "Figure", "Outcome"]

CLONE = ("git clone https://github.com/gpulab-course/gpulab && cd gpulab && pip install -e . "
         "&& python -m gpulab check")
_DTYPES = (("float32", "fp32_flops", "fp32"), ("bfloat16", "bf16_tensor_flops", "bf16"),
           ("float16", "fp16_tensor_flops", "fp16"))


def find_course(root: str | Path | None = None) -> Path | None:
    """The course's checkout (a folder holding ``notebooks/`` and ``tests/gpu/``): ``root`` when given, else the
    one this gpulab was imported from, else the working directory; None when there is none (a wheel install)."""
    candidates = [Path(root)] if root is not None else [Path(__file__).resolve().parents[2], Path.cwd()]
    for c in candidates:
        if (c / "notebooks").is_dir() and (c / "tests" / "gpu").is_dir():
            return c.resolve()
    if root is not None:
        raise ValueError(f"root={str(root)!r} holds no notebooks/ and tests/gpu/: pass the course's checkout "
                         f"(the folder with README.md), or clone it: {CLONE}")
    return None


def _select(notebooks_dir: Path, notebooks: Sequence[str] | None) -> list[Path]:
    every = sorted(notebooks_dir.glob("[0-9A-Z][0-9]_*.ipynb"))
    if notebooks is None:
        return every
    picked = []
    for want in notebooks:
        path = Path(want)
        if path.suffix == ".ipynb" and path.exists():
            picked.append(path.resolve())
            continue
        hits = [p for p in every if p.name.startswith(want)]
        if not hits:
            raise ValueError(f"notebooks: no notebook starts with {want!r}; the course has "
                             f"{', '.join(p.name.split('_')[0] for p in every)}")
        picked += hits
    return picked


def _limit_figures(env: Environment) -> tuple[list[Figure], list[str]]:
    """The measured matmul ceiling per dtype and the copy bandwidth, beside the datasheet's when it knows the GPU."""
    from ..limits import machine_limits
    from ..reference import gpu_spec

    lim = machine_limits()
    spec = None
    gpus = [g for g in (env.system.gpus if env.system else ()) if g.visible]
    if lim.device.startswith("cuda") and gpus:
        try:
            spec = gpu_spec(gpus[0].name)
        except KeyError:
            spec = None
    figs = []
    for dtype, attr, short in _DTYPES:
        if lim.has(dtype):
            figs.append(Figure(f"matmul peak {short}", lim.peak_flops(dtype) / 1e12, "TFLOP/s",
                               None if spec is None or getattr(spec, attr) is None else getattr(spec, attr) / 1e12,
                               f"gl.machine_limits() on {lim.device}"))
    figs.append(Figure("copy bandwidth", lim.bandwidth_bytes_per_s / 1e9, "GB/s",
                       None if spec is None else spec.bandwidth_bytes_per_s / 1e9, f"gl.machine_limits() on {lim.device}"))
    notes = [] if spec is not None or not gpus else [f"no datasheet for {gpus[0].name} in gl.reference: measured "
                                                      f"figures are shown alone"]
    return figs, notes


@checked(root="path?", out="path?", tests="flag", limits="flag", budget_s="pos", tests_timeout_s="pos",
         notebook_timeout_s="pos", cell_timeout_s="pos", kernel_name="name?", progress="fn?")
def check(root: str | Path | None = None, out: str | Path | None = "build/gpu-check", *, tests: bool = True,
          notebooks: Sequence[str] | None = None, limits: bool = True, budget_s: float = 900.0,
          tests_timeout_s: float = 300.0, notebook_timeout_s: float = 300.0, cell_timeout_s: float = 300.0,
          kernel_name: str | None = None, progress: Any = None) -> CheckReport:
    """Run the preflight and return its :class:`CheckReport` (written to ``out`` unless ``out=None``).

    ``notebooks``: None runs every notebook; a list of prefixes ("00", "12") or paths runs those; ``()`` none.
    ``budget_s`` bounds the whole check: notebooks not started by then are reported "not run".
    ``progress``: a callable given one line per step (``print`` on the command line).
    """
    if notebooks is not None and (isinstance(notebooks, str) or not all(isinstance(n, (str, Path)) for n in notebooks)):
        raise TypeError(f"notebooks must be None (all), a list of notebook prefixes such as ['00', '12'] or paths, "
                        f"or () for none; got {notebooks!r}")
    say = progress or (lambda line: None)
    course = find_course(root)
    out_dir = None if out is None else Path(out) if Path(out).is_absolute() or course is None else course / out
    selected = _select(course / "notebooks", notebooks) if course is not None and notebooks != () else []
    started, t0 = datetime.now(timezone.utc).isoformat(timespec="seconds"), time.monotonic()
    say("environment: GPUs, driver, CUDA, packages ...")
    env = environment()
    say(repr(env))
    notes = list(env.notes)
    if not env.gpus:
        notes.insert(0, "no CUDA GPU is usable here: the GPU conformance tests skip and the notebooks take their CPU "
                        "paths; run this on the GPU runtime the learners will use")
    if course is None and (tests or notebooks != ()):
        notes.append(f"the conformance tests and notebooks come with the course's repository: {CLONE}")
    figures: list[Figure] = []
    if limits:
        say("measuring this device's ceilings (gl.machine_limits) ...")
        try:
            figs, more = _limit_figures(env)
            figures += figs
            notes += more
        except ImportError as e:
            notes.append(f"ceilings not measured: {e}")
    test_rows: list[Outcome] = []
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    if tests and course is not None:
        say(f"GPU conformance tests (tests/gpu, up to {tests_timeout_s:.0f} s) ...")
        with tempfile.TemporaryDirectory(prefix="gpulab-check-") as scratch:     # out=None: nothing left behind
            work = out_dir or Path(scratch)
            fig_file = work / "figures.jsonl"
            fig_file.unlink(missing_ok=True)
            test_rows, _ = run_tests(course / "tests" / "gpu", work, min(tests_timeout_s, budget_s), fig_file)
            figures += [Figure(r.get("name", "?"), r.get("value"), r.get("unit", ""), r.get("datasheet"),
                               r.get("test", ""), r.get("note", "")) for r in read_figures(fig_file)]
        say(f"  {sum(o.status == 'passed' for o in test_rows)} passed, "
            f"{sum(o.status == 'skipped' for o in test_rows)} skipped, {sum(not o.ok for o in test_rows)} failed")
    nb_rows: list[Outcome] = []
    deadline = t0 + budget_s
    have_nbclient = env.packages and all(p.installed for p in env.packages if p.name in ("nbclient", "ipykernel"))
    if selected and not have_nbclient:
        notes.append("notebooks not run: nbclient and ipykernel are missing (pip install nbclient ipykernel)")
        selected = []
    for path in selected:
        left = deadline - time.monotonic()
        if left < 10:
            nb_rows.append(Outcome(path.name, "not run", 0.0, f"the check's budget of {budget_s:.0f} s was spent"))
            continue
        say(f"notebook {path.name} ...")
        row = run_notebook(path, min(notebook_timeout_s, left), cell_timeout_s=cell_timeout_s,
                           save_to=None if out_dir is None else out_dir / "notebooks" / path.name,
                           kernel_name=kernel_name, env={"PYTHONPATH": os.pathsep.join(
                               filter(None, [str(course), os.environ.get("PYTHONPATH")]))})
        say(f"  {row.status} in {row.seconds:.0f} s{': ' + row.detail if row.detail else ''}")
        nb_rows.append(row)
    warnings = tuple(f"{o.name}: {w}" for o in nb_rows for w in o.warnings)
    report = CheckReport(started, time.monotonic() - t0, env, tuple(figures), tuple(test_rows), tuple(nb_rows),
                         warnings, tuple(notes))
    if out_dir is not None:
        md, js = report.write(out_dir)
        report = replace(report, files=(str(md), str(js)))
    return report

