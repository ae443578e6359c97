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
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from .._format import fmt_number, html_table, text_table
from . import _store

__all__ = ["track", "Run", "TrackedRun"]

log = logging.getLogger("gpulab")
_BATCH = 1000          # MLflow's most metrics per log_batch call
_FLUSH_EVERY_S = 5.0   # buffered metrics reach MLflow at least this often while a run logs


@dataclass(frozen=True)
class TrackedRun:
    """One logged run (immutable): what :attr:`Run.record` gives, and a row of :func:`~gpulab.tracking.runs`.

    ``params`` are strings (as MLflow stores them); ``metrics`` holds the latest value of each metric (the one
    at the highest step), telemetry (``telemetry/...``) left out; ``points`` counts every metric point logged,
    telemetry included (``None`` for a run read back from the store). ``tracking_uri`` is ``None`` for a
    TensorBoard-only run and ``tensorboard_dir`` for an MLflow-only one.
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
    ``python -m gpulab runs --root <root>`` opens both UIs. Leaving the block flushes everything and marks
    the run FINISHED, or FAILED when the block raised (the exception goes on); ``run.record`` is then the
    :class:`TrackedRun`. mlflow's global tracking URI and active run are never touched.

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


def _mapping(name: str, value: Any) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a mapping name -> value, got {value!r}")
    return value


class Run:
    """A run being logged, made by :func:`track` and used as a context manager (``with track(...) as run``).

    Metrics are buffered and reach MLflow in batches (at least every 5 s, and when the block ends);
    TensorBoard gets them as they come. After the block, logging raises a RuntimeError and :attr:`record`
    is the finished :class:`TrackedRun`.
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
        self.root = _store.resolve_root(root)
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
        self._last_flush = time.monotonic()
        self._start_time: datetime | None = None

    # ---- lifecycle ----------------------------------------------------------------------------------
    def __enter__(self) -> "Run":
        if self._state != "new":
            raise RuntimeError(f"run {self.name!r} was already entered: call track(...) again for a new run")
        if self._tb_on:
            _store._tensorboard()                       # missing tensorboard fails before an MLflow run exists
        self.root.mkdir(parents=True, exist_ok=True)
        tags = dict(self._tags)
        if self._mlflow_on:
            self._uri = _store.tracking_uri(self.root)
            self._client = _store.client(self._uri)
            exp = _store.experiment_id(self._client, self.experiment, self.root)
            with _store.quiet():
                run = self._client.create_run(exp, run_name=self.name, tags=tags)
            self._run_id = run.info.run_id
            self._start_time = datetime.fromtimestamp(run.info.start_time / 1000, tz=timezone.utc).astimezone()
        else:
            import uuid

            self._run_id = uuid.uuid4().hex
            self._start_time = datetime.now(timezone.utc).astimezone()
        self._state = "running"
        try:
            if self._tb_on:
                safe = lambda s: re.sub(r"[^\w.\-]+", "_", s).strip("._") or "run"
                run_dir = f"{safe(self.name)}-{self._run_id[:8]}"
                self._tb_dir = self.root / "tensorboard" / safe(self.experiment) / run_dir
                self._tb = _store.EventWriter(self._tb_dir)
                tags[_store.TB_TAG] = str(self._tb_dir)
            self._send(params=self._params, tags={k: v for k, v in tags.items() if k not in self._tags})
        except BaseException:
            self._end("FAILED")
            raise
        return self

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
        if self._state == "ended":
            return
        try:
            self.flush()
        except BaseException:
            status = "FAILED"
            raise
        finally:
            self._state = "ended"
            self._status = status
            if self._tb is not None:
                self._tb.close()
            if self._client is not None:
                with _store.quiet():
                    self._client.set_terminated(self._run_id, status)

    def _check_open(self, what: str) -> None:
        if self._state == "new":
            raise RuntimeError(f"{what}: the run has not started; use `with gl.tracking.track(...) as run:`")
        if self._state == "ended":
            raise RuntimeError(f"{what}: run {self.name!r} has ended ({self._status}); log inside its with "
                               "block, or start another run with gl.tracking.track(...)")

    # ---- logging ------------------------------------------------------------------------------------
    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log parameters (str, int, float, bool or None; stored as text, like MLflow). A parameter keeps
        its first value: logging it again with another value is a ValueError."""
        self._check_open("log_params")
        new = {_store.check_key("param", k): _param(k, v) for k, v in _mapping("params", params).items()}
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
        if self._trace:
            raise ValueError(f"run {self.name!r} already holds a trace: one trace per run (start another run, or "
                             "keep one Monitor around the whole loop)")
        for key, value, wall, step in _store.trace_points(trace):
            self._add(key, value, wall, step)
        for path, text in _store.trace_files(trace).items():
            self._put(path, text.encode())
        self._trace = True
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
        """Send the buffered metrics to MLflow and flush TensorBoard's event file (the end of the block
        does this too)."""
        if self._state == "ended":
            return
        if self._buffer and self._client is not None:
            from mlflow.entities import Metric

            with _store.quiet():
                while self._buffer:
                    chunk = self._buffer[:_BATCH]
                    self._client.log_batch(self._run_id, metrics=[Metric(k, v, ts, s) for k, v, ts, s in chunk])
                    del self._buffer[:_BATCH]
        self._buffer.clear()
        if self._tb is not None:
            self._tb.flush()
        self._last_flush = time.monotonic()

    @property
    def record(self) -> TrackedRun:
        """The run as logged so far (status RUNNING inside the block), as a :class:`TrackedRun`."""
        if self._state == "new":
            raise RuntimeError("the run has not started; use `with gl.tracking.track(...) as run:`")
        return TrackedRun(self.name, self.experiment, self._run_id, self._status, self._uri, self._tb_dir,
                          dict(self._params), {k: v for k, (_, v) in self._latest.items()}, self._points,
                          self._trace, self._start_time)

    def __repr__(self) -> str:
        return f"Run({self.name!r}, experiment={self.experiment!r}, {self._state})"

    # ---- the stores ---------------------------------------------------------------------------------
    def _add(self, key: str, value: float, wall: float, step: int) -> None:
        if self._client is not None:
            self._buffer.append((key, value, int(wall * 1000), step))
        if self._tb is not None:
            self._tb.scalar(key, value, step, wall)
        self._points += 1
        if not key.startswith(_store.TELEMETRY) and step >= self._latest.get(key, (-1, 0.0))[0]:
            self._latest[key] = (step, value)

    def _maybe_flush(self) -> None:
        if len(self._buffer) >= _BATCH or time.monotonic() - self._last_flush > _FLUSH_EVERY_S:
            self.flush()

    def _send(self, params: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None) -> None:
        if self._client is None:
            return
        from mlflow.entities import Param, RunTag

        params, tags = list((params or {}).items()), list((tags or {}).items())
        with _store.quiet():
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
            with _store.quiet():
                self._client.log_artifact(self._run_id, str(Path(tmp) / base), folder or None)
