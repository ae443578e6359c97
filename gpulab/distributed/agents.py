"""The torchrun processes of one launch: started, watched, stopped; their logs read back for tracebacks."""
from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import signal
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from . import _lifeline
from .results import RankFailure

__all__ = []


class _Agents:
    """The torchrun processes of one launch, their descendants, and their merged output."""

    def __init__(self, commands: Sequence[list[str]], envs: Sequence[dict[str, str]],
                 echo: Callable[[str], Any] | None) -> None:
        import subprocess

        import psutil

        self._psutil = psutil
        self.echo = echo
        self.lines: list[str] = []
        self.tracked: dict[int, Any] = {}
        self.hung_pids: list[int] = []
        self.procs: list[Any] = []
        self.sel = selectors.DefaultSelector()
        self.partial: dict[int, bytes] = {}
        self.prefix = len(commands) > 1    # several agents: tag their own lines with the node they stand for
        try:
            for i, (cmd, env) in enumerate(zip(commands, envs)):
                # A session of its own: a timeout can signal the whole group. torchrun starts each rank in a session
                # of its own too, so ranks are also tracked one by one (self.track) and killed by pid. The lifeline
                # between this process and torchrun stops torchrun and every rank if this process dies without
                # cleaning up (SIGTERM, SIGKILL); its watch is tied to this thread, which waits for the launch.
                p = subprocess.Popen(_lifeline.command(cmd), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True)
                self.procs.append(p)
                os.set_blocking(p.stdout.fileno(), False)
                self.sel.register(p.stdout, selectors.EVENT_READ, i)
                self.partial[i] = b""
        except BaseException:
            self.kill_all()                 # an agent that started must not outlive a launch that could not
            raise
        self.track()

    def track(self) -> None:
        """Remember every process below the agents (ranks, their workers): they outlive a killed agent."""
        for p in self.procs:
            with contextlib.suppress(self._psutil.Error):
                agent = self._psutil.Process(p.pid)
                self.tracked.setdefault(agent.pid, agent)
                for child in agent.children(recursive=True):
                    self.tracked.setdefault(child.pid, child)

    def _emit(self, node: int, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if self.prefix and not line.startswith("[rank "):
            line = f"[node {node}] {line}"
        self.lines.append(line)
        if self.echo is not None:
            self.echo(line)

    def pump(self, wait_s: float) -> None:
        """Read whatever output is ready (waiting at most ``wait_s``) and pass complete lines on."""
        if not self.sel.get_map():
            time.sleep(wait_s)
            return
        for key, _ in self.sel.select(timeout=wait_s):
            node = key.data
            try:
                chunk = os.read(key.fileobj.fileno(), 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                self.sel.unregister(key.fileobj)
                if self.partial[node]:
                    self._emit(node, self.partial[node])
                    self.partial[node] = b""
                continue
            data = self.partial[node] + chunk
            *complete, self.partial[node] = data.split(b"\n")
            for raw in complete:
                self._emit(node, raw)

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs) or bool(self.sel.get_map())

    def alive(self) -> list[Any]:
        out = []
        for p in self.tracked.values():
            with contextlib.suppress(self._psutil.Error):
                if p.is_running() and p.status() != self._psutil.STATUS_ZOMBIE:
                    out.append(p)
        return out

    def kill_all(self, grace_s: float = 3.0) -> None:
        """SIGTERM every tracked process and each agent's process group, SIGKILL what is left after ``grace_s``."""
        self.track()
        left = self.alive()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in left:
                with contextlib.suppress(self._psutil.Error):
                    p.send_signal(sig)
            for a in self.procs:
                with contextlib.suppress(OSError):
                    os.killpg(a.pid, sig)
            _, left = self._psutil.wait_procs(left, timeout=grace_s)
        for a in self.procs:
            with contextlib.suppress(Exception):
                a.wait(timeout=grace_s)
        self.close()

    def close(self) -> None:
        for a in self.procs:
            with contextlib.suppress(Exception):
                a.stdout.close()
        with contextlib.suppress(Exception):
            self.sel.close()


def _read_markers(results_dir: Path) -> dict[int, dict[str, Any]]:
    out = {}
    for f in results_dir.glob("rank-*.started"):
        with contextlib.suppress(ValueError, OSError):
            info = json.loads(f.read_text())
            out[int(info["rank"])] = info
    return out


def _read_results(results_dir: Path) -> list[dict[str, Any]]:
    out = []
    for f in sorted(results_dir.glob("rank-*.json"), key=lambda p: int(p.stem.split("-")[1])):
        out.append(json.loads(f.read_text()))
    return sorted(out, key=lambda r: r.get("rank", 0))


_TB_START = "Traceback (most recent call last):"
_RANK_TAG = re.compile(r"^\[rank(\d+)\]:\s?")


def _rank_logs(log_root: Path) -> list[tuple[int, int, Path]]:
    """``(node, local_rank, stderr.log)`` for every rank of every node (torchrun: run/attempt_k/<local>/)."""
    out = []
    for node_dir in sorted(log_root.glob("node-*")):
        node = int(node_dir.name.split("-")[1])
        for err in node_dir.glob("*/attempt_*/*/stderr.log"):
            out.append((node, int(err.parent.name), err))
    return sorted(out)


def _traceback_from(text: str) -> tuple[str, int | None]:
    """The last Python traceback, or the last faulthandler stack dump, in a rank's stderr, and the rank
    (torch tags an uncaught exception's lines with ``[rankN]:``)."""
    rank = None
    clean = []
    for line in text.splitlines():
        m = _RANK_TAG.match(line)
        if m:
            rank = int(m.group(1))
            line = line[m.end():]
        clean.append(line)
    tracebacks = [i for i, line in enumerate(clean) if line.startswith(_TB_START)]
    last_tb = tracebacks[-1] if tracebacks else -1
    dumps = [i for i, line in enumerate(clean) if line.rstrip().endswith("(most recent call first):") and i > last_tb]
    first = dumps[0] if dumps else last_tb
    return ("\n".join(clean[first:]).strip() if first >= 0 else ""), rank


def _root_cause_rank(lines: Sequence[str]) -> int | None:
    """The rank torchrun names under 'Root Cause (first observed failure)'."""
    seen = False
    for line in lines:
        if "Root Cause" in line:
            seen = True
        elif seen:
            m = re.search(r"rank\s*:\s*(\d+)", line)
            if m:
                return int(m.group(1))
    return None


def _failures(log_root: Path, markers: Mapping[int, dict[str, Any]], only_pids: set[int] | None = None
              ) -> list[RankFailure]:
    """Ranks with a traceback (or, for ``only_pids``, a stack dump) in their stderr log. A rank that failed
    without a Python traceback (e.g. the interpreter could not start it) is reported with its stderr tail."""
    by_local = {(int(m.get("node_index", 0)), int(m["local_rank"])): m for m in markers.values()}
    logs = _rank_logs(log_root)
    single_node = len({node for node, _, _ in logs}) == 1
    out = []
    for node, local, err in logs:
        marker = by_local.get((node, local))
        if only_pids is not None and (marker is None or int(marker["pid"]) not in only_pids):
            continue
        with contextlib.suppress(OSError):
            text = err.read_text(errors="replace")
            tb, rank = _traceback_from(text)
            if rank is None:
                rank = int(marker["rank"]) if marker is not None else (local if single_node else None)
            if only_pids is not None:
                tb = tb or "(no stack dump: the script did not call gpulab.distributed.init_worker)"
            elif not tb and marker is None and text.strip():
                tb = "\n".join(text.strip().splitlines()[-20:])   # never got as far as init_worker
            if tb:
                out.append(RankFailure(rank, node, local, tb))
    return out
