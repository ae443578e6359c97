"""Running the GPU conformance tests (pytest, ``-m gpu``) and every notebook (nbclient), each under a time limit.

Example:
    >>> from gpulab.preflight.run import parse_junit
    >>> xml = ('<testsuite><testcase classname="gpu.test_x" name="test_a" time="0.5"/>'
    ...        '<testcase classname="gpu.test_x" name="test_b" time="0"><skipped message="no GPU"/></testcase>'
    ...        '</testsuite>')
    >>> [(r.name, r.status) for r in parse_junit(xml)]
    [('gpu.test_x::test_a', 'passed'), ('gpu.test_x::test_b', 'skipped')]
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from .._tf import QUIET_ENV
from .jobs import Done, Job, run_jobs

__all__ = ["Outcome", "parse_junit", "node_id", "tests_job", "tests_outcomes", "run_tests", "notebook_job",
           "notebook_outcome",
           "run_notebook",
           "read_figures"]

_WARN_WORDS = ("warning", "deprecat", "throttl", "skipped", "not installed", "falls back", "fell back")
_MAX_WARNINGS = 40


@dataclass(frozen=True)
class Outcome:
    """One test or notebook: ``status`` is passed, failed, skipped, timed out, interrupted or not run; ``detail``
    says why. ``profile``: "native" or the GPU rehearsed (``--as t4``); ``beside``: it ran while other jobs ran;
    ``alone``: what a re-run alone gave (after failing beside others); ``started_s``: its start in the check."""

    name: str
    status: str
    seconds: float
    detail: str = ""
    warnings: tuple[str, ...] = ()
    profile: str = "native"
    beside: bool = False
    alone: str = ""
    started_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.status in ("passed", "skipped")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "seconds": round(self.seconds, 2), "detail": self.detail,
                "warnings": list(self.warnings), "profile": self.profile, "beside": self.beside, "alone": self.alone,
                "started_s": None if self.started_s is None else round(self.started_s, 1)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Outcome":
        """The outcome :meth:`to_dict` wrote (a child process's result file)."""
        return cls(str(d["name"]), str(d["status"]), float(d.get("seconds") or 0.0), str(d.get("detail") or ""),
                   tuple(d.get("warnings") or ()), str(d.get("profile") or "native"), bool(d.get("beside")),
                   str(d.get("alone") or ""), d.get("started_s"))


def parse_junit(xml_text: str) -> list[Outcome]:
    """Outcomes from pytest's ``--junitxml`` report, one per test."""
    root = ET.fromstring(xml_text)
    out = []
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}".lstrip(":")
        status, detail = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                status, detail = "failed", (child.get("message") or child.text or child.tag).strip()
            elif child.tag == "skipped" and status == "passed":
                status, detail = "skipped", (child.get("message") or "").strip()
        out.append(Outcome(name, status, float(case.get("time") or 0.0), detail[:500]))
    return out


def node_id(name: str, root: Path) -> str | None:
    """pytest's node id of a test named as its report names it (``tests.gpu.test_x::test_y[p]`` from the XML
    report, or the node id itself), relative to ``root``; None when no file under ``root`` matches."""
    if "::" not in name:
        return None
    where, test = name.split("::", 1)
    if where.endswith(".py"):
        return name if (root / where).exists() else None
    parts = where.split(".")
    for cut in range(len(parts), 0, -1):               # tests.gpu.test_x.TestY: the module, then the class
        path = Path(*parts[:cut]).with_suffix(".py")
        if (root / path).exists():
            return "::".join([path.as_posix(), *parts[cut:], test])
    return None


def tests_job(tests_dir: Path, out_dir: Path, timeout_s: float, figures: Path, extra_args: Sequence[str] = (),
              env: dict[str, str] | None = None, tag: str = "", targets: Sequence[str] = ()) -> Job | Outcome:
    """The conformance tests as a :class:`~gpulab.preflight.jobs.Job` (pytest on ``tests_dir``, its own process
    group, stopped at ``timeout_s``), or the "not run" :class:`Outcome` where pytest is missing. Figures the tests
    record go to ``figures``; each finished test is also written as it ends (``outcomes.jsonl``), so a stopped run
    keeps what finished. ``targets``: node ids to run instead of the whole folder (a re-run of some tests alone)."""
    if importlib.util.find_spec("pytest") is None:
        return Outcome("tests/gpu", "not run", 0.0, "pytest is not installed here, so the GPU conformance tests did "
                                                    "not run: pip install pytest (or the course's `make lab`)")
    junit, log, lines = (out_dir / f"gpu-tests{tag}.xml", out_dir / f"gpu-tests{tag}.log",
                         out_dir / f"gpu-tests{tag}.jsonl")
    for stale in (junit, lines):
        stale.unlink(missing_ok=True)
    root = tests_dir.parent.parent
    child_env = {k: v for k, v in QUIET_ENV.items() if k not in os.environ}       # the caller's own settings win
    child_env.update(env or {})
    child_env.update(GPULAB_CHECK_FIGURES=str(figures), GPULAB_CHECK_OUTCOMES=str(lines),
                     PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    argv = [sys.executable, "-m", "pytest", *(targets or [str(tests_dir)]), "-q", "-rs", "-p", "no:cacheprovider",
            f"--junitxml={junit}", *extra_args]
    return Job(f"tests/gpu{tag}", argv, timeout_s, child_env, str(root), str(log), None,
               {"junit": str(junit), "log": str(log), "lines": str(lines), "dir": str(tests_dir),
                "figures": str(figures)})


ALONE = "alone"     # the pytest mark of a conformance test that measures the whole GPU (power, overlap, peak speed)


def marked_alone(tests_dir: Path) -> bool:
    """Does any conformance test in ``tests_dir`` carry the ``alone`` mark (``@pytest.mark.alone``)?"""
    return any(f"mark.{ALONE}" in p.read_text(encoding="utf-8", errors="replace") for p in tests_dir.glob("test_*.py"))


def tests_outcomes(done: Done, budget_s: float | None = None) -> list[Outcome]:
    """The tests' outcomes from pytest's report (or, for a run that was stopped, from the tests that finished)."""
    junit, log, lines = (Path(done.job.tag[k]) for k in ("junit", "log", "lines"))
    tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-30:]) if log.exists() else ""
    outcomes = parse_junit(junit.read_text(encoding="utf-8")) if junit.exists() and done.state == "finished" else []
    if not outcomes:
        outcomes = [Outcome.from_dict(r) for r in read_figures(lines) if "name" in r and "status" in r]
    if done.state == "timed out":
        outcomes.append(Outcome("tests/gpu (the rest)", "timed out", done.job.timeout_s,
                                f"the conformance tests ran past {done.job.timeout_s:.0f} s and were stopped; see {log}"))
    elif done.state == "interrupted":
        outcomes.append(Outcome("tests/gpu (the rest)", "interrupted", done.seconds,
                                f"stopped by Ctrl-C or a kill after {done.seconds:.0f} s; see {log}"))
    elif done.state == "not run":
        outcomes.append(Outcome("tests/gpu", "not run", 0.0, f"the check's budget"
                                f"{'' if budget_s is None else f' of {budget_s:.0f} s'} was spent before they started"))
    elif not outcomes and done.returncode == 5:          # pytest: no tests were collected
        outcomes.append(Outcome("tests/gpu", "skipped", 0.0, f"no conformance tests were found in {done.job.tag['dir']}"))
    elif not outcomes:
        outcomes.append(Outcome("tests/gpu", "failed", 0.0,
                                f"pytest wrote no report (exit {done.returncode}): {tail[-400:]}"))
    return outcomes


def run_tests(tests_dir: Path, out_dir: Path, timeout_s: float, figures: Path,
              extra_args: Sequence[str] = ()) -> tuple[list[Outcome], str]:
    """Run the conformance tests alone (:func:`tests_job` and :func:`tests_outcomes`); the outcomes and the last
    lines of pytest's output."""
    job = tests_job(tests_dir, out_dir, timeout_s, figures, extra_args)
    if isinstance(job, Outcome):
        return [job], ""
    done = run_jobs([job], 1)[0]
    log = Path(job.tag["log"])
    tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-30:]) if log.exists() else ""
    return tests_outcomes(done), tail


def read_figures(path: Path) -> list[dict[str, Any]]:
    """The figures the tests recorded (one JSON object per line); lines that do not parse are skipped."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def _warnings_in(nb: Any) -> tuple[str, ...]:
    seen: list[str] = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") != "stream":
                continue
            for line in str(out.get("text", "")).splitlines():
                line = line.strip()
                if line and (out.get("name") == "stderr" or any(w in line.lower() for w in _WARN_WORDS)) \
                        and line not in seen:
                    seen.append(line[:300])
    return tuple(seen[:_MAX_WARNINGS])


def notebook_job(path: Path, timeout_s: float, result: Path, *, cell_timeout_s: float = 300.0,
                 save_to: Path | None = None, kernel_name: str | None = None, env: dict[str, str] | None = None,
                 name: str | None = None, tag: Any = None, group: str | None = None) -> Job:
    """One notebook as a :class:`~gpulab.preflight.jobs.Job`: ``python -m gpulab.preflight.child`` runs it with
    :func:`run_notebook` and writes its :class:`Outcome` to ``result`` (and its kernel's process group beside it);
    the child's limit is ``timeout_s`` (or what the check's budget leaves), the job's guard a minute more for the
    kernel to start and stop. ``group``: no two jobs of one group at once."""
    argv = [sys.executable, "-m", "gpulab.preflight.child", str(path), "--timeout", "{limit}",
            "--cell-timeout", f"{cell_timeout_s:.1f}", "--result", str(result)]
    if save_to is not None:
        argv += ["--save-to", str(save_to)]
    if kernel_name:
        argv += ["--kernel-name", kernel_name]
    return Job(name or path.name, argv, timeout_s, dict(env or {}), str(path.parent), str(result) + ".log",
               str(result), tag, group, guard_s=60.0)


def notebook_outcome(done: Done, profile: str = "native", budget_s: float | None = None) -> Outcome:
    """A notebook job's :class:`Outcome`: the child's own, or what the guard saw when the child gave none."""
    name = Path(done.job.argv[3]).name if len(done.job.argv) > 3 else done.job.name
    if done.result is not None:
        o = Outcome.from_dict(done.result)
        if done.state == "interrupted" and o.status != "interrupted":     # what stopping it looked like inside
            o = Outcome(o.name, "interrupted", o.seconds, "stopped by Ctrl-C or a kill"
                        + (f" (inside: {o.status}: {o.detail[:200]})" if o.status != "passed" else ""), o.warnings)
    elif done.state == "not run":
        o = Outcome(name, "not run", 0.0, f"the check's budget{'' if budget_s is None else f' of {budget_s:.0f} s'} "
                                          f"was spent before it started")
    elif done.state == "interrupted":
        o = Outcome(name, "interrupted", done.seconds, "stopped by Ctrl-C or a kill" if done.seconds else
                    "not started: the check was interrupted")
    elif done.state == "timed out":
        o = Outcome(name, "timed out", done.seconds, f"the notebook's guard stopped it at {done.job.timeout_s:.0f} s")
    else:
        log = Path(done.job.log) if done.job.log else None
        tail = log.read_text(encoding="utf-8", errors="replace")[-400:] if log and log.exists() else ""
        o = Outcome(name, "failed", done.seconds, f"its runner ended (exit {done.returncode}) without a result: "
                                                  f"{' '.join(tail.split())}")
    return Outcome(o.name, o.status, o.seconds, o.detail, o.warnings, profile, done.beside, o.alone, done.started_s)


def run_notebook(path: Path, timeout_s: float, *, cell_timeout_s: float = 300.0, save_to: Path | None = None,
                 kernel_name: str | None = None, env: dict[str, str] | None = None,
                 on_kernel: Callable[[int], None] | None = None) -> Outcome:
    """Execute the notebook at ``path`` top to bottom with nbclient, the reference solutions on
    (``GPULAB_SOLUTIONS=1``), in its own folder; stop it at ``timeout_s`` (no cell longer than ``cell_timeout_s``).
    The executed copy goes to ``save_to`` when given; ``on_kernel`` is given the kernel's process group once it runs.
    A file that is no notebook is a failed outcome, never an exception; ``KeyboardInterrupt`` shuts the kernel down
    and gives an "interrupted" outcome."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    start = time.monotonic()
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as e:                     # not JSON, not a notebook, unreadable: one failed row
        return Outcome(path.name, "failed", time.monotonic() - start,
                       f"not a readable notebook ({type(e).__name__}: {' '.join(str(e).split())[:300]}): restore it "
                       f"from git (git checkout -- {path.name}) or open it in JupyterLab to see what is wrong")
    deadline = start + timeout_s

    def timeout_for(cell: Any) -> int:
        return max(1, int(min(cell_timeout_s, deadline - time.monotonic())))

    kwargs: dict[str, Any] = {"kernel_name": kernel_name} if kernel_name else {}
    current: list[int] = []
    client = NotebookClient(nb, timeout_func=timeout_for, timeout=int(cell_timeout_s), allow_errors=False,
                            resources={"metadata": {"path": str(path.parent)}},
                            on_cell_start=lambda cell, cell_index: current.append(cell_index),
                            extra_arguments=["--IPKernelApp.log_level=ERROR"], **kwargs)
    if on_kernel is not None:
        def started(notebook: Any) -> None:
            provisioner = getattr(client.km, "provisioner", None)
            group = getattr(provisioner, "pgid", None) or getattr(provisioner, "pid", None)
            if group:
                on_kernel(int(group))

        client.on_notebook_start = started
    kernel_env = {**QUIET_ENV, **os.environ, "GPULAB_SOLUTIONS": "1", **(env or {})}
    status, detail = "passed", ""
    try:
        client.execute(env=kernel_env)
    except CellTimeoutError as e:
        status = "timed out"
        detail = (f"stopped at {timeout_s:.0f} s (notebook limit)" if time.monotonic() >= deadline - 1
                  else f"a cell ran past {cell_timeout_s:.0f} s") + f": {_cell_of(nb, current)}"
    except CellExecutionError as e:
        status, detail = "failed", f"{e.ename}: {e.evalue} ({_cell_of(nb, current)})"
    except DeadKernelError as e:
        status, detail = "failed", f"the kernel died ({e}); out of host or GPU memory?"
    except KeyboardInterrupt:
        status, detail = "interrupted", f"stopped by Ctrl-C or a kill at {_cell_of(nb, current)}"
    except Exception as e:                     # a kernel that would not start, a broken notebook file
        status, detail = "failed", f"{type(e).__name__}: {e}"
    if save_to is not None:
        save_to.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, save_to)
    return Outcome(path.name, status, time.monotonic() - start, detail[:600], _warnings_in(nb))


def _cell_of(nb: Any, started: list[int]) -> str:
    """Which cell failed (the last one that started): its number among the notebook's cells and its first line."""
    if not started:
        return "before the first cell"
    cell = nb.cells[started[-1]]
    first = next((ln for ln in cell.source.splitlines() if ln.strip() and not ln.startswith("#")), "")
    return f"cell {started[-1] + 1}: {first[:80]}"
