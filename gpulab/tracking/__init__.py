"""Experiment tracking for any training loop: parameters, per-step metrics and a Monitor's telemetry to
MLflow (a local SQLite file: no server to run) and TensorBoard, so runs compare in either UI and a past
run's telemetry can be replayed.

```python
import gpulab as gl

with gl.tracking.track("bf16", params={"lr": 3e-4, "batch": 64}) as run:   # under ./runs (or $GPULAB_RUNS)
    with gl.Monitor(interval=0.1) as mon:
        for step in range(steps):
            run.log_metrics({"loss": train_step().item()}, step=step)
    run.log_trace(mon.trace)                  # GPU/CPU utilisation, memory, power as telemetry/<device>/<column>
gl.tracking.runs()                            # the experiment's runs: params and latest metrics, side by side
gl.tracking.load_trace("bf16").diagnose()     # the logged telemetry rebuilt: replay a past run's verdict
```

``python -m gpulab runs`` (``make runs`` in the course) opens MLflow's UI and TensorBoard on localhost;
:func:`ui_commands` gives the two commands. ``run.py`` logs a run (:func:`track`, :class:`Run`,
:class:`TrackedRun`), ``query.py`` reads runs back (:func:`runs`, :func:`load_trace`), ``ui.py`` builds the
UI commands, and ``_store.py`` is the only place that imports MLflow and writes TensorBoard event files
(with the tensorboard package alone: neither TensorFlow nor torch is imported). ``_guard.py`` keeps the
store sound: processes starting on one fresh runs folder create it one at a time (a lock file beside it),
a folder, a foreign or a damaged file is a clear ValueError, reads look at the file read-only first (they
never write), and a run left RUNNING by a process that is gone reads as ``DEAD``. ``_flusher.py`` sends each
run's points to both stores within about a second from a thread of the run, and ends runs still open at
exit as KILLED. MLflow is imported only when a run starts (~1-2 s) and its INFO logs are silenced per call;
mlflow's global tracking URI and active run are never changed, so your own ``mlflow`` calls are
undisturbed. Everything gl.tracking writes stays under the runs folder. MLflow decides once, when it is
imported, whether to send anonymous usage statistics (and to keep an id in ``~/.config/mlflow``): when
gl.tracking imports it first and neither ``MLFLOW_DISABLE_TELEMETRY`` nor ``DO_NOT_TRACK`` is set, it is
imported with them off, for the whole process (no environment variable is left changed); set
``MLFLOW_DISABLE_TELEMETRY=false`` to keep MLflow's default. If your code imports ``mlflow`` before
gl.tracking does, MLflow's own setting applies to gl.tracking's calls too.

Example:
    >>> import shutil, tempfile, gpulab as gl
    >>> root = tempfile.mkdtemp()
    >>> with gl.tracking.track("demo", params={"lr": 0.1}, root=root) as run:
    ...     run.log_metrics({"loss": 0.25}, step=0)
    >>> print(repr(run.record).splitlines()[3])
    run          demo (FINISHED) in experiment 'gpulab'
    >>> gl.tracking.runs(root=root).rows[0].params
    {'lr': '0.1'}
    >>> shutil.rmtree(root)
"""
from .query import RunTable, load_trace, runs
from .run import Run, TrackedRun, track
from .ui import UICommands, ui_commands

__all__ = ["track", "Run", "TrackedRun", "runs", "RunTable", "load_trace", "ui_commands", "UICommands"]
