"""The bad-input sweep: every public gpulab call, given a table of bad values per parameter kind.

Each attempt is classified:
- ``clear``: a ``TypeError``/``ValueError``/``LookupError`` (or one of gpulab's own errors) whose message
  names the parameter (or quotes the bad text);
- ``obscure``: another exception, or a message that names neither;
- ``silent``: the call returned, as if the value made sense;
- ``hang``: the call ran past its time limit;
- ``leak``: whatever the call raised, it left global state changed: an environment variable, a logger's level,
  the warnings filters, a global random number generator, one of torch's process-wide switches, the working
  folder, a thread or a child process still running (``tests/support/globalstate.py`` takes the snapshots);
- ``loss``: it changed or removed data it was not asked to write (a logged run's store, a file of the user's).

``python tests/support/badinput.py`` prints the counts and every attempt that was not clear; ``tests/project/test_bad_input_sweep.py``
asserts them. A new public function needs an entry in ``CASES`` (a test checks that every name of
``gpulab.__all__`` has one).
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import math
import signal
import sys
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, Iterator, Mapping, Sequence

nan, inf = math.nan, math.inf

# ---------------------------------------------------------------------------------------------- bad values per kind
KINDS: dict[str, list[Any]] = {
    "count": [0, -1, 2.5, "3", True, nan],          # a whole number >= 1
    "count0": [-1, 2.5, "3", True],                 # a whole number >= 0
    "pos": [0, -1.0, nan, inf, "1"],                # a positive finite number
    "pos0": [-1.0, nan, inf, "1"],                  # a non-negative finite number
    "flag": ["yes", 1, None],                       # True or False
    "flagopt": ["yes", 1],                          # True, False or None
    "text": [3, ["a"]],                             # a text (label, name)
    "choice": ["nonsense", 3],                      # one of a fixed set of texts
    "fn": [3, "fn"],                                # a callable
    "bytes": [-1, 1.5, "1GiB", nan],                # a whole number of bytes
    "mapping": [3, "x", ["a"]],                     # a mapping
    "path": [3, 2.5],                               # a path
}


def _scale_kernel() -> Any:
    """A one-line Triton kernel for kernel_resources' valid call (imported from a file, so its source can be read)."""
    from support.kernel_for_sweep import scale_kernel
    return scale_kernel


def _device_values() -> list[Any]:
    """Devices that do not exist here: always "tpu" and a float; "cuda" and "cuda:7" when they are absent."""
    values: list[Any] = ["tpu", 3.5]
    try:
        import torch
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        n = 0
    if n == 0:
        values.append("cuda")
    if n < 8:
        values.append("cuda:7")
    return values


# ---------------------------------------------------------------------------------------------- one public call
@dataclass(frozen=True)
class Case:
    """A public call: ``call(**good)`` is a valid call; each parameter of ``bad`` gets its bad values in turn."""

    name: str
    call: Callable[..., Any]
    good: Mapping[str, Any]
    bad: Mapping[str, str | Sequence[Any]]
    limit_s: float = 20.0
    gpu_only: bool = False      # without a CUDA GPU the valid call raises a RuntimeError saying a GPU is needed
    allow: tuple[str, ...] = ()  # global state the call changes on purpose (globalstate.leaks' kinds)


@dataclass(frozen=True)
class Attempt:
    case: str
    param: str
    value: Any
    outcome: str            # clear | obscure | silent | hang | leak | loss
    detail: str = ""


OUTCOMES = ("clear", "obscure", "silent", "hang", "leak", "loss")

# the modules a sweep reports one by one: a case belongs to the first group whose prefix its name starts with
GROUPS = {"tracking": ("tracking.", "Run."), "compiling": ("compiling.",), "kernels": ("kernels.",),
          "limits": ("limits.", "machine_limits", "MachineLimits."), "streams": ("streams.",),
          "profile": ("profile", "compare_profiles", "phase"), "capstone": ("capstone.",),
          "gpt": ("gpt.", "attention."), "lesson": ("lesson.",)}


def group(case: str) -> str:
    return next((g for g, prefixes in GROUPS.items() if case.startswith(prefixes)), "other")


@dataclass(frozen=True)
class Sweep:
    attempts: tuple[Attempt, ...]
    cases: int
    seconds: float

    def count(self, outcome: str, group_: str | None = None) -> int:
        return sum(a.outcome == outcome and (group_ is None or group(a.case) == group_) for a in self.attempts)

    def by_group(self) -> dict[str, dict[str, int]]:
        """``{module group: {outcome: count}}``, the groups of :data:`GROUPS` then "other"."""
        out: dict[str, dict[str, int]] = {}
        for g in [*GROUPS, "other"]:
            counts = {o: self.count(o, g) for o in OUTCOMES}
            if sum(counts.values()):
                out[g] = counts
        return out

    def __repr__(self) -> str:
        n = len(self.attempts)
        head = (f"{n} bad inputs against {self.cases} public calls in {self.seconds:.0f} s: "
                f"{self.count('clear')} clear ({100 * self.count('clear') / max(n, 1):.1f}%), "
                f"{self.count('obscure')} obscure, {self.count('silent')} silent, {self.count('hang')} hung, "
                f"{self.count('leak')} leaked, {self.count('loss')} lost data")
        table = [f"  {'':10s}" + "".join(f"{o:>9s}" for o in OUTCOMES)]
        table += [f"  {g:10s}" + "".join(f"{c[o]:9d}" for o in OUTCOMES) for g, c in self.by_group().items()]
        rest = [f"  {a.outcome:8s} {a.case}({a.param}={_short(a.value)}): {a.detail}" for a in self.attempts
                if a.outcome != "clear"]
        return "\n".join([head, *table, *rest])


def _short(value: Any) -> str:
    text = getattr(value, "__name__", None) or repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Hung(BaseException):
    """Raised by the alarm: BaseException, so a library's ``except Exception`` cannot swallow it."""


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    if not hasattr(signal, "setitimer"):        # pragma: no cover - Windows
        yield
        return

    def ring(signum, frame):
        raise _Hung()

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _names(exc: BaseException, param: str, value: Any) -> bool:
    """Whether the message names the parameter, quotes the bad text, or names the bad entry of a mapping."""
    text = str(exc)
    if param in text:
        return True
    texts = [value] if isinstance(value, str) else [v for v in value if isinstance(v, str)] \
        if isinstance(value, (list, tuple)) else []
    if isinstance(value, Mapping):         # {"loss": nan} refused as "metric 'loss' must be finite" names the entry
        return any(repr(k) in text for k in value) or (not value and param.rstrip("s") in text)
    return any(len(v) >= 3 and repr(v) in text for v in texts)


def _clear_types() -> tuple[type[BaseException], ...]:
    """The exceptions a refusal may raise: a wrong type or value, a missing key, a path that does not exist."""
    from gpulab.distributed.results import DistributedError
    return (TypeError, ValueError, LookupError, FileNotFoundError, DistributedError)


def attempt(case: Case, param: str, value: Any) -> Attempt:
    """One bad value, classified; a leak or a loss outranks how the value was refused."""
    from support import globalstate

    before = globalstate.snapshot(guard())
    result = _attempt(case, param, value)
    lost = globalstate.losses(before)
    if lost:
        return Attempt(case.name, param, value, "loss", "; ".join(lost)[:300])
    left = globalstate.leaks(before, allow=case.allow)
    if left:
        _reap(before)
        return Attempt(case.name, param, value, "leak", "; ".join(left)[:300])
    return result


def _reap(before: Any) -> None:
    """Stop child processes a leaking call left, so they do not count against the next call."""
    import psutil

    from support import globalstate

    for pid in globalstate._children() - before.children:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()


def _attempt(case: Case, param: str, value: Any) -> Attempt:
    kwargs = {**case.good, param: value}
    try:
        with _time_limit(case.limit_s):
            case.call(**kwargs)
    except _Hung:
        return Attempt(case.name, param, value, "hang", f"still running after {case.limit_s:.0f} s")
    except _clear_types() as e:
        if _names(e, param, value):
            return Attempt(case.name, param, value, "clear")
        return Attempt(case.name, param, value, "obscure", f"{type(e).__name__}: {str(e)[:160]}")
    except RuntimeError as e:      # a GPU-only call on a machine without one: clear when it names the argument
        if case.gpu_only and _names(e, param, value):
            return Attempt(case.name, param, value, "clear")
        return Attempt(case.name, param, value, "obscure", f"{type(e).__name__}: {str(e)[:160]}")
    except Exception as e:  # noqa: BLE001 - classifying every failure is the point
        return Attempt(case.name, param, value, "obscure", f"{type(e).__name__}: {str(e)[:160]}")
    return Attempt(case.name, param, value, "silent", "accepted")


def bad_values(spec: str | Sequence[Any]) -> list[Any]:
    if isinstance(spec, str):
        return _device_values() if spec == "device" else list(KINDS[spec])
    return list(spec)


def check_good(case: Case) -> str | None:
    """Why ``case``'s valid call fails (None when it works): a sweep is only meaningful from a valid call."""
    try:
        with _time_limit(case.limit_s):
            case.call(**case.good)
    except RuntimeError as e:
        if case.gpu_only and not _has_cuda() and "GPU" in str(e):
            return None
        return f"{case.name}: {type(e).__name__}: {e}"
    except BaseException as e:  # noqa: BLE001
        return f"{case.name}: {type(e).__name__}: {e}"
    return None


def check_state(case: Case) -> tuple[str | None, list[str]]:
    """``case``'s valid call, run once: why it fails (None when it works), and what it left changed (global
    state, guarded data; empty when nothing)."""
    from support import globalstate

    before = globalstate.snapshot(guard())
    why = check_good(case)
    found = [f"{case.name}: lost {x}" for x in globalstate.losses(before)]
    found += [f"{case.name}: {x}" for x in globalstate.leaks(before, allow=case.allow)]
    if found:
        _reap(before)
    return why, found


@functools.lru_cache(maxsize=None)
def guard() -> tuple[str, ...]:
    """Data no call of the sweep may change: a logged run's whole store, and a file of the user's."""
    precious = _tmp_root() + "/precious/notes.txt"
    import os
    os.makedirs(os.path.dirname(precious), exist_ok=True)
    with open(precious, "w") as f:
        f.write("a learner's notes\n")
    logged = (_tracked_root(),) if importlib.util.find_spec("mlflow") is not None else ()   # the lean compat venv
    return (*logged, precious)


def sweep(cases: Sequence[Case] | None = None, *, only: str | None = None) -> Sweep:
    from support import globalstate

    cases = cases_() if cases is None else cases
    if only:
        cases = [c for c in cases if only in c.name]
    globalstate.preimport()
    guard()
    t0 = time.perf_counter()
    out = [attempt(c, p, v) for c in cases for p, spec in c.bad.items() for v in bad_values(spec)]
    return Sweep(tuple(out), len(cases), time.perf_counter() - t0)


# ---------------------------------------------------------------------------------------------- fixtures (built once)
@functools.lru_cache(maxsize=None)
def fx() -> dict[str, Any]:
    """Small valid objects the calls need: tensors, measurements, a trace, a profile, a loader run."""
    import torch

    import gpulab as gl

    x = torch.ones(16, 16)
    mm = lambda: x @ x   # noqa: E731
    a = gl.benchmark(mm, label="a", warmup=1, min_run_time=0.02, warn_noisy=False)
    b = gl.benchmark(mm, label="b", warmup=1, min_run_time=0.02, warn_noisy=False)
    with gl.Monitor(interval=0.02, gpus=False) as mon:
        time.sleep(0.15)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = gl.measure_loader([torch.ones(2, 4)] * 3, label="a", warmup_batches=0)
    run_b = gl.measure_loader([torch.ones(2, 4)] * 3, label="b", warmup_batches=0)
    prof = gl.profile(mm, steps=1, warmup=1, trace=False, label="a", count_work=False)
    prof_b = gl.profile(mm, steps=1, warmup=1, trace=False, label="b", count_work=False)
    limits = gl.machine_limits(dtypes=["float32"], sizes=[64], copy_bytes=1 << 20, min_run_time=0.02)
    return dict(x=x, mm=mm, a=a, b=b, cmp=gl.compare([a, b], baseline="a"), trace=mon.trace, model=model,
                opt=opt, run=run, run_b=run_b, prof=prof, prof_b=prof_b, limits=limits)


def _monitor_call(method: str) -> Callable[..., Any]:
    def call(**kw: Any) -> Any:
        import gpulab as gl
        with gl.Monitor(interval=0.05, gpus=False) as mon:
            target = getattr(mon, method)
            if method == "phase":
                with target(**kw):
                    pass
            else:
                target(**kw)
    return call


def _monitor_stop(**kw: Any) -> Any:
    """``stop(timeout=...)`` of a running Monitor; it is stopped in any case, so no sampling thread is left behind."""
    import gpulab as gl
    mon = gl.Monitor(gpus=False).start()
    try:
        return mon.stop(**kw)
    finally:
        mon.stop()


def _ctx(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A context-manager API called as a user would: entering it is the call."""
    def call(**kw: Any) -> Any:
        with fn(**kw):
            pass
    return call


def _step(n: int) -> Any:
    import torch
    return torch.ones(n, 4).sum()


# ---------------------------------------------------------------------------------------------- the public calls
def cases_() -> list[Case]:  # noqa: PLR0915 - one table
    import gpulab as gl
    from gpulab import compiling, data, distributed, kernels, limits, memory, preflight, profiling, roofline, streams
    from gpulab import timing, tracking, transfer
    from gpulab import course
    from gpulab.course.capstone.ablation import accuracy_floor
    capstone = SimpleNamespace(accuracy_floor=accuracy_floor, **{n: getattr(course, n) for n in (   # lesson 12's calls
        "Recipe", "train_recipe", "recipe_stepper", "digits_on_disk", "Change", "ablate")})

    f = fx
    C = Case
    return [
        # set-up and diagnosis
        C("setup", gl.setup, {}, {"seed": [-1, 2.5, "0", True], "quiet": "flag"},
          allow=("env", "rng")),      # its purpose: seeds every generator, sets the quiet-log variables for the session
        C("by_device", gl.by_device, {"cpu": 1, "cuda": 2}, {"mps": ["x"]}),
        C("device", gl.device, {}, {"prefer": ["tpu", "cuda:7", 3, "cuda"] if not _has_cuda() else ["tpu", 3]}),
        C("system_info", gl.system_info, {}, {"frameworks": [3, "torch", ["jax"]]}),
        C("doctor", gl.doctor, {"frameworks": ("torch",)}, {"frameworks": [3, "torch", ["jax"]]}),
        C("preflight.check", preflight.check, {"out": None, "tests": False, "notebooks": (), "limits": False},
          {"root": ["/nonexistent/course", 3], "out": "path", "tests": "flag", "limits": "flag",
           "notebooks": ["00", [3], ["99"]], "budget_s": "pos", "notebook_timeout_s": "pos", "cell_timeout_s": "pos",
           "kernel_name": "text", "progress": "fn"}),
        C("device_query", gl.device_query, {}, {"device": ["tpu", 3.5], "compare": [3, ["Voodoo 2"]]}),
        # timing
        C("benchmark", lambda **k: gl.benchmark(f()["mm"], **k), {"min_run_time": 0.02, "warmup": 1, "warn_noisy": False},
          {"label": "text", "warmup": "count0", "min_run_time": "pos", "items": "pos", "flops": "pos0",
           "bytes_moved": "pos0", "device": "device", "num_threads": "count", "description": "text",
           "warn_noisy": "flag", "energy": "flag"}),
        C("benchmark(fn)", gl.benchmark, {"fn": f()["mm"], "min_run_time": 0.02}, {"fn": "fn"}),
        C("benchmark_interleaved", gl.benchmark_interleaved,
          {"fns": {"a": lambda: None, "b": lambda: None}, "min_run_time": 0.02},
          {"fns": [3, {"a": 3}, {}, ["a"]], "min_run_time": "pos", "warmup": "count0", "items": [-1, nan, "1", {"z": 1}],
           "flops": [-1, nan, {"z": 1}], "device": "device", "min_rounds": "count", "max_rounds": "count",
           "block_s": "pos", "energy": "flag"}),
        C("timer", _ctx(gl.timer), {}, {"label": "text", "device": "device"}),
        C("interleaved.threads", _ctx(gl.interleaved.threads), {"n": 1}, {"n": "count"}),
        C("compare", gl.compare, {"measurements": [f()["a"], f()["b"]], "baseline": "a"},
          {"measurements": [3, [], [3]], "baseline": ["zzz", 3], "title": "text", "peak_flops": "pos",
           "peak_bandwidth": "pos", "setup_s": [3, {"zzz": 1.0}, {"a": -1.0}, {"a": nan}],
           "published_figures": [3, {"zzz": "amp-pytorch"}, {"a": "no-such-figure"}],
           "price_per_hour": [0, -1.0, nan, inf, "no-such-price", True, []], "energy": ["yes", 1], "gpus": "count"}),
        C("published", gl.published, {"key": "amp-pytorch"}, {"key": ["no-such-figure", 3]}),
        C("gpu_spec", gl.gpu_spec, {"name": "T4"}, {"name": ["Voodoo 2", 3]}),
        C("machine_limits", gl.machine_limits,
          {"dtypes": ["float32"], "sizes": [64], "copy_bytes": 1 << 20, "min_run_time": 0.02},
          {"device": "device", "dtypes": [3, "float32", ["float7"]], "sizes": [[0], [-8], [1.5], "64", 64],
           "copy_bytes": "bytes", "min_run_time": "pos", "refresh": "flag", "caches": "flag"}),
        C("count_flops", gl.count_flops, {"fn": lambda: None}, {"fn": "fn"}),
        C("attainable_flops", gl.attainable_flops, {"intensity": 1.0, "peak_flops": 1e12, "bandwidth": 1e11},
          {"intensity": [-1.0, nan, "1"], "peak_flops": "pos", "bandwidth": "pos"}),
        C("fit_amdahl", gl.fit_amdahl, {"workers": [1, 2], "times_s": [1.0, 0.6]},
          {"workers": [[1], [2, 4], [0, 2], "12", 3, [1, 2, 3]], "times_s": [[1.0], [1.0, nan], [1.0, -1.0], "12", 3]}),
        C("plot_roofline", gl.plot_roofline, {"peak_flops": 1e12, "bandwidth": 1e11},
          {"peak_flops": "pos", "bandwidth": "pos", "points": [3, [("a", -1.0, 1.0)], [("a", 1.0)], [("a", nan, 1.0)]],
           "label": "text", "gpus": [3, "T4", ["Voodoo 2"]], "extra_peaks": [3, {"x": -1.0}]}),
        C("choose_precision", gl.choose_precision, {}, {"info": [3, "cuda"], "gpu": ["Voodoo 2", 3]}),
        # telemetry and profiling
        C("Monitor", lambda **k: gl.Monitor(**k), {},
          {"interval": "pos", "live": "flag", "gpus": "flag", "live_every_s": "pos", "on_sample": [3, "fn"]}),
        C("Monitor.mark", _monitor_call("mark"), {"name": "x"}, {"name": [3, None, ""]}),
        C("Monitor.phase", _monitor_call("phase"), {"name": "x"}, {"name": [3, None, ""]}),
        C("Monitor.stop", _monitor_stop, {}, {"timeout": "pos"}),
        C("Trace.device_frame", lambda **k: f()["trace"].device_frame(**k), {"device": "host"}, {"device": [3, "gpu9"]}),
        C("Trace.to_csv", lambda **k: f()["trace"].to_csv(**k), {"path": _tmp_root() + "/x.csv"}, {"path": "path"}),
        C("Trace.samples", lambda **k: f()["trace"].samples(**k), {"device": "host"}, {"device": [3, "gpu9"]}),
        C("Trace.failed_share", lambda **k: f()["trace"].failed_share(**k), {"device": "host"}, {"device": [3, "gpu9"]}),
        C("Trace.to_tensorboard", lambda **k: f()["trace"].to_tensorboard(**k), {"logdir": _tmp_root() + "/tb"},
          {"logdir": "path"}),
        C("Trace.plot", lambda **k: f()["trace"].plot(**k), {}, {"fig": [3, "fig"], "tight": "flag"}),
        C("Trace.summary", lambda **k: f()["trace"].summary(**k), {},
          {"items": [0, -1, nan, inf, "10", True], "price_per_hour": [0, -1.0, nan, "no-such-price", []],
           "gpus": "count"}),
        C("profile", lambda **k: gl.profile(f()["mm"], **k), {"steps": 1, "warmup": 0, "trace": False, "count_work": False},
          {"steps": "count", "warmup": "count0", "label": "text", "memory": "flag", "record_shapes": "flag",
           "trace": "flag", "trace_dir": "path", "device": "device", "limits": [3, "cpu"], "count_work": "flag"}),
        C("profile(fn)", gl.profile, {"fn": f()["mm"], "steps": 1, "trace": False, "count_work": False}, {"fn": "fn"}),
        C("phase", _ctx(gl.phase), {"name": "x"}, {"name": [3, None, ""]}),
        C("compare_profiles", gl.compare_profiles, {"summaries": [f()["prof"], f()["prof_b"]]},
          {"summaries": [3, [], [3]], "baseline": ["zzz", 3], "timings": [3, {"zzz": 1.0}]}),
        # memory
        C("peak_memory", lambda **k: gl.peak_memory(f()["mm"], **k), {}, {"device": "device"}),
        C("peak_memory(fn)", gl.peak_memory, {"fn": f()["mm"]}, {"fn": "fn"}),
        C("memory_budget", _ctx(gl.memory_budget), {"budget_bytes": 1 << 30}, {"budget_bytes": "bytes", "label": "text"}),
        C("breakdown", lambda **k: gl.breakdown(**k),
          {"model": f()["model"], "optimizer": f()["opt"], "batch": _batch()},
          {"model": [3, "model"], "optimizer": [3, "adam"], "batch": [3, "x"], "loss_fn": [3, "mse"],
           "autocast_dtype": ["bf16", 3]}),
        C("estimate", gl.estimate, {"model_fn": lambda: _linear(), "batch_fn": _batch_n, "batch_size": 2},
          {"model_fn": "fn", "batch_fn": "fn", "batch_size": "count", "optimizer": "choice",
           "autocast_dtype": ["bf16", 3], "context_bytes": "bytes"}),
        C("find_max_batch_size", gl.find_max_batch_size,
          {"step": _step, "start": 2, "limit": 8, "budget": 1 << 30, "time_trials": False},
          {"step": "fn", "start": "count", "limit": [0, -1, 2.5, "8", 1], "budget": "bytes", "device": "device",
           "margin": [0, -0.5, 1.5, nan, "0.9"], "time_trials": "flag", "min_run_time": "pos", "max_trials": "count"}),
        C("explain_oom", gl.explain_oom, {"exc": "CUDA out of memory. Tried to allocate 2.00 GiB"},
          {"exc": [3, None], "capacity_bytes": "bytes", "device": ["tpu", 3.5], "scan_references": "flag",
           "loss_fn": [3, "mse"]}),
        C("free_memory", gl.free_memory, {}, {"device": "device"}),
        # data loading and launching
        C("measure_loader", gl.measure_loader, {"loader": [f()["x"]] * 2, "warmup_batches": 0},
          {"loader": [3, None], "step": [3, "fn"], "label": "text", "epochs": "count", "warmup_batches": "count0",
           "max_batches": "count", "max_s": "pos",
           "device": "device", "non_blocking": "flag", "monitor": [3, "mon"], "description": "text"}),
        C("compare_loaders", gl.compare_loaders, {"runs": [f()["run"], f()["run_b"]], "baseline": "a"},
          {"runs": [3, [], [3]], "baseline": ["zzz", 3], "title": "text",
           "limit_items_per_s": [-1.0, nan, "1", {"zzz": 1.0}], "published": [3, {"zzz": "amp-pytorch"}]}),
        C("launch", gl.launch, {"script": "gpulab.course.scripts.ddp_train", "nproc": 1, "timeout_s": 60},
          {"script": [3, "", "no_such_script.py"], "nproc": "count", "nnodes": "count", "backend": ["mpi", 3],
           "timeout_s": "pos", "echo": [3, "print"], "env": [3, {"A": 1}], "threads_per_process": "count",
           "keep_logs": "flag"}, limit_s=30),
        C("torchrun_command", gl.torchrun_command, {"script": "gpulab.course.scripts.ddp_train"},
          {"script": [3, ""], "args": ["--steps 5", 3, [None], [["a"]]], "nproc": "count", "nnodes": "count",
           "rdzv_endpoint": [3, ""], "rdzv_id": [3, ""], "log_dir": [3], "python": [3],
           "check_script": "flag", "module": "flagopt"}),
        # methods of the results
        C("Comparison.measurement", lambda **k: f()["cmp"].measurement(**k), {"label": "a"}, {"label": ["zzz", 3]}),
        C("Comparison.speedup", lambda **k: f()["cmp"].speedup(**k), {"label": "a"}, {"label": ["zzz", 3]}),
        C("Comparison.joules_per_item", lambda **k: f()["cmp"].joules_per_item(**k), {"label": "a"},
          {"label": ["zzz", 3]}),
        C("Comparison.cost_per_million", lambda **k: f()["cmp"].cost_per_million(**k), {"label": "a"},
          {"label": ["zzz", 3]}),
        C("Comparison.break_even_calls", lambda **k: f()["cmp"].break_even_calls(**k), {"label": "a"},
          {"label": ["zzz", 3]}),
        C("Comparison.plot", lambda **k: f()["cmp"].plot(**k), {}, {"metric": ["nonsense", 3], "ax": [3, "ax"]}),
        C("Measurement.fraction_of", lambda **k: f()["a"].fraction_of(**k), {"peak_per_s": 1e12},
          {"peak_per_s": "pos", "kind": ["nonsense", 3]}),
        C("MachineLimits.peak_flops", lambda **k: f()["limits"].peak_flops(**k), {}, {"dtype": ["float7", 3]}),
        C("MachineLimits.ridge_point", lambda **k: f()["limits"].ridge_point(**k), {}, {"dtype": ["float7", 3]}),
        C("MachineLimits.has", lambda **k: f()["limits"].has(**k), {"dtype": "float32"}, {"dtype": [3, None]}),
        C("MachineLimits.bandwidth_for", lambda **k: f()["limits"].bandwidth_for(**k), {"working_set": 4096},
          {"working_set": [-1, nan, "1 MiB", None, True]}),
        C("limits.cache_levels", limits.cache_levels, {}, {"device": "device"}),
        # one level down
        C("limits.matmul_sweep", limits.matmul_sweep, {"sizes": [32, 48], "dtypes": ["float32"], "min_run_time": 0.02},
          {"sizes": [3, "32", [], [0], [2.5], None], "dtypes": [3, "float32", ["int4"], [], None], "device": "device",
           "min_run_time": "pos"}),
        C("limits.measure_matmul", limits.measure_matmul, {"n": 32, "min_run_time": 0.02, "warmup": 1},
          {"n": "count", "dtype": ["float7", 3], "device": "device", "min_run_time": "pos", "warmup": "count0"}),
        C("limits.measure_bandwidth", limits.measure_bandwidth, {"nbytes": 1 << 16, "min_run_time": 0.02, "warmup": 1},
          {"nbytes": [0, -1, 1.5, "1MiB", nan], "device": "device", "min_run_time": "pos", "warmup": "count0"}),
        C("limits.step_matmul_ceiling", lambda step, **k: limits.step_matmul_ceiling(step, _batch()[0], **k),
          {"step": f()["model"], "min_run_time": 0.02},
          {"step": [3, "model"], "min_run_time": "pos"}),
        C("transfer.measure_transfer", transfer.measure_transfer, {"nbytes": 1 << 16, "min_run_time": 0.02},
          {"nbytes": [0, -1, 1.5, "1MiB", nan], "pinned": "flag", "non_blocking": "flag", "device": "device",
           "direction": "choice", "until": "choice", "min_run_time": "pos", "warmup": "count0", "min_runs": "count"}),
        C("transfer.find_host_syncs", transfer.find_host_syncs, {"fn": lambda: None}, {"fn": "fn", "label": "text"}),
        C("timing.repeat_for", timing.repeat_for, {"seconds": 0.01, "fn": lambda: None},
          {"seconds": "pos", "fn": "fn", "device": "device"}),
        C("timing.synchronize", timing.synchronize, {}, {"device": "device"}),
        C("roofline.ridge_point", roofline.ridge_point, {"peak_flops": 1e12, "bandwidth": 1e11},
          {"peak_flops": "pos", "bandwidth": "pos"}),
        C("roofline.amdahl_speedup", roofline.amdahl_speedup, {"parallel_fraction": 0.9, "workers": 4},
          {"parallel_fraction": [-0.1, 1.5, nan, "0.9"], "workers": [0, -1, "4", nan]}),
        C("memory.memory_growth", memory.memory_growth, {"step": lambda: None, "steps": 2},
          {"step": "fn", "steps": "count", "device": "device", "label": "text"}),
        C("memory.smaller_card", _ctx(memory.smaller_card), {"budget_bytes": 1 << 30},
          {"budget_bytes": "bytes", "device": "device"}),
        C("memory.try_fixes", memory.try_fixes, {"configs": {"a": lambda: None}, "budget": 1 << 30},
          {"configs": [3, {}, {"a": 3}], "budget": "bytes", "device": "device"}),
        C("memory.parse_oom_message", memory.parse_oom_message, {"text": "CUDA out of memory."}, {"text": [3, None]}),
        C("memory.graph_holders", memory.graph_holders, {}, {"min_tensors": "count"}),
        C("profiling.nsight_commands", profiling.nsight_commands, {},
          {"script": [3, ""], "output": [3, ""], "nvtx_range": [3, ""], "kernels": "count", "capture_range": "flag"}),
        C("compiling.cuda_graph", compiling.cuda_graph, {"fn": lambda: None}, {"fn": "fn", "warmup": "count0"},
          gpu_only=True),
        C("compiling.compile_report", lambda **k: compiling.compile_report(**k),
          {"fn": lambda: None, "min_run_time": 0.02},
          {"fn": "fn", "label": "text", "backend": ["nonsense", 3], "mode": ["nonsense", 3], "dynamic": "flagopt",
           "fullgraph": "flag", "explain": "flag", "min_run_time": "pos"}),
        C("streams.model_streams", streams.model_streams, {"tasks": [_task()]},
          {"tasks": [3, [3]], "gpu": ["Voodoo 2", 3], "launch_s": "pos0"}),
        C("streams.measure_streams", streams.measure_streams, {"tasks": [_task()]},
          {"tasks": [3, [3]], "device": "device", "repeats": "count"}, gpu_only=True),
        C("kernels.check_kernel", kernels.check_kernel, {"actual": f()["x"], "expected": f()["x"]},
          {"atol": "pos0", "rtol": "pos0", "label": "text", "actual": [3, "x"]}),
        C("kernels.bench_kernel", kernels.bench_kernel, {"fn": lambda: None, "label": "k", "min_run_time": 0.02},
          {"fn": "fn", "label": [3, None], "device": "device", "bytes_moved": "pos0", "flops": "pos0",
           "min_run_time": "pos", "rep_ms": "count"}),
        C("kernels.occupancy", kernels.occupancy, {"cc": 80, "registers": 32, "shared_bytes": 0},
          {"cc": [70, "80", None, 8.0], "registers": "count0", "shared_bytes": "count0", "num_warps": "count"}),
        C("kernels.kernel_roofline", kernels.kernel_roofline, {"kernels": [kernels.KernelWork("k", 1e6, 1e6)]},
          {"kernels": [3, [3]], "gpu": ["Voodoo 2", 3]}),
        C("distributed.shard_indices", distributed.shard_indices, {"n_items": 10, "world_size": 2},
          {"n_items": "count0", "world_size": "count", "seed": [2.5, "0", nan], "epoch": "count0",
           "shuffle": "flag", "drop_last": "flag"}),
        C("distributed.allreduce_seconds", distributed.allreduce_seconds, {"nbytes": 1e6, "link_bytes_per_s": 1e9},
          {"nbytes": "pos0", "link_bytes_per_s": "pos", "workers": "count"}),
        C("distributed.scaling", distributed.scaling, {"runs": {"1": (1, 1.0), "2": (2, 0.6)}, "baseline": "1"},
          {"runs": [3, {}, {"1": (0, 1.0)}, {"1": (1, -1.0)}, {"1": (1, nan)}], "baseline": ["zzz", 3],
           "published": [3, {"zzz": 1}], "title": "text"}),
        C("distributed.default_backend", distributed.default_backend, {}, {"processes_per_machine": "count"}),
        C("data.measure_loaders", data.measure_loaders, {"loaders": {"a": [f()["x"]] * 2}, "warmup_batches": 0},
          {"loaders": [3, {}, {"a": 3}], "step": [3, "fn"], "rounds": "count", "epochs": "count",
           "max_batches": "count", "max_s": "pos",
           "warmup_batches": "count0", "device": "device", "non_blocking": ["yes", {"zzz": True}]}),
        C("data.check_batches", data.check_batches, {"a": _pair(), "b": _pair()},
          {"a": [3, (1,)], "b": [3, (1,)], "names": [3, ("a",)], "atol": "pos0"}),
    ] + ([] if importlib.util.find_spec("mlflow") is None else [       # the lean compat venv has no MLflow
        C("tracking.track", _ctx(tracking.track), {"name": "r", "root": _tmp_root(), "mlflow": False},
          {"name": [3, "", "  "], "params": [3, ["a"], {"lr": [0.1]}, {"/lr": 1}], "experiment": [3, ""],
           "root": [*KINDS["path"], _a_file()], "tensorboard": "flag", "mlflow": "flag",
           "tags": [3, {"a": 1}, {"gpulab.trace": "1"}, {"mlflow.user": "x"}]}),
        C("tracking.track(mlflow)", _ctx(tracking.track), {"name": "r", "root": _tmp_root() + "/runs"},
          {"root": [*KINDS["path"], _a_file(), _not_a_store(), _folder_store()], "tags": [{"gpulab.tensorboard_dir": "x"}]}),
        C("tracking.runs", tracking.runs, {"root": _tracked_root()},
          {"experiment": [3, "", "zzz"], "root": [*KINDS["path"], _tmp_root() + "/no-runs-here", _not_a_store(), _folder_store()]}),
        C("tracking.load_trace", tracking.load_trace, {"run": "r", "root": _tracked_root()},
          {"run": [3, "", "no-such-run", None], "root": [*KINDS["path"], _tmp_root() + "/no-runs-here", _not_a_store(), _folder_store()],
           "experiment": [3, "", "zzz"]}),
        C("Run.log_metrics", _run_call("log_metrics"), {"metrics": {"loss": 1.0}, "step": 0},
          {"metrics": [3, ["loss"], {"loss": nan}, {"loss": inf}, {"loss": "1"}, {3: 1.0}, {"": 1.0}, {"loss": None}],
           "step": "count0"}),
        C("Run.log_params", _run_call("log_params"), {"params": {"lr": 0.1}},
          {"params": [3, ["lr"], {"lr": [1]}, {"/lr": 1}, {"": 1}, {"big": "x" * 7000}]}),
        C("Run.log_trace", _run_call("log_trace"), {"trace": f()["trace"]}, {"trace": [3, "trace", None]}),
        C("Run.log_text", _run_call("log_text"), {"filename": "notes/a.txt", "text": "hi"},
          {"filename": [3, "", "/abs.txt", "../up.txt", "dir/"], "text": [3, None]}),
        C("Run.log_figure", _run_call("log_figure"), {"fig": _figure(), "filename": "f.png"},
          {"fig": [3, "fig", None], "filename": [3, "f.bmp", "../f.png", ""]}),
    ]) + [
        C("tracking.ui_commands", tracking.ui_commands, {"root": _tmp_root()},
          {"root": "path", "mlflow_port": [0, -1, 70000, "5000", 2.5], "tensorboard_port": [0, -1, 70000, "6006"]}),
        # compiling
        C("compiling.graph_breaks", compiling.graph_breaks, {"fn": _add_one},
          {"fn": [3, "fn", None, _generator_fn, _async_fn]}, limit_s=60),
        C("compiling.compile_report(fn)", lambda **k: compiling.compile_report(**k, min_run_time=0.02),
          {"fn": _add_one}, {"fn": [_generator_fn, _async_fn]}, limit_s=60),
        C("compiling.export", lambda model: compiling.export(model, _batch()[0]), {"model": _linear()},
          {"model": [3, "model", None]}, limit_s=60),
    ] + ([] if not _installed("onnx", "onnxscript", "onnxruntime") else [     # not in the lean compat venv
        C("compiling.onnx_runtime", lambda **k: compiling.onnx_runtime(_linear().eval(), _batch()[0], **k),
          {"path": _tmp_root() + "/m.onnx"},
          {"path": [3, "", _tmp_root() + "/no/such/folder/m.onnx"], "providers": [3, "CPUExecutionProvider",
                                                                                  ["NoSuchProvider"], [3]]},
          limit_s=60),
    ]) + [
        # kernels
        C("kernels.check_kernel(expected)", kernels.check_kernel, {"actual": f()["x"], "expected": f()["x"]},
          {"expected": [3, "x", None, [[1, 2]]], "actual": [None, _object_array()]}),
        C("kernels.traffic", lambda **k: kernels.traffic(**k), {"fn": f()["mm"]},
          {"fn": "fn", "kernels": [3, [3], "k"], "label": [3, ["a"]]}),
        C("kernels.autotune", kernels.autotune, {"configs": _configs(), "key": ["n"], "backend": _triton_cpu()},
          {"configs": [3, [], [3], "BLOCK"], "key": [3, "n", [3]], "backend": [3, "triton9"]}),
        C("kernels.tuning", kernels.tuning, {"kernel": _tuned()}, {"kernel": [3, "k", None, _add_one]}),
        C("kernels.triton_backend", kernels.triton_backend, {}, {"device": "device"}, allow=("env",)),   # *_INTERPRET
    ] + ([] if not _installed("hta") else [                         # not in the lean compat venv
        C("profiling.trace_breakdown", profiling.trace_breakdown, {"traces": _gpu_trace()},
          {"traces": [3, None, [], [3], "", _tmp_root() + "/no-such-trace.json", _tmp_root(), _cpu_trace()],
           "include_last_step": "flag", "kernel_gap_us": "pos0"}),
    ]) + ([] if not _installed("numba", "numba_cuda") else [
        C("kernels.numba_backend", kernels.numba_backend, {}, {"device": "device"}, allow=("env",)),    # on a CPU
    ]) + ([] if not triton_compiles_ahead() else [     # the compat venv's Triton 3.1 predates what it needs
        C("kernels.kernel_resources", kernels.kernel_resources,
          {"kernel": _scale_kernel(), "signature": {"x_ptr": "*fp32", "n": "i32"}, "constexprs": {"BLOCK": 128},
           "ccs": (80,)},
          {"kernel": [3, "k", None, print], "signature": [3, {}, "x"], "constexprs": [3, "x", ["BLOCK"]],
           "num_warps": "count", "ccs": [(61,), (), "80", 80], "timeout_s": "pos"}, limit_s=120),
    ]) + [
        C("kernels.KernelWork", kernels.KernelWork, {"label": "k", "flops": 1e6, "bytes_moved": 1e6},
          {"label": [3, ""], "flops": "pos0", "bytes_moved": "pos0", "measurement": [3, "m"]}),
        C("kernels.kernel_roofline(limits)", kernels.kernel_roofline, {"kernels": [kernels.KernelWork("k", 1e6, 1e6)]},
          {"limits": [3, "cpu"]}),
        C("kernels.cpp_extension", kernels.cpp_extension,
          {"name": "gpulab_sweep_ext", "cpp_sources": _CPP, "functions": ["twice"]},
          {"name": [3, "", "not a name"], "cpp_sources": [3, [3], None], "functions": [3, "twice", [3], [], ["nope"]],
           "cuda_sources": [3, [3]], "cuda_functions": [3, "g", [3]], "extra_cflags": [3, "-O3", [3]],
           "verbose": "flag"}, limit_s=240),
        # limits
        C("limits.ceiling_for", limits.ceiling_for, {"ceiling": 1e12, "rates": [("a", 1e11)]},
          {"ceiling": [0, -1.0, nan, inf, "1"], "rates": [3, [3], [("a", "x")], [("a", -1.0)], "a"],
           "unit": [3, ""], "measured_by": [3]}),
        # streams
        C("streams.StreamTask", streams.StreamTask, {"name": "k", "stream": "s", "kind": "kernel"},
          {"name": [3, ""], "stream": [3, ""], "kind": ["nonsense", 3], "fn": [3, "fn"], "bytes_moved": [-1, 1.5, "1", nan],
           "flops": [-1, nan, inf, "1"]}),
        # profiling
        C("profile(generator)", gl.profile, {"fn": f()["mm"], "steps": 1, "trace": False, "count_work": False},
          {"fn": [_generator_fn, _async_fn, _makes_generator, _on_meta]}),
        # the capstone
        C("capstone.Recipe", capstone.Recipe, {},
          {"batch_size": "count", "lr": "pos", "data": "choice", "workers": "count0", "pin_memory": "flag",
           "precision": ["fp8", 3], "tf32": "flag", "optimizer": "choice", "compile": "flag", "cuda_graphs": "flag",
           "log_every": "count", "schedule": "choice"}),
        C("capstone.train_recipe", capstone.train_recipe,
          {"recipe": capstone.Recipe(batch_size=64), "data": _digits(), "epochs": 1},
          {"recipe": [3, "fp32", {"batch_size": 64}], "data": [3, None, "digits"], "epochs": "count",
           "device": "device", "seed": [-1, 2.5, "0", nan], "run": [3, "run"], "disk_root": "path"}, limit_s=60),
        C("capstone.recipe_stepper", capstone.recipe_stepper, {"recipe": capstone.Recipe(batch_size=64),
                                                               "data": _digits()},
          {"recipe": [3, "fp32"], "data": [3, None], "device": "device", "seed": [-1, 2.5, "0", nan]}),
        C("capstone.digits_on_disk", capstone.digits_on_disk, {"d": _digits(), "root": _tmp_root() + "/digits"},
          {"d": [3, None, "digits"], "root": "path"}, limit_s=60),
        C("capstone.Change", capstone.Change, {"label": "b2", "fields": {"b": 2}},
          {"label": [3, ""], "fields": [3, "x", ["b"]], "why": [3], "available": "flag", "why_not": [3],
           "branch": "flag", "updates": "flag"}),
        C("capstone.ablate", capstone.ablate,
          {"train": _fake_train, "baseline": {"b": 1}, "changes": [capstone.Change("b2", {"b": 2})], "apply": _apply},
          {"train": "fn", "baseline": [None], "changes": [3, [3], "b2"], "apply": "fn", "describe": "fn",
           "params": "fn", "ceiling": "fn", "baseline_label": "text", "title": "text",
           "accuracy_tolerance": [-0.1, 1.0, nan, "0.01"], "min_gain": [-0.1, 1.0, nan, "0.05"], "track": [3, "x"],
           "monitor_interval": [-1.0, nan, inf, "1"], "device": [3], "epochs": [0, -1, 2.5, "3"], "compare": [3, "fn"],
           "rerun": [3, "fn"], "accuracy_seeds": [-1, 2.5, "2"], "judge": ["fast", 3, None],
           "max_epochs": [0, -1, 2.5, "3"]}),
        C("capstone.ablate(results)", capstone.ablate,
          {"train": _fake_train, "baseline": {"b": 1}, "changes": [capstone.Change("b2", {"b": 2})], "apply": _apply},
          {"train": [_none_train, _text_train]}),
        C("capstone.accuracy_floor", capstone.accuracy_floor, {"accuracies": [0.9, 0.91], "tolerance": 0.01},
          {"accuracies": [3, [], [nan], ["a"], [1.5], [-0.1]], "tolerance": [-0.1, 1.5, nan, "0.1"]}),
        C("capstone.ablate(price)", capstone.ablate,
          {"train": _fake_train, "baseline": {"b": 1}, "changes": [capstone.Change("b2", {"b": 2})], "apply": _apply},
          {"price_per_hour": [0, -1.0, nan, inf, "no-such-price", True, []]}),
        C("capstone.precision_cost", course.precision_cost,
          {"fp32_run": _recipe_run("fp32"), "low_run": _recipe_run("bf16")},
          {"fp32_run": [3, None, "run", _recipe_run("bf16")], "low_run": [3, None, _recipe_run("fp32")],
           "price_per_hour": [0, -1.0, nan, inf, "no-such-price", True, []]}),
        C("capstone.compare_precisions", course.compare_precisions,
          {"recipe": capstone.Recipe(batch_size=64, data="host"), "data": _digits(), "epochs": 1},
          {"recipe": [3, "fp32"], "data": [3, None, "digits"], "epochs": "count", "device": "device",
           "price_per_hour": [0, -1.0, nan, inf, "no-such-price", True, []]}, limit_s=60),
        C("capstone.energy_headline", course.energy_headline,
          {"table": capstone.ablate(_fake_train, {"b": 1}, [], apply=_apply)}, {"table": [3, None, "table"]}),
    ] + _lesson12_cases() + _gpt_cases()


def _lesson12_cases() -> list[Case]:
    """Lesson 12's other calls (the ablation driver, the challenge and the results card), and the lesson helpers
    every notebook calls (predictions, narration, checks, the closing table)."""
    import gpulab as gl
    from gpulab import course

    C, d, table, rr = Case, _digits(), _table(), _recipe_run("fp32")
    prices = [0, -1.0, nan, inf, "no-such-price", True, []]
    return [
        C("capstone.torch_ablation", course.torch_ablation,
          {"data": d, "epochs": 1, "device": "cpu", "batch_size": 64, "compare_s": 0, "accuracy_seeds": 0,
           "disk_images": 64},
          {"data": [3, None, "digits"], "epochs": "count", "device": "device", "batch_size": "count",
           "compile_on_cpu": "flag", "track": [3, "x"], "accuracy_tolerance": [-0.1, 1.0, nan, "0.01"],
           "budget": [0, -1, 1.5, "1GiB"], "disk_images": [0, -1, 2.5, "64"], "compare_s": [-1.0, nan, inf, "1"],
           "accuracy_seeds": [-1, 2.5, "2"], "price_per_hour": prices, "judge": ["fast", 3, None],
           "max_epochs": [0, -1, 2.5, "3"]}, limit_s=120),
        C("capstone.scale_lr", course.scale_lr, {"base_lr": 1e-3, "base_batch": 32, "batch": 512},
          {"base_lr": "pos", "base_batch": "count", "batch": "count", "rule": "choice"}),
        C("capstone.lesson_price", course.lesson_price, {"price_per_hour": 1.0},
          {"price_per_hour": prices, "device": "device"}),
        C("capstone.describe_price", course.describe_price, {"price": gl.cost.hourly_price(1.0)},
          {"price": [3, "x", 1.0]}),
        C("capstone.digits", course.digits, {"n_train": 256, "n_test": 64, "download": False},
          {"n_train": [0, -1, 2.5, "3", True, 10**9], "n_test": [0, -1, 2.5, "3", True, 10**9],
           "seed": [-1, 2.5, "0", True], "download": "flag", "timeout_s": "pos"}),
        C("capstone.recipe_ceiling", course.recipe_ceiling,
          {"recipe": course.Recipe(batch_size=64), "device": "cpu", "min_run_time": 0.02},
          {"recipe": [3, "fp32", {"batch_size": 64}], "device": "device", "min_run_time": "pos"}),
        C("capstone.mfu_report", course.mfu_report, {"table": table, "model": _linear()},
          {"table": [3, None, "table"], "label": [3, "zzz"], "model": [-3, None, "model"]}),
        C("capstone.results_card", course.results_card,
          {"title": "t", "tables": [table], "folder": _tmp_root() + "/card"},
          {"title": [3, ""], "tables": [3, "t", [3]], "headline": [3, [("a",)], [(1, 2)]], "folder": "path",
           "name": [3, "", "../x", "a/b"]}),
        C("capstone.check_tracked", course.check_tracked, {"name": "n", "run": None},
          {"name": [3, ""], "run": [3, "run"], "metrics": [3, "loss", [3]], "trace": "flag", "root": "path"}),
        C("capstone.recipe_challenge", course.recipe_challenge, {"name": "n", "recipe": None, "data": d, "baseline": rr},
          {"name": [3, ""], "recipe": [3, "fp32", {"batch_size": 64}], "data": [3, None, "digits"],
           "baseline": [3, None, "x"], "speedup": [0, -1.0, nan, inf, "5", True],
           "accuracy_tolerance": [-0.1, 1.0, nan, "0.01"], "epochs": [0, -1, 2.5, "3"], "device": "device",
           "compare_s": [-1.0, nan, inf, "1"], "not_from": [3, "table"]}),
        C("lesson.predict", course.predict, {"key": "sweep k", "value": 1.0},
          {"key": [3, "", None], "value": [[1], nan, True], "unit": [3], "note": [3]}),
        C("lesson.versus_prediction", course.versus_prediction, {"key": "sweep k", "measured": 1.0},
          {"key": [3, ""], "measured": [[1], {}], "unit": [3], "tolerance": [-0.1, nan, "0.1"], "noisy": "flag"}),
        C("lesson.compare_predictions", course.compare_predictions, {"measured": {"sweep k": 1.0}},
          {"measured": [3, "k", ["k"], {3: 1.0}], "unit": [3], "tolerance": [-0.1, nan, "0.1"], "noisy": "flag",
           "title": "text"}),
        C("lesson.narrate", course.narrate, {"cpu": "a {x}", "cuda": "b {x}", "x": 1.0},
          {"cpu": [3, None], "cuda": [3, None], "mps": [3], "kind": [3, "tpu"], "noisy": "flag"}),
        C("lesson.check", course.check, {"name": "n", "got": 1.0, "expected": 1.0},
          {"name": [3, ""], "rtol": [-0.1, nan, "0.1"], "hint": [3]}),
        C("lesson.measured", course.measured, {"quantity": "q", "yours": 1.0, "unit": "x"},
          {"quantity": [3, ""], "yours": [[1], True], "unit": [3], "vs": [3, "no-such-figure", [3]], "claim": [3],
           "source": [3], "note": [3], "noisy": "flag", "digits": "count"}),
        C("lesson.your_numbers", course.your_numbers, {"rows": [course.measured("q", 1.0, "x")]},
          {"rows": [3, "x", [3]], "title": "text"}),
        C("lesson.cite", lambda **k: course.cite("amp-pytorch", **k), {}, {"source": "flag"}),
        C("lesson.by_this_course", course.by_this_course, {"figure": "gpt2_small_train_mfu_of_measured_peak"},
          {"figure": [3, ""], "unit": [3], "root": "path"}),
        C("lesson.setup", course.setup, {}, {"seed": [-1, 2.5, "0", True], "quiet": "flag"},
          allow=("env", "rng")),      # its purpose: seeds every generator, sets the quiet-log variables
        C("lesson.needs", course.needs, {"package": "mlflow", "part": "p"}, {"package": [3, "nonsense"], "part": [3, ""]}),
        C("lesson.fsdp_runs_on_cpu", course.fsdp_runs_on_cpu, {}, {"version": [3, "x.y", ""]}),
    ]


@functools.lru_cache(maxsize=None)
def _table() -> Any:
    from gpulab import course
    return course.ablate(_fake_train, {"b": 1}, [course.Change("b2", {"b": 2})], apply=_apply)


def _gpt_run() -> Any:
    """A measured run's record, as :func:`gpulab.course.train_gpt` returns it: 1,000 tokens/s at 100 tokens a step."""
    from gpulab.course.transformers.train import GPTRecipe, GPTRun

    return GPTRun(GPTRecipe(), "cpu", 100, (5.0, 0.1, 0.1, 0.1), (), 1.0, 0.5, None, 1.0)


def _gpt_cases() -> list[Case]:
    """Lesson 13's calls: the course's GPT (its forward, generation, windows of the text), its recipes and trainer,
    the attention sweep, generation speed, and the SDPA backends report."""
    import torch

    from gpulab import attention, course

    g, C, t = _gpt(), Case, _tensors()
    shape, tiny = g["shape"], course.GPTRecipe(micro_batch=2)
    ids_bad = [3, [[1, 2]], t["float_ids"], t["ids"][0], t["ids"][None], t["ids"] + 300, t["ids"] - 300, t["ids"][:, :0],
               t["ids"].to("meta")]
    shapes_bad = [3, "gpt2", None, g["small_vocab"], g["too_long"]]
    recipes_bad = [3, "fp32", {"precision": "bf16"}]
    q = t["q"]
    return [
        C("gpt.gpt", course.gpt, {"shape": shape}, {"shape": [3, "gpt2", None, {"layers": 1}], "manual_attention": "flag"},
          allow=("rng",)),       # its purpose: weights drawn from torch's generator, as torch.manual_seed(0) then set

        C("gpt.forward", lambda **k: g["model"](**k), {"idx": t["ids"], "targets": t["ids"]},
          {"idx": ids_bad, "targets": [3, t["float_ids"], t["ids"][:, :5], t["ids"] + 300, t["ids"] - 300],
           "start": [-1, 2.5, "0", 1000], "caches": [3, "x", [[]] * 5, [[1, 2, 3]]]}),
        C("gpt.generate", course.generate, {"model": g["model"], "prompt": t["ids"][:, :4], "new_tokens": 2},
          {"model": [3, "gpt", None, torch.nn.Linear], "prompt": ids_bad, "new_tokens": [*KINDS["count"], 10**6],
           "kv_cache": "flag"}),
        C("gpt.static_caches", course.static_caches, {"model": g["model"], "capacity": 8},
          {"model": [3, "gpt", None, torch.nn.Linear(2, 2)], "capacity": "count"}),
        C("gpt.StaticKV", course.StaticKV, {"capacity": 8}, {"capacity": "count"}),
        C("gpt.checkpoint_blocks", course.checkpoint_blocks, {"model": g["fresh_model"]},
          {"model": [3, "gpt", None, torch.nn.Linear(2, 2)]}),
        C("gpt.counted_flops_per_token", course.counted_flops_per_token, {"shape": shape, "batch": 1},
          {"shape": [3, "gpt2", None], "checkpoint": "flag", "batch": "count", "device": "device"}),
        C("gpt.token_batch", course.token_batch,
          {"tokens": g["text"], "batch": 2, "seq_len": 8, "generator": torch.Generator().manual_seed(0)},
          {"tokens": [3, [1, 2, 3], t["float_ids"][0], t["ids"], g["text"][:5]], "batch": "count",
           "seq_len": [*KINDS["count"], 10**9], "generator": [3, "g"], "device": "device"}),
        C("gpt.GPTRecipe", course.GPTRecipe, {},
          {"precision": ["fp8", 3, None], "fused": "flag", "compile": "flag", "checkpoint": "flag",
           "micro_batch": "count", "accumulation": "count", "lr": [0, -1.0, 1.5, nan, inf, "0.1", True]}),
        C("gpt.train_gpt", course.train_gpt, {"shape": shape, "recipe": tiny, "steps": 2, "device": "cpu",
                                             "eval_windows": 2},
          {"shape": shapes_bad, "recipe": recipes_bad, "steps": "count", "device": "device",
           "seed": [-1, 2.5, "0", nan, True], "eval_windows": "count", "run": [3, "run"],
           "parts": [0, -1, 2.5, "2", 3]}, limit_s=60),
        C("gpt.GPTRun.tokens_in", _gpt_run().tokens_in, {"seconds": 1.0}, {"seconds": "pos", "parts": "count"}),
        C("gpt.gpt_stepper", course.gpt_stepper, {"shape": shape, "recipe": tiny, "device": "cpu"},
          {"shape": shapes_bad, "recipe": recipes_bad, "device": "device", "seed": [-1, 2.5, "0", nan]}),
        C("gpt.gpt_changes", course.gpt_changes, {"shape": shape, "device": "cpu"},
          {"shape": shapes_bad, "device": "device", "compile_on_cpu": "flag"}),
        C("gpt.micro_batches_that_fit", course.micro_batches_that_fit,
          {"shape": shape, "recipe": course.GPTRecipe(micro_batch=1), "device": "cpu", "up_to": 2},
          {"shape": shapes_bad, "recipe": recipes_bad, "device": "device", "up_to": "count"}, limit_s=60),
        C("gpt.gpt_ablation", course.gpt_ablation,
          {"shape": shape, "tokens": 256, "baseline": tiny, "device": "cpu", "accuracy_seeds": 0, "compare_s": 0},
          {"shape": shapes_bad, "tokens": "count", "baseline": recipes_bad, "device": "device",
           "compile_on_cpu": "flag", "accuracy_tolerance": [-0.1, 1.0, 5, nan, "0.01"],
           "accuracy_seeds": [-1, 2.5, "2"], "compare_s": [-1.0, nan, inf, "1"],
           "price_per_hour": [0, -1.0, nan, inf, "no-such-price", True, []], "track": [3, "x"],
           "judge": ["fast", 3, None], "max_epochs": [0, 3, 2.5, "8"]}, limit_s=120),
        C("gpt.gpt_challenge", course.gpt_challenge, {"name": "faster", "shape": shape, "yours": None, "device": "cpu"},
          {"name": [3, "", None], "shape": shapes_bad, "yours": recipes_bad, "baseline": recipes_bad,
           "speedup": [0, -1.0, nan, inf, "1.5", True], "tokens": "count",
           "accuracy_tolerance": [-0.1, 1.0, 5, nan, "0.02"], "min_run_time": "pos", "device": "device"}),
        C("gpt.attention_sweep", course.attention_sweep,
          {"seq_lens": [16, 32], "batch": 1, "heads": 2, "head_dim": 8, "min_run_time": 0.01, "device": "cpu"},
          {"seq_lens": [3, "128", [], [0], [2.5], None], "batch": "count", "heads": "count", "head_dim": "count",
           "dtype": [3, "float16", torch.int64], "device": "device", "min_run_time": "pos", "backward": "flag"}),
        C("gpt.generation_speed", course.generation_speed,
          {"model": g["model"], "prompt_len": 4, "new_tokens": 4, "batches": (1,), "repeats": 1},
          {"model": [3, "gpt", None, torch.nn.Linear(2, 2)], "prompt_len": [*KINDS["count"], 10**6],
           "new_tokens": "count", "batches": [3, "1", [], [0], [2.5]], "repeats": "count", "device": "device",
           "limits": [3, "cpu", {"bandwidth": 1e9}]}),
        C("attention.sdpa_backends", attention.sdpa_backends, {"q": q, "k": q, "v": q},
          {"q": [3, None, q.numpy(), q.long(), q[0, 0], q[:, :, :0], q.to("meta")],
           "k": [q.double(), t["k_dim"], t["k_heads"]], "v": [t["v_len"], 3], "fn": [3, "fn", _no_sdpa],
           "attn_mask": [3, t["mask_shape"], t["mask_long"]], "is_causal": ["yes", 1], "dropout_p": [2.0, -0.1, "0.1"],
           "scale": [nan, "1"], "enable_gqa": ["yes"], "nonsense": [1]}),
        C("attention.sdpa_backends(is_causal)", attention.sdpa_backends, {"q": q, "k": q, "v": q, "is_causal": True},
          {"attn_mask": [t["mask_ok"]]}),
        C("attention.sdpa_backend", attention.sdpa_backend, {"q": q, "k": q, "v": q},
          {"q": [3, q.long(), q[0, 0]], "k": [q.double(), t["k_dim"]], "v": [t["v_len"]], "fn": [3, _no_sdpa]}),
        C("attention.own_reasons", attention.own_reasons, {"backend": "flash", "messages": []},
          {"backend": [3, "flash2", None, ["flash"]], "messages": [3, "text", [3]]}),
    ]


@functools.lru_cache(maxsize=None)
def _gpt() -> dict[str, Any]:
    """A tiny GPT (made without drawing from the global generator), the course's text, and shapes it cannot train."""
    import torch

    from gpulab import course
    from gpulab.transformer import TransformerShape

    shape = TransformerShape(layers=1, d_model=32, heads=2, seq_len=32, vocab=256)
    with torch.random.fork_rng(devices=[]):
        model = course.gpt(shape).eval()
        fresh = course.gpt(shape)               # for checkpoint_blocks, which changes the model it is given
    return {"shape": shape, "model": model, "fresh_model": fresh, "text": course.text_tokens(),
            "small_vocab": TransformerShape(layers=1, d_model=32, heads=2, seq_len=32, vocab=100),
            "too_long": TransformerShape(layers=1, d_model=32, heads=2, seq_len=10**6, vocab=256)}


@functools.lru_cache(maxsize=None)
def _tensors() -> dict[str, Any]:
    import torch

    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 256, (2, 16), generator=gen)
    q = torch.randn(1, 2, 16, 8, generator=gen)
    return {"ids": ids, "float_ids": ids.float(), "q": q, "k_dim": torch.randn(1, 2, 16, 4, generator=gen),
            "k_heads": torch.randn(1, 3, 16, 8, generator=gen), "v_len": torch.randn(1, 2, 10, 8, generator=gen),
            "mask_shape": torch.ones(3, 3, dtype=torch.bool), "mask_long": torch.ones(16, 16, dtype=torch.long),
            "mask_ok": torch.ones(16, 16, dtype=torch.bool)}


def _no_sdpa(q: Any, k: Any, v: Any, **kw: Any) -> Any:
    """A fn for the SDPA report that never calls SDPA."""
    return q @ k.transpose(-2, -1) @ v


def _installed(*names: str) -> bool:
    return all(importlib.util.find_spec(n) is not None for n in names)


def triton_compiles_ahead() -> bool:
    """Whether the installed Triton is one gl.kernels.kernel_resources can use (3.4 or newer)."""
    if not _installed("triton"):
        return False
    import triton
    return tuple(int(p) for p in triton.__version__.split(".")[:2]) >= (3, 4)


def _has_cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def _linear() -> Any:
    """A small model, made without drawing from the global random number generator (the sweep watches it)."""
    import torch
    with torch.random.fork_rng(devices=[]):
        return torch.nn.Linear(4, 2)


def _batch_n(n: int) -> Any:
    import torch
    return (torch.ones(n, 4), torch.zeros(n, dtype=torch.long))


def _batch() -> Any:
    return _batch_n(2)


def _pair() -> Any:
    import torch
    return (torch.ones(2, 3), torch.zeros(2, dtype=torch.long))


def _task() -> Any:
    from gpulab.streams import StreamTask
    return StreamTask("k", "s", "kernel", fn=lambda: None, flops=10**6, bytes_moved=10**6)


@functools.lru_cache(maxsize=None)
def _tracked_root() -> str:
    """A runs folder with one logged MLflow run and its trace (``tracking.runs`` and ``load_trace`` read it)."""
    from gpulab import tracking
    root = _tmp_root() + "/tracked"
    with tracking.track("r", root=root, tensorboard=False) as run:
        run.log_metrics({"x": 1.0}, step=0)
        run.log_trace(fx()["trace"])
    return root


def _run_call(method: str) -> Callable[..., Any]:
    """A method of a run being logged (MLflow and TensorBoard), called inside its ``with`` block."""
    def call(**kw: Any) -> Any:
        from gpulab import tracking
        with tracking.track("sweep", root=_tmp_root() + "/runs") as run:
            getattr(run, method)(**kw)
    return call


@functools.lru_cache(maxsize=None)
def _a_file() -> str:
    """A file where a folder is expected."""
    path = _tmp_root() + "/a-file"
    with open(path, "w") as f:
        f.write("not a folder\n")
    return path


@functools.lru_cache(maxsize=None)
def _not_a_store() -> str:
    """A runs folder whose mlflow.db is not a database."""
    import os
    root = _tmp_root() + "/not-a-store"
    os.makedirs(root, exist_ok=True)
    with open(root + "/mlflow.db", "wb") as f:
        f.write(b"these are not the tables you are looking for" * 100)
    return root


@functools.lru_cache(maxsize=None)
def _folder_store() -> str:
    """A runs folder whose mlflow.db is a folder."""
    import os
    root = _tmp_root() + "/folder-store"
    os.makedirs(root + "/mlflow.db", exist_ok=True)
    return root


@functools.lru_cache(maxsize=None)
def _figure() -> Any:
    from matplotlib.figure import Figure
    fig = Figure(figsize=(2, 2))
    fig.add_subplot().plot([0, 1], [0, 1])
    return fig


@functools.lru_cache(maxsize=None)
def _digits() -> Any:
    from gpulab import course
    return course.digits(n_train=256, n_test=64, download=False)


def _add_one(x: Any = None) -> Any:
    import torch
    return (torch.ones(4) if x is None else x) + 1


def _generator_fn() -> Any:
    yield _add_one()


async def _async_fn() -> Any:
    return _add_one()


def _on_meta() -> Any:
    """Work on the meta device: shapes only, nothing computed."""
    import torch
    return torch.ones(64, 64, device="meta") @ torch.ones(64, 64, device="meta")


def _makes_generator() -> Any:
    return (_add_one() for _ in range(2))


def _object_array() -> Any:
    import numpy as np
    return np.array([object(), object()], dtype=object)


def _configs() -> list[Any]:
    _triton_cpu()                                   # on a CPU, Triton's interpreter is chosen before triton imports
    import triton
    return [triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})]


@functools.lru_cache(maxsize=None)
def _triton_cpu() -> Any:
    from gpulab import kernels
    return kernels.triton_backend("cpu")


@functools.lru_cache(maxsize=None)
def _tuned() -> Any:
    """A kernel under gl.kernels.autotune (Triton's interpreter on a CPU): ``tuning`` reads its choice."""
    from gpulab import kernels
    return kernels.autotune(_configs(), key=["n"], backend=_triton_cpu())(_add_one)


_CPP = "torch::Tensor twice(torch::Tensor x) { return x * 2; }"


def _fake_train(recipe: Any, run: Any) -> Any:
    b = recipe["b"]
    return SimpleNamespace(samples_per_s=100.0 * b, spread_pct=1.0, test_accuracy=0.9, peak_memory_bytes=1000 * b,
                           flops_per_sample=1e6)


def _none_train(recipe: Any, run: Any) -> Any:
    return None


def _text_train(recipe: Any, run: Any) -> Any:
    return "fast"


def _apply(recipe: Any, fields: Any) -> Any:
    return {**recipe, **fields}


def _recipe_run(precision: str) -> Any:
    from gpulab import course
    return course.RecipeRun(course.Recipe(precision=precision), "cpu", 2, 100, (1.0, 1.0), (), 0.9, None, 1e6)


@functools.lru_cache(maxsize=None)
def _gpu_trace() -> str:
    """A GPU run's trace file as kineto writes it (tests/support/fake_trace.py): one rank, kernels waiting for the host."""
    from support import fake_trace

    return str(fake_trace.host_bound().write(_tmp_root() + "/gpu.pt.trace.json"))


def _cpu_trace() -> str:
    """A trace with no GPU kernels, as a CPU run writes it."""
    import json

    path = _tmp_root() + "/cpu.pt.trace.json"
    with open(path, "w") as f:
        json.dump({"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1,
                                                        "tid": 1, "ts": 0, "dur": 5}]}, f)
    return path


def _tmp_root() -> str:
    import tempfile
    return tempfile.mkdtemp(prefix="gpulab-sweep-")


if __name__ == "__main__":
    import os
    import shutil
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))      # tests/, where `support` is imported from
    if shutil.which("nvidia-smi") is None:          # as tests/conftest.py: Triton's interpreter, chosen before import
        os.environ.setdefault("TRITON_INTERPRET", "1")
    os.chdir(_tmp_root())
    only = sys.argv[1] if len(sys.argv) > 1 else None
    for c in cases_():
        if only is None or only in c.name:
            why = check_good(c)
            if why:
                print("GOOD CALL FAILS:", why)
    print(sweep(only=only))
