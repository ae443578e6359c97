"""Logging one run: :func:`track` opens a :class:`Run` (a context manager) that logs parameters, per-step
metrics, a Monitor :class:`~gpulab.telemetry.Trace` and text or figure artifacts to MLflow (a SQLite file)
and TensorBoard; on leaving the block it is a :class:`TrackedRun`.

Example:
    >>> import shutil, tempfile
    >>> from gpulab.tracking import track
    >>> root = tempfile.mkdtemp()
    >>> with track("demo", params={"lr": 0.1, "batch": 64}, root=root) as run:
    ...     for step in range(3):
    ...         run.log_metrics({"loss": 1.0 / (step + 1)}, step=step)
    >>> run.record.status, run.record.params, run.record.metrics["loss"], run.record.points
    ('FINISHED', {'lr': '0.1', 'batch': '64'}, 0.3333333333333333, 3)
    >>> shutil.rmtree(root)
"""
from __future__ import annotations

import io
import logging
import math
import numbers
import posixpath
import re
import shutil
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from .._format import fmt_number, html_table, text_table
from . import _flusher, _guard, _store

__all__ = ["track", "Run", "TrackedRun"]

log = logging.getLogger("gpulab")
_BATCH = 1000          # MLflow's most metrics per log_batch call


@dataclass(frozen=True)
class TrackedRun:
    """One logged run (immutable): what :attr:`Run.record` gives, and a row of :func:`~gpulab.tracking.runs`.

    ``status`` is RUNNING, FINISHED, FAILED (the block raised) or KILLED (Ctrl-C, or still open when the
    interpreter exited), as MLflow stores it; a run read back as RUNNING whose process on this machine is gone
    (killed outright, or its pid now another process's) is ``DEAD``: its process ended without closing it;
    metrics up to its last flush are kept. ``params`` are strings (as MLflow stores them); ``metrics`` holds
    the latest value of each metric (the one at the highest step), telemetry (``telemetry/...``) left out;
    ``points`` counts every metric point logged, telemetry included (``None`` for a run read back from the
    store). ``tracking_uri`` is ``None`` for a TensorBoard-only run and ``tensorboard_dir`` for an MLflow-only one.
    """

    name: str
    experiment: str
    run_id: str
    status: str
    tracking_uri: str | None
    tensorboard_dir: Path | None
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    points: int | None = None
    trace_logged: bool = False
    start_time: datetime | None = None

    def _rows(self) -> list[tuple[str, str]]:
        def listed(d: Mapping[str, Any], fmt: Any, most: int = 6) -> str:
            items = [f"{k}={fmt(v)}" for k, v in list(d.items())[:most]]
            return ", ".join(items) + (f", ... ({len(d) - most} more)" if len(d) > most else "") or "none"

        points = "" if self.points is None else f" ({self.points} points logged)"
        return [("run", f"{self.name} ({self.status}) in experiment {self.experiment!r}"),
                ("run id", self.run_id),
                ("params", listed(self.params, str)),
                ("metrics", listed(self.metrics, fmt_number) + points),
                ("telemetry", "trace logged: gl.tracking.load_trace(run_id)" if self.trace_logged else "none"),
                ("MLflow", self.tracking_uri or "not logged"),
                ("TensorBoard", str(self.tensorboard_dir) if self.tensorboard_dir else "not logged")]

    def __repr__(self) -> str:
        return "TrackedRun\n" + text_table(("", ""), self._rows())

    def _repr_html_(self) -> str:
        return html_table(("", ""), self._rows(), caption="Tracked run")


def track(name: str, *, params: Mapping[str, Any] | None = None, experiment: str = "gpulab",
          root: str | Path | None = None, tensorboard: bool = True, mlflow: bool = True,
          tags: Mapping[str, str] | None = None) -> "Run":
    """Log a training run, any loop: ``with gl.tracking.track("bf16", params=cfg) as run: ...``.

    Inside the block, ``run.log_metrics({"loss": loss.item()}, step=i)`` logs per-step metrics,
    ``run.log_trace(mon.trace)`` a :class:`~gpulab.Monitor`'s telemetry, ``run.log_params``,
    ``run.log_text`` and ``run.log_figure`` the rest. Everything lands under ``root`` (default
    ``$GPULAB_RUNS``, else ``./runs``): MLflow's SQLite store ``mlflow.db`` (no server to run), its artifacts
    in ``mlartifacts/`` and TensorBoard's event files in ``tensorboard/<experiment>/<name>-<run id>/``;
    ``python -m gpulab runs --root <root>`` opens both UIs. Every logged point reaches both stores within
    about a second (a background thread flushes them), so a process that is killed keeps what it logged.
    Leaving the block flushes everything and marks the run FINISHED, or FAILED when the block raised (the
    exception goes on); ``run.record`` is then the :class:`TrackedRun`. A call refused before the run starts
    (a runs folder that is a file, a damaged store, a reserved tag such as ``gpulab.*`` or ``mlflow.*``) leaves
    no run behind. mlflow's global tracking URI and active run are never touched.

    Example:
        >>> import shutil, tempfile, gpulab as gl
        >>> root = tempfile.mkdtemp()
        >>> with gl.tracking.track("baseline", params={"lr": 0.1}, root=root, tensorboard=False) as run:
        ...     run.log_metrics({"loss": 0.9, "accuracy": 0.5}, step=0)
        >>> run.record.metrics
        {'loss': 0.9, 'accuracy': 0.5}
        >>> shutil.rmtree(root)
    """
    return Run(name, params=params, experiment=experiment, root=root, tensorboard=tensorboard, mlflow=mlflow,
               tags=tags)


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {value!r}")
    if not value.strip():
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def _param(key: str, value: Any) -> str:
    if value is not None and not isinstance(value, (str, int, float, bool)):
        raise TypeError(f"param {key!r} must be a str, int, float, bool or None, got {type(value).__name__} "
                        f"{value!r}: log str(value) if that is what you mean")
    text = str(value)
    if len(text) > 6000:
        raise ValueError(f"param {key!r} is {len(text)} characters long; MLflow keeps at most 6000: "
                         "log it with run.log_text instead")
    return text


def _value(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        hint = " (a tensor? log value.item())" if hasattr(value, "item") else ""
        raise TypeError(f"metric {key!r} must be a number, got {type(value).__name__} {value!r}{hint}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"metric {key!r} must be a finite number, got {value!r}")
    return value


def _step(step: Any) -> int:
    if isinstance(step, bool) or not isinstance(step, numbers.Integral):
        raise TypeError(f"step must be a whole number >= 0, got {step!r}")
    if step < 0:
        raise ValueError(f"step must be a whole number >= 0, got {step!r}")
    return int(step)


def _safe(text: str) -> str:
    """``text`` as a folder name: runs of other characters become ``_``."""
    return re.sub(r"[^\w.\-]+", "_", text).strip("._") or "run"


def _mapping(name: str, value: Any) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a mapping name -> value, got {value!r}")
    return value


class Run:
    """A run being logged, made by :func:`track` and used as a context manager (``with track(...) as run``).

    Metrics are buffered and reach MLflow and TensorBoard's event file within about a second (a thread of
    the run's flushes them every 0.5 s, and the end of the block); the run may log from several threads.
    After the block, logging raises a RuntimeError and :attr:`record` is the finished :class:`TrackedRun`.
    """

    def __init__(self, name: str, *, params: Mapping[str, Any] | None = None, experiment: str = "gpulab",
                 root: str | Path | None = None, tensorboard: bool = True, mlflow: bool = True,
                 tags: Mapping[str, str] | None = None) -> None:
        self.name = _text("name", name)
        self.experiment = _text("experiment", experiment)
        self._tb_on, self._mlflow_on = _flag("tensorboard", tensorboard), _flag("mlflow", mlflow)
        if not (self._tb_on or self._mlflow_on):
            raise ValueError("tensorboard=False and mlflow=False leave nothing to log to: keep one of them")
        self._params = {_store.check_key("param", k): _param(k, v) for k, v in _mapping("params", params).items()}
        self._tags = {_store.check_key("tag", k): _text(f"tags[{k!r}]", v) for k, v in _mapping("tags", tags).items()}
        _guard.check_tags(self._tags)
        self.root = _store.resolve_root(root)
        self._lock = threading.RLock()     # the state, the buffer and TensorBoard's writer
        self._send_lock = threading.RLock()  # MLflow's client: one call at a time, in order
        self._flusher: _flusher.Flusher | None = None
        self._tb_dirty = False
        self._state = "new"
        self._status = "RUNNING"
        self._run_id = ""
        self._uri: str | None = None
        self._client: Any = None
        self._tb: Any = None
        self._tb_dir: Path | None = None
        self._buffer: list[tuple[str, float, int, int]] = []     # key, value, timestamp (ms), step
        self._latest: dict[str, tuple[int, float]] = {}
        self._points = 0
        self._trace = False
        self._start_time: datetime | None = None

    # ---- lifecycle ----------------------------------------------------------------------------------
    def __enter__(self) -> "Run":
        if self._state != "new":
            raise RuntimeError(f"run {self.name!r} was already entered: call track(...) again for a new run")
        self._prepare()                                 # everything that can fail, before a run exists
        if self._mlflow_on:
            self._uri = _store.tracking_uri(self.root)
            self._client, exp = _store.open_store(self.root, self.experiment)
        tb_parent = self._tb_parent()
        tags = {**self._tags, **_guard.process_tags()}
        if self._mlflow_on:
            with self._send_lock, _store.refusing(self.root / _guard.DB), _store.quiet():
                run = self._client.create_run(exp, run_name=self.name, tags=tags)
            self._run_id = run.info.run_id
            self._start_time = datetime.fromtimestamp(run.info.start_time / 1000, tz=timezone.utc).astimezone()
        else:
            import uuid

            self._run_id = uuid.uuid4().hex
            self._start_time = datetime.now(timezone.utc).astimezone()
        try:
            extra = {}
            if tb_parent is not None:
                self._tb_dir = tb_parent / f"{_safe(self.name)}-{self._run_id[:8]}"
                self._tb = _store.EventWriter(self._tb_dir)
                extra[_store.TB_TAG] = str(self._tb_dir)
            self._send(params=self._params, tags=extra)
        except BaseException:
            self._undo()
            raise
        with self._lock:
            self._state = "running"
        self._flusher = _flusher.Flusher(self._flush_now, self.name)
        self._flusher.start()
        _flusher.register(self, lambda: self._end("KILLED"))
        return self

    def _prepare(self) -> None:
        """TensorBoard importable, the runs folder a folder (made when missing), the store a SQLite file."""
        if self._tb_on:
            _store._tensorboard()                       # missing tensorboard fails before an MLflow run exists
        if self.root.exists() and not self.root.is_dir():
            raise ValueError(f"the runs folder {self.root} is a file: choose a folder with root=... or $GPULAB_RUNS")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ValueError(f"cannot make the runs folder {self.root} ({e.strerror}): choose another with root=... "
                             "or $GPULAB_RUNS") from None
        if self._mlflow_on:
            _guard.check_db(self.root / _guard.DB)

    def _tb_parent(self) -> Path | None:
        """The experiment's TensorBoard folder (made), which the run's folder goes in; None without TensorBoard."""
        if not self._tb_on:
            return None
        parent = self.root / "tensorboard" / _safe(self.experiment)
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ValueError(f"cannot make TensorBoard's folder {parent} ({e.strerror}): move what is in the way, "
                             "choose another root, or track(..., tensorboard=False)") from None
        return parent

    def _undo(self) -> None:
        """The run failed to start after it was created: remove it (its TensorBoard folder, MLflow's run)."""
        with self._lock:
            self._state, self._status = "ended", "FAILED"
        if self._tb is not None:
            self._tb.close()
        if self._tb_dir is not None:
            shutil.rmtree(self._tb_dir, ignore_errors=True)
        if self._client is not None:
            try:
                with self._send_lock, _store.quiet():
                    self._client.delete_run(self._run_id)
            except Exception:
                log.warning("gl.tracking: run %r could not be removed after it failed to start", self.name,
                            exc_info=True)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        status = ("FINISHED" if exc_type is None else
                  "KILLED" if issubclass(exc_type, (KeyboardInterrupt, SystemExit)) else "FAILED")
        try:
            self._end(status)
        except Exception:
            if exc_type is None:
                raise
            log.warning("gl.tracking: run %r could not be closed cleanly after the block raised", self.name,
                        exc_info=True)
        return False                                    # never swallow the block's exception

    def _end(self, status: str) -> None:
        with self._lock:
            if self._state != "running":
                return
            self._state = "ending"                      # logging from now on is refused
        if self._flusher is not None:
            self._flusher.stop()                        # no thread outlives the run
        _flusher.unregister(self)
        try:
            self._flush_now()
        except BaseException:
            status = "FAILED"
            raise
        finally:
            with self._lock:
                self._state = "ended"
                self._status = status
                if self._tb is not None:
                    self._tb.close()
            if self._client is not None:
                with self._send_lock, _store.quiet():
                    self._client.set_terminated(self._run_id, status)

    def _check_open(self, what: str) -> None:
        if self._state == "new":
            raise RuntimeError(f"{what}: the run has not started; use `with gl.tracking.track(...) as run:`")
        if self._state != "running":
            raise RuntimeError(f"{what}: run {self.name!r} has ended ({self._status}); log inside its with "
                               "block, or start another run with gl.tracking.track(...)")

    # ---- logging ------------------------------------------------------------------------------------
    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log parameters (str, int, float, bool or None; stored as text, like MLflow). A parameter keeps
        its first value: logging it again with another value is a ValueError."""
        self._check_open("log_params")
        new = {_store.check_key("param", k): _param(k, v) for k, v in _mapping("params", params).items()}
        with self._lock:
            self._check_open("log_params")
            clash = {k: (self._params[k], v) for k, v in new.items() if k in self._params and self._params[k] != v}
            if clash:
                raise ValueError(f"params cannot change during a run (MLflow keeps the first value): {clash}; "
                                 "log the new value as a metric, or start another run")
            new = {k: v for k, v in new.items() if k not in self._params}
            self._params.update(new)
        self._send(params=new)

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        """Log numbers at ``step`` (a whole number >= 0): ``run.log_metrics({"loss": loss.item()}, step=i)``.
        Every value must be finite: a NaN or infinite loss is a ValueError naming the metric."""
        self._check_open("log_metrics")
        step = _step(step)
        values = {_store.check_key("metric", k): _value(k, v) for k, v in _mapping("metrics", metrics).items()}
        now = time.time()
        with self._lock:
            self._check_open("log_metrics")
            for key, value in values.items():
                self._add(key, value, now, step)
        self._maybe_flush()

    def log_trace(self, trace: Any) -> None:
        """Log a :class:`~gpulab.Monitor`'s :class:`~gpulab.telemetry.Trace`: every numeric column per device
        as metrics ``telemetry/<device>/<column>`` (step = sample number, time = the sample's wall time), and
        the trace itself as artifacts (``telemetry/trace.csv`` + ``.json``), from which
        :func:`~gpulab.tracking.load_trace` rebuilds it exactly. One trace per run."""
        from ..telemetry.trace import Trace

        self._check_open("log_trace")
        if not isinstance(trace, Trace):
            raise TypeError(f"trace must be a gpulab Trace (mon.trace of gl.Monitor), got {type(trace).__name__}")
        points = _store.trace_points(trace)
        with self._lock:
            self._check_open("log_trace")
            if self._trace:
                raise ValueError(f"run {self.name!r} already holds a trace: one trace per run (start another run, "
                                 "or keep one Monitor around the whole loop)")
            self._trace = True
            for key, value, wall, step in points:
                self._add(key, value, wall, step)
        for path, text in _store.trace_files(trace).items():
            self._put(path, text.encode())
        self._send(tags={_store.TRACE_TAG: "1"})
        self._maybe_flush()

    def log_text(self, filename: str, text: str) -> None:
        """Save ``text`` as the artifact ``filename`` (a relative path such as ``"notes/setup.md"``)."""
        self._check_open("log_text")
        filename = _store.check_path("filename", filename)
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        self._put(filename, text.encode())

    def log_figure(self, fig: Any, filename: str) -> None:
        """Save a matplotlib figure as the artifact ``filename`` (``.png``, ``.svg``, ``.pdf`` or ``.jpg``)."""
        self._check_open("log_figure")
        filename = _store.check_path("filename", filename)
        fmt = posixpath.splitext(filename)[1].lower().lstrip(".")
        if fmt not in ("png", "svg", "pdf", "jpg", "jpeg"):
            raise ValueError(f"filename must end in .png, .svg, .pdf or .jpg, got {filename!r}")
        if not hasattr(fig, "savefig"):
            raise TypeError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, bbox_inches="tight")
        self._put(filename, buf.getvalue())

    def flush(self) -> None:
        """Send the buffered metrics to MLflow and flush TensorBoard's event file now (the run's thread does
        this within a second, and the end of the block does it too)."""
        if self._state in ("running", "ending"):
            self._flush_now()

    def _flush_now(self) -> None:
        """Take the buffer and send it (MLflow in batches, one sender at a time); what could not be sent goes
        back to the front of the buffer, for the next flush."""
        with self._send_lock:
            with self._lock:
                chunk, self._buffer = self._buffer, []
                if self._tb is not None and self._tb_dirty:
                    self._tb.flush()
                    self._tb_dirty = False
            if not chunk or self._client is None:
                return
            from mlflow.entities import Metric

            sent = 0
            try:
                while sent < len(chunk):
                    part = chunk[sent:sent + _BATCH]
                    self._client.log_batch(self._run_id, metrics=[Metric(k, v, ts, s) for k, v, ts, s in part])
                    sent += len(part)
            finally:
                if sent < len(chunk):
                    with self._lock:
                        self._buffer[:0] = chunk[sent:]

    @property
    def record(self) -> TrackedRun:
        """The run as logged so far (status RUNNING inside the block), as a :class:`TrackedRun`."""
        if self._state == "new":
            raise RuntimeError("the run has not started; use `with gl.tracking.track(...) as run:`")
        with self._lock:
            return TrackedRun(self.name, self.experiment, self._run_id, self._status, self._uri, self._tb_dir,
                              dict(self._params), {k: v for k, (_, v) in self._latest.items()}, self._points,
                              self._trace, self._start_time)

    def __repr__(self) -> str:
        return f"Run({self.name!r}, experiment={self.experiment!r}, {self._state})"

    # ---- the stores ---------------------------------------------------------------------------------
    def _add(self, key: str, value: float, wall: float, step: int) -> None:
        """One point into the buffer and TensorBoard's event file (the caller holds the lock)."""
        if self._client is not None:
            self._buffer.append((key, value, int(wall * 1000), step))
        if self._tb is not None:
            self._tb.scalar(key, value, step, wall)
            self._tb_dirty = True
        self._points += 1
        if not key.startswith(_store.TELEMETRY) and step >= self._latest.get(key, (-1, 0.0))[0]:
            self._latest[key] = (step, value)

    def _maybe_flush(self) -> None:
        if len(self._buffer) >= _BATCH:                 # a burst: send it now rather than let it grow
            self.flush()

    def _send(self, params: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None) -> None:
        if self._client is None:
            return
        from mlflow.entities import Param, RunTag

        params, tags = list((params or {}).items()), list((tags or {}).items())
        with self._send_lock:
            for i in range(0, max(len(params), len(tags)), 100):
                self._client.log_batch(self._run_id, params=[Param(k, v) for k, v in params[i:i + 100]],
                                       tags=[RunTag(k, v) for k, v in tags[i:i + 100]])

    def _put(self, path: str, data: bytes) -> None:
        """An artifact: into MLflow's artifact store, or next to the TensorBoard events when MLflow is off."""
        if self._client is None:
            target = self._tb_dir / "artifacts" / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            return
        import tempfile

        folder, base = posixpath.split(path)
        with tempfile.TemporaryDirectory(prefix="gpulab-artifact-") as tmp:
            (Path(tmp) / base).write_bytes(data)
            with self._send_lock:
                self._client.log_artifact(self._run_id, str(Path(tmp) / base), folder or None)
