"""The preflight a teacher runs on the GPU runtime the learners will use, the day before a class:
``python -m gpulab check`` (``make gpu-check`` in a clone; ``!python -m gpulab check`` in a Colab cell).

It reports the machine and the stack (what is missing and which sections that skips), measures the ceilings a
learner will compare against (beside the datasheet), runs the GPU conformance tests (``tests/gpu``: the real GPU
paths, skipped without CUDA) and every notebook top to bottom, each in a process of its own under a time limit,
``jobs`` at a time on the one GPU. The tests marked ``alone`` (power, overlap, peak speed: they measure the whole GPU)
run first with nothing beside them; then the notebooks never passed on a GPU, then the oldest pass; what failed
beside others is re-run alone at the end while the budget lasts. It writes ``report.md`` and ``report.json`` under
``build/gpu-check/`` and a record of the run into the course's ledger (``tests/gpu/runs``,
:mod:`gpulab.preflight.ledger`). ``profiles`` adds rehearsals of smaller GPUs (``("native", "t4")``: every notebook
and test again as a T4 would run them, :mod:`gpulab.rehearsal`; the ``alone`` tests only natively, since a
rehearsal's power and speed are not a T4's). Without a GPU it says so, runs the CPU parts and writes its report.
Ctrl-C ends every job at once and still writes the report.

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
from . import ledger as _ledger
from .jobs import run_jobs
from .plan import (build_jobs, collect, default_jobs, order_notebooks, profiles_arg, rerun_alone,
                   rerun_tests_alone, state)
from .stack import Environment, environment
from .report import CheckReport, Figure
from .run import Outcome

__all__ = ["check", "environment", "find_course", "default_jobs", "CheckReport", "Environment", "Figure", "Outcome",
           "Interrupted"]


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or a kill) stopped the check: its jobs were ended, and ``report`` (written where ``out`` says) has
    what finished and "interrupted" for the rest."""

    def __init__(self, report: CheckReport) -> None:
        super().__init__(report.headline)
        self.report = report

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
          kernel_name: str | None = None, progress: Any = None, jobs: int | None = None,
          profiles: Sequence[str] = ("native",), ledger: bool | str | Path = True) -> CheckReport:
    """Run the preflight and return its :class:`CheckReport` (written to ``out`` unless ``out=None``).

    ``notebooks``: None runs every notebook; a list of prefixes ("00", "12") or paths runs those; ``()`` none.
    ``budget_s`` bounds the whole check: jobs not started by then are reported "not run" (never passed).
    ``jobs``: how many notebooks (and the tests) run at once; None fits the host (:func:`default_jobs`).
    ``profiles``: "native" and/or a GPU to rehearse ("t4", which needs a CUDA GPU to rehearse on).
    ``ledger``: True files a record per profile in the course's ``tests/gpu/runs`` when a GPU ran it (and in
    ``out/ledger`` always), a folder files it there, False files none.
    ``progress``: a callable given one line per step (``print`` on the command line).
    Ctrl-C raises :class:`Interrupted` (a ``KeyboardInterrupt``) after every job was ended and the report written.
    """
    if notebooks is not None and (isinstance(notebooks, str) or not all(isinstance(n, (str, Path)) for n in notebooks)):
        raise TypeError(f"notebooks must be None (all), a list of notebook prefixes such as ['00', '12'] or paths, "
                        f"or () for none; got {notebooks!r}")
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise ValueError(f"jobs must be a whole number >= 1 (how many notebooks run at once), or None to fit the "
                         f"host; got {jobs!r}")
    if not isinstance(ledger, (bool, str, Path)):
        raise TypeError(f"ledger must be True, False or a folder, got {ledger!r}")
    wanted = profiles_arg(profiles)
    say = progress or (lambda line: None)
    course = find_course(root)
    out_dir = _out_dir(out, course)
    selected = _select(course / "notebooks", notebooks) if course is not None and notebooks != () else []
    started, t0 = datetime.now(timezone.utc).isoformat(timespec="seconds"), time.monotonic()
    deadline = t0 + budget_s
    say("environment: GPUs, driver, CUDA, packages ...")
    env = environment()
    say(repr(env))
    if any(p != "native" for p in wanted) and not env.gpus:
        raise ValueError(f"--as {','.join(p for p in wanted if p != 'native')}: a rehearsal runs a smaller GPU's "
                         f"branches on a CUDA GPU, and torch sees none here")
    jobs = default_jobs(env, wanted) if jobs is None else jobs
    notes = list(env.notes)
    failed_env: list[Outcome] = []
    if not env.gpus:
        notes.insert(0, "no CUDA GPU is usable here: the GPU conformance tests skip and the notebooks take their CPU "
                        "paths; run this on the GPU runtime the learners will use")
        if env.system is not None and env.system.gpus:
            failed_env.append(Outcome("GPU usable by torch", "failed", 0.0,
                                      f"NVML sees {len(env.system.gpus)} GPU(s) but torch cannot use them: every GPU "
                                      f"test would skip and every notebook take its CPU path; run python -m gpulab "
                                      f"doctor for the cause and its fix"))
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
    have_nbclient = env.packages and all(p.installed for p in env.packages if p.name in ("nbclient", "ipykernel"))
    if selected and not have_nbclient:
        notes.append("notebooks not run: nbclient and ipykernel are missing (pip install nbclient ipykernel)")
        selected = []
    records = _ledger.read_ledger(_ledger.ledger_folder(course))
    selected = order_notebooks(selected, records, wanted)
    with tempfile.TemporaryDirectory(prefix="gpulab-check-") as scratch:     # out=None: nothing left behind
        work = out_dir or Path(scratch)
        todo, fixed = build_jobs(course, work, wanted, jobs, env, tests, selected, min(tests_timeout_s, budget_s),
                                 notebook_timeout_s, cell_timeout_s, kernel_name)
        if todo:
            say(f"{len(todo)} jobs, {jobs} at a time ({', '.join(wanted)}) ...")
        interrupted, done = False, []
        first = [j for j in todo if (j.tag or {}).get("alone")]      # tests that need the whole GPU: nothing beside
        try:
            for batch, at_once in ((first, 1), ([j for j in todo if j not in first], jobs)):
                if batch:
                    done += run_jobs(batch, at_once, deadline=deadline, origin=t0,
                                     on_start=lambda j: say(f"started {j.name}"),
                                     on_done=lambda d: say(f"  {d.job.name}: {state(d)} in {d.seconds:.0f} s"))
        except KeyboardInterrupt as e:
            done += e.args[0] if e.args and isinstance(e.args[0], list) else []
            interrupted = True
            say("interrupted: every job was ended; writing the report")
        test_rows, nb_rows, figures = collect(done, figures, budget_s)
        test_rows = fixed + test_rows
        if not interrupted:
            try:
                nb_rows = rerun_alone(nb_rows, done, deadline, say)
                test_rows, more = rerun_tests_alone(test_rows, done, deadline, work, say)
                figures += more
            except KeyboardInterrupt:
                interrupted = True
        warnings = tuple(f"{o.name} ({o.profile}): {w}" for o in nb_rows for w in o.warnings)
        report = CheckReport(started, time.monotonic() - t0, env, tuple(figures), tuple(failed_env + test_rows),
                             tuple(nb_rows), warnings, tuple(notes), jobs=jobs, profiles=wanted,
                             interrupted=interrupted)
        report = _write(report, out_dir, course, ledger, wanted, jobs, say)
    if interrupted:
        raise Interrupted(report)
    return report


def _out_dir(out: str | Path | None, course: Path | None) -> Path | None:
    """Where the report goes, made and checked writable before any work (a clear error otherwise)."""
    if out is None:
        return None
    path = Path(out) if Path(out).is_absolute() or course is None else course / out
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".gpulab-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ValueError(f"out={str(out)!r}: the report cannot be written there ({e.strerror or e}); pass a folder "
                         f"you can write to, e.g. --out build/gpu-check") from None
    return path


def _write(report: CheckReport, out_dir: Path | None, course: Path | None, ledger: bool | str | Path,
           profiles: Sequence[str], jobs: int, say: Any) -> CheckReport:
    """Write report.md, report.json and a ledger record per profile; the report with the files it wrote."""
    from ..rehearsal import label

    files: list[str] = []
    records = []
    gpu = next((g.name for g in (report.environment.system.gpus if report.environment and report.environment.system
                                 else ()) if g.visible), None)
    for p in profiles:
        records.append(_ledger.record(report, profile=p, jobs=jobs, course=course,
                                      label=None if gpu is None else label(gpu, {"GPULAB_AS": p}),
                                      source=f"python -m gpulab check --jobs {jobs} --as {','.join(profiles)}"))
    targets = []
    if out_dir is not None and ledger is not False:
        targets.append(out_dir / "ledger")
    if ledger is True and course is not None and report.environment is not None and report.environment.gpus:
        targets.append(_ledger.ledger_folder(course))
    elif isinstance(ledger, (str, Path)) and not isinstance(ledger, bool):
        targets.append(Path(ledger))
    for folder in targets:
        for rec in records:
            try:
                files.append(str(_ledger.write_record(rec, folder)))
            except OSError as e:
                say(f"ledger record not written to {folder}: {e}")
    if out_dir is not None:
        report = replace(report, files=tuple(files))
        md, js = report.write(out_dir)
        files = [str(md), str(js)] + files
    return replace(report, files=tuple(files))
