"""Running the check's jobs (each notebook, the conformance tests) as child processes, N at a time, on one machine.

Every job is its own process group (a notebook's kernel is a process group of its own too: the child writes its
id beside its result), stopped at its time limit; Ctrl-C (or ``SIGTERM``) stops every running job at once, ends
its processes, and the jobs that did not finish are "interrupted". Which jobs ran beside others is kept: a
timing that fails beside others can be re-run alone.

Example:
    >>> import sys
    >>> from gpulab.preflight.jobs import Job, run_jobs
    >>> done = run_jobs([Job("hi", [sys.executable, "-c", "print('hi')"], timeout_s=60)], jobs=1)
    >>> done[0].returncode, done[0].beside
    (0, False)
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["Job", "Done", "run_jobs", "kill_group"]

_GRACE_S = 8.0          # what a job gets between SIGTERM and SIGKILL (nbclient shuts its kernel down in it)


@dataclass(frozen=True)
class Job:
    """One child process to run: ``argv`` with ``env`` added, stopped at ``timeout_s`` plus ``guard_s``. Its limit is
    ``timeout_s`` or the time left before the deadline, whichever is less, and a ``{limit}`` in ``argv`` becomes
    those seconds (the child keeps its own limit). ``result`` names the JSON file the child writes its outcome to."""

    name: str
    argv: Sequence[str]
    timeout_s: float
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    log: str | None = None
    result: str | None = None
    tag: Any = None
    group: str | None = None          # no two jobs of one group run at once (one notebook in two profiles)
    guard_s: float = 0.0              # beyond its limit before the job is stopped (the child keeps its own limit)


@dataclass(frozen=True)
class Done:
    """What became of a job: its exit code (None when it never started or was stopped), the child's JSON result,
    whether it ran beside other jobs, its start offset and seconds, and ``state``: finished, timed out,
    interrupted or not run."""

    job: Job
    state: str
    returncode: int | None
    seconds: float
    started_s: float
    beside: bool
    result: dict[str, Any] | None = None


def kill_group(pgid: int, wait: Callable[[float], bool], grace_s: float = _GRACE_S) -> None:
    """SIGTERM to the process group ``pgid``; SIGKILL when ``wait`` (given a timeout, it says whether the group's
    leader ended in it) says it outlived ``grace_s``; the rest of the group gets SIGKILL either way."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError, OSError):
        return
    wait(grace_s)
    try:
        os.killpg(pgid, signal.SIGKILL)       # the leader's own children, and the leader if it hung on
    except (ProcessLookupError, PermissionError, OSError):
        pass


class _Running:
    def __init__(self, job: Job, proc: subprocess.Popen, start: float, offset: float, stop_at_s: float) -> None:
        self.job, self.proc, self.start, self.offset, self.stop_at_s = job, proc, start, offset, stop_at_s
        self.beside = False

    def sidecar_groups(self) -> list[int]:
        """Process groups the child started in sessions of their own (a notebook's kernel), which it lists in
        ``<result>.pgids``."""
        if not self.job.result:
            return []
        try:
            return [int(x) for x in Path(self.job.result + ".pgids").read_text().split()]
        except (OSError, ValueError):
            return []

    def stop(self) -> None:
        """End the job and everything it started: SIGTERM, a grace period (the child shuts its kernel down), then
        SIGKILL to its group and to its kernels' groups."""
        groups = self.sidecar_groups()

        def ended(timeout: float) -> bool:
            try:
                self.proc.wait(timeout=timeout)
                return True
            except subprocess.TimeoutExpired:
                return False

        kill_group(self.proc.pid, ended)
        ended(10)
        for g in set(groups + self.sidecar_groups()):
            try:
                os.killpg(g, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, OSError):
                pass


def _read_result(job: Job) -> dict[str, Any] | None:
    if not job.result:
        return None
    try:
        return json.loads(Path(job.result).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def run_jobs(todo: Sequence[Job], jobs: int = 1, *, deadline: float | None = None,
             on_start: Callable[[Job], None] | None = None, on_done: Callable[[Done], None] | None = None,
             poll_s: float = 0.1, origin: float | None = None) -> list[Done]:
    """Run ``todo`` in order, ``jobs`` at a time; the :class:`Done` of each, in ``todo``'s order. Start offsets count
    from ``origin`` (``time.monotonic()``; default: now).

    A job not started before ``deadline`` (``time.monotonic()``; 10 s before it) is "not run"; one still running at
    its ``timeout_s`` is stopped ("timed out"). ``KeyboardInterrupt`` and ``SIGTERM`` stop every running job, mark
    it and the ones not started "interrupted", and raise ``KeyboardInterrupt`` with the results in
    ``.args[0]``: the caller writes its report with what finished."""
    if jobs < 1:
        raise ValueError(f"jobs must be a whole number >= 1, got {jobs!r}")
    t0 = time.monotonic() if origin is None else origin
    pending = list(enumerate(todo))
    running: dict[int, _Running] = {}
    done: dict[int, Done] = {}
    logs: list[Any] = []

    def finish(i: int, r: _Running, state: str) -> None:
        rc = r.proc.poll()
        d = Done(r.job, state, rc if state == "finished" else None, time.monotonic() - r.start, r.offset, r.beside,
                 _read_result(r.job))
        done[i] = d
        if on_done is not None:
            on_done(d)

    previous = signal.getsignal(signal.SIGTERM)
    is_main = _in_main_thread()
    if is_main:                      # a kill of the check ends its jobs too, as Ctrl-C does
        signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        while pending or running:
            while pending and len(running) < jobs:
                busy = {r.job.group for r in running.values() if r.job.group is not None}
                k = next((k for k, (_, j) in enumerate(pending) if j.group is None or j.group not in busy), None)
                if k is None:
                    break                        # what is left waits for its group's running job
                i, job = pending.pop(k)
                now = time.monotonic()
                if deadline is not None and deadline - now < 10:
                    done[i] = Done(job, "not run", None, 0.0, now - t0, False)
                    if on_done is not None:
                        on_done(done[i])
                    continue
                if on_start is not None:
                    on_start(job)
                out: Any = subprocess.DEVNULL
                if job.log:
                    Path(job.log).parent.mkdir(parents=True, exist_ok=True)
                    out = open(job.log, "w", encoding="utf-8")
                    logs.append(out)
                if job.result:
                    for stale in (Path(job.result), Path(job.result + ".pgids")):
                        stale.unlink(missing_ok=True)
                limit = job.timeout_s if deadline is None else max(1.0, min(job.timeout_s, deadline - now))
                argv = [a.replace("{limit}", f"{limit:.0f}") for a in job.argv]
                proc = subprocess.Popen(argv, cwd=job.cwd, env={**os.environ, **job.env}, stdout=out,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
                running[i] = _Running(job, proc, now, now - t0, limit + job.guard_s)
            if len(running) > 1:
                for r in running.values():
                    r.beside = True
            for i, r in list(running.items()):
                if r.proc.poll() is not None:
                    del running[i]
                    finish(i, r, "finished")
                elif time.monotonic() - r.start > r.stop_at_s:
                    r.stop()
                    del running[i]
                    finish(i, r, "timed out")
            time.sleep(poll_s)
    except KeyboardInterrupt:
        for i, r in list(running.items()):
            r.stop()
            finish(i, r, "interrupted")
        now = time.monotonic()
        for i, job in pending:
            done[i] = Done(job, "interrupted", None, 0.0, now - t0, False)
        raise KeyboardInterrupt([done[i] for i in sorted(done)]) from None
    finally:
        if is_main:
            signal.signal(signal.SIGTERM, previous)
        for f in logs:
            f.close()
    return [done[i] for i in sorted(done)]


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt

