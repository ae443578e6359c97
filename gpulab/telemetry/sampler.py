"""The background sampler: :class:`Monitor` -> :class:`~gpulab.telemetry.trace.Trace`, with a live
inline figure in JupyterLab and Colab.

Example:
    >>> import time
    >>> from gpulab.telemetry.sampler import Monitor
    >>> with Monitor(interval=0.05) as mon:
    ...     time.sleep(0.2)
    >>> len(mon.trace.frame) >= 2
    True
"""
from __future__ import annotations

import atexit
import contextlib
import io
import logging
import threading
import time
import warnings
import weakref
from typing import Any, Callable, Iterator

from .._check import callable_arg, flag, positive, text
from .trace import Mark, Trace

__all__ = ["Monitor"]

log = logging.getLogger("gpulab")
_said_host_only = False
_STILL_FINISHING = "the sampling thread was still finishing"


class Monitor:
    """Sample GPU (NVML) and host (psutil) metrics in a background thread.

    Use as ``with gl.Monitor(interval=0.1, live=True) as mon: train()`` or ``mon.start()`` /
    ``mon.stop()``. ``mon.trace`` is the recorded :class:`Trace` (a snapshot while running).
    ``mon.mark("eval")`` marks a moment; ``with mon.phase("data"): ...`` marks a span, and phases
    named ``data*`` feed the data-loading share of ``trace.diagnose()`` (both need a started Monitor).

    The thread is a daemon, stops on ``stop()``, on leaving the ``with`` block (also on an exception
    or KeyboardInterrupt, keeping what was sampled) and at interpreter exit. ``live=True`` redraws one
    figure in place every ``live_every_s`` seconds (default 2, at least 1: a frame costs ~0.1 s of CPU)
    from a second thread; it never blocks the body or the sampler, and its cost is in ``trace``.
    """

    def __init__(self, interval: float = 0.1, live: bool = False, gpus: bool = True, live_every_s: float = 2.0,
                 on_sample: Callable[[list[dict[str, Any]]], None] | None = None) -> None:
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0.001 <= interval <= 3600:
            raise ValueError(f"interval must be seconds between 0.001 and 3600, got {interval!r}")
        if isinstance(live_every_s, bool) or not isinstance(live_every_s, (int, float)) or not 1.0 <= live_every_s < 1e9:
            raise ValueError(f"live_every_s must be at least 1 s (a frame costs ~0.1 s of CPU), got {live_every_s!r}")
        flag("live", live)
        flag("gpus", gpus)
        if on_sample is not None:
            callable_arg("on_sample", on_sample)
        self.interval = float(interval)
        self.live = bool(live)
        self.live_every_s = float(live_every_s)
        self._want_gpus = gpus
        self._on_sample = on_sample
        self._rows: list[dict[str, Any]] = []
        self._marks: list[Mark] = []
        self._notes: list[str] = []
        self._failed: dict[str, int] = {}      # readings that raised, per device ("host", "gpu0", ...)
        self._first_error: str | None = None
        self._lock = threading.Lock()          # guards the recorded rows (held for microseconds)
        self._render_lock = threading.Lock()   # guards the live figure
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._live_thread: threading.Thread | None = None
        self._t0 = 0.0
        self._t_end: float | None = None
        self._cpu_s = 0.0
        self._devices_info: dict[str, str] = {}
        self._display: Any = None
        self._live_frames = 0
        self._live_cpu_s = 0.0
        self._fig: Any = None
        self._host_energy_note: str | None = None

    # ---- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> "Monitor":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """Sampling: started and not yet asked to stop (a thread still finishing after ``stop()`` is not)."""
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    @property
    def finishing(self) -> bool:
        """``stop()`` was called, but its join timed out: the sampling thread is still finishing a (slow) sample.
        ``stop()`` again waits for it; ``start()`` waits up to ``START_WAIT_S`` and otherwise refuses."""
        return self._thread is not None and self._thread.is_alive() and self._stop.is_set()

    START_WAIT_S = 5.0

    def start(self) -> "Monitor":
        """Start sampling (raises ``RuntimeError`` if already running, or if the thread of a ``stop()`` that timed
        out is still finishing after ``START_WAIT_S`` more seconds)."""
        if self.running:
            raise RuntimeError("this Monitor is already running; stop() it first or use a new one")
        if self.finishing:
            self._thread.join(self.START_WAIT_S)            # type: ignore[union-attr]
            if self._thread.is_alive():                      # type: ignore[union-attr]
                raise RuntimeError("this Monitor's previous sampler is still finishing a sample (its stop() timed "
                                   f"out, and {self.START_WAIT_S:g} s more were not enough): call mon.stop() again "
                                   "to wait for it, or use a new Monitor")
        from .host import HostSampler
        from .rapl import RaplMeter

        host = HostSampler()
        self._host = host
        rapl = RaplMeter()
        self._host_energy_note = rapl.status.cause
        if rapl.status.readable:
            try:
                host.energy_j = rapl.start().package_joules    # the host rows' energy_j: the CPU packages since start
            except Exception as e:     # a counter gone or unparsable since it was found: no host joules, and why
                self._host_energy_note = (f"the CPU's energy counter could not be read at the start ({type(e).__name__}: "
                                          f"{e}): energy is not measurable for this trace")
        samplers = self._gpu_samplers() if self._want_gpus else []
        with self._lock:
            self._rows, self._marks, self._cpu_s, self._t_end = [], [], 0.0, None
            self._failed, self._first_error = {}, None
            self._notes = [n for n in self._notes if not n.startswith(_STILL_FINISHING)]
        self._stop.clear()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, args=(host, samplers), name="gpulab-monitor", daemon=True)
        self._thread.start()
        _register_exit_hooks()
        _ACTIVE.add(self)
        if self.live:
            self._start_live()
        return self

    def stop(self, timeout: float = 5.0) -> Trace:
        """Stop sampling and return the :class:`Trace` (safe to call twice); ``timeout`` bounds each thread's join.

        If the sampling thread is still in a (slow) sample after ``timeout``, a ``RuntimeWarning`` says so, the
        trace's notes say so, and ``finishing`` is True: call ``stop()`` again to wait for it."""
        positive("timeout", timeout, unit="seconds")
        self._stop.set()
        for t in (self._thread, self._live_thread):
            if t is not None and t is not threading.current_thread():
                t.join(timeout)
        if self._t_end is None and self._thread is not None:
            self._t_end = time.monotonic()
        with self._lock:
            self._notes = [n for n in self._notes if not n.startswith(_STILL_FINISHING)]
        if self.finishing and self._thread is not threading.current_thread():
            note = (f"{_STILL_FINISHING} {timeout:g} s after stop(): a sample is taking long; call stop() again to "
                    "wait for it")
            with self._lock:
                self._notes.append(note)
            warnings.warn(f"gpulab.Monitor: {note}", RuntimeWarning, stacklevel=2)
        else:
            _ACTIVE.discard(self)
        trace = self.trace
        if self.live and self._display is not None:
            self._show(trace)  # the final frame, drawn once more by the caller's thread
        return trace

    # ---- marks -------------------------------------------------------------------------------
    def mark(self, name: str) -> None:
        """Mark this moment (a phase that lasts until the next mark). The Monitor must have been started."""
        text("name", name, empty=False)
        self._marks.append(Mark(name, self._now("mark")))

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Mark a span: ``with mon.phase("data"): batch = next(it)``. The Monitor must have been started."""
        text("name", name, empty=False)
        start = self._now("phase")
        try:
            yield
        finally:
            self._marks.append(Mark(str(name), start, self._now()))

    def _now(self, what: str = "") -> float:
        if not self._t0:
            raise RuntimeError(f"mon.{what or 'mark'}() before the Monitor started: its time would land at t=0, before "
                               "any sample. Start it first: mon.start(), or `with gl.Monitor() as mon:` around the "
                               "marked code")
        return time.monotonic() - self._t0

    # ---- the recorded trace ------------------------------------------------------------------
    @property
    def notes(self) -> tuple[str, ...]:
        """What the Monitor noted so far (NVML missing, MIG slices, GPU order, errors): ``trace.notes`` without
        building the trace."""
        with self._lock:
            return tuple(self._notes)

    @property
    def trace(self) -> Trace:
        """The samples so far (or of the finished run) as a :class:`Trace`."""
        import pandas as pd

        with self._lock:
            rows = list(self._rows)
            cpu_s = self._cpu_s
            failed = dict(self._failed)
            first_error = self._first_error
        end = self._t_end if self._t_end is not None else time.monotonic()
        frame = pd.DataFrame(rows)
        if frame.empty:
            frame = pd.DataFrame(columns=["t_s", "wall_time", "device", "source"])
        if getattr(getattr(self, "_host", None), "energy_lost", None) and "energy_j" in frame:
            frame.loc[frame["device"] == "host", "energy_j"] = float("nan")   # part of a window is no window's joules
        return Trace(frame=frame, interval_s=self.interval, marks=tuple(self._marks), energy_notes=self._energy_notes(frame),
                     duration_s=max(0.0, end - self._t0) if self._t0 else 0.0, sampler_cpu_s=cpu_s,
                     live_cpu_s=self._live_cpu_s, notes=tuple(self._notes), devices_info=dict(self._devices_info),
                     failed_samples=sum(failed.values()), failed_by_device=failed, first_error=first_error)

    def _energy_notes(self, frame: Any) -> dict[str, str]:
        """Per device, why it has no energy figure: the host without a readable RAPL counter, a GPU that gave
        neither an energy counter nor power."""
        notes = {"host": self._host_energy_note} if self._host_energy_note else {}
        lost = getattr(self._host, "energy_lost", None) if getattr(self, "_host", None) is not None else None
        if lost:
            notes["host"] = lost
        for dev in dict.fromkeys(frame["device"]) if len(frame) else ():
            f = frame[frame["device"] == dev]
            if dev != "host" and not any(c in f and f[c].notna().any() for c in ("energy_j", "power_w")):
                notes[dev] = ("NVML gives power and energy for the whole card, not per MIG slice" if "MIG slice"
                              in " ".join(n for n in self._notes if n.startswith(dev + " ")) else
                              "NVML gives neither an energy counter nor power for this GPU")
        return notes

    # ---- sampling thread ---------------------------------------------------------------------
    def _gpu_samplers(self) -> list[tuple[str, Any]]:
        from . import nvml

        st = nvml.status()
        if not st.available:
            global _said_host_only
            note = f"NVML not available ({st.error}): monitoring host metrics only"
            self._notes.append(note)
            if not _said_host_only:
                _said_host_only = True
                log.warning("gpulab.Monitor: %s", note)
            return []
        from .gpu import GPUSampler

        order = nvml.device_order()
        self._notes.extend(order.notes)
        out = []
        for i, dev in enumerate(order.devices):
            name = f"gpu{i}"
            self._devices_info[name] = f"{dev.name} ({dev.uuid})"
            if dev.is_mig:
                self._notes.append(f"{name} is a MIG slice: its own memory is recorded; utilisation, power and "
                                   "clocks are the whole card's and NVML does not report them per slice")
            out.append((name, GPUSampler(dev)))
        return out

    def _run(self, host: Any, samplers: list[tuple[str, Any]]) -> None:
        from . import host as host_mod
        from .host import torch_memory

        cpu0 = time.thread_time()
        with contextlib.suppress(Exception):
            host.prime()       # the CPU window starts with the sampling: the first row has no CPU % (no window yet)
        next_t = time.monotonic()
        failures = 0
        try:
            while True:
                now = last = time.monotonic()
                try:
                    rows = self._take(host, samplers, torch_memory, now)
                    with self._lock:
                        self._rows.extend(rows)
                        self._cpu_s = time.thread_time() - cpu0
                    if self._on_sample is not None:
                        self._on_sample(rows)
                except Exception as e:  # a failing metric source must not kill the thread silently
                    failures += 1
                    if failures == 1:
                        log.warning("gpulab.Monitor: a sample failed (%s); continuing", e)
                        self._notes.append(f"sampling error: {e}")
                next_t += self.interval
                if next_t < time.monotonic():  # fell behind (a slow call): skip, don't burst
                    next_t = time.monotonic() + self.interval
                if self._stop.wait(max(0.0, next_t - time.monotonic())):
                    break
            # one last reading at stop, so the trace covers every marked phase: only with a CPU window behind it
            # (a stop right after a sample is covered by that sample, within the window)
            if time.monotonic() - last >= host_mod.MIN_CPU_WINDOW_S:
                with contextlib.suppress(Exception):
                    rows = self._take(host, samplers, torch_memory, time.monotonic())
                    with self._lock:
                        self._rows.extend(rows)
        finally:
            with self._lock:
                self._cpu_s = time.thread_time() - cpu0
            self._t_end = time.monotonic()
            for _, s in samplers:
                with contextlib.suppress(Exception):
                    s.close()

    def _take(self, host: Any, samplers: list[tuple[str, Any]], torch_memory: Callable[[], dict], now: float
              ) -> list[dict[str, Any]]:
        """One row per device that could be read; a device whose reading raised is counted, not recorded."""
        t_s, wall = now - self._t0, time.time()
        rows = []
        host_row = self._read("host", host.sample)
        if host_row is not None:
            rows.append({"t_s": t_s, "wall_time": wall, "device": "host", "source": "host", **host_row})
        tm = torch_memory() if samplers else {}
        for i, (name, s) in enumerate(samplers):
            reading = self._read(name, s.sample, now)
            if reading is not None:
                rows.append({"t_s": t_s, "wall_time": wall, "device": name, "source": "nvml", **reading,
                             **tm.get(i, {})})
        return rows

    def _read(self, device: str, sample: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any] | None:
        """``sample(*args)``, or None (counted in the trace, the first error kept and logged once) if it raised:
        psutil can fail on a process or a /proc it may not read, NVML on a GPU that fell off the bus."""
        try:
            return sample(*args)
        except Exception as e:  # one failing source must neither stop the others nor vanish silently
            text = f"{device}: {type(e).__name__}: {e}"
            with self._lock:
                first = not self._failed
                self._failed[device] = self._failed.get(device, 0) + 1
                if first:
                    self._first_error = text
            if first:
                log.warning("gpulab.Monitor: a %s reading failed (%s); counting failures in trace.failed_samples",
                            device, text)
            return None

    # ---- live figure -------------------------------------------------------------------------
    def _start_live(self) -> None:
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:
            get_ipython = None  # type: ignore[assignment]
        if get_ipython is None or get_ipython() is None:
            self._notes.append("live=True needs Jupyter: plotting after the run instead")
            self.live = False
            return
        from IPython.display import Image

        self._display = display(Image(data=self._render(self.trace)), display_id=True)
        self._live_thread = threading.Thread(target=self._live_loop, name="gpulab-monitor-live", daemon=True)
        self._live_thread.start()

    def _live_loop(self) -> None:
        cpu0 = time.thread_time()
        while not self._stop.wait(self.live_every_s):
            try:
                self._show(self.trace)
            except Exception as e:  # drawing must never break the body
                log.info("gpulab.Monitor live plot skipped a frame: %s", e)
            self._live_cpu_s = time.thread_time() - cpu0

    def _show(self, trace: Trace) -> None:
        from IPython.display import Image

        self._display.update(Image(data=self._render(trace)))
        self._live_frames += 1

    def _render(self, trace: Trace) -> bytes:
        """Draw the trace on this Monitor's own Agg figure (no pyplot state: safe outside the main
        thread; one figure reused, so frames neither leak memory nor pay for a new figure)."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        with self._render_lock:
            if self._fig is None:
                self._fig = Figure(figsize=(9, 5), dpi=80)
                FigureCanvasAgg(self._fig)
            fig = self._fig
            fig.clear()
            trace.plot(fig=fig, tight=False)
            buf = io.BytesIO()
            fig.savefig(buf, format="png")
        return buf.getvalue()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"Monitor(interval={self.interval:g} s, {state}, {len(self._rows)} rows)"


_ACTIVE: "weakref.WeakSet[Monitor]" = weakref.WeakSet()
_hooks: list[bool] = []


def _stop_all() -> None:
    for m in list(_ACTIVE):
        with contextlib.suppress(Exception):
            m.stop(timeout=1.0)


def _register_exit_hooks() -> None:
    """Once per process: stop running monitors at exit, before NVML shuts down (atexit runs handlers
    last-in first-out, so the order is handed to nvml explicitly)."""
    if _hooks:
        return
    from . import nvml

    _hooks.append(True)
    atexit.register(_stop_all)
    nvml.before_shutdown(_stop_all)
