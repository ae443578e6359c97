"""launch(): torchrun from a notebook, every rank's result back; torchrun_command() for a terminal."""
from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Sequence

from .._check import checked, positive, whole
from .agents import _Agents, _failures, _read_markers, _read_results, _root_cause_rank
from .results import DistributedError, LaunchResult, LaunchTimeout

__all__ = ['default_backend', 'free_port', 'torchrun_command', 'launch', 'RESULTS_ENV', 'BACKEND_ENV', 'TIMEOUT_ENV']


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
                        f"'gpulab.course.scripts.ddp_train', got {script!r}")
    text = str(script)
    path = Path(text).expanduser()
    if path.suffix == ".py" or os.sep in text or isinstance(script, os.PathLike):
        if not path.is_file():
            raise ValueError(f"no training script at {str(path)!r}: pass an existing .py file or an importable "
                             "module name such as 'gpulab.course.scripts.ddp_train'")
        return str(path.resolve()), False
    if not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*", text):
        raise ValueError(f"{text!r} is neither a .py file nor a module name")
    try:
        found = importlib.util.find_spec(text) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ValueError(f"no module {text!r} to run: pass an importable module (e.g. 'gpulab.course.scripts.ddp_train') "
                         "or the path of a .py file")
    return text, True


@checked(rdzv_endpoint="name?", rdzv_id="name", rdzv_conf="name?", log_dir="path?", python="name?", check_script="flag",
         module="flag?")
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
    if not isinstance(args, (str, bytes, list, tuple)):
        raise TypeError(f"args must be a list of arguments such as ['--steps', '5'], got {args!r:.60}")
    bad = [a for a in args if a is None or isinstance(a, (list, tuple, dict, set))] \
        if not isinstance(args, (str, bytes)) else []
    if bad:
        raise TypeError(f"args must hold texts or numbers, one per argument, got {bad!r:.60}")
    if isinstance(args, (str, bytes)):
        raise TypeError(f"args must be a list of arguments, one item each, got the text {args!r}: for a command line "
                        "pass shlex.split(text), e.g. shlex.split('--steps 5') == ['--steps', '5']")
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

@checked("torch", timeout_s="pos", echo="fn?", env="mapping?", keep_logs="flag")
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
    Nothing outlives the launching process: Ctrl-C stops every process of the launch, and if this process is
    killed (SIGTERM, SIGKILL: a kernel restart, the OOM killer) a small supervisor between it and torchrun
    stops torchrun and every rank (see ``gpulab/distributed/_lifeline.py``).
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
    package_root = str(Path(__file__).resolve().parents[2])  # the folder holding this gpulab, importable by every rank
    bad_env = {k: v for k, v in (env or {}).items() if not isinstance(k, str) or not isinstance(v, str)}
    if bad_env:
        raise TypeError(f"env must map texts to texts (as os.environ does), got {bad_env!r:.80}: use str(value)")
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
