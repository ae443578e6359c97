"""Where gl.tracking's runs live and how they are written: the runs folder, MLflow's client on a SQLite file
(imported only here, its INFO logs silenced per call), names checked the way MLflow checks them,
TensorBoard event files, and a :class:`~gpulab.telemetry.Trace` as two artifact files (CSV + JSON) and as
metric points.

Example:
    >>> import pandas as pd
    >>> from gpulab.telemetry.trace import Mark, Trace
    >>> frame = pd.DataFrame({"t_s": [0.0, 0.1], "wall_time": [1e9, 1e9 + 0.1], "device": ["host"] * 2,
    ...                       "source": ["host"] * 2, "cpu_util_pct": [90.0, 95.5]})
    >>> trace = Trace(frame, interval_s=0.1, marks=(Mark("eval", 0.05),), duration_s=0.2)
    >>> back = trace_from_files(*trace_files(trace).values())
    >>> back.frame.equals(trace.frame), back.marks == trace.marks
    (True, True)
    >>> [(key, value, step) for key, value, _, step in trace_points(trace)]
    [('telemetry/host/cpu_util_pct', 90.0, 0), ('telemetry/host/cpu_util_pct', 95.5, 1)]
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import numbers
import os
import posixpath
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from . import _guard

__all__ = ["resolve_root", "tracking_uri", "import_mlflow", "quiet", "client", "open_store", "read_store",
           "refusing", "experiment_id", "check_key", "check_path", "EventWriter", "trace_files", "trace_from_files",
           "trace_points"]

ROOT_ENV = "GPULAB_RUNS"
TELEMETRY = "telemetry/"                 # metric keys of a logged trace start with this
TRACE_FILES = ("telemetry/trace.csv", "telemetry/trace.json")
TB_TAG = "gpulab.tensorboard_dir"        # MLflow tags gl.tracking sets on its runs
TRACE_TAG = "gpulab.trace"
_NAME = re.compile(r"^[/\w.\- :]*$")     # MLflow's rule for metric, param and tag names (POSIX)
_META = ("t_s", "wall_time", "device", "source")
_FORMAT = "gpulab-trace/1"


def resolve_root(root: Any) -> Path:
    """The runs folder as an absolute path: ``root``, else ``$GPULAB_RUNS``, else ``./runs``."""
    if root is None:
        root = os.environ.get(ROOT_ENV) or "runs"
    if not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"root must be a folder (str or Path) or None, got {root!r}")
    if not str(root):
        raise ValueError("root must name a folder, got ''")
    return Path(root).expanduser().resolve()


def tracking_uri(root: Path) -> str:
    """MLflow's URI of the SQLite store in ``root``."""
    return f"sqlite:///{(root / 'mlflow.db').as_posix()}"


_TELEMETRY_ENV = ("MLFLOW_DISABLE_TELEMETRY", "DO_NOT_TRACK")
_import_lock = threading.Lock()


def import_mlflow() -> Any:
    """``import mlflow``, or one ImportError that says how to install it. When gl.tracking is the first to
    import it and neither ``MLFLOW_DISABLE_TELEMETRY`` nor ``DO_NOT_TRACK`` is set, MLflow is imported with
    its usage statistics off (``MLFLOW_DISABLE_TELEMETRY=true`` for the import alone, then unset again): MLflow
    decides once, on import, and then neither writes ``~/.config/mlflow/telemetry.json`` nor sends records."""
    with _import_lock:
        fresh = "mlflow" not in sys.modules
        off = fresh and not any(name in os.environ for name in _TELEMETRY_ENV)
        if off:
            os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
        try:
            import mlflow
        except ImportError as e:
            raise ImportError("gl.tracking logs runs to MLflow, which is not installed: pip install mlflow "
                              "(or pip install 'gpulab[tracking]'); track(..., mlflow=False) logs to TensorBoard "
                              "only") from e
        finally:
            if off:
                os.environ.pop("MLFLOW_DISABLE_TELEMETRY", None)
    return mlflow


_quiet_lock = threading.Lock()
_quiet_depth = 0
_quiet_saved: list[tuple[logging.Logger, int]] = []


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """MLflow's and alembic's INFO logs ("Creating initial MLflow database tables...") silenced for the
    duration. Safe across threads: the levels are raised by the first of overlapping calls and restored by
    the last. (MLflow's own deprecation warnings, raised inside SQLAlchemy on import, are attributed to
    MLflow's modules, which Python's default warning filters already ignore; the filters are left alone.)"""
    global _quiet_depth
    with _quiet_lock:
        if _quiet_depth == 0:
            _quiet_saved[:] = [(logger, logger.level) for logger in map(logging.getLogger, ("mlflow", "alembic"))]
            for logger, _ in _quiet_saved:
                if logger.getEffectiveLevel() < logging.WARNING:
                    logger.setLevel(logging.WARNING)
        _quiet_depth += 1
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet_depth -= 1
            if _quiet_depth == 0:
                for logger, level in _quiet_saved:
                    logger.setLevel(level)
                _quiet_saved.clear()


def client(uri: str) -> Any:
    """An explicit ``MlflowClient`` on ``uri``: mlflow's global tracking URI and active run stay untouched."""
    import_mlflow()
    from mlflow import MlflowClient

    with quiet():                      # the first use of a store creates its tables (INFO logs)
        return MlflowClient(tracking_uri=uri)


def open_store(root: Path, experiment: str) -> tuple[Any, str]:
    """A client on ``root/mlflow.db`` and the id of ``experiment`` (created when missing), for logging: the store
    is created under the runs folder's lock (two processes starting on a fresh folder would both create
    its tables), with one more try on MLflow's schema race (a few where there is no lock). A folder, a file
    that is not SQLite or a damaged store is a ValueError naming the file and the fix."""
    db = root / _guard.DB
    _guard.check_db(db)
    uri = tracking_uri(root)
    import_mlflow()
    tries = 2 if _guard.HAVE_LOCK else 5
    for attempt in range(tries):
        try:
            with _guard.store_lock(root):
                c = client(uri)
                return c, experiment_id(c, experiment, root)
        except ValueError:
            raise
        except Exception as e:
            if attempt + 1 >= tries or not _guard.is_race(e):
                with refusing(db):
                    raise
            _forget(uri)
            _guard.pause(attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def read_store(db: Path) -> tuple[Any, str]:
    """A client on the SQLite store ``db`` for reading, and its URI; nothing is written: the file is looked at
    read-only first, and a missing, empty or table-less file, one written by another MLflow schema or one that
    is not SQLite is a ValueError (MLflow would create or migrate its tables)."""
    root = db.parent
    if not db.exists():
        raise ValueError(f"no MLflow store at {db}: gl.tracking.track(..., root={str(root)!r}) creates it when it "
                         f"logs a run (root defaults to ${ROOT_ENV}, else ./runs)")
    import_mlflow()
    _guard.check_db(db)
    if not _guard.has_tables(db):
        raise ValueError(f"no runs logged in {db} yet (it holds no MLflow tables): gl.tracking.track(..., "
                         f"root={str(root)!r}) logs one")
    found, head = _guard.schema_version(db), _head_revision()
    if head is not None and found != head:
        raise ValueError(f"{db} was written by another MLflow version (schema {found}, this MLflow reads {head}): "
                         f"after a backup, `mlflow db upgrade sqlite:///{db.as_posix()}` migrates it")
    uri = f"sqlite:///{db.as_posix()}"
    with refusing(db):
        return client(uri), uri


def _head_revision() -> str | None:
    try:
        from mlflow.store.db.utils import _get_latest_schema_revision

        return _get_latest_schema_revision()
    except Exception:                  # another MLflow layout: MLflow's own check decides
        return None


@contextlib.contextmanager
def refusing(db: Path) -> Iterator[None]:
    """SQLite's (or SQLAlchemy's) database errors raised inside, as one ValueError naming the store ``db`` and
    the fix; MLflow's cached engine on it is dropped, so that a store moved away and made again opens afresh."""
    try:
        yield
    except ValueError:
        raise
    except Exception as e:
        out = _guard.damaged(db, e)
        if out is e:
            raise
        _forget(f"sqlite:///{db.as_posix()}")
        raise out from None


def _forget(uri: str) -> None:
    try:
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        engine = SqlAlchemyStore._engine_map.pop(uri, None)
        if engine is not None:
            engine.dispose()
    except Exception:                  # another MLflow layout: nothing cached to drop
        pass


def experiment_id(mlflow_client: Any, name: str, root: Path | None = None) -> str:
    """The id of experiment ``name``; with ``root`` it is created when missing (its artifacts in
    ``root/mlartifacts``), without it a missing experiment is a ValueError naming those that exist."""
    with quiet():
        exp = mlflow_client.get_experiment_by_name(name)
        if exp is None and root is not None:
            try:
                return mlflow_client.create_experiment(name, artifact_location=(root / "mlartifacts").as_uri())
            except Exception:                  # another process created it meanwhile
                exp = mlflow_client.get_experiment_by_name(name)
                if exp is None:
                    raise
        if exp is None:
            names = sorted(e.name for e in mlflow_client.search_experiments())
            raise ValueError(f"no experiment {name!r} in {mlflow_client.tracking_uri}; experiments there: {names}")
    if exp.lifecycle_stage == "deleted":
        raise ValueError(f"experiment {name!r} was deleted in {mlflow_client.tracking_uri}: restore it "
                         "(MlflowClient.restore_experiment) or choose another experiment name")
    return exp.experiment_id


def check_key(kind: str, key: Any) -> str:
    """A metric, param or tag name MLflow accepts (checked now, not when a buffered batch is sent)."""
    if not isinstance(key, str):
        raise TypeError(f"{kind} names must be strings, got {key!r}")
    if not key or len(key) > 250:
        raise ValueError(f"{kind} names must be 1 to 250 characters, got {key!r}")
    if not _NAME.match(key) or posixpath.normpath(key) != key or key.startswith(("/", "..")):
        raise ValueError(f"{kind} name {key!r} is not allowed: use letters, digits, _ - . : space and / "
                         "(no leading /, no empty, . or .. parts)")
    return key


def check_path(name: str, path: Any) -> str:
    """An artifact file name: a relative path inside the run, like ``"notes/config.txt"``."""
    if not isinstance(path, str):
        raise TypeError(f"{name} must be a relative file name (str), got {path!r}")
    norm = posixpath.normpath(path) if path else ""
    if not path or norm != path or norm in (".", "..") or norm.startswith(("/", "../")) or path.endswith("/"):
        raise ValueError(f"{name} must be a relative file name inside the run, like 'notes/config.txt', "
                         f"got {path!r}")
    return path


class EventWriter:
    """One TensorBoard event file, written with the tensorboard package's record framing and protos alone:
    neither TensorFlow nor torch is imported (torch's SummaryWriter imports TensorFlow when it is installed,
    ~4 s, and before Triton, see :mod:`gpulab._tf`)."""

    def __init__(self, logdir: Path) -> None:
        import socket

        Event, Summary, RecordWriter = _tensorboard()
        logdir.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.gpulab"
        self._event, self._summary = Event, Summary
        self._records = RecordWriter(open(logdir / name, "wb"))
        self._records.write(Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())

    def scalar(self, tag: str, value: float, step: int, wall_time: float) -> None:
        summary = self._summary(value=[self._summary.Value(tag=tag, simple_value=value)])
        self._records.write(self._event(wall_time=wall_time, step=step, summary=summary).SerializeToString())

    def flush(self) -> None:
        self._records.flush()

    def close(self) -> None:
        if not self._records.closed:
            self._records.close()


def _tensorboard() -> tuple[Any, Any, Any]:
    try:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        # Not a public writer: torch's SummaryWriter, tensorboard.summary.Writer and EventFileWriter all import
        # TensorFlow when it is installed (4-5 s, measured); Writer also files scalars under "tensors", not "scalars".
        from tensorboard.summary.writer.record_writer import RecordWriter
    except ImportError as e:
        raise ImportError("tensorboard=True needs the tensorboard package: pip install tensorboard "
                          "(or track(..., tensorboard=False))") from e
    return Event, Summary, RecordWriter


# ---- a Trace as artifacts and as metric points -------------------------------------------------------
def trace_files(trace: Any) -> dict[str, str]:
    """The trace as two texts by artifact name: the frame as CSV and everything else (interval, marks, notes,
    duration, devices, sampler cost, the frame's dtypes) as JSON; :func:`trace_from_files` rebuilds it."""
    frame = trace.frame.reset_index(drop=True)
    meta = {"format": _FORMAT, "interval_s": trace.interval_s, "duration_s": trace.duration_s,
            "sampler_cpu_s": trace.sampler_cpu_s, "live_cpu_s": trace.live_cpu_s, "notes": list(trace.notes),
            "devices_info": dict(trace.devices_info), "failed_samples": trace.failed_samples,
            "failed_by_device": dict(trace.failed_by_device), "first_error": trace.first_error,
            "energy_notes": dict(trace.energy_notes),
            "marks": [{"name": m.name, "start_s": m.start_s, "end_s": m.end_s} for m in trace.marks],
            "dtypes": {str(c): str(t) for c, t in frame.dtypes.items()}}
    return {TRACE_FILES[0]: frame.to_csv(index=False), TRACE_FILES[1]: json.dumps(meta, indent=1)}


def trace_from_files(csv_text: str, json_text: str) -> Any:
    """The :class:`~gpulab.telemetry.Trace` that :func:`trace_files` wrote (same values, dtypes, marks)."""
    import pandas as pd

    from ..telemetry.trace import Mark, Trace

    meta = json.loads(json_text)
    if meta.get("format") != _FORMAT:
        raise ValueError(f"not a trace gl.tracking wrote (format {meta.get('format')!r}, expected {_FORMAT!r})")
    exact = {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}  # 3's default
    frame = pd.read_csv(io.StringIO(csv_text), **exact)
    for col, dtype in meta["dtypes"].items():
        if col in frame and str(frame[col].dtype) != dtype:
            with contextlib.suppress(TypeError, ValueError):
                frame[col] = frame[col].astype(dtype)
    marks = tuple(Mark(m["name"], m["start_s"], m["end_s"]) for m in meta["marks"])
    return Trace(frame, meta["interval_s"], marks=marks, duration_s=meta["duration_s"],
                 sampler_cpu_s=meta["sampler_cpu_s"], live_cpu_s=meta["live_cpu_s"], notes=tuple(meta["notes"]),
                 devices_info=dict(meta["devices_info"]), failed_samples=meta.get("failed_samples", 0),
                 failed_by_device=dict(meta.get("failed_by_device", {})), first_error=meta.get("first_error"),
                 energy_notes=dict(meta.get("energy_notes", {})))


def trace_points(trace: Any) -> list[tuple[str, float, float, int]]:
    """Every numeric value of the trace as ``(telemetry/<device>/<column>, value, wall time (s), step)``:
    step = the sample's number on its device, wall time from the ``wall_time`` column; missing values and
    text columns are left out (booleans such as ``throttled`` become 0/1)."""
    import numpy as np

    points: list[tuple[str, float, float, int]] = []
    frame = trace.frame
    now = time.time()
    for device in trace.devices:
        rows = frame[frame["device"] == device]
        if "wall_time" in rows:
            walls = [float(w) if _finite(w) else now for w in rows["wall_time"]]
        else:
            walls = [now + float(t) if _finite(t) else now for t in rows.get("t_s", [0.0] * len(rows))]
        for col in rows.columns:
            if col in _META:
                continue
            values = rows[col]
            if values.dtype.kind not in "fiub":
                present = values.dropna()
                if not len(present) or not all(isinstance(v, (numbers.Real, np.bool_)) for v in present):
                    continue
            key = check_key("metric", f"{TELEMETRY}{device}/{col}")
            points += [(key, float(v), w, step) for step, (v, w) in enumerate(zip(values, walls)) if _finite(v)]
    return points


def _finite(x: Any) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False
