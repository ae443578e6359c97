"""Run data-parallel training from a notebook with the real engine: ``torchrun`` and ``torch.distributed``.

A notebook cannot host several training processes itself, so :func:`launch` starts ``torchrun`` (as
``python -m torch.distributed.run`` of the kernel's own interpreter, so the kernel's environment is used),
streams every rank's output with a ``[rank N]`` prefix, collects what each rank reported with
:func:`report` (JSON files, not scraped logs), and fails loudly: a rank that raises surfaces its traceback
in a :class:`DistributedError`; a launch that does not finish in ``timeout_s`` is stopped, every process it
started is killed, and :class:`LaunchTimeout` says which rank hung and where. The backend follows the
device: NCCL when every process can have its own CUDA GPU, gloo (CPU) otherwise.

A training script calls :func:`init_worker` (process group, device, stack dumps on request) and
:func:`report`; ``gpulab/scripts/ddp_train.py`` is the course's script. ``nnodes=2`` starts two torchrun
agents on this machine that meet through a c10d rendezvous, exactly as two machines would.

Example (starts two processes; about 10 s on a laptop CPU):
    >>> import gpulab as gl
    >>> run = gl.launch("gpulab.scripts.ddp_train", "--steps", "2", "--no-checks", "--no-baseline", nproc=2)
    >>> [r["rank"] for r in run.results], run.backend in ("gloo", "nccl")
    ([0, 1], True)
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import selectors
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Sequence

from ._check import positive, whole
from ._format import NA, TableView, fmt_number, fmt_seconds

__all__ = ["launch", "LaunchResult", "DistributedError", "LaunchTimeout", "RankFailure", "torchrun_command",
           "default_backend", "free_port", "init_worker", "report", "WorkerInfo", "shard_indices", "allreduce_seconds",
           "scaling", "Scaling", "PublishedScaling", "mirrored_strategy", "RESULTS_ENV", "BACKEND_ENV", "barrier"]

Backend = Literal["gloo", "nccl"]

RESULTS_ENV = "GPULAB_DIST_RESULTS"      # directory where each rank's report() writes rank-<N>.json
BACKEND_ENV = "GPULAB_DIST_BACKEND"      # the backend launch() chose; init_worker() uses it
TIMEOUT_ENV = "GPULAB_DIST_TIMEOUT_S"    # collectives time out with the launch, not after torch's 10 minutes
_RANK_PREFIX = "[rank ${rank}] "          # torchrun's log line prefix: global rank on every line
_PREFIX_ENV = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"   # read by torchrun since torch 2.2 (its flag only from 2.14)


# --------------------------------------------------------------------------------------------- launcher side

def default_backend(processes_per_machine: int = 1) -> Backend:
    """``"nccl"`` when CUDA is available with at least one GPU per process on this machine, else ``"gloo"``.

    NCCL needs a GPU of its own for every rank; gloo runs anywhere (CPU tensors, TCP on localhost).

    Example:
        >>> default_backend(2) in ("gloo", "nccl")
        True
    """
    whole("processes_per_machine", processes_per_machine)
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return "gloo"
    if torch.cuda.is_available() and dist.is_nccl_available() and torch.cuda.device_count() >= processes_per_machine:
        return "nccl"
    return "gloo"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (the OS picks it: bind to port 0).

    Another program could take it before it is used; single-node launches avoid the race entirely
    (``torchrun --standalone`` binds its own port 0), multi-node ones fail loudly if it happens.

    Example:
        >>> 1024 <= free_port() <= 65535
        True
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _resolve_script(script: str | os.PathLike[str]) -> tuple[str, bool]:
    """``(target, is_module)``: an existing ``.py`` file (absolute path) or an importable module name."""
    if not isinstance(script, (str, os.PathLike)) or not str(script).strip():
        raise TypeError(f"script must be a path to a .py file or a module name such as "
                        f"'gpulab.scripts.ddp_train', got {script!r}")
    text = str(script)
    path = Path(text).expanduser()
    if path.suffix == ".py" or os.sep in text or isinstance(script, os.PathLike):
        if not path.is_file():
            raise ValueError(f"no training script at {str(path)!r}: pass an existing .py file or an importable "
                             "module name such as 'gpulab.scripts.ddp_train'")
        return str(path.resolve()), False
    if not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*", text):
        raise ValueError(f"{text!r} is neither a .py file nor a module name")
    try:
        found = importlib.util.find_spec(text) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ValueError(f"no module {text!r} to run: pass an importable module (e.g. 'gpulab.scripts.ddp_train') "
                         "or the path of a .py file")
    return text, True


def torchrun_command(script: str | os.PathLike[str], args: Sequence[str] = (), *, nproc: int = 1, nnodes: int = 1,
                     rdzv_endpoint: str | None = None, rdzv_id: str = "gpulab", rdzv_conf: str | None = None,
                     log_dir: str | None = None,
                     python: str | None = None, check_script: bool = True, module: bool | None = None) -> list[str]:
    """The ``torchrun`` command line (as an argument list) that runs ``script`` on ``nproc`` processes per node.

    One node: ``--standalone`` (a private rendezvous on a port the OS picks). Several nodes: the same command
    runs on every machine, with ``--rdzv-backend=c10d --rdzv-endpoint=HOST:PORT`` naming one of them (the
    rendezvous host) and the same ``--rdzv-id``; each node is assigned its rank when they meet.
    ``python`` defaults to this interpreter (``python -m torch.distributed.run`` is ``torchrun``). ``script`` is a
    ``.py`` file or a module name (run with ``-m``), checked to exist unless ``check_script=False``; ``module``
    forces either reading.

    Example:
        >>> cmd = torchrun_command("train.py", ["--steps", "5"], nproc=8, nnodes=2, rdzv_endpoint="node0:29400",
        ...                        python="python", check_script=False)
        >>> " ".join(cmd)
        'python -m torch.distributed.run --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d --rdzv-endpoint=node0:29400 --rdzv-id=gpulab train.py --steps 5'
    """
    whole("nproc", nproc)
    whole("nnodes", nnodes)
    target, is_module = _resolve_script(script) if check_script else (str(script), not str(script).endswith(".py"))
    is_module = is_module if module is None else module
    cmd = [python or sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}", f"--nproc-per-node={nproc}"]
    if nnodes == 1 and rdzv_endpoint is None:
        cmd.append("--standalone")
    else:
        if not rdzv_endpoint or ":" not in rdzv_endpoint:
            raise ValueError(f"several nodes need rdzv_endpoint='HOST:PORT' of the rendezvous host, got {rdzv_endpoint!r}")
        cmd += ["--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}", f"--rdzv-id={rdzv_id}"]
        cmd += [f"--rdzv-conf={rdzv_conf}"] if rdzv_conf else []
    if log_dir is not None:
        cmd += [f"--log-dir={log_dir}", "--tee=3"]
    if is_module:
        cmd.append("-m")
    return cmd + [target, *map(str, args)]


@dataclass(frozen=True)
class RankFailure:
    """One rank that failed: where it ran and the traceback it printed (or its stack when it hung)."""

    rank: int | None
    node: int
    local_rank: int
    traceback: str

    def __str__(self) -> str:
        who = f"rank {self.rank}" if self.rank is not None else f"local rank {self.local_rank}"
        return f"{who} (node {self.node}, local rank {self.local_rank})"


class DistributedError(RuntimeError):
    """A launch failed. ``failures`` lists the ranks with their tracebacks, root cause first; ``output`` holds
    every line streamed; ``log_dir`` keeps each rank's stdout/stderr files for inspection."""

    def __init__(self, message: str, failures: Sequence[RankFailure] = (), output: Sequence[str] = (),
                 log_dir: str | None = None, returncode: int | None = None) -> None:
        super().__init__(message)
        self.failures = tuple(failures)
        self.output = tuple(output)
        self.log_dir = log_dir
        self.returncode = returncode


class LaunchTimeout(DistributedError, TimeoutError):
    """A launch did not finish in time; every process it started was stopped. ``failures`` hold the stacks
    of the ranks still running (dumped just before they were killed, when they called :func:`init_worker`)."""


@dataclass(frozen=True, repr=False)
class LaunchResult(TableView):
    """What a finished launch produced: one dict per rank from :func:`report`, ordered by rank."""

    script: str
    nproc: int
    nnodes: int
    backend: str
    commands: tuple[str, ...]
    wall_s: float
    results: tuple[dict[str, Any], ...]
    output: tuple[str, ...] = field(repr=False)

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    def result(self, rank: int) -> dict[str, Any]:
        """What ``rank`` reported."""
        for r in self.results:
            if r.get("rank") == rank:
                return r
        raise KeyError(f"rank {rank} reported nothing; ranks that reported: {[r.get('rank') for r in self.results]}")

    def to_dataframe(self) -> Any:
        import pandas as pd

        return pd.DataFrame([{k: v for k, v in r.items() if not isinstance(v, (list, dict))} for r in self.results]
                            ).set_index("rank")

    @property
    def title(self) -> str:  # type: ignore[override]
        name = self.script.rsplit("/", 1)[-1]
        return (f"torchrun {name}: {self.world_size} processes ({self.nnodes} node(s) x {self.nproc}), "
                f"{self.backend}, {fmt_seconds(self.wall_s)} wall")

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        keys: list[str] = []
        for r in self.results:
            keys += [k for k, v in r.items() if k not in keys and isinstance(v, (int, float, str))
                     and not isinstance(v, bool)]
        numbers = [k for k in keys if any(isinstance(r.get(k), float) for r in self.results)]
        shown = [k for k in ("node", "device") if k in keys] + ([k for k in numbers if k.endswith("_per_s")]
                                                                 or numbers)[:4]
        rows = [[str(r.get("rank"))] + [_cell(r.get(k)) for k in shown] for r in self.results]
        return (["rank", *shown], rows, f"{len(self.results)} of {self.world_size} ranks reported "
                                        f"(every value: .results or .to_dataframe())")


def _cell(v: Any) -> str:
    if v is None:
        return NA
    if isinstance(v, (bool, str)):
        return str(v)
    return fmt_number(v)


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
        for i, (cmd, env) in enumerate(zip(commands, envs)):
            # A session of its own: a timeout can signal the whole group. torchrun starts each rank in a session of
            # its own too, so ranks are also tracked one by one (self.track) and killed by pid.
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 env=env, start_new_session=True)
            self.procs.append(p)
            os.set_blocking(p.stdout.fileno(), False)
            self.sel.register(p.stdout, selectors.EVENT_READ, i)
            self.partial[i] = b""
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


def launch(script: str | os.PathLike[str], *args: Any, nproc: int = 2, nnodes: int = 1, backend: Backend | None = None,
           timeout_s: float = 300.0, echo: Callable[[str], Any] | None = None, env: Mapping[str, str] | None = None,
           threads_per_process: int | None = None, keep_logs: bool = False) -> LaunchResult:
    """Run ``script`` (a ``.py`` path or a module name) with torchrun on ``nproc`` processes, and wait for it.

    ``nnodes > 1`` starts that many torchrun agents on this machine, each standing for one node with ``nproc``
    processes; they meet through a c10d rendezvous, as separate machines would, at a store this process hosts on
    ``127.0.0.1`` (hence ``is_host=0`` in ``commands``, the command each "node" ran). ``backend`` defaults to :func:`default_backend` for the
    processes on this machine and reaches the script through ``init_worker``. ``threads_per_process``
    (``OMP_NUM_THREADS``) defaults to this machine's cores divided by its processes.

    ``echo`` receives every output line as it arrives (pass ``print`` in a notebook); lines of rank N start
    with ``[rank N]``. Each rank's :func:`report` calls come back in ``LaunchResult.results``.

    Raises :class:`DistributedError` with the failing rank's traceback when a rank fails (torchrun stops the
    others), and :class:`LaunchTimeout` after ``timeout_s``, having stopped every process of the launch.
    """
    whole("nproc", nproc)
    whole("nnodes", nnodes)
    positive("timeout_s", timeout_s, unit="seconds")
    if threads_per_process is not None:
        whole("threads_per_process", threads_per_process)
    if echo is not None and not callable(echo):
        raise TypeError(f"echo must be a function taking one line (e.g. print) or None, got {echo!r}")
    if os.name != "posix":
        raise RuntimeError("gpulab.launch needs Linux or macOS (on Windows, use WSL): it reads torchrun's output "
                           "through non-blocking pipes and stops processes by session")
    target, is_module = _resolve_script(script)
    local_procs = nproc * nnodes
    if backend is None:
        backend = default_backend(local_procs)
    elif backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo', 'nccl' or None (chosen by device), got {backend!r}")
    elif backend == "nccl":
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus < local_procs:
            raise ValueError(f"backend 'nccl' needs one CUDA GPU per process: {local_procs} processes here, {gpus} "
                             f"GPU(s). Use backend='gloo' or fewer processes.")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = threads_per_process or max(1, cores // local_procs)

    work = Path(tempfile.mkdtemp(prefix="gpulab-launch-"))
    results_dir, log_root = work / "results", work / "logs"
    results_dir.mkdir()
    package_root = str(Path(__file__).resolve().parent.parent)  # this gpulab, importable by every rank
    child_env = {**os.environ, **(env or {})}
    child_env.update({RESULTS_ENV: str(results_dir), BACKEND_ENV: backend, TIMEOUT_ENV: f"{timeout_s:g}",
                      "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1", _PREFIX_ENV: _RANK_PREFIX,
                      "PYTHONPATH": os.pathsep.join([package_root, *filter(None, [child_env.get("PYTHONPATH")])])})
    store = _rendezvous_store() if nnodes > 1 else None
    endpoint = None if store is None else f"127.0.0.1:{store.port}"
    rdzv_id = f"gpulab-{uuid.uuid4().hex[:8]}"
    commands = [torchrun_command(target, [str(a) for a in args], nproc=nproc, nnodes=nnodes, rdzv_endpoint=endpoint,
                                 rdzv_id=rdzv_id, rdzv_conf=None if store is None else "is_host=0",
                                 log_dir=str(log_root / f"node-{i}"), check_script=False, module=is_module)
                for i in range(nnodes)]
    node_envs = [{**child_env, "GPULAB_NODE_INDEX": str(i), **_node_gpus(child_env, backend, i, nproc, nnodes)}
                 for i in range(nnodes)]
    shown = tuple(shlex.join(c) for c in commands)

    start = time.perf_counter()
    agents = _Agents(commands, node_envs, echo)
    deadline = start + timeout_s
    try:
        while agents.running():
            if time.perf_counter() > deadline:
                _stop_on_timeout(agents, results_dir)
                raise _timeout_error(Path(target).name, timeout_s, agents, results_dir, log_root)
            agents.pump(min(0.2, max(0.0, deadline - time.perf_counter())))
            agents.track()
        wall = time.perf_counter() - start
        codes = [p.wait() for p in agents.procs]
    finally:
        if agents.alive():                  # nothing may outlive a launch, whatever happened (even Ctrl-C)
            agents.kill_all()
        agents.close()
        del store                           # closes the rendezvous store, now that no agent needs it
    if any(codes):
        raise _failure_error(Path(target).name, max(codes), agents.lines, results_dir, log_root)
    results = _read_results(results_dir)
    if not keep_logs:
        shutil.rmtree(work, ignore_errors=True)
    return LaunchResult(str(script), nproc, nnodes, backend, shown, wall, tuple(results), tuple(agents.lines))


def _rendezvous_store() -> Any:
    """A c10d TCPStore server in this process for "nodes" on localhost: the OS picks its port (no race), and it
    outlives every agent, so no agent's closing handshake finds it gone. On a cluster, node 0's torchrun (or an
    etcd server) hosts it instead."""
    from torch.distributed import TCPStore

    return TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)


def _timeout_error(name: str, timeout_s: float, agents: _Agents, results_dir: Path, log_root: Path) -> LaunchTimeout:
    markers = _read_markers(results_dir)
    hung = {int(m["pid"]) for m in markers.values()} & set(agents.hung_pids)
    failures = _failures(log_root, markers, only_pids=hung) if hung else []
    done = sorted(r.get("rank") for r in _read_results(results_dir))
    who = ", ".join(str(f) for f in failures) or "some rank (it never called init_worker)"
    return LaunchTimeout(f"{name} did not finish within {timeout_s:g} s: {who} was still running. Every process of "
                         f"the launch was stopped. Ranks that had reported: {done or 'none'}. Logs: {log_root}"
                         + "".join(f"\n\nWhere {f} was:\n{f.traceback}" for f in failures),
                         failures, agents.lines, str(log_root))


def _failure_error(name: str, code: int, lines: Sequence[str], results_dir: Path, log_root: Path) -> DistributedError:
    failures = _failures(log_root, _read_markers(results_dir))
    root = _root_cause_rank(lines)
    failures.sort(key=lambda f: (f.rank != root, f.rank if f.rank is not None else 1 << 30))
    head = failures[0] if failures else None
    message = (f"{name} failed on {head}. Its traceback:\n{head.traceback}" if head else
               f"torchrun exited with code {code} and no rank printed a traceback; last output:\n"
               + "\n".join(lines[-20:]))
    message += f"\n\ntorchrun stopped the other ranks. Logs of every rank: {log_root}"
    return DistributedError(message, failures, lines, str(log_root), code)


def _node_gpus(env: Mapping[str, str], backend: str, node: int, nproc: int, nnodes: int) -> dict[str, str]:
    """Several "nodes" on one machine each see only their own GPUs (as separate machines would), so that
    local rank 0 of node 1 does not share GPU 0 with local rank 0 of node 0."""
    if backend != "nccl" or nnodes == 1:
        return {}
    visible = env.get("CUDA_VISIBLE_DEVICES")
    ids = [v.strip() for v in visible.split(",")] if visible else [str(i) for i in range(nproc * nnodes)]
    return {"CUDA_VISIBLE_DEVICES": ",".join(ids[node * nproc:(node + 1) * nproc])}


def _stop_on_timeout(agents: _Agents, results_dir: Path) -> None:
    """Ask every still-running rank that called init_worker for its stack (SIGUSR1 -> faulthandler), then kill
    every process of the launch."""
    agents.track()
    markers = _read_markers(results_dir)
    live = {p.pid for p in agents.alive()}
    hung = [int(m["pid"]) for m in markers.values() if int(m["pid"]) in live]
    agents.hung_pids = hung
    for pid in hung:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGUSR1)
    if hung:
        end = time.perf_counter() + 1.0
        while time.perf_counter() < end:
            agents.pump(0.1)
    agents.kill_all()


# ----------------------------------------------------------------------------------------------- worker side

@dataclass(frozen=True)
class WorkerInfo:
    """Where this process sits in the job (torchrun's environment variables) and what it computes on."""

    rank: int
    local_rank: int
    world_size: int
    node: int
    backend: str
    device: Any

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_worker(backend: str | None = None) -> WorkerInfo:
    """Join the job torchrun started: ``init_process_group`` with the launcher's backend (NCCL on this rank's own
    GPU, gloo on CPU otherwise), a timeout as long as the launch's, and a stack dump on ``SIGUSR1`` so a launcher
    can show where a hung rank is stuck. Call once at the top of a training script.

    Example (outside torchrun it is a one-process job):
        >>> import os, torch.distributed as dist
        >>> saved = dict(os.environ)
        >>> os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1")
        >>> info = init_worker("gloo")
        >>> info.rank, info.world_size, str(info.device)
        (0, 1, 'cpu')
        >>> dist.destroy_process_group(); os.environ.clear(); os.environ.update(saved)
    """
    import datetime
    import faulthandler

    import torch
    import torch.distributed as dist

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    backend = backend or os.environ.get(BACKEND_ENV) or default_backend(int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    timeout = datetime.timedelta(seconds=float(os.environ.get(TIMEOUT_ENV, "600")))
    if not dist.is_initialized():
        # No device_id: it is a TypeError before torch 2.3 and makes NCCL hang at random on torch 2.6-2.7
        # (pytorch#153960). set_device above already binds this rank to its GPU; barrier() names it.
        dist.init_process_group(backend, timeout=timeout)
    info = WorkerInfo(rank, local_rank, world, int(os.environ.get("GROUP_RANK", "0")), backend, device)
    results = os.environ.get(RESULTS_ENV)
    if results:
        marker = {"rank": rank, "local_rank": local_rank, "pid": os.getpid(),
                  "node_index": int(os.environ.get("GPULAB_NODE_INDEX", "0")), "group_rank": info.node}
        _atomic_write(Path(results) / f"rank-{rank}.started", marker)
    return info


def barrier(info: WorkerInfo) -> None:
    """``dist.barrier()`` that names this rank's GPU on NCCL (``device_ids``), so NCCL never guesses the
    device from the global rank, which hangs when ranks and GPUs are not numbered alike.

    Example (a one-process gloo job):
        >>> import os, torch.distributed as dist
        >>> saved = dict(os.environ)
        >>> os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1")
        >>> barrier(init_worker("gloo"))
        >>> dist.destroy_process_group(); os.environ.clear(); os.environ.update(saved)
    """
    import torch.distributed as dist

    if info.backend == "nccl" and info.device.type == "cuda":
        dist.barrier(device_ids=[info.device.index])
    else:
        dist.barrier()


def _atomic_write(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, default=_jsonable))
    os.replace(tmp, path)


def _jsonable(v: Any) -> Any:
    if hasattr(v, "tolist"):
        return v.tolist()
    if hasattr(v, "item"):
        return v.item()
    raise TypeError(f"report() values must be numbers, strings, lists or dicts of them; got {type(v).__name__}")


_REPORTED: dict[str, Any] = {}    # this process's report, also kept when no launcher collects it


def report(**values: Any) -> dict[str, Any]:
    """Record values for the launcher: merged into this rank's ``rank-<N>.json`` (later calls add or replace
    keys). Returns everything this process reported so far. Values must be JSON-friendly (numbers, strings,
    lists, dicts; tensors and numpy values are converted).

    Example:
        >>> report(items_per_s=1234.5)["items_per_s"]
        1234.5
    """
    rank = int(os.environ.get("RANK", "0"))
    _REPORTED.setdefault("rank", rank)
    _REPORTED.update(json.loads(json.dumps(values, default=_jsonable)))
    target = os.environ.get(RESULTS_ENV)
    if target:
        _atomic_write(Path(target) / f"rank-{rank}.json", _REPORTED)
    return dict(_REPORTED)


# ------------------------------------------------------------------------------------- estimates and tables

def shard_indices(n_items: int, world_size: int, *, seed: int = 0, epoch: int = 0, shuffle: bool = True,
                  drop_last: bool = False) -> list[list[int]]:
    """The indices ``torch.utils.data.DistributedSampler`` gives each of ``world_size`` ranks for a dataset of
    ``n_items`` (computed here, no process group needed). Without ``drop_last`` an uneven dataset is padded by
    repeating its first indices, so some items are seen twice per epoch.

    Example:
        >>> shard_indices(6, 2, shuffle=False)
        [[0, 2, 4], [1, 3, 5]]
        >>> shard_indices(5, 2, shuffle=False)      # padded to 6 by repeating index 0
        [[0, 2, 4], [1, 3, 0]]
    """
    whole("n_items", n_items)
    whole("world_size", world_size)
    from torch.utils.data import DistributedSampler

    shards = []
    for rank in range(world_size):
        sampler = DistributedSampler(range(n_items), num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed,
                                     drop_last=drop_last)
        sampler.set_epoch(epoch)
        shards.append([int(i) for i in sampler])
    return shards


def allreduce_seconds(nbytes: float, link_bytes_per_s: float, workers: int = 2) -> float:
    """Time a ring all-reduce of ``nbytes`` needs on links of ``link_bytes_per_s`` (per direction):
    each worker sends and receives ``2 (n - 1) / n`` times the buffer, so the time hardly grows with n.

    Example: ResNet-50's 25.6 M fp32 gradients (102 MB) between 2 GPUs over PCIe Gen3 (~16 GB/s)
        >>> round(allreduce_seconds(25.6e6 * 4, 16e9, workers=2) * 1e3, 1)
        6.4
    """
    positive("nbytes", nbytes, allow_zero=True, unit="bytes")
    positive("link_bytes_per_s", link_bytes_per_s, unit="bytes per second")
    whole("workers", workers)
    return 2 * (workers - 1) / workers * nbytes / link_bytes_per_s


@dataclass(frozen=True)
class PublishedScaling:
    """A published scaling figure with the number of workers it refers to (relative to its own baseline)."""

    figure: Any          # a gpulab.Published: unit "x" (speedup) or "% scaling efficiency"
    workers: int

    @property
    def speedup(self) -> float | None:
        return self.figure.low if self.figure.unit == "x" else None

    @property
    def efficiency(self) -> float:
        return self.figure.low / self.workers if self.figure.unit == "x" else self.figure.low / 100


@dataclass(frozen=True, repr=False)
class Scaling(TableView):
    """Throughput for several worker counts, its speedup over the baseline and the scaling efficiency
    (speedup divided by the growth in workers), with published figures as extra rows."""

    labels: tuple[str, ...]
    workers: tuple[int, ...]
    items_per_s: tuple[float, ...]
    baseline: str
    published: tuple[PublishedScaling, ...] = ()
    title: str = "Data-parallel scaling"

    def _index(self, label: str) -> int:
        if label not in self.labels:
            raise KeyError(f"no row {label!r}; rows: {list(self.labels)}")
        return self.labels.index(label)

    def speedup(self, label: str) -> float:
        """Throughput of ``label`` over the baseline's."""
        return self.items_per_s[self._index(label)] / self.items_per_s[self._index(self.baseline)]

    def efficiency(self, label: str) -> float:
        """Speedup over the growth in workers: 1.0 is perfect scaling."""
        i, b = self._index(label), self._index(self.baseline)
        return self.speedup(label) / (self.workers[i] / self.workers[b])

    def to_dataframe(self) -> Any:
        import pandas as pd

        rows = [{"run": k, "workers": n, "items/s": v, "speedup": self.speedup(k), "efficiency": self.efficiency(k),
                 "source": "measured here"} for k, n, v in zip(self.labels, self.workers, self.items_per_s)]
        rows += [{"run": p.figure.hardware, "workers": p.workers, "items/s": None, "speedup": p.speedup,
                  "efficiency": p.efficiency, "source": f"{p.figure.source} ({p.figure.date})"} for p in self.published]
        return pd.DataFrame(rows).set_index("run")

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        rows = [[k, str(n), fmt_number(v), f"{self.speedup(k):.2f}x", f"{self.efficiency(k):.0%}", "measured here"]
                for k, n, v in zip(self.labels, self.workers, self.items_per_s)]
        rows += [[p.figure.hardware, str(p.workers), "", "" if p.speedup is None else f"{p.speedup:.2f}x",
                  f"{p.efficiency:.0%}", f"{p.figure.source} ({p.figure.date})"] for p in self.published]
        return (["run", "workers", "items/s", "speedup", "efficiency", "source"], rows,
                "efficiency = speedup / (workers / baseline workers); published: workers relative to their baseline")


def scaling(runs: Mapping[str, tuple[int, float]], baseline: str, published: Mapping[str, int] | None = None,
            title: str = "Data-parallel scaling") -> Scaling:
    """A :class:`Scaling` table from ``{label: (workers, items_per_s)}``. ``published`` maps keys of
    :func:`gpulab.published` figures (a speedup in ``"x"`` or a ``"% scaling efficiency"``) to the number of
    workers the figure is for, relative to its own baseline.

    Example:
        >>> t = scaling({"1 GPU": (1, 100.0), "2 GPUs": (2, 180.0)}, baseline="1 GPU",
        ...             published={"ddp-resnet50-dgxa100-tf32": 8})
        >>> round(t.speedup("2 GPUs"), 2), round(t.efficiency("2 GPUs"), 2), round(t.published[0].efficiency, 3)
        (1.8, 0.9, 0.965)
    """
    if baseline not in runs:
        raise ValueError(f"baseline {baseline!r} is not one of the runs {list(runs)}")
    for k, (n, v) in runs.items():
        whole(f"workers of {k!r}", n)
        positive(f"items_per_s of {k!r}", v)
    from .reference import published as get

    rows = []
    for key, n in (published or {}).items():
        fig = get(key)
        if fig.unit not in ("x", "% scaling efficiency"):
            raise ValueError(f"published figure {key!r} is in {fig.unit!r}, not a speedup ('x') or a scaling efficiency")
        rows.append(PublishedScaling(fig, whole(f"workers of {key!r}", n)))
    return Scaling(tuple(runs), tuple(n for n, _ in runs.values()), tuple(float(v) for _, v in runs.values()),
                   baseline, tuple(rows), title)


# ---------------------------------------------------------------------------------------------- TensorFlow

def mirrored_strategy(cpu_devices: int = 2) -> Any:
    """``tf.distribute.MirroredStrategy`` over every GPU TensorFlow sees, or, without GPUs, over ``cpu_devices``
    logical CPU devices carved out of the one physical CPU (same code path: one replica per device, gradients
    all-reduced). Call before TensorFlow runs any operation: logical devices cannot be added afterwards.

    With Keras 3, build *and* ``compile()`` the model inside ``strategy.scope()``.
    """
    whole("cpu_devices", cpu_devices)
    from ._tf import import_tensorflow

    tf = import_tensorflow()

    if tf.config.list_physical_devices("GPU"):
        return tf.distribute.MirroredStrategy()
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * cpu_devices)
    except RuntimeError:
        pass  # already initialised: use what exists, if it is enough
    logical = [d.name for d in tf.config.list_logical_devices("CPU")]
    if len(logical) < cpu_devices:
        raise RuntimeError(f"TensorFlow already started with {len(logical)} CPU device(s); logical devices must be "
                           "configured before the first TensorFlow operation. Restart the kernel and call "
                           "mirrored_strategy() first.")
    return tf.distribute.MirroredStrategy(devices=logical[:cpu_devices])
