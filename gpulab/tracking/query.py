"""Reading logged runs back: :func:`runs` lists an experiment's runs from the SQLite store as a
:class:`RunTable`, and :func:`load_trace` rebuilds a run's Monitor trace, so ``trace.diagnose()`` and
``trace.plot()`` replay a past run's telemetry.

Example:
    >>> import shutil, tempfile, pandas as pd
    >>> from gpulab.telemetry import Trace
    >>> from gpulab.tracking import load_trace, runs, track
    >>> root = tempfile.mkdtemp()
    >>> frame = pd.DataFrame({"t_s": [0.0, 0.1], "wall_time": [1e9, 1e9 + 0.1], "device": ["host"] * 2,
    ...                       "source": ["host"] * 2, "cpu_util_pct": [20.0, 30.0]})
    >>> with track("idle", root=root, tensorboard=False) as run:
    ...     run.log_metrics({"loss": 0.5}, step=0)
    ...     run.log_trace(Trace(frame, interval_s=0.1, duration_s=0.2))
    >>> table = runs(root=root)
    >>> len(table), table.rows[0].name, table.rows[0].metrics
    (1, 'idle', {'loss': 0.5})
    >>> load_trace("idle", root=root).frame.equals(frame)
    True
    >>> shutil.rmtree(root)
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .._format import NA, TableView, fmt_number
from . import _guard, _store
from .run import TrackedRun

__all__ = ["runs", "RunTable", "load_trace"]

_RUN_ID = re.compile(r"^[0-9a-f]{32}$")


@dataclass(frozen=True, repr=False)
class RunTable(TableView):
    """An experiment's runs (immutable), oldest first: name, status, start time, parameters, the latest
    value of each metric (telemetry left out) and whether a trace was logged. Made by :func:`runs`;
    ``to_dataframe()`` gives one row per run (columns ``params.<name>`` and ``metrics.<name>``, like
    ``mlflow.search_runs``). A run whose status is ``DEAD`` was left RUNNING by a process on this machine
    that is gone: its process ended without closing it; metrics up to its last flush are kept."""

    experiment: str
    tracking_uri: str
    rows: tuple[TrackedRun, ...]

    @property
    def title(self) -> str:
        return f"Runs of experiment {self.experiment!r}"

    def __len__(self) -> int:
        return len(self.rows)

    def run(self, name: str) -> TrackedRun:
        """The newest run called ``name``."""
        for r in reversed(self.rows):
            if r.name == name:
                return r
        raise KeyError(f"no run {name!r} in experiment {self.experiment!r}; runs: {[r.name for r in self.rows]}")

    def _keys(self) -> tuple[list[str], list[str]]:
        params = list(dict.fromkeys(k for r in self.rows for k in r.params))
        metrics = list(dict.fromkeys(k for r in self.rows for k in r.metrics))
        return params, metrics

    def to_dataframe(self) -> Any:
        """One row per run (index: run id); missing values are NaN."""
        import pandas as pd

        params, metrics = self._keys()
        records = [{"name": r.name, "status": r.status, "start_time": r.start_time, "trace": r.trace_logged,
                    **{f"params.{k}": r.params.get(k) for k in params},
                    **{f"metrics.{k}": r.metrics.get(k, float("nan")) for k in metrics}} for r in self.rows]
        return pd.DataFrame(records, index=pd.Index([r.run_id for r in self.rows], name="run_id"))

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        params, metrics = self._keys()
        header = ["run", "status", "started", "trace", *params, *metrics]
        rows = [[r.name, r.status, r.start_time.strftime("%Y-%m-%d %H:%M:%S") if r.start_time else NA,
                 "yes" if r.trace_logged else "-", *(r.params.get(k, NA) for k in params),
                 *(fmt_number(r.metrics.get(k)) for k in metrics)] for r in self.rows]
        n = len(self.rows)
        footer = (f"{n} run{'' if n == 1 else 's'} in {self.tracking_uri}; params: {', '.join(params) or 'none'}; metrics: "
                  "the latest value; gl.tracking.load_trace(name) replays a logged trace")
        if any(r.status == _guard.DEAD for r in self.rows):
            footer += f"; {_guard.DEAD_NOTE}"
        return header, rows, footer


def _open(root: Any) -> tuple[Any, str]:
    """A client on the store under ``root`` for reading, and its URI: nothing in the store is written."""
    return _store.read_store(_store.resolve_root(root) / _guard.DB)


def _record(run: Any, experiment: str, uri: str) -> TrackedRun:
    tags = run.data.tags
    tb = tags.get(_store.TB_TAG)
    start = run.info.start_time
    status = _guard.status(run.info.status, tags)
    return TrackedRun(run.info.run_name or run.info.run_id, experiment, run.info.run_id, status, uri,
                      Path(tb) if tb else None, dict(run.data.params),
                      {k: v for k, v in run.data.metrics.items() if not k.startswith(_store.TELEMETRY)}, None,
                      tags.get(_store.TRACE_TAG) == "1",
                      None if start is None else datetime.fromtimestamp(start / 1000, tz=timezone.utc).astimezone())


def runs(experiment: str = "gpulab", root: str | Path | None = None) -> RunTable:
    """The runs of ``experiment`` in the store under ``root`` (default ``$GPULAB_RUNS``, else ``./runs``) as a
    :class:`RunTable`, oldest first. A missing store or experiment is a ValueError naming what exists; the
    store is only read (a file that holds no runs yet stays as it was). A run left RUNNING by a process that
    is gone reads as ``DEAD``.

    Example:
        >>> import shutil, tempfile, gpulab as gl
        >>> root = tempfile.mkdtemp()
        >>> for lr in (0.1, 0.01):
        ...     with gl.tracking.track(f"lr={lr}", params={"lr": lr}, root=root, tensorboard=False) as run:
        ...         run.log_metrics({"loss": lr * 2}, step=0)
        >>> table = gl.tracking.runs(root=root)
        >>> table.run("lr=0.01").metrics, list(table.to_dataframe().columns)[-2:]
        ({'loss': 0.02}, ['params.lr', 'metrics.loss'])
        >>> shutil.rmtree(root)
    """
    if not isinstance(experiment, str) or not experiment:
        raise TypeError(f"experiment must be a non-empty string, got {experiment!r}")
    client, uri = _open(root)
    exp = _store.experiment_id(client, experiment)
    found, token = [], None
    with _store.quiet(), _store.refusing(Path(uri.removeprefix("sqlite:///"))):
        while True:
            page = client.search_runs([exp], order_by=["attributes.start_time ASC"], max_results=1000,
                                      page_token=token)
            found += list(page)
            token = page.token
            if not token:
                break
    return RunTable(experiment, uri, tuple(_record(r, experiment, uri) for r in found))


def load_trace(run: TrackedRun | str, root: str | Path | None = None, *, experiment: str = "gpulab") -> Any:
    """The :class:`~gpulab.telemetry.Trace` a run logged with ``run.log_trace``, rebuilt from its artifacts
    with the same values, marks and interval: ``load_trace("baseline").diagnose()`` replays the verdict of
    a past run. ``run`` is a :class:`TrackedRun`, a run id, or a run name (the newest run of that name in
    ``experiment``). A run that logged no trace is a ValueError.

    Example:
        >>> import shutil, tempfile, time, gpulab as gl
        >>> root = tempfile.mkdtemp()
        >>> with gl.tracking.track("sleepy", root=root) as run:
        ...     with gl.Monitor(interval=0.05) as mon:
        ...         time.sleep(0.2)
        ...     run.log_trace(mon.trace)
        >>> trace = gl.tracking.load_trace(run.record)
        >>> trace.interval_s, trace.frame.equals(mon.trace.frame), trace.diagnose().verdict != ""
        (0.05, True, True)
        >>> shutil.rmtree(root)
    """
    if isinstance(run, TrackedRun):
        if run.tracking_uri is None:                     # a TensorBoard-only run keeps its artifacts by its events
            folder = (run.tensorboard_dir or Path()) / "artifacts"
            return _read(folder, f"run {run.name!r} ({run.run_id})")
        db = Path(run.tracking_uri.removeprefix("sqlite:///"))
        if not db.is_file():
            raise ValueError(f"run {run.name!r}'s store {run.tracking_uri} is gone")
        client, run_id, label = _store.read_store(db)[0], run.run_id, f"run {run.name!r} ({run.run_id})"
    elif isinstance(run, str) and run:
        client, uri = _open(root)
        run_id, label = _find(client, run, experiment)
    else:
        raise TypeError(f"run must be a TrackedRun, a run id or a run name, got {run!r}")
    with _store.quiet():
        try:
            info = client.get_run(run_id).info
        except Exception as e:
            raise ValueError(f"{label} is not in {client.tracking_uri}: {e}") from None
        local = _local(info.artifact_uri)
        if local is not None:                            # the usual case: artifacts in root/mlartifacts
            return _read(local, label)
        import tempfile

        with tempfile.TemporaryDirectory(prefix="gpulab-trace-") as tmp:   # a remote artifact store
            try:
                client.download_artifacts(run_id, "telemetry", tmp)
            except Exception:
                pass                                     # no telemetry folder: _read says so
            return _read(Path(tmp), label)


def _local(uri: str | None) -> Path | None:
    """The folder of a local ``file:`` artifact URI (None for any other kind of artifact store)."""
    from urllib.parse import unquote, urlparse

    if not uri:
        return None
    parsed = urlparse(uri)
    if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
        return Path(unquote(parsed.path))
    return Path(uri) if not parsed.scheme else None


def _read(folder: Path, label: str) -> Any:
    files = [folder / p for p in _store.TRACE_FILES]
    if not all(f.is_file() for f in files):
        raise ValueError(f"{label} logged no trace: call run.log_trace(mon.trace) inside gl.tracking.track(...) "
                         "to keep a Monitor's telemetry with the run")
    return _store.trace_from_files(*(f.read_text() for f in files))


def _find(client: Any, run: str, experiment: str) -> tuple[str, str]:
    """(run id, a label) of a run id, or of the newest run called ``run`` in ``experiment``."""
    with _store.quiet():
        if _RUN_ID.match(run):
            try:
                found = client.get_run(run)
            except Exception:
                found = None
            if found is not None:
                return run, f"run {found.info.run_name!r} ({run})"
        exp = _store.experiment_id(client, experiment)
        name = run.replace("'", "\\'")
        hits = client.search_runs([exp], filter_string=f"attributes.run_name = '{name}'",
                                  order_by=["attributes.start_time DESC"], max_results=1)
        if not hits:
            names = sorted({r.info.run_name for r in client.search_runs([exp], max_results=50)})
            raise ValueError(f"no run id or run name {run!r} in experiment {experiment!r}; runs there: {names}")
    return hits[0].info.run_id, f"run {run!r} ({hits[0].info.run_id})"
