#!/usr/bin/env python3
"""Run a command while other processes keep CPU cores busy: the stress run of `make stress`.

    python3 tools/busy_core.py [--cores N] -- COMMAND [ARGS...]

Starts N processes (default 1) that each spin a Python loop, runs COMMAND, then stops them and exits with
COMMAND's status. A test suite that passes this way does not depend on having the machine to itself: a
shared runner, a notebook server or a browser next to it takes a core the same way.

Nothing outlives the run. Each spinner:
  * on Linux asks the kernel for SIGKILL when this process dies (prctl PR_SET_PDEATHSIG), by any signal;
  * elsewhere checks every 0.2 s that this process is still its parent;
and this process stops them on every exit path (normal, exception, SIGINT/SIGTERM).
Standard library only.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1


def _spin(parent: int) -> None:
    """The busy loop: arithmetic for ever, until the parent is gone."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
    x, last = 0, time.monotonic()
    while True:
        for _ in range(100_000):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        now = time.monotonic()
        if now - last > 0.2:
            if os.getppid() != parent:
                os._exit(0)
            last = now


def _start(cores: int) -> list[int]:
    parent, pids = os.getpid(), []
    for _ in range(cores):
        pid = os.fork()
        if pid == 0:            # the child: never returns into the caller's code
            try:
                _spin(parent)
            finally:
                os._exit(0)
        pids.append(pid)
    return pids


def _stop(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in pids:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cores", type=int, default=1, help="how many busy processes (default 1)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("give the command to run after --, e.g. busy_core.py -- make unit")
    if args.cores < 1 or args.cores > (os.cpu_count() or 1):
        ap.error(f"--cores must be from 1 to this machine's {os.cpu_count()} CPUs, got {args.cores}")
    if not hasattr(os, "fork"):
        ap.error("this platform has no fork(): run the busy loop by hand in another terminal")

    def stop_on_signal(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop_on_signal)
    pids = _start(args.cores)
    print(f"busy_core: {args.cores} busy process(es) {pids} beside: {' '.join(command)}", file=sys.stderr, flush=True)
    start = time.monotonic()
    try:
        return subprocess.call(command)
    finally:
        _stop(pids)
        print(f"busy_core: stopped {pids} after {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
