"""Command line: ``python -m gpulab doctor [--json]``, ``python -m gpulab limits``, ``python -m gpulab devicequery``,
``python -m gpulab monitor``, ``python -m gpulab runs`` (MLflow's UI and TensorBoard on the logged runs),
``python -m gpulab check`` (the preflight before a class), ``python -m gpulab version``.

``doctor`` exits 0 when nothing is at level "error" (a healthy CPU-only machine included), 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from typing import Any, Sequence

from . import __version__


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpulab", description="gpulab: make ML fast on GPUs")
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("doctor", help="check the machine and the ML stack; suggest fixes")
    d.add_argument("--json", action="store_true", help="print the report as JSON")
    d.add_argument("--frameworks", default="torch,tensorflow,dali",
                   help="comma-separated frameworks to probe (default: torch,tensorflow,dali)")
    lim = sub.add_parser("limits", help="measure this device's peak matmul FLOP/s and copy bandwidth")
    lim.add_argument("--device", default=None, help="cpu, cuda, cuda:1, mps (default: best available)")
    mon = sub.add_parser("monitor", help="print GPU (NVML) or host metrics every interval; Ctrl-C to stop")
    mon.add_argument("--interval", type=float, default=1.0, help="seconds between samples (default 1)")
    mon.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    mon.add_argument("--csv", default=None, help="write every sample to this CSV file at the end")
    mon.add_argument("--processes", type=int, default=3, metavar="N",
                     help="name the N processes that matter on each line: the busiest on the host's CPUs, those "
                          "holding each GPU's memory (default 3; 0: none)")
    dq = sub.add_parser("devicequery", help="the GPU's execution model (SMs, threads, shared memory, L2, clocks, "
                                            "bus) beside published GPUs, like CUDA's deviceQuery")
    dq.add_argument("--device", default=None, help="cuda, cuda:1 or cpu (default: the current CUDA device, if any)")
    dq.add_argument("--compare", default="T4,A100 40GB SXM,H100 SXM",
                    help="comma-separated published GPUs to show beside it (default: T4,A100 40GB SXM,H100 SXM)")
    runs = sub.add_parser("runs", help="open MLflow's UI and TensorBoard on the runs gl.tracking logged "
                                       "(127.0.0.1 only); Ctrl-C stops both")
    runs.add_argument("--root", default=None, help="the runs folder (default: $GPULAB_RUNS, else ./runs)")
    runs.add_argument("--mlflow-port", type=int, default=5000, help="MLflow UI's port (default 5000)")
    runs.add_argument("--tensorboard-port", type=int, default=6006, help="TensorBoard's port (default 6006)")
    chk = sub.add_parser("check", help="the preflight before a class: environment, ceilings beside the datasheet, "
                                       "the GPU conformance tests and every notebook, with a report in build/gpu-check")
    chk.add_argument("--out", default="build/gpu-check", help="where report.md and report.json go "
                                                              "(default: build/gpu-check in the course's checkout)")
    chk.add_argument("--root", default=None, help="the course's checkout (default: the one gpulab runs from)")
    chk.add_argument("--notebooks", default=None, nargs="+",
                     help="notebook prefixes or paths, by commas or spaces: --notebooks 00 01 A1 (default: all; "
                          "'none' for none)")
    chk.add_argument("--no-tests", action="store_true", help="skip the GPU conformance tests")
    chk.add_argument("--no-limits", action="store_true", help="skip measuring the ceilings")
    chk.add_argument("--budget", type=float, default=900.0, help="seconds for the whole check (default 900)")
    chk.add_argument("--notebook-timeout", type=float, default=300.0, help="seconds per notebook (default 300)")
    chk.add_argument("--jobs", type=int, default=None, metavar="N",
                     help="notebooks (and the tests) at once on the one GPU (default: what the host fits; 1 without "
                          "a GPU); what fails beside others is re-run alone at the end while the budget lasts")
    chk.add_argument("--as", dest="profiles", default="native", metavar="PROFILES",
                     help="native, t4 (a T4 rehearsed on this GPU: its memory, fp16, no TF32, its attention kernels) "
                          "or both: --as native,t4 (default: native)")
    chk.add_argument("--no-ledger", action="store_true",
                     help="write no record into the course's ledger of GPU runs (tests/gpu/runs)")
    chk.add_argument("--json", action="store_true", help="print the report as JSON")
    sub.add_parser("version", help="print gpulab's version")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        return _command(parser, args)
    except ImportError as e:
        if (e.name or "").split(".")[0] == "gpulab":
            raise                                              # gpulab's own module: a bug to see in full
        print(f"gpulab {args.command}: {_missing(e)}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        print(f"gpulab {args.command}: interrupted", file=sys.stderr, flush=True)
        return 130


def _missing(e: ImportError) -> str:
    """An optional package's ImportError as one line, with the ``pip install`` that adds it where gpulab knows it."""
    from ._check import install_hint

    text = " ".join(str(e).split())
    hint = install_hint(e.name) if isinstance(e, ModuleNotFoundError) else None
    return f"{e.name} is not installed: {hint}" if hint else text


def _command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run the command ``args`` names; its exit code."""
    if args.command == "version":
        print(__version__)
        return 0
    if args.command == "doctor":
        from .diagnosis import doctor

        fws = tuple(f.strip() for f in args.frameworks.split(",") if f.strip())
        try:
            report = doctor(frameworks=fws)
        except ValueError as e:
            parser.error(str(e))
        print(json.dumps(report.to_dict(), indent=2, default=str) if args.json else repr(report))
        return 0 if report.healthy else 1
    if args.command == "check":
        return _check(parser, args)
    if args.command == "monitor":
        from .telemetry import Monitor

        try:
            Monitor(interval=args.interval)                    # checks the interval; starts nothing
        except ValueError as e:
            parser.error(f"--interval: {e}")
        if args.processes < 0:
            parser.error(f"--processes must be 0 or more, got {args.processes}")
        return _monitor(args.interval, args.duration, args.csv, args.processes)
    if args.command == "runs":
        from .tracking import ui_commands

        problem = _runs_missing()
        try:
            commands = ui_commands(args.root, mlflow_port=args.mlflow_port, tensorboard_port=args.tensorboard_port)
        except (ValueError, TypeError) as e:
            parser.error(str(e))
        problem = problem or _port_taken(("MLflow", "--mlflow-port", args.mlflow_port),
                                         ("TensorBoard", "--tensorboard-port", args.tensorboard_port)) \
            or _no_runs(commands.root)
        if problem:
            print(f"gpulab runs: {problem}", file=sys.stderr, flush=True)
            return 2
        return _serve_uis(commands)
    if args.command == "devicequery":
        from .devicequery import device_query

        try:
            report = device_query(args.device, compare=tuple(n.strip() for n in args.compare.split(",") if n.strip()))
        except (ValueError, TypeError) as e:
            parser.error(str(e))
        print(repr(report))
        return 0
    if args.command == "limits":
        from .limits import machine_limits

        try:
            report = machine_limits(args.device)
        except (ValueError, TypeError) as e:                  # a device this machine cannot use
            parser.error(str(e))
        print(repr(report))
        return 0
    return 2  # pragma: no cover


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``python -m gpulab check``: exit 0 when every test and notebook passed or skipped, 1 otherwise."""
    from .preflight import Interrupted, check

    given = None if args.notebooks is None else [n.strip() for part in args.notebooks for n in part.split(",")
                                                 if n.strip()]
    nbs = None if given is None else (() if [n.lower() for n in given] == ["none"] else tuple(given))
    try:
        report = check(args.root, args.out, tests=not args.no_tests, notebooks=nbs, limits=not args.no_limits,
                       budget_s=args.budget, notebook_timeout_s=args.notebook_timeout, jobs=args.jobs,
                       profiles=args.profiles, ledger=not args.no_ledger,
                       progress=None if args.json else (lambda line: print(line, flush=True)))
    except (ValueError, TypeError) as e:
        print(f"gpulab check: {e}", file=sys.stderr, flush=True)       # one line, before any work
        return 2
    except Interrupted as stop:
        print(repr(stop.report), flush=True)
        print("gpulab check: interrupted: every job was ended; the report has what finished", file=sys.stderr,
              flush=True)
        return 130
    print(json.dumps(report.to_dict(), indent=2, default=str) if args.json else repr(report))
    undone = [f"{o.name} not run: {o.detail}" for o in report.tests + report.notebooks if o.status == "not run"]
    undone += [n for n in report.notes if n.startswith("notebooks not run")]
    if undone:
        print(f"gpulab check: {'FAILED' if not report.ok else 'incomplete'}: {undone[0]}"
              + (f" (and {len(undone) - 1} more not run)" if len(undone) > 1 else ""), file=sys.stderr, flush=True)
        return 1
    if not report.ok:
        failed = next(o for o in report.tests + report.notebooks if not o.ok)
        print(f"gpulab check: FAILED: {failed.name} {failed.status}"
              + (f": {' '.join(failed.detail.split())[:200]}" if failed.detail else ""), file=sys.stderr, flush=True)
    return 0 if report.ok else 1


def _monitor(interval: float, duration: float | None, csv: str | None, processes: int = 3) -> int:
    """A terminal view like ``nvidia-smi dmon`` (:class:`gpulab.telemetry.dmon.Dmon`): a header with units, one
    line per device per interval, the processes that matter. ``csv`` is checked before sampling starts (exit code
    2 when it cannot be written); if writing it still fails at the end, the samples go to a file in the temp
    folder instead, named on screen (exit code 1)."""
    from .telemetry import Monitor
    from .telemetry.dmon import Dmon, gpu_handles

    problem = None if csv is None else _csv_problem(csv)
    if problem:
        print(f"gpulab monitor: --csv {csv}: {problem}", file=sys.stderr, flush=True)
        return 2
    quiet = logging.getLogger("gpulab")                    # its warnings are in the trace's notes, printed once
    level, ready, gone = quiet.level, threading.Event(), threading.Event()
    quiet.setLevel(logging.ERROR)

    def show(rows: list[dict]) -> None:
        ready.wait(5)
        try:
            for text in view.lines(rows):
                print(text, flush=True)
        except BrokenPipeError:                            # the reader went away (`| head`): stop as it does
            gone.set()

    try:
        import psutil

        view = Dmon(processes=processes, gpu_handles=gpu_handles(), interval=interval)
        mon = Monitor(interval=interval, on_sample=show)
        mon.start()
        shown = set(mon.notes)
        print(f"gpulab monitor: every {interval:g} s; Ctrl-C to stop", flush=True)
        for n in mon.notes:
            print("note:", n)
        print(view.legend(psutil.cpu_count(logical=True)), flush=True)
        ready.set()
        try:
            end = None if duration is None else time.monotonic() + duration
            while (end is None or time.monotonic() < end) and not gone.is_set():
                time.sleep(0.05)
        except KeyboardInterrupt:
            pass
        finally:
            trace = mon.stop()
    finally:
        quiet.setLevel(level)
    if gone.is_set():
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # nothing more to say to a closed pipe
        return 0
    code = 0
    if csv:
        try:
            print(f"wrote {trace.to_csv(csv)} ({len(trace.frame)} rows)")
        except OSError as e:
            import tempfile

            fd, fallback = tempfile.mkstemp(prefix="gpulab-monitor-", suffix=".csv")
            os.close(fd)
            trace.to_csv(fallback)
            print(f"could not write {csv} ({e.strerror or e}); saved the {len(trace.frame)} rows to {fallback}")
            code = 1
    for n in trace.notes:
        if n not in shown:
            print("note:", n)
    if trace.failed_samples:
        print(f"note: {trace.failed_samples} readings failed (the first: {trace.first_error})")
    return code


def _csv_problem(csv: str) -> str | None:
    """Why ``csv`` cannot take the samples (a folder, a missing folder, no write access), or None; a file made
    to find out is removed again."""
    from pathlib import Path

    path = Path(csv).expanduser()
    if path.is_dir():
        return f"is a folder; name a file, such as {path / 'monitor.csv'}"
    if not path.parent.is_dir():
        return f"the folder {path.parent} does not exist: create it first, or choose another path"
    existed = path.exists()
    try:
        with open(path, "a"):
            pass
    except OSError as e:
        return f"cannot be written ({e.strerror or e}): choose another path"
    if not existed:
        path.unlink(missing_ok=True)
    return None


def _serve_uis(commands: Any) -> int:
    """Run MLflow's UI and TensorBoard (a :class:`gpulab.tracking.UICommands`) as child processes until Ctrl-C,
    SIGTERM or SIGHUP, or until one of them exits; then stop both. Each child leads its own process group, so
    its helpers (uvicorn and its workers) stop with it: terminate, wait up to 10 s, then kill. Each runs under
    the launcher's lifeline, so both stop even when this process is killed outright (SIGKILL)."""
    import collections
    import signal
    import subprocess

    from ._tf import QUIET_ENV
    from .distributed._lifeline import command as lifeline

    commands.root.mkdir(parents=True, exist_ok=True)
    (commands.root / "tensorboard").mkdir(exist_ok=True)
    env = {**QUIET_ENV, **os.environ}                      # TensorBoard imports TensorFlow when it is installed
    envs = {"MLflow": {**commands.mlflow_env, **env}, "TensorBoard": env}
    stop = threading.Event()
    signals = [s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None]
    saved = {s: signal.signal(s, lambda signum, frame: stop.set()) for s in signals}
    children: list[tuple[str, Any]] = []
    tails: dict[str, Any] = {}
    readers: dict[str, threading.Thread] = {}
    code = 0
    try:
        for name, argv in (("MLflow", commands.mlflow_argv), ("TensorBoard", commands.tensorboard_argv)):
            child = subprocess.Popen(lifeline(list(argv)), env=envs[name], stdin=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, start_new_session=hasattr(os, "killpg"))
            children.append((name, child))
            tails[name] = collections.deque(maxlen=20)
            readers[name] = threading.Thread(target=_tee, args=(child.stderr, tails[name]), daemon=True,
                                             name=f"gpulab-runs-{name}")
            readers[name].start()
        print(f"MLflow UI:   {commands.mlflow_url}\nTensorBoard: {commands.tensorboard_url}\n"
              f"runs in {commands.root}; both start in a few seconds. Ctrl-C stops both.", flush=True)
        while not stop.is_set() and all(p.poll() is None for _, p in children):
            stop.wait(0.2)
        exited = [(n, p.returncode) for n, p in children if p.poll() is not None]
        if exited and not stop.is_set():
            name, rc = exited[0]
            readers[name].join(2.0)                            # what it printed last, read to the end
            said = [line.strip() for line in tails[name] if line.strip()]
            other = next(n for n, _ in children if n != name)
            print(f"gpulab runs: {name} exited with code {rc}"
                  + (f"; its last words: {said[-1]}" if said else ", printing nothing on stderr")
                  + f"; stopping {other} too", file=sys.stderr, flush=True)
            code = 1
    finally:
        _stop_children([p for _, p in children])
        for s, handler in saved.items():
            signal.signal(s, handler)
        for name, p in children:
            readers[name].join(2.0)
            if not readers[name].is_alive():
                p.stderr.close()
    return code


def _runs_missing() -> str | None:
    """Which of MLflow and TensorBoard cannot be imported here, and how to install them; None when both can."""
    import importlib.util

    from ._check import install_hint

    missing = [m for m in ("mlflow", "tensorboard") if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    return f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed: {install_hint('mlflow')}"


def _no_runs(root: Any) -> str | None:
    """Why there is nothing to open under ``root`` (a file on its path, or no store yet), or None."""
    from pathlib import Path

    root = Path(root)
    blocker = next((p for p in (root, *root.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        return (f"--root {root}: {blocker} is a file, not a folder of runs; pass the folder gl.tracking logged to "
                f"(its default is ./runs of the notebook's working folder, or $GPULAB_RUNS)")
    if not (root / "mlflow.db").exists() and not (root / "tensorboard").is_dir():
        return (f"no runs logged in {root} yet: gl.tracking logs to $GPULAB_RUNS, else ./runs of the working folder "
                f"of the notebook that logged them (e.g. --root notebooks/runs)")
    return None


def _port_taken(*uis: tuple[str, str, int]) -> str | None:
    """Why a UI could not listen on its port of 127.0.0.1 (another program holds it), or None when all are free."""
    import socket

    from .tracking.ui import HOST

    for name, flag, port in uis:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            if os.name != "nt":                      # as the servers do: TIME_WAIT is no obstacle (on Windows the
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # option would share a port in use)
            try:
                s.bind((HOST, port))
            except OSError as e:
                return (f"port {port} of {HOST}, {name}'s, is taken ({e.strerror or e}): stop the program that "
                        f"holds it (another `gpulab runs`?) or choose another port with {flag}")
    return None


def _tee(stream: Any, tail: Any) -> None:
    """Copy a child's stderr to ours line by line, keeping its last lines in ``tail`` (a deque)."""
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace")
        tail.append(line.rstrip())
        try:
            sys.stderr.write(line)
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


def _stop_children(children: list[Any]) -> None:
    """Terminate each child's process group, wait up to 10 s for every process in it, then kill what is left."""
    import signal

    groups = hasattr(os, "killpg")

    def send(p: Any, sig: int) -> None:
        try:
            if groups:
                os.killpg(p.pid, sig)                      # the child leads its own group (start_new_session)
            elif p.poll() is None:
                p.send_signal(sig)
        except (ProcessLookupError, PermissionError):
            pass

    def alive(p: Any) -> bool:
        return p.poll() is None or (groups and _group_running(p.pid))

    for p in children:
        send(p, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while any(alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    for p in children:
        if alive(p):
            send(p, getattr(signal, "SIGKILL", signal.SIGTERM))
        p.wait(timeout=5)


def _group_running(pgid: int) -> bool:
    """Whether process group ``pgid`` still holds a process that is not a zombie."""
    import psutil

    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except (psutil.Error, OSError):
            continue
    return False


if __name__ == "__main__":
    sys.exit(main())
