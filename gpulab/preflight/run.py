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
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from .._tf import QUIET_ENV

__all__ = ["Outcome", "parse_junit", "run_tests", "run_notebook", "read_figures"]

_WARN_WORDS = ("warning", "deprecat", "throttl", "skipped", "not installed", "falls back", "fell back")
_MAX_WARNINGS = 40


@dataclass(frozen=True)
class Outcome:
    """One test or notebook: ``status`` is passed, failed, skipped, timed out or not run; ``detail`` says why."""

    name: str
    status: str
    seconds: float
    detail: str = ""
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status in ("passed", "skipped")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "seconds": round(self.seconds, 2), "detail": self.detail,
                "warnings": list(self.warnings)}


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


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, PermissionError, OSError):
        pass
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass
        proc.wait(timeout=10)


def run_tests(tests_dir: Path, out_dir: Path, timeout_s: float, figures: Path,
              extra_args: Sequence[str] = ()) -> tuple[list[Outcome], str]:
    """Run pytest on ``tests_dir`` in a child process (its own process group, stopped at ``timeout_s``); the
    outcomes and the last lines of its output. Figures the tests record go to ``figures`` (JSON lines)."""
    if importlib.util.find_spec("pytest") is None:
        return [Outcome("tests/gpu", "not run", 0.0, "pytest is not installed here, so the GPU conformance tests did "
                                                     "not run: pip install pytest (or the course's `make lab`)")], ""
    junit = out_dir / "gpu-tests.xml"
    junit.unlink(missing_ok=True)
    root = tests_dir.parent.parent
    env = {**QUIET_ENV, **os.environ, "GPULAB_CHECK_FIGURES": str(figures),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    argv = [sys.executable, "-m", "pytest", str(tests_dir), "-q", "-rs", "-p", "no:cacheprovider",
            f"--junitxml={junit}", *extra_args]
    log = out_dir / "gpu-tests.log"
    with open(log, "w", encoding="utf-8") as f:
        proc = subprocess.Popen(argv, cwd=root, env=env, stdout=f, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            proc.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            timed_out = True
    tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-30:])
    outcomes = parse_junit(junit.read_text(encoding="utf-8")) if junit.exists() else []
    if timed_out:
        outcomes.append(Outcome("tests/gpu (the rest)", "timed out", timeout_s,
                                f"the conformance tests ran past {timeout_s:.0f} s and were stopped; see {log}"))
    elif not outcomes and proc.returncode == 5:          # pytest: no tests were collected
        outcomes.append(Outcome("tests/gpu", "skipped", 0.0, f"no conformance tests were found in {tests_dir}"))
    elif not outcomes:
        outcomes.append(Outcome("tests/gpu", "failed", 0.0, f"pytest wrote no report (exit {proc.returncode}): {tail[-400:]}"))
    return outcomes, tail


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


def run_notebook(path: Path, timeout_s: float, *, cell_timeout_s: float = 300.0, save_to: Path | None = None,
                 kernel_name: str | None = None, env: dict[str, str] | None = None) -> Outcome:
    """Execute the notebook at ``path`` top to bottom with nbclient, the reference solutions on
    (``GPULAB_SOLUTIONS=1``), in its own folder; stop it at ``timeout_s`` (no cell longer than ``cell_timeout_s``).
    The executed copy goes to ``save_to`` when given."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    start = time.monotonic()
    deadline = start + timeout_s

    def timeout_for(cell: Any) -> int:
        return max(1, int(min(cell_timeout_s, deadline - time.monotonic())))

    kwargs: dict[str, Any] = {"kernel_name": kernel_name} if kernel_name else {}
    current: list[int] = []
    client = NotebookClient(nb, timeout_func=timeout_for, timeout=int(cell_timeout_s), allow_errors=False,
                            resources={"metadata": {"path": str(path.parent)}},
                            on_cell_start=lambda cell, cell_index: current.append(cell_index),
                            extra_arguments=["--IPKernelApp.log_level=ERROR"], **kwargs)
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
