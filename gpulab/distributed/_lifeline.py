"""Tie a command, and every process it starts, to the life of the process that launched it.

``python -I _lifeline.py --parent PID -- CMD ...`` runs CMD (torchrun, for :func:`gpulab.launch`) as its child and
stays between PID and CMD as a small supervisor:

- when PID dies, however it dies (SIGTERM, SIGKILL: a kernel restart, the OOM killer), the supervisor asks CMD to
  stop with SIGTERM (torchrun then stops its ranks), and SIGKILLs CMD after ``GRACE_S``;
- when CMD ends, however it ends (a SIGKILLed torchrun cannot stop its ranks, each in a session of its own), every
  process left below the supervisor is stopped (SIGTERM, then SIGKILL);
- it exits as CMD did (the same code, or the same signal).

How it notices: on Linux the kernel signals it when its parent dies (``prctl(PR_SET_PDEATHSIG)``), and orphans
below it are re-parented to it (``PR_SET_CHILD_SUBREAPER``); elsewhere (macOS) it polls ``os.getppid()`` and
remembers CMD's descendants every ``POLL_S`` (with psutil); CMD's environment carries ``GPULAB_LIFELINE_PID``,
which every descendant inherits, so the ones re-parented away before they were seen are found too. ``GPULAB_LIFELINE_MODE=poll`` forces the portable
watch on Linux too (tests). The death signal belongs to the *thread* that started this process: the launcher
starts it and waits for it in the same thread.

Standard library only (psutil if present): it runs as a script, before and without gpulab's imports.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

__all__ = ["command", "can_set_parent_death_signal"]

POLL_S = 0.2         # how often the portable watch looks at its parent and at CMD's descendants
GRACE_S = 10.0       # SIGTERM -> SIGKILL for CMD (torchrun waits for its ranks in this time)
LEFTOVER_GRACE_S = 2.0
MODE_ENV = "GPULAB_LIFELINE_MODE"
MARK_ENV = "GPULAB_LIFELINE_PID"   # set for CMD: inherited by everything below it
USAGE = "usage: _lifeline.py --parent PID -- COMMAND [ARG ...]"
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36


def command(cmd: list[str], parent: int | None = None) -> list[str]:
    """``cmd`` wrapped so that it dies with process ``parent`` (default: this one)."""
    return [sys.executable, "-I", os.path.abspath(__file__), "--parent", str(parent or os.getpid()), "--", *cmd]


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError, ImportError):
        return False


def can_set_parent_death_signal() -> bool:
    """True where the kernel can signal a process when its parent dies (Linux ``prctl``)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return hasattr(ctypes.CDLL(None), "prctl")
    except (OSError, ImportError):
        return False


def _parse(argv: list[str]) -> tuple[int, list[str]] | None:
    if len(argv) < 4 or argv[0] != "--parent" or argv[2] != "--" or not argv[1].isdigit():
        return None
    return int(argv[1]), argv[3:]


class _Descendants:
    """Every process seen below this one (psutil.Process objects: a reused pid is never mistaken for one)."""

    def __init__(self) -> None:
        try:
            import psutil
        except ImportError:
            psutil = None
        self.psutil = psutil
        self.seen: dict[int, object] = {}
        self.since = 0.0
        if psutil is not None:
            try:
                self.since = psutil.Process().create_time()
            except psutil.Error:
                pass

    def look(self) -> None:
        if self.psutil is None:
            return
        try:
            for p in self.psutil.Process().children(recursive=True):
                self.seen.setdefault(p.pid, p)
        except self.psutil.Error:
            pass

    def marked(self) -> None:
        """Processes started since this one whose environment names it (re-parented away unseen: polling)."""
        ps, me = self.psutil, os.getpid()
        for p in ps.process_iter(["create_time"]):
            try:
                if p.pid != me and (p.info["create_time"] or 0) >= self.since - 1 and \
                        p.environ().get(MARK_ENV) == str(me):
                    self.seen.setdefault(p.pid, p)
            except ps.Error:
                pass

    def stop_all(self, grace_s: float) -> None:
        """SIGTERM everything still running below (or once below) this process, SIGKILL it after ``grace_s``."""
        if self.psutil is None:
            return _stop_children_by_proc(grace_s)
        ps = self.psutil
        for _ in range(5):                    # orphans of the stopped ones are re-parented here: look again
            self.look()
            self.marked()
            left = [p for p in self.seen.values() if _running(ps, p)]
            if not left:
                return
            for sig in (signal.SIGTERM, signal.SIGKILL):
                for p in left:
                    try:
                        p.send_signal(sig)
                    except ps.Error:
                        pass
                _, left = ps.wait_procs(left, timeout=grace_s)
                if not left:
                    break


def _running(ps, p) -> bool:
    try:
        return p.is_running() and p.status() != ps.STATUS_ZOMBIE
    except ps.Error:
        return False


def _my_children_by_proc() -> list[int]:
    """Pids whose parent is this process, from /proc (Linux without psutil)."""
    me, out = os.getpid(), []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
                if int(stat[stat.rindex(b")") + 2:].split()[1]) == me:
                    out.append(int(name))
            except (OSError, ValueError, IndexError):
                pass
    return out


def _stop_children_by_proc(grace_s: float) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = _my_children_by_proc()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        end = time.monotonic() + grace_s
        while time.monotonic() < end and pids:
            for pid in list(pids):
                try:
                    if os.waitpid(pid, os.WNOHANG)[0]:
                        pids.remove(pid)
                except ChildProcessError:
                    pids.remove(pid)
            time.sleep(0.05)


def _gone(parent: int, cmd: list[str]) -> int:
    sys.stderr.write(f"gpulab lifeline: the parent process {parent} is gone (the parent is now {os.getppid()}); "
                     f"not starting {cmd[0]}\n")
    return 1


def main(argv: list[str] | None = None) -> int:
    parsed = _parse(sys.argv[1:] if argv is None else argv)
    mode = os.environ.get(MODE_ENV, "")
    if parsed is None or mode not in ("", "poll"):
        sys.stderr.write(f"{USAGE}\n  (got {sys.argv[1:] if argv is None else argv}; {MODE_ENV}={mode!r}: '' or "
                         "'poll')\n")
        return 2
    parent, cmd = parsed
    stop = []

    def on_signal(signum, frame):           # the parent died (PDEATHSIG), or someone asks us to stop
        stop.append(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    kernel_watch = mode != "poll" and _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if kernel_watch:
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    if os.getppid() != parent:              # it died before the watch was set: never start the command
        return _gone(parent, cmd)
    below = _Descendants()
    try:
        child = subprocess.Popen(cmd, env={**os.environ, MARK_ENV: str(os.getpid())})
    except OSError as e:
        sys.stderr.write(f"gpulab lifeline: cannot start {cmd[0]}: {e}\n")
        return 127
    deadline = None
    while True:
        try:
            code = child.wait(timeout=POLL_S)
            break
        except subprocess.TimeoutExpired:
            pass
        below.look()
        if deadline is None and (stop or os.getppid() != parent):
            _signal(child, signal.SIGTERM)  # torchrun stops its ranks on SIGTERM
            deadline = time.monotonic() + GRACE_S
        elif deadline is not None and time.monotonic() > deadline:
            _signal(child, signal.SIGKILL)
    below.stop_all(LEFTOVER_GRACE_S)        # whatever CMD left behind (a SIGKILLed torchrun's ranks)
    if code < 0:                            # end as CMD ended: by the same signal
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        time.sleep(1.0)
        return 128 - code
    return code


def _signal(child: subprocess.Popen, sig: int) -> None:
    try:
        child.send_signal(sig)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
