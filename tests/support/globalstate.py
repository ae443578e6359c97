"""What a gpulab call must leave as it found it: a snapshot of the process's global state, and the differences.

:func:`snapshot` records environment variables, the levels of existing loggers, the warnings filters, the
global random number generators (torch, NumPy, Python), torch's process-wide switches (default dtype, grad
mode, threads, TF32, cuDNN, deterministic algorithms), the working folder, live threads, child processes and
the content of files that must never change (``guard``). :func:`leaks` compares two snapshots after giving
threads and children a moment to finish: what is left is a leak.

Libraries' own import-time effects (a logger MLflow configures when first imported, a filter a library adds
on import) are not a call's doing: import those libraries before the first snapshot (:func:`preimport`).

Example:
    >>> before = snapshot()
    >>> leaks(before, snapshot())
    []
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import logging
import os
import random
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

__all__ = ["State", "snapshot", "leaks", "preimport", "digest", "losses", "LIBRARIES"]

# imported before any snapshot: their import-time effects (loggers, warning filters, worker threads) are theirs
LIBRARIES = ("numpy", "pandas", "torch", "torch.profiler", "torch._dynamo", "torch.utils.data", "matplotlib",
             "matplotlib.pyplot", "psutil", "tqdm.auto", "mlflow", "mlflow.entities", "tensorboard",
             "sqlalchemy", "alembic", "PIL.Image")


# state that libraries change once, on their first use, whoever calls them: not a call's leak
LIBRARY_ENV_PREFIXES = ("_TORCHINDUCTOR_",)          # torch.compile's first compile notes a pointer here
LIBRARY_ENV = ("TORCHINDUCTOR_CACHE_DIR",            # TorchInductor names its cache folder on first use
               "CUDA_MODULE_LOADING")                # torch's CUDA set-up (LAZY), on first use
LIBRARY_THREADS = ("tqdm_monitor",)                  # tqdm's one monitor thread, started by its first bar
LIBRARY_LOGGERS = ("torch.__trace",)                 # TorchDynamo's first use sets up torch's logs again
# TorchDynamo (torch 2.5) adds this filter each time it patches torch's optimizers, on its first compilations
LIBRARY_FILTERS = (("ignore", "UserWarning", "torch.distributed"),)


def preimport(names: Iterable[str] = LIBRARIES) -> None:
    """Import the libraries gpulab wraps, when installed, so their import-time effects precede a snapshot."""
    for name in names:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    if importlib.util.find_spec("tensorflow") is not None:      # the way gpulab imports it (Triton's LLVM first)
        with contextlib.suppress(Exception):
            from gpulab._tf import import_tensorflow
            import_tensorflow()


def _rng() -> dict[str, str]:
    out = {"random": hashlib.sha1(repr(random.getstate()).encode()).hexdigest()}
    if "numpy" in sys.modules:
        state = sys.modules["numpy"].random.get_state()
        out["numpy.random"] = hashlib.sha1(state[1].tobytes() + repr(state[2:]).encode()).hexdigest()
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        out["torch (CPU)"] = hashlib.sha1(torch.get_rng_state().numpy().tobytes()).hexdigest()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            for i, s in enumerate(torch.cuda.get_rng_state_all()):
                out[f"torch (cuda:{i})"] = hashlib.sha1(s.numpy().tobytes()).hexdigest()
    return out


def _flushes_subnormals() -> bool:
    """Whether this thread's floating-point unit flushes subnormal numbers to zero (FTZ/DAZ): a process-wide
    switch that a library built with -ffast-math, or torch.set_flush_denormal(True), turns on."""
    tiny = float(sys.float_info.min)
    return tiny / 2 == 0.0


def _torch_switches() -> dict[str, Any]:
    if "torch" not in sys.modules:
        return {"subnormal floats flushed to zero": _flushes_subnormals()}
    torch = sys.modules["torch"]
    out: dict[str, Any] = {"default dtype": torch.get_default_dtype(), "grad enabled": torch.is_grad_enabled(),
                           "inference mode": torch.is_inference_mode_enabled(),
                           "threads": torch.get_num_threads(),
                           "deterministic": torch.are_deterministic_algorithms_enabled(),
                           "matmul precision": torch.get_float32_matmul_precision(),
                           "cudnn.benchmark": torch.backends.cudnn.benchmark,
                           "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
                           "matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                           "subnormal floats flushed to zero": _flushes_subnormals()}
    with contextlib.suppress(Exception):
        out["autocast (cpu)"] = torch.is_autocast_enabled("cpu")
    with contextlib.suppress(Exception):
        out["default device"] = str(torch.get_default_device())
    return out


def _loggers() -> dict[str, tuple[int, bool, int]]:
    manager = logging.root.manager
    out = {"": (logging.root.level, logging.root.disabled, len(logging.root.handlers))}
    for name, logger in list(manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            out[name] = (logger.level, logger.disabled, len(logger.handlers))
    return out


def _children() -> frozenset[int]:
    try:
        import psutil
    except ImportError:                                       # pragma: no cover - psutil is a dependency
        return frozenset()
    with contextlib.suppress(Exception):
        return frozenset(p.pid for p in psutil.Process().children(recursive=True) if p.status() != "zombie")
    return frozenset()


def digest(paths: Iterable[Path]) -> dict[str, str]:
    """``{path: sha1 of its bytes and its mtime}`` of every file under ``paths`` (folders walked)."""
    out: dict[str, str] = {}
    for root in paths:
        root = Path(root)
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []
        for f in files:
            with contextlib.suppress(OSError):
                st = f.stat()
                out[str(f)] = hashlib.sha1(f.read_bytes()).hexdigest() + f"@{st.st_mtime_ns}"
    return out


@dataclass(frozen=True)
class State:
    """The process's global state at one moment (see the module's docstring)."""

    env: dict[str, str]
    loggers: dict[str, tuple[int, bool, int]]
    filters: tuple[Any, ...]
    rng: dict[str, str]
    torch: dict[str, Any]
    cwd: str
    threads: frozenset[int]
    children: frozenset[int]
    files: dict[str, str] = field(default_factory=dict)
    guarded: tuple[str, ...] = ()


def snapshot(guard: Sequence[str | Path] = ()) -> State:
    """The global state now; ``guard`` names files or folders whose content must not change."""
    return State(dict(os.environ), _loggers(), tuple(warnings.filters), _rng(), _torch_switches(), os.getcwd(),
                 frozenset(t.ident for t in threading.enumerate() if t.ident is not None), _children(),
                 digest(Path(g) for g in guard), tuple(str(g) for g in guard))


def _library_pools() -> tuple[set[int], set[int]]:
    """(thread idents, process ids) of the pools a library keeps for the whole process once it has made them:
    TorchInductor's compile pools (``AsyncCompile.pool`` and ``process_pool``, cached, and its ``_pool_set``),
    started by the first compilation that is not in its cache: a thread pool, or worker processes with the
    thread that reads their answers."""
    threads: set[int] = set()
    pids: set[int] = set()
    mod = sys.modules.get("torch._inductor.async_compile")
    if mod is None:
        return threads, pids
    pools = list(getattr(mod, "_pool_set", ()) or ())
    maker = getattr(mod, "AsyncCompile", None)
    for attr in ("pool", "process_pool"):
        fn = getattr(maker, attr, None)
        info = getattr(fn, "cache_info", None)
        with contextlib.suppress(Exception):
            if info is not None and info().currsize:
                pools.append(fn())
    for pool in pools:
        found = list(getattr(pool, "_threads", ()) or ())
        found += [getattr(pool, a, None) for a in ("read_thread", "_executor_manager_thread")]
        threads |= {t.ident for t in found if t is not None and t.ident is not None}
        procs = [getattr(pool, "process", None), *(getattr(pool, "_processes", None) or {}).values()]
        pids |= {p.pid for p in procs if p is not None and getattr(p, "pid", None)}
    if pids:
        with contextlib.suppress(Exception):
            import psutil

            for pid in list(pids):
                pids |= {c.pid for c in psutil.Process(pid).children(recursive=True)}
    return threads, pids


def _settle(before: State, wait_s: float) -> tuple[list[threading.Thread], frozenset[int]]:
    """Threads and child processes started since ``before`` that are still alive after up to ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        pool_threads, pool_pids = _library_pools()
        threads = [t for t in threading.enumerate() if t.ident not in before.threads and t.is_alive()
                   and t.name not in LIBRARY_THREADS and t.ident not in pool_threads]
        children = _children() - before.children - pool_pids
        if (not threads and not children) or time.monotonic() >= deadline:
            return threads, children
        time.sleep(0.05)


def leaks(before: State, after: State | None = None, *, wait_s: float = 2.0,
          allow: Iterable[str] = ()) -> list[str]:
    """What changed between ``before`` and ``after`` (taken now when None), each as one line; ``allow`` names
    kinds a call may change on purpose ("rng", "env", "loggers", "warnings", "torch", "cwd", "threads",
    "children"). Threads and children started since ``before`` get ``wait_s`` to finish first."""
    allow = set(allow)
    threads, children = _settle(before, 0.0 if "threads" in allow and "children" in allow else wait_s)
    after = snapshot(before.guarded) if after is None else after
    found: list[str] = []
    if "env" not in allow:
        for k in sorted(set(before.env) | set(after.env)):
            if before.env.get(k) != after.env.get(k) and not k.startswith(LIBRARY_ENV_PREFIXES) and \
                    k not in LIBRARY_ENV:
                found.append(f"environment variable {k}: {before.env.get(k)!r} -> {after.env.get(k)!r}")
    if "loggers" not in allow:
        for name in sorted(set(before.loggers) & set(after.loggers) - set(LIBRARY_LOGGERS)):
            if before.loggers[name] != after.loggers[name]:
                found.append(f"logger {name or 'root'!r} (level, disabled, handlers): "
                             f"{before.loggers[name]} -> {after.loggers[name]}")
    library = [f for f in after.filters if f not in before.filters and _library_filter(f)]
    if "warnings" not in allow and [f for f in before.filters if f not in library] != \
            [f for f in after.filters if f not in library]:
        added = [f for f in after.filters if f not in before.filters]
        found.append(f"warnings filters changed ({len(before.filters)} -> {len(after.filters)}; new: {added[:3]})")
    if "rng" not in allow:
        for k in sorted(set(before.rng) & set(after.rng)):
            if before.rng[k] != after.rng[k]:
                found.append(f"the global random number generator of {k} was advanced or reseeded")
    if "torch" not in allow:
        for k in sorted(set(before.torch) | set(after.torch)):
            if before.torch.get(k) != after.torch.get(k):
                found.append(f"torch {k}: {before.torch.get(k)!r} -> {after.torch.get(k)!r}")
    if "cwd" not in allow and before.cwd != after.cwd:
        found.append(f"working folder: {before.cwd} -> {after.cwd}")
    if "threads" not in allow:
        found += [f"thread {t.name!r} ({type(t).__name__}) still running" for t in threads]
    if "children" not in allow and children:
        found.append(f"child processes still running: {sorted(children)}")
    return found


def _library_filter(f: Any) -> bool:
    action, _message, category, module, _line = f
    pattern = getattr(module, "pattern", module) or ""
    return any(action == a and getattr(category, "__name__", "") == c and pattern.startswith(m)
               for a, c, m in LIBRARY_FILTERS)


def losses(before: State, after: State | None = None) -> list[str]:
    """Guarded files that were changed or removed since ``before`` (data the call must not touch)."""
    after = snapshot(before.guarded) if after is None else after
    out = []
    for path, mark in before.files.items():
        now = after.files.get(path)
        if now is None:
            out.append(f"{path} was removed")
        elif now != mark:
            out.append(f"{path} was changed")
    return out
